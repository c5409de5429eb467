// hooks.cc: the built-in session run hooks of hooks.h. Each hook is used by one loop thread.
#include "recsdk/hooks.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "fmt/format.h"
#include "recsdk/checkpoint.h"
#include "recsdk/embedding.h"
#include "recsdk/pipeline.h"
#include "src/common/clock.h"
#include "src/common/finite_option.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

using internal::NowSeconds;

void Emit(const LogSink& sink, const std::string& line) {
  if (sink) {
    sink(line);
  } else {
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  }
}

// ScalarOf: the value of a one-element (or the first element of a) numeric tensor.
StatusOr<double> ScalarOf(const Tensor& t, const std::string& what) {
  if (t.num_elements() < 1) {
    return absl::InvalidArgumentError(fmt::format("{}: the tensor is empty", what));
  }
  switch (t.dtype()) {
    case DType::kFloat32:
      return static_cast<double>(t.data<float>()[0]);
    case DType::kFloat64:
      return t.data<double>()[0];
    case DType::kInt64:
      return static_cast<double>(t.data<int64_t>()[0]);
    case DType::kInt32:
      return static_cast<double>(t.data<int32_t>()[0]);
    default:
      return absl::InvalidArgumentError(
          fmt::format("{}: a {} tensor is not a number to log", what, DTypeName(t.dtype())));
  }
}

// Step: the global step when the graph has one, else the steps run (AfterRun: including this
// call's).
int64_t Step(const SessionRunContext& c) {
  return c.global_step >= 0 ? c.global_step : c.run_index + c.steps;
}

}  // namespace

// --- LoggingTensorHook

LoggingTensorHook::LoggingTensorHook(std::vector<std::pair<std::string, TensorName>> tensors,
                                     int64_t every_n_iter, LogSink sink)
    : tensors_(std::move(tensors)), every_n_iter_(every_n_iter), sink_(std::move(sink)) {}

Status LoggingTensorHook::BeforeRun(SessionRunContext& context, SessionRunArgs* args) {
  if (every_n_iter_ < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "LoggingTensorHook: every_n_iter {} is below 1; log every 1 or more steps", every_n_iter_));
  }
  due_ = DueWithin(context.run_index, context.steps, every_n_iter_);
  if (due_) {
    for (const auto& [name, tensor] : tensors_) args->fetches.push_back(tensor);
  }
  return absl::OkStatus();
}

Status LoggingTensorHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  // A loop cut short by the end of the input may not reach the step BeforeRun planned for.
  if (!due_ || !DueWithin(context.run_index, context.steps, every_n_iter_)) {
    return absl::OkStatus();
  }
  std::string line = fmt::format("step {}:", Step(context));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(
        double v, ScalarOf(results[i], "LoggingTensorHook \"" + tensors_[i].first + "\""));
    line += fmt::format("{} {} = {:.6g}", i == 0 ? "" : ",", tensors_[i].first, v);
  }
  Emit(sink_, line);
  return absl::OkStatus();
}

// --- StepCounterHook

// State: the options and the window being counted.
struct StepCounterHook::State {
  int64_t every_n_steps;
  std::shared_ptr<SummaryWriter> writer;
  bool log;
  LogSink sink;
  int64_t runs = 0, rows = 0;
  double window_start = -1;  // < 0: the first step is still to come
  double steps_per_sec = 0, samples_per_sec = 0;
};

StepCounterHook::StepCounterHook(int64_t every_n_steps, std::shared_ptr<SummaryWriter> writer,
                                 bool log, LogSink sink)
    : state_(
          std::make_unique<State>(State{every_n_steps, std::move(writer), log, std::move(sink)})) {}
StepCounterHook::~StepCounterHook() = default;
double StepCounterHook::steps_per_sec() const { return state_->steps_per_sec; }
double StepCounterHook::samples_per_sec() const { return state_->samples_per_sec; }

