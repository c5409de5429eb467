// recsdk/hooks.h: session run hooks (TensorFlow's SessionRunHook) and the MonitoredSession that
// runs them, so a Session loop and the Estimator get the same logging, step counting, summaries,
// checkpoints, stop conditions, NaN guard, eviction and graph modification.
//
// A hook sees: Begin (the graph, before the Session exists: a hook may add ops or rewrite it),
// AfterCreateSession, BeforeRun (may add fetches to the coming step), AfterRun (their values; may
// request a stop) and End. MonitoredSession::Run calls them around each Session::Run in the order
// the hooks were given; the first hook error stops the run and is returned as it is.
// MonitoredSession::RunLoop calls them once around several steps (the spec's iterations_per_loop):
// a hook's step counting uses SessionRunContext::steps, and its fetches are the last step's.
//
// Threading: a MonitoredSession and its hooks are used by one training loop.
#ifndef RECSDK_HOOKS_H_
#define RECSDK_HOOKS_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "recsdk/config.h"
#include "recsdk/graph.h"
#include "recsdk/session.h"
#include "recsdk/status.h"
#include "recsdk/summary.h"
#include "recsdk/table.h"
#include "recsdk/tensor.h"

namespace recsdk {

class KeyStage;

// SessionRunContext: the step a hook is called around.
struct SessionRunContext {
  // session: the Session running the step.
  Session* session = nullptr;
  // key_stage: the training key stage feeding the step, or null (EvictRunHook uses it).
  KeyStage* key_stage = nullptr;
  // run_index: 0-based count of the steps run before this call (one per MonitoredSession::Run,
  // `steps` per RunLoop).
  int64_t run_index = 0;
  // steps: the steps this call runs: 1 for Run; for RunLoop its iterations in BeforeRun and the
  // steps it ran (fewer when the input ended) in AfterRun. A hook due every n steps is due when a
  // multiple of n lies in (run_index, run_index + steps] (DueWithin).
  int64_t steps = 1;
  // global_step: the graph's global_step: before the step in BeforeRun, after it in AfterRun;
  // -1 when the graph has none.
  int64_t global_step = -1;
  // batch_rows: the real rows of the step's batches (StepCounterHook's samples/s); 0 if unknown.
  int64_t batch_rows = 0;
  // RequestStop: the loop ends after this step (MonitoredSession::ShouldStop turns true).
  void RequestStop() { stop_requested = true; }
  // stop_requested: a hook called RequestStop during this step.
  bool stop_requested = false;
};

// DueWithin: whether a multiple of `every` (>= 1) lies in (before, before + steps]: a hook that
// acts every `every` steps acts in a call that runs steps before+1 .. before+steps.
inline bool DueWithin(int64_t before, int64_t steps, int64_t every) {
  return every >= 1 && steps >= 1 && (before + steps) / every > before / every;
}

// SessionRunArgs: what a hook adds to the coming step: fetches whose values come back in
// AfterRun, in the same order.
struct SessionRunArgs {
  // fetches: the tensors to fetch.
  std::vector<TensorName> fetches;
};

// SessionRunHook: the base of the hooks (see the file comment); every callback defaults to OK and
// doing nothing, so a hook overrides the ones it needs.
class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;
  // Begin: before the Session is created; `graph` may be changed (GraphModifierHook).
  virtual Status Begin(Graph* /*graph*/) { return absl::OkStatus(); }
  // AfterCreateSession: the session exists and its variables are initialized (or restored).
  virtual Status AfterCreateSession(Session& /*session*/) { return absl::OkStatus(); }
  // BeforeRun: before the step; fetches added to `args` come back to AfterRun.
  virtual Status BeforeRun(SessionRunContext& /*context*/, SessionRunArgs* /*args*/) {
    return absl::OkStatus();
  }
  // AfterRun: `results` holds the values of the fetches this hook added in BeforeRun.
  virtual Status AfterRun(SessionRunContext& /*context*/, absl::Span<const Tensor> /*results*/) {
    return absl::OkStatus();
  }
  // End: the loop is over (data exhausted, stop requested or closed); not called after an error
  // of the step itself.
  virtual Status End(Session& /*session*/) { return absl::OkStatus(); }
};

