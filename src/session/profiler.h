// profiler.h: the session's profiler (profiling_mode, profiling_options, fp_point, bp_point).
//
// An ExecutionObserver that records every node execution of a Run and, when the Run ends, writes
// one Chrome trace JSON file (opens in ui.perfetto.dev or chrome://tracing) to profiling_dir and
// prints a summary (slowest ops, phase shares) to stderr. What the trace holds follows
// profiling_options:
//   task_trace      every op execution: name, type, device and executing thread (one track per
//                   thread).
//   op_trace        every op execution's duration on one track, args the op type only (the
//                   seed's single-operator tracing); exclusive with the other two.
//   training_trace  the step's phases on a "phases" track: data_wait (since the previous Run
//                   ended: the caller or the pipeline), key_stage (in-graph lookups), forward
//                   (fp_point's start to the first gradient op), backward (to bp_point's end),
//                   sparse_update (TableApply), dense_update (Apply*). Communication is absent:
//                   this build runs one process.
//
// Threading: AfterNode may be called concurrently (inter-op parallelism); it takes a mutex.
// BeginRun and EndRun are called by the Session on the Run thread.
#ifndef RECSDK_SESSION_PROFILER_H_
#define RECSDK_SESSION_PROFILER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "recsdk/config.h"
#include "recsdk/observer.h"

namespace recsdk::internal {

class Profiler final : public ExecutionObserver {
 public:
  // `tag` distinguishes sessions in file names.
  Profiler(const SessionConfig& config, std::string tag);

  void BeginRun(int64_t step);
  // EndRun writes the trace and prints the summary; an I/O error is returned (Session::Run
  // returns it).
  Status EndRun(int64_t step);

  void AfterNode(const NodeExecution& exec) override;

  // last_trace_path / last_summary: of the last EndRun.
  const std::string& last_trace_path() const { return last_trace_path_; }
  const std::string& last_summary() const { return last_summary_; }

 private:
  struct Event {
    const Node* node;
    std::string device;
    int thread;
    int64_t start_ns;
    int64_t end_ns;
  };
  struct Phase {
    std::string name;
    int64_t start_ns;
    int64_t dur_ns;
  };
  std::vector<Phase> Phases() const;
  std::string Summary(int64_t step, const std::vector<Phase>& phases) const;

  const bool training_trace_, task_trace_, op_trace_;
  const std::string fp_point_, bp_point_, dir_, tag_;
  const int64_t origin_ns_;
  int64_t run_start_ns_ = 0, run_end_ns_ = 0, previous_end_ns_ = -1;
  absl::Mutex mu_;
  std::vector<Event> events_;
  std::string last_trace_path_, last_summary_;
};

// NowNs: the steady clock in nanoseconds (the timestamps observers get).
int64_t NowNs();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_PROFILER_H_