Status StepCounterHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  State& s = *state_;
  if (s.every_n_steps < 1) {
    return absl::InvalidArgumentError(
        fmt::format("StepCounterHook: every_n_steps {} is below 1; count over 1 or more steps",
                    s.every_n_steps));
  }
  const double now = NowSeconds();
  if (s.window_start < 0) {  // the first step includes start-up costs: the window starts after it
    s.window_start = now;
    return absl::OkStatus();
  }
  s.runs += context.steps;
  s.rows += context.batch_rows;
  if (s.runs < s.every_n_steps) return absl::OkStatus();
  const double secs = std::max(now - s.window_start, 1e-9);
  s.steps_per_sec = static_cast<double>(s.runs) / secs;
  s.samples_per_sec = static_cast<double>(s.rows) / secs;
  s.runs = s.rows = 0;
  s.window_start = now;
  if (s.log) {
    Emit(s.sink, fmt::format("step {}: {:.2f} steps/s, {:.0f} samples/s", Step(context),
                             s.steps_per_sec, s.samples_per_sec));
  }
  if (s.writer != nullptr) {
    RECSDK_RETURN_IF_ERROR(s.writer->AddScalar("global_step/sec", s.steps_per_sec, Step(context)));
    RECSDK_RETURN_IF_ERROR(s.writer->AddScalar("examples/sec", s.samples_per_sec, Step(context)));
  }
  return absl::OkStatus();
}

// --- SummarySaverHook

SummarySaverHook::SummarySaverHook(std::shared_ptr<SummaryWriter> writer, int64_t save_steps,
                                   std::vector<std::pair<std::string, TensorName>> scalars,
                                   bool tables)
    : writer_(std::move(writer)),
      save_steps_(save_steps),
      scalars_(std::move(scalars)),
      tables_(tables) {}

Status SummarySaverHook::BeforeRun(SessionRunContext& context, SessionRunArgs* args) {
  if (writer_ == nullptr || save_steps_ < 1) {
    return absl::InvalidArgumentError(
        fmt::format("SummarySaverHook: needs a SummaryWriter and save_steps >= 1 (got {}); set "
                    "RunConfig::save_summary_steps to 0 to write no summaries",
                    save_steps_));
  }
  due_ = DueWithin(context.run_index, context.steps, save_steps_);
  if (due_) {
    for (const auto& [tag, tensor] : scalars_) args->fetches.push_back(tensor);
  }
  return absl::OkStatus();
}

Status SummarySaverHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  if (!due_ || !DueWithin(context.run_index, context.steps, save_steps_)) {
    return absl::OkStatus();
  }
  const int64_t step = Step(context);
  for (size_t i = 0; i < scalars_.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(double v,
                            ScalarOf(results[i], "summary \"" + scalars_[i].first + "\""));
    RECSDK_RETURN_IF_ERROR(writer_->AddScalar(scalars_[i].first, v, step));
  }
  if (tables_) {
    RECSDK_ASSIGN_OR_RETURN(std::vector<EmbeddingTable*> tables, SessionTables(*context.session));
    for (const EmbeddingTable* t : tables) {
      RECSDK_RETURN_IF_ERROR(writer_->AddScalar(fmt::format("table/{}/size", t->name()),
                                                static_cast<double>(t->size()), step));
    }
  }
  return writer_->Flush();
}

Status SummarySaverHook::End(Session&) { return writer_ ? writer_->Flush() : absl::OkStatus(); }

// --- StopAtStepHook

Status StopAtStepHook::Begin(Graph*) {
  if ((num_steps_ >= 0) == (last_step_ >= 0)) {
    return absl::InvalidArgumentError(
        fmt::format("StopAtStepHook: num_steps {} and last_step {}: set exactly one of them (>= 0)",
                    num_steps_, last_step_));
  }
  stop_at_ = last_step_;
  return absl::OkStatus();
}

Status StopAtStepHook::BeforeRun(SessionRunContext& context, SessionRunArgs*) {
  if (stop_at_ < 0) stop_at_ = (context.global_step >= 0 ? context.global_step : 0) + num_steps_;
  return absl::OkStatus();
}

Status StopAtStepHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  if (Step(context) >= stop_at_) context.RequestStop();
  return absl::OkStatus();
}

// --- NanTensorHook