// HookList: hooks, called in this order.
using HookList = std::vector<std::shared_ptr<SessionRunHook>>;

// MonitoredSessionOptions.
struct MonitoredSessionOptions {
  // config, hooks: the Session's config and the hooks to run.
  SessionConfig config;
  HookList hooks;
  // init_targets: run once after the Session is created, before AfterCreateSession (default:
  // the graph's "init" op when it has one, as GlobalVariablesInitializer names it).
  std::optional<std::vector<TensorName>> init_targets;
  // after_init: runs after init_targets, before AfterCreateSession (the Estimator restores a
  // checkpoint here). Null: nothing.
  std::function<Status(Session&)> after_init;
};

// MonitoredSession: a Session with hooks (TensorFlow's MonitoredSession, single worker).
class MonitoredSession {
 public:
  // Create: Begin on every hook (in order), Session::Create(*graph, config), the init targets,
  // after_init, then AfterCreateSession on every hook. The first error is returned.
  static StatusOr<std::unique_ptr<MonitoredSession>> Create(Graph* graph,
                                                            MonitoredSessionOptions options);
  // Wrap: hooks around an existing, initialized Session (not owned; it must outlive the
  // MonitoredSession): Begin gets a null graph (the graph is already in the Session; a hook that
  // must change it returns FailedPrecondition), then AfterCreateSession. The Estimator's later
  // Train / Evaluate calls run their hooks this way.
  static StatusOr<std::unique_ptr<MonitoredSession>> Wrap(Session& session, HookList hooks);
  ~MonitoredSession();
  MonitoredSession(const MonitoredSession&) = delete;
  MonitoredSession& operator=(const MonitoredSession&) = delete;

  // Run: BeforeRun on every hook, one Session::Run with the hooks' fetches appended, AfterRun on
  // every hook with its values. FailedPrecondition after Close. A hook's error is returned and
  // the step's own outputs are still in *outputs.
  Status Run(const FeedList& feeds, const std::vector<TensorName>& fetches,
             const std::vector<TensorName>& targets, std::vector<Tensor>* outputs,
             int64_t batch_rows = 0);
  // StepSource: the next step's feeds and its batch's real rows; false when the input ended.
  using StepSource = std::function<StatusOr<bool>(FeedList* feeds, int64_t* batch_rows)>;
  // RunLoop: up to `iterations` (>= 1) steps with one round of hooks (the spec's
  // iterations_per_loop): the first step's feeds are pulled first (none: returns 0 and calls no
  // hook), then BeforeRun on every hook, then the steps, each fed by `next` (the loop ends early
  // when it returns false), then AfterRun with the last step's fetches, the global step after it,
  // and the rows of every step. Returns the steps run. Errors as Run.
  StatusOr<int64_t> RunLoop(int64_t iterations, const StepSource& next,
                            const std::vector<TensorName>& fetches,
                            const std::vector<TensorName>& targets, std::vector<Tensor>* outputs);
  // ShouldStop: a hook requested a stop.
  bool ShouldStop() const;
  // Close: End on every hook (once); the Session stays usable through session().
  Status Close();

  // session: the Session it runs.
  Session& session();
  // global_step: the graph's global_step as last read (-1 without one).
  int64_t global_step() const;
  // set_key_stage: the training key stage hooks see in their context (or null).
  void set_key_stage(KeyStage* stage);

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit MonitoredSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Built-in hooks.

// LogSink: where a hook writes its lines. Default (null): stdout.
using LogSink = std::function<void(const std::string& line)>;

// LoggingTensorHook: every `every_n_iter` runs (>= 1), one line "step N: name = value, ..." of
// the named scalar tensors (or the first elements of larger ones).
class LoggingTensorHook final : public SessionRunHook {
 public:
  // LoggingTensorHook: `tensors` as (label, tensor) pairs; lines go to `sink`.
  LoggingTensorHook(std::vector<std::pair<std::string, TensorName>> tensors, int64_t every_n_iter,
                    LogSink sink = nullptr);
  Status BeforeRun(SessionRunContext& context, SessionRunArgs* args) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;

