// recsdk/session.h: runs a graph.
//
// A Session copies a graph, places its nodes on a device, owns the variables (and, later, the
// tables) and runs steps: Run(feeds, fetches, targets) computes the fetched outputs and runs the
// target nodes, feeding placeholders (or any output) with the given tensors, like TensorFlow's
// sess.run. Execution plans are cached per (feeds, fetches, targets) signature.
//
// Threading: Run may be called from one thread at a time. Close() releases every resource; the
// destructor closes too.
#ifndef RECSDK_SESSION_H_
#define RECSDK_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/graph.h"
#include "recsdk/observer.h"
#include "recsdk/status.h"
#include "recsdk/tensor.h"

namespace recsdk {

namespace internal {
class SessionAccess;  // src/session/session_resources.h
}  // namespace internal

// TensorName: "node:index", "node" (index 0), or an Output / Node of the session's source graph.
struct TensorName {
  // name: "node:index" or "node".
  std::string name;
  // TensorName: from a name, an Output or a Node (null: ""), implicitly, so calls read
  // Run({{"x", t}}, {loss}, {train_op}).
  TensorName(const char* n) : name(n) {}                   // NOLINT
  TensorName(std::string n) : name(std::move(n)) {}        // NOLINT
  TensorName(std::string_view n) : name(n) {}              // NOLINT
  TensorName(const Output& o) : name(o.name()) {}          // NOLINT
  TensorName(const Node* n) : name(n ? n->name() : "") {}  // NOLINT
};

// FeedList: the tensors fed to a run, by the name of the placeholder (or any output) they replace.
using FeedList = std::vector<std::pair<TensorName, Tensor>>;

// RunOptions: per-run choices.
struct RunOptions {
  // observers: watch every node this run executes (observer.h), in this order. Not owned; they
  // must outlive the call. Empty (default): no observation, no cost.
  std::vector<ExecutionObserver*> observers;
};

// BatchSource: where Session::RunLoop pulls each step's feeds from: sets *feeds and returns true,
// or returns false at the end of the data. A KeyStage fits:
//   [&](FeedList* f) { return stage->Next(f); }
using BatchSource = std::function<StatusOr<bool>(FeedList* feeds)>;

// LoopResult: what Session::RunLoop did.
struct LoopResult {
  int64_t steps = 0;            // steps run (fewer than asked when the data ended)
  std::vector<Tensor> outputs;  // the fetches of the last step run (empty when none ran)
};

// SessionStats: memory accounting of the device the session runs on.
struct SessionStats {
  // graph_bytes_in_use, graph_peak_bytes: step buffers in use now, and the most at once since the
  // session started. variable_bytes_in_use: variables and tables on the device.
  int64_t graph_bytes_in_use = 0;
  int64_t graph_peak_bytes = 0;
  int64_t variable_bytes_in_use = 0;
  int64_t steps = 0;  // Run calls that completed
  // graph_cached_bytes: freed step buffers kept for reuse by the next steps (not in use).
  int64_t graph_cached_bytes = 0;
  // graph_fresh_allocations: step buffers taken from the system rather than reused, since the
  // session started; a steady training loop stops adding to it after its first steps.
  int64_t graph_fresh_allocations = 0;
  // overflow_count: op executions overflow detection (SessionConfig::enable_dump_debug) reported
  // since the session started: NaN/Inf made from finite inputs. 0 when detection is off.
  int64_t overflow_count = 0;
  // tier_swap_in_bytes / tier_swap_out_bytes: bytes of table rows copied into / out of the device
  // tiers in the device's own memory (tiered tables on a device such as cuda; 0 on cpu, whose
  // device tier is host memory). Swap-ins are queued by the key stage without waiting.
  int64_t tier_swap_in_bytes = 0;
  int64_t tier_swap_out_bytes = 0;
  // tier_swap_in_host_waits: times the host blocked for a swap-in's copy (only when a staging
  // buffer was still in flight, or a table went away with copies queued); 0 in a steady loop.
  // tier_swap_out_host_waits: times the host waited for a swap-out's copy (one per swap-out: the
  // host tier takes the rows), or for a snapshot's or export's read of device rows.
  int64_t tier_swap_in_host_waits = 0;
  int64_t tier_swap_out_host_waits = 0;
  // tier_swap_compute_waits: times a step's kernels were ordered (on the device) after swap-ins
  // still in flight when the step reached its gather.
  int64_t tier_swap_compute_waits = 0;
};

// Session: runs a graph (see the file comment). Create makes one; not copyable.
class Session {
 public:
  // Create validates the config, checks the graph (its construction status, op kernels on the
  // device) and copies it. Errors: InvalidArgument for config and graph problems, NotFound for an
  // unknown device, Unimplemented for an op the device has no kernel for; with dumps on, an error
  // naming dump_path when it cannot be created.
  static StatusOr<std::unique_ptr<Session>> Create(const Graph& graph,
                                                   const SessionConfig& config = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Run feeds `feeds`, computes `fetches` into `outputs` (same order) and runs `targets`.
  // InvalidArgument names a feed of the wrong dtype or shape, or an unknown fetch or target.
  Status Run(const FeedList& feeds, const std::vector<TensorName>& fetches,
             const std::vector<TensorName>& targets, std::vector<Tensor>* outputs);
  StatusOr<std::vector<Tensor>> Run(const FeedList& feeds, const std::vector<TensorName>& fetches,
                                    const std::vector<TensorName>& targets = {});
  // Run with per-run options (observers). With profiling_mode on, the session's profiler observes
  // too and writes one Chrome trace per call (SessionConfig::profiling_dir) from a background
  // thread; Close() waits until every trace is on disk and returns a failed write.
  // With enable_dump, enable_dump_debug or enable_exception_dump, the session's dump observer
  // watches too (docs/precision.md): a failed dump write is this Run's error, naming the file, and
  // a failed op's error names the directory its inputs were dumped to.
  Status Run(const RunOptions& options, const FeedList& feeds,
             const std::vector<TensorName>& fetches, const std::vector<TensorName>& targets,
             std::vector<Tensor>* outputs);

  // RunLoop: `iterations` training steps in one call (the spec's iterations_per_loop): each step
  // pulls its feeds from `next` and runs fetches and targets; returns the last step's fetches.
  // `iterations` must equal SessionConfig::iterations_per_loop (InvalidArgument otherwise, the
  // spec's check against set_iteration_per_loop). Stops early, without error, when the data ends.
  StatusOr<LoopResult> RunLoop(int64_t iterations, const BatchSource& next,
                               const std::vector<TensorName>& fetches,
                               const std::vector<TensorName>& targets = {},
                               const RunOptions& options = {});

  // applied_passes: the graph passes Session::Create ran, in order (disabled ones excluded).
  const std::vector<std::string>& applied_passes() const;

  // Close releases variables and device memory. Later Run calls fail with FailedPrecondition.
  Status Close();

  // graph: the session's copy of the graph, after its passes. config: its SessionConfig. stats: its
  // memory and step counts now.
  const Graph& graph() const;
  const SessionConfig& config() const;
  SessionStats stats() const;
  // SetRunCount: sets the count of completed Run calls (SessionStats::steps). With the graph's
  // seed and each op's seed it keys every random stream of a run (Dropout, RandomUniform, ...),
  // so it is the session's RNG state: checkpoints save it and Saver::Restore sets it, and a
  // resumed run draws the same numbers as an uninterrupted one. Not while a Run is in progress.
  void SetRunCount(int64_t runs);

 private:
  // The library's other layers reach the session's resources (variables, tables) through it.
  friend class internal::SessionAccess;
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace recsdk

#endif  // RECSDK_SESSION_H_