Status NanTensorHook::BeforeRun(SessionRunContext&, SessionRunArgs* args) {
  args->fetches.push_back(loss_);
  return absl::OkStatus();
}

Status NanTensorHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  RECSDK_ASSIGN_OR_RETURN(double loss,
                          ScalarOf(results[0], "NanTensorHook \"" + loss_.name + "\""));
  if (std::isfinite(loss)) return absl::OkStatus();
  const std::string message = fmt::format(
      "NaN or Inf loss: \"{}\" = {} at step {}; training stopped. Lower the learning rate, check "
      "the input for NaN/Inf, or enable loss scaling",
      loss_.name, loss, Step(context));
  if (fail_) return absl::InvalidArgumentError(message);
  internal::LogWarning("{}", message);
  context.RequestStop();
  return absl::OkStatus();
}

// --- EvictRunHook

Status EvictRunHook::Begin(Graph*) { return hook_.Validate(); }

Status EvictRunHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  const int64_t step = Step(context);
  StatusOr<int64_t> n = 0;
  if (context.key_stage != nullptr) {
    n = context.key_stage->AfterStep(hook_, step);
  } else {
    RECSDK_ASSIGN_OR_RETURN(std::vector<EmbeddingTable*> tables, SessionTables(*context.session));
    n = hook_.AfterStep(step, tables);
  }
  RECSDK_RETURN_IF_ERROR(n.status());
  evicted_ += *n;
  return absl::OkStatus();
}

std::shared_ptr<SessionRunHook> AsSessionRunHook(const EvictHook& hook) {
  return std::make_shared<EvictRunHook>(hook);
}

// --- GraphModifierHook

Status GraphModifierHook::Begin(Graph* graph) {
  if (!modify_graph_ || graph == nullptr) return absl::OkStatus();
  return ModifyGraph(graph).status();
}

// --- CheckpointSaverHook

// State: what the hook keeps between steps. Its methods are the hook's.
struct CheckpointSaverHook::State {
  enum class Due { kNone, kDelta, kFull };

  explicit State(CheckpointSaverOptions o) : options(std::move(o)) {}
  Status Begin();
  Status AfterCreateSession(Session& session);
  Status AfterRun(SessionRunContext& context);
  Status End();
  Status SaveAt(int64_t step, bool delta);
  double Now() const;

  CheckpointSaverOptions options;
  KeyStage* key_stage = nullptr;  // attached to saver
  Due pending = Due::kNone;       // a save waiting for the key stage to be Quiescent
  std::unique_ptr<Saver> saver;
  int64_t last_saved_step = -1;
  int64_t last_step = -1;
  double last_full_time = 0, last_delta_time = 0;
  std::vector<std::string> saved;  // the checkpoint directories written, in order
};

CheckpointSaverHook::CheckpointSaverHook(CheckpointSaverOptions options)
    : state_(std::make_unique<State>(std::move(options))) {}
CheckpointSaverHook::~CheckpointSaverHook() = default;

Status CheckpointSaverHook::Begin(Graph*) { return state_->Begin(); }
Status CheckpointSaverHook::AfterCreateSession(Session& session) {
  return state_->AfterCreateSession(session);
}
Status CheckpointSaverHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  return state_->AfterRun(context);
}
Status CheckpointSaverHook::End(Session&) { return state_->End(); }
const std::vector<std::string>& CheckpointSaverHook::saved() const { return state_->saved; }

Status CheckpointSaverHook::State::Begin() {
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError(
        "CheckpointSaverHook: model_dir is empty; give the directory checkpoints go to");
  }
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "CheckpointSaverHook", "save_secs", options.save_secs,
      "give a period in seconds, or 0 to save by save_steps or only at End"));
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "CheckpointSaverHook", "save_delta_checkpoints_secs", options.save_delta_checkpoints_secs,
      "give a period in seconds, or 0 for no delta checkpoints"));
  if (options.save_steps > 0 && options.save_secs > 0) {
    return absl::InvalidArgumentError(
        fmt::format("CheckpointSaverHook: save_steps {} and save_secs {}: set at most one of them",
                    options.save_steps, options.save_secs));
  }
  return absl::OkStatus();
}