 private:
  std::vector<std::pair<std::string, TensorName>> tensors_;
  int64_t every_n_iter_;
  LogSink sink_;
  bool due_ = false;
};

// StepCounterHook: steps/s and samples/s over each window of `every_n_steps` runs (>= 1);
// logs them (log == true), writes "global_step/sec" and "examples/sec" to `writer` when given.
class StepCounterHook final : public SessionRunHook {
 public:
  // StepCounterHook: windows of `every_n_steps`; lines go to `sink` when `log`.
  explicit StepCounterHook(int64_t every_n_steps, std::shared_ptr<SummaryWriter> writer = nullptr,
                           bool log = false, LogSink sink = nullptr);
  ~StepCounterHook() override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  // steps_per_sec / samples_per_sec: of the last full window (0 before one).
  double steps_per_sec() const;
  double samples_per_sec() const;

 private:
  struct State;  // hooks.cc: the options and the window being counted
  std::unique_ptr<State> state_;
};

// SummarySaverHook: every `save_steps` runs (>= 1), writes the named scalar tensors ("loss")
// and, when `tables` is true, each table's size ("table/<name>/size") to `writer` at the global
// step, then flushes.
class SummarySaverHook final : public SessionRunHook {
 public:
  // SummarySaverHook: `scalars` as (tag, tensor) pairs.
  SummarySaverHook(std::shared_ptr<SummaryWriter> writer, int64_t save_steps,
                   std::vector<std::pair<std::string, TensorName>> scalars, bool tables = true);
  Status BeforeRun(SessionRunContext& context, SessionRunArgs* args) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  Status End(Session& session) override;

 private:
  std::shared_ptr<SummaryWriter> writer_;
  int64_t save_steps_;
  std::vector<std::pair<std::string, TensorName>> scalars_;
  bool tables_;
  bool due_ = false;
};

// StopAtStepHook: requests a stop once the global step reaches `last_step`, or (num_steps) after
// num_steps more steps from where the session began. Exactly one of them must be >= 0 (Begin
// returns InvalidArgument otherwise). Without a global_step in the graph, counts runs.
class StopAtStepHook final : public SessionRunHook {
 public:
  // NumSteps, LastStep, StopAtStepHook: stop after num_steps steps, or at last_step (the other
  // one -1).
  static StopAtStepHook NumSteps(int64_t num_steps) { return StopAtStepHook(num_steps, -1); }
  static StopAtStepHook LastStep(int64_t last_step) { return StopAtStepHook(-1, last_step); }
  StopAtStepHook(int64_t num_steps, int64_t last_step)
      : num_steps_(num_steps), last_step_(last_step) {}
  Status Begin(Graph* graph) override;
  Status BeforeRun(SessionRunContext& context, SessionRunArgs* args) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;

 private:
  int64_t num_steps_;
  int64_t last_step_;
  int64_t stop_at_ = -1;
};

// NanTensorHook: fetches `loss` each step; a NaN or Inf value stops training with InvalidArgument
// naming the step and the value (fail_on_nan_loss, the default) or, without it, logs a warning
// and requests a stop.
class NanTensorHook final : public SessionRunHook {
 public:
  // NanTensorHook: watches `loss`; fails on NaN/Inf when fail_on_nan_loss, else stops.
  explicit NanTensorHook(TensorName loss, bool fail_on_nan_loss = true)
      : loss_(std::move(loss)), fail_(fail_on_nan_loss) {}
  Status BeforeRun(SessionRunContext& context, SessionRunArgs* args) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;

 private:
  TensorName loss_;
  bool fail_;
};

// EvictRunHook: the spec's EvictHook as a session run hook: after each step, hook.AfterStep at
// the global step, through the key stage (which protects rows of batches in flight) when the
// context has one, else on every table of the session. `evicted()` counts keys evicted.
class EvictRunHook final : public SessionRunHook {
 public:
  // EvictRunHook: runs `hook` after each step.
  explicit EvictRunHook(EvictHook hook) : hook_(hook) {}
  // Begin: the hook's Validate. In a job with ps ranks both triggers work on the workers: the
  // time interval is measured on the job's data time (EvictHook::AfterStep), and eviction through
  // the key stage keeps the keys of its batches in flight on the ps ranks too.
  Status Begin(Graph* graph) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  // evicted: keys evicted so far.
  int64_t evicted() const { return evicted_; }

