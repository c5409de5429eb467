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
// Cost (benchmarks/dispatch_bench BM_ProfilingCost): the Run thread only records events and hands
// them over. AfterNode appends to a buffer owned by the executing thread (no lock, no string copy:
// the device name is stored once per thread and change), and EndRun moves the Run's events to a
// background writer thread, which sorts them, derives the phases and the summary, formats the
// JSON and writes the file. Up to kMaxPendingRuns traces wait for the writer; past that EndRun
// waits, so memory stays bounded when runs outpace the disk.
//
// Files therefore appear shortly after their Run returns: Flush() (called by Session::Close and
// the destructor) waits for every pending one. A write error is returned by the next EndRun or by
// Flush.
//
// Threading: AfterNode may be called concurrently (inter-op parallelism) from different threads,
// each with its own executing-thread index; BeginRun, EndRun and Flush are called by the Session
// on the Run thread, never concurrently with each other.
#ifndef RECSDK_SESSION_PROFILER_PROFILER_H_
#define RECSDK_SESSION_PROFILER_PROFILER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/observer.h"

namespace recsdk::internal {

class Profiler final : public ExecutionObserver {
 public:
  // `tag` distinguishes sessions in file names.
  Profiler(const SessionConfig& config, std::string tag);
  ~Profiler() override;

  void BeginRun(int64_t step);
  // EndRun hands the Run's events to the writer. Returns the first error of an earlier write.
  Status EndRun(int64_t step);
  // Flush waits until every handed-over trace is written; returns (and clears) the first error.
  Status Flush();

  void AfterNode(const NodeExecution& exec) override;

  // last_trace_path / last_summary: of the last trace written (call Flush first to include the
  // last EndRun).
  std::string last_trace_path() const;
  std::string last_summary() const;

  static constexpr int kMaxThreads = 256;  // executing-thread indices with their own buffer
  static constexpr size_t kMaxPendingRuns = 16;

 private:
  struct Event {
    const Node* node;
    int device;  // index into the run's device names
    int thread;
    int64_t start_ns;
    int64_t end_ns;
  };
  // ThreadBuffer: the events one executing thread recorded in the current Run.
  struct ThreadBuffer {
    int64_t run = -1;  // the Run these events belong to; stale buffers are cleared on first use
    std::vector<Event> events;
    std::vector<std::string> devices;
  };
  struct Phase {
    std::string name;
    int64_t start_ns;
    int64_t dur_ns;
  };
  // RunTrace: what the writer needs of one Run.
  struct RunTrace {
    int64_t step = 0, run_start_ns = 0, run_end_ns = 0, previous_end_ns = -1;
    std::vector<Event> events;
    std::vector<std::string> devices;
  };

  void Record(ThreadBuffer& buffer, const NodeExecution& exec);
  void WriterLoop();
  Status Write(RunTrace& trace);
  std::vector<Phase> Phases(const RunTrace& t) const;
  std::string Summary(const RunTrace& t, const std::vector<Phase>& phases) const;

  const bool training_trace_, task_trace_, op_trace_;
  const std::string fp_point_, bp_point_, dir_, tag_;
  const int64_t origin_ns_;
  int64_t run_start_ns_ = 0, previous_end_ns_ = -1;
  std::atomic<int64_t> run_{0};
  std::array<ThreadBuffer, kMaxThreads> buffers_;
  std::mutex overflow_mu_;  // threads whose index is outside [0, kMaxThreads)
  ThreadBuffer overflow_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable changed_;
  std::deque<std::unique_ptr<RunTrace>> pending_;
  bool writing_ = false, stop_ = false;
  Status error_;
  std::string last_trace_path_, last_summary_;
  // event_heads_: the writer thread's cache of each node's formatted event prefix (writer only).
  std::unordered_map<const Node*, std::string> event_heads_;
  std::thread writer_;
};

// NowNs: the steady clock in nanoseconds (the timestamps observers get).
int64_t NowNs();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_PROFILER_PROFILER_H_