Status CheckpointSaverHook::State::AfterCreateSession(Session& session) {
  SaverOptions o;
  o.model_dir = options.model_dir;
  o.keep_checkpoint_max = options.keep_checkpoint_max;
  o.is_incremental_checkpoint = options.is_incremental_checkpoint;
  RECSDK_ASSIGN_OR_RETURN(saver, Saver::Create(session, o));
  last_full_time = last_delta_time = Now();
  return absl::OkStatus();
}

Status CheckpointSaverHook::State::SaveAt(int64_t step, bool delta) {
  RECSDK_ASSIGN_OR_RETURN(std::string dir, delta ? saver->SaveDelta(step) : saver->Save(step));
  saved.push_back(dir);
  if (options.log) Emit(options.sink, fmt::format("saved checkpoint {}", dir));
  const double now = Now();
  last_delta_time = now;
  if (!delta) {
    last_full_time = now;
    last_saved_step = step;
  }
  return absl::OkStatus();
}

double CheckpointSaverHook::State::Now() const {
  return options.clock ? options.clock() : NowSeconds();
}

Status CheckpointSaverHook::State::AfterRun(SessionRunContext& context) {
  const int64_t step = Step(context);
  last_step = step;
  KeyStage* stage =
      context.key_stage != nullptr && context.key_stage->channel() == KeyStageChannel::kTrain
          ? context.key_stage
          : nullptr;
  if (stage != key_stage) {
    saver->AttachKeyStage(stage);
    key_stage = stage;
  }
  const double now = Now();
  Due due = pending;
  const bool full_due = (DueWithin(step - context.steps, context.steps, options.save_steps) &&
                         step != last_saved_step) ||
                        (options.save_secs > 0 && now - last_full_time >= options.save_secs);
  if (full_due) {
    due = Due::kFull;
  } else if (due == Due::kNone && options.is_incremental_checkpoint &&
             options.save_delta_checkpoints_secs > 0 && step != last_saved_step &&
             now - last_delta_time >= options.save_delta_checkpoints_secs) {
    // Nothing to build on yet: the first checkpoint of the run is a full one.
    due = last_saved_step >= 0 ? Due::kDelta : Due::kFull;
  }
  Status result;
  if (due != Due::kNone) {
    if (stage != nullptr && !stage->Quiescent()) {
      // The key stage has changed the tables for batches not yet run: stop it reading, and save
      // at the first step end where the training loop has caught up (at most prefetch_batches
      // steps later).
      stage->Quiesce();
      pending = due;
      return absl::OkStatus();
    }
    pending = Due::kNone;
    result = SaveAt(step, due == Due::kDelta);
  }
  // The next save's step may be known (save_steps, the last step): let the stage read no batch
  // past it, so the tables are consistent right at that step without a pause in prefetching (one
  // batch per step). Set before the next Next call, which would otherwise resume reading freely.
  int64_t next = std::numeric_limits<int64_t>::max();
  if (options.save_steps > 0) next = (step / options.save_steps + 1) * options.save_steps;
  if (options.last_step >= 0) {
    // At the last step the limit stays where it is: End saves this consistent moment.
    next = step >= options.last_step ? std::numeric_limits<int64_t>::max()
                                     : std::min(next, options.last_step);
  }
  if (stage != nullptr && next != std::numeric_limits<int64_t>::max()) {
    stage->Quiesce(stage->batches_consumed() + (next - step));
  }
  return result;
}

Status CheckpointSaverHook::State::End() {
  if (saver == nullptr || last_step < 0 || last_step == last_saved_step) {
    return absl::OkStatus();
  }
  if (key_stage != nullptr && !key_stage->Quiescent()) {
    // No later step will let the stage catch up. Saving the final model matters more than the
    // batches the stage prepared ahead: their key effects (inserted rows, admission counts) are
    // in this checkpoint, and it records no dataset position.
    // Said once a process: it repeats for every Train call stopped this way, and the fix is
    // the same each time.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      internal::LogWarning(
          "CheckpointSaverHook: training stopped at step {} while the key stage had prepared "
          "later batches, so the final checkpoint also holds their key effects (inserted rows, "
          "admission counts) and no dataset position; to make it exact, give Train a step limit "
          "(steps or max_steps, or CheckpointSaverOptions::last_step) so the stage stops reading "
          "there, or let the input run to its end (said once per process)",
          last_step);
    }
    saver->AttachKeyStage(nullptr);
    key_stage = nullptr;
  }
  return SaveAt(last_step, false);
}