 private:
  EvictHook hook_;
  int64_t evicted_ = 0;
};
// AsSessionRunHook: EvictHook, the spec's class with its arguments (evict_enable,
// evict_time_interval, evict_step_interval), for a hook list.
std::shared_ptr<SessionRunHook> AsSessionRunHook(const EvictHook& hook);

// GraphModifierHook: the spec's GraphModifierHook: automatic graph modification (ModifyGraph,
// pipeline.h) in Begin, so the lookups built with modify_graph=true move to the key stage.
// modify_graph = false makes it a no-op (the spec's switch). With a null graph (a wrapped Session,
// e.g. the Estimator's, which runs ModifyGraph itself before creating its Session) it checks
// nothing is left to do and is a no-op.
class GraphModifierHook final : public SessionRunHook {
 public:
  // GraphModifierHook: modify_graph false makes the hook a no-op.
  explicit GraphModifierHook(bool modify_graph = true) : modify_graph_(modify_graph) {}
  Status Begin(Graph* graph) override;

 private:
  bool modify_graph_;
};

// SetThresholdHook: after the step that takes the global step to `at_step`, sets the admission
// threshold of table `table_name` (set_threshold in embedding.h). The spec's little_demo does it
// at step 50.
class SetThresholdHook final : public SessionRunHook {
 public:
  // SetThresholdHook: sets `access_threshold` on `table_name` at global step `at_step`.
  SetThresholdHook(std::string table_name, int64_t access_threshold, int64_t at_step)
      : table_(std::move(table_name)), threshold_(access_threshold), at_step_(at_step) {}
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  // applied: the threshold has been set.
  bool applied() const { return applied_; }

 private:
  std::string table_;
  int64_t threshold_;
  int64_t at_step_;
  bool applied_ = false;
};

// ProgressHookOptions.
struct ProgressHookOptions {
  // total_steps: the steps the loop will run, for "step/total" and the ETA; <= 0 unknown.
  int64_t total_steps = 0;
  // first_step: the global step before the loop's first run (the Estimator passes it), so the
  // line counts the run's global steps: "step 150/200" for a loop of 50 steps from step 100 to
  // max_steps 200, not "step 50/100". Default 0: the loop's own runs.
  int64_t first_step = 0;
  // loss: a scalar tensor shown on the line (fetched every step it is shown); empty: none.
  std::optional<TensorName> loss;
  // every_n_steps: how often a line is produced (>= 1). On a terminal the line is rewritten in
  // place ("\r"); elsewhere one plain line per every_n_steps. Default 10.
  int64_t every_n_steps = 10;
  // out: where it goes; default stdout. terminal: force the mode; default: isatty(out).
  std::FILE* out = nullptr;
  std::optional<bool> terminal;
};

// ProgressHook: "step 120/200  35.2 steps/s  36045 samples/s  loss 0.5123  ETA 2s".
class ProgressHook final : public SessionRunHook {
 public:
  // ProgressHook: a line as `options` say.
  explicit ProgressHook(ProgressHookOptions options);
  ~ProgressHook() override;
  Status BeforeRun(SessionRunContext& context, SessionRunArgs* args) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  Status End(Session& session) override;

 private:
  struct State;  // hooks.cc: the options and the progress between steps
  std::unique_ptr<State> state_;
};

// CheckpointSaverOptions: CheckpointSaverHook's options (the hook below says how it uses them).
struct CheckpointSaverOptions {
  // model_dir: where the checkpoints go. Required.
  std::string model_dir;
  // save_steps, save_secs: save every that many global steps or seconds; at most one > 0.
  // Default 0 and 0: only at End.
  int64_t save_steps = 0;
  double save_secs = 0;
  // keep_checkpoint_max: SaverOptions::keep_checkpoint_max (checkpoint.h). Default 5.
  int keep_checkpoint_max = 5;
  // is_incremental_checkpoint, save_delta_checkpoints_secs: delta checkpoints every that many
  // seconds (both needed). Default off.
  bool is_incremental_checkpoint = false;
  double save_delta_checkpoints_secs = 0;
  // log: one line per checkpoint written ("saved checkpoint <dir>") through `sink`.
  bool log = false;
  // sink: where the log lines go (null: stdout).
  LogSink sink;
  // last_step: the global step training stops at, when known (-1, the default: unknown). With a
  // key stage, the stage then reads no batch past it, so the final checkpoint at End is one
  // consistent moment too (the Estimator sets it).
  int64_t last_step = -1;
  // clock: seconds on a monotonic clock, read once per step and per save. Null (default): the
  // process's steady clock. Tests give a fake one to drive save_secs and
  // save_delta_checkpoints_secs without sleeping.
  std::function<double()> clock;
};
// CheckpointSaverHook: saves a full checkpoint (Saver, checkpoint.h) of the session into
// model_dir every `save_steps` global steps or `save_secs` seconds (at most one > 0; both <= 0:
// only at End), and at End unless the last step was just saved. With is_incremental_checkpoint
// and save_delta_checkpoints_secs > 0, a delta checkpoint (SaveDelta) when that many seconds have
// passed since the last checkpoint of either kind; the first checkpoint of a run is always full
// (a delta needs one to build on), so a delta that falls due before any full one saves a full
// one instead. Times are taken after each step, so a save happens at the first step end at or
// past its due time. With a training key stage (SessionRunContext::key_stage), a due save first
// quiesces the stage (KeyStage::Quiesce) and happens at the first step end where it is
// Quiescent, so every checkpoint is one consistent moment and records the dataset position.
// Steps known in advance (save_steps, last_step) are planned: the stage reads no batch past them,
// so those saves cost no pause. Only a final checkpoint at End whose step was not known (no
// last_step, data not exhausted) cannot wait, and says so in the log. Several hooks may share
// one stage (a user's beside the Estimator's own): the stage keeps each hook's stop, so every
// hook's checkpoints land at their own steps.
// AfterCreateSession makes the Saver (InvalidArgument for bad options).
class CheckpointSaverHook final : public SessionRunHook {
 public:
  // CheckpointSaverHook: saves as `options` say.
  explicit CheckpointSaverHook(CheckpointSaverOptions options);
  ~CheckpointSaverHook() override;
  Status Begin(Graph* graph) override;
  Status AfterCreateSession(Session& session) override;
  Status AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) override;
  Status End(Session& session) override;
  // saved: the checkpoint directories written, in order.
  const std::vector<std::string>& saved() const;

 private:
  struct State;  // hooks.cc: the Saver, the key stage it follows, the save due, the times
  std::unique_ptr<State> state_;
};

// BroadcastGlobalVariablesHook (the spec's NPUBroadcastGlobalVariablesHook): in
// AfterCreateSession, after the init op (and after_init's restore) ran, copies every global
// variable from rank `root_rank` to the other ranks (broadcast_global_variables,
// recsdk/distributed.h), so that all ranks start training from the same values. A no-op copy at
// world size 1. Every rank must use it (it is a collective); its errors are
// broadcast_global_variables'. The Estimator adds it by itself (root 0) to its first Train call
// when the model uses the distributed optimizer (AllReduceMean in the graph) and no hook given
// is one; elsewhere (a MonitoredSession of your own) add it to the hooks.
class BroadcastGlobalVariablesHook final : public SessionRunHook {
 public:
  // BroadcastGlobalVariablesHook: broadcasts from `root_rank` (root_rank() returns it).
  explicit BroadcastGlobalVariablesHook(int root_rank = 0) : root_rank_(root_rank) {}
  Status AfterCreateSession(Session& session) override;
  // root_rank: the rank whose variables the others receive.
  int root_rank() const { return root_rank_; }

 private:
  int root_rank_;
};

}  // namespace recsdk

#endif  // RECSDK_HOOKS_H_