// --- SetThresholdHook

Status SetThresholdHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  if (applied_ || Step(context) < at_step_) return absl::OkStatus();
  RECSDK_RETURN_IF_ERROR(set_threshold(*context.session, table_, threshold_));
  applied_ = true;
  internal::LogInfo("set_threshold: table \"{}\" access_threshold {} at step {}", table_,
                    threshold_, Step(context));
  return absl::OkStatus();
}

// --- ProgressHook

// State: the options and the progress between steps.
struct ProgressHook::State {
  ProgressHookOptions options;
  bool terminal = false;   // rewrite the line in place
  bool due = false;        // this step prints a line
  bool line_open = false;  // a line rewritten in place awaits its newline
  int64_t runs = 0, rows = 0;
  double start = -1;
};

ProgressHook::ProgressHook(ProgressHookOptions options) : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  if (state_->options.out == nullptr) state_->options.out = stdout;
  state_->terminal = state_->options.terminal.has_value() ? *state_->options.terminal
                                                          : isatty(fileno(state_->options.out));
}

ProgressHook::~ProgressHook() = default;

Status ProgressHook::BeforeRun(SessionRunContext& context, SessionRunArgs* args) {
  State& s = *state_;
  const ProgressHookOptions& o = s.options;
  if (o.every_n_steps < 1) {
    return absl::InvalidArgumentError(
        fmt::format("ProgressHook: every_n_steps {} is below 1", o.every_n_steps));
  }
  if (s.start < 0) s.start = NowSeconds();
  const int64_t last = context.run_index + context.steps;  // the call's last step
  s.due = DueWithin(context.run_index, context.steps, o.every_n_steps) ||
          (o.total_steps > 0 && context.run_index < o.total_steps && last >= o.total_steps);
  if (s.due && o.loss.has_value()) args->fetches.push_back(*o.loss);
  return absl::OkStatus();
}

Status ProgressHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  State& s = *state_;
  const ProgressHookOptions& o = s.options;
  s.runs += context.steps;
  s.rows += context.batch_rows;
  if (!s.due) return absl::OkStatus();
  const double secs = std::max(NowSeconds() - s.start, 1e-9);
  const double rate = static_cast<double>(s.runs) / secs;
  const int64_t step = o.first_step + s.runs;
  std::string line = o.total_steps > 0
                         ? fmt::format("step {}/{}", step, o.first_step + o.total_steps)
                         : fmt::format("step {}", step);
  line += fmt::format("  {:.1f} steps/s", rate);
  if (s.rows > 0) line += fmt::format("  {:.0f} samples/s", static_cast<double>(s.rows) / secs);
  if (o.loss.has_value() && !results.empty()) {
    RECSDK_ASSIGN_OR_RETURN(double loss, ScalarOf(results[0], "ProgressHook loss"));
    line += fmt::format("  loss {:.4f}", loss);
  }
  if (o.total_steps > s.runs) {
    line += fmt::format("  ETA {:.0f}s", static_cast<double>(o.total_steps - s.runs) / rate);
  }
  if (s.terminal) {
    std::fprintf(o.out, "\r\033[K%s", line.c_str());  // rewrite the line in place
    s.line_open = true;
  } else {
    std::fprintf(o.out, "%s\n", line.c_str());
  }
  std::fflush(o.out);
  return absl::OkStatus();
}

Status ProgressHook::End(Session&) {
  State& s = *state_;
  const ProgressHookOptions& o = s.options;
  if (s.line_open) {
    std::fprintf(o.out, "\n");
    std::fflush(o.out);
    s.line_open = false;
  }
  return absl::OkStatus();
}

}  // namespace recsdk
