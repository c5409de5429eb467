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

// Step: the global step when the graph has one, else the run count.
int64_t Step(const SessionRunContext& c) {
  return c.global_step >= 0 ? c.global_step : c.run_index + 1;
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
  due_ = (context.run_index + 1) % every_n_iter_ == 0;
  if (due_) {
    for (const auto& [name, tensor] : tensors_) args->fetches.push_back(tensor);
  }
  return absl::OkStatus();
}

Status LoggingTensorHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  if (!due_) return absl::OkStatus();
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

StepCounterHook::StepCounterHook(int64_t every_n_steps, std::shared_ptr<SummaryWriter> writer,
                                 bool log, LogSink sink)
    : every_n_steps_(every_n_steps),
      writer_(std::move(writer)),
      log_(log),
      sink_(std::move(sink)) {}

Status StepCounterHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  if (every_n_steps_ < 1) {
    return absl::InvalidArgumentError(
        fmt::format("StepCounterHook: every_n_steps {} is below 1; count over 1 or more steps",
                    every_n_steps_));
  }
  const double now = NowSeconds();
  if (window_start_ < 0) {  // the first step includes start-up costs: the window starts after it
    window_start_ = now;
    return absl::OkStatus();
  }
  ++runs_;
  rows_ += context.batch_rows;
  if (runs_ < every_n_steps_) return absl::OkStatus();
  const double secs = std::max(now - window_start_, 1e-9);
  steps_per_sec_ = static_cast<double>(runs_) / secs;
  samples_per_sec_ = static_cast<double>(rows_) / secs;
  runs_ = rows_ = 0;
  window_start_ = now;
  if (log_) {
    Emit(sink_, fmt::format("step {}: {:.2f} steps/s, {:.0f} samples/s", Step(context),
                            steps_per_sec_, samples_per_sec_));
  }
  if (writer_ != nullptr) {
    RECSDK_RETURN_IF_ERROR(writer_->AddScalar("global_step/sec", steps_per_sec_, Step(context)));
    RECSDK_RETURN_IF_ERROR(writer_->AddScalar("examples/sec", samples_per_sec_, Step(context)));
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
  due_ = (context.run_index + 1) % save_steps_ == 0;
  if (due_) {
    for (const auto& [tag, tensor] : scalars_) args->fetches.push_back(tensor);
  }
  return absl::OkStatus();
}

Status SummarySaverHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  if (!due_) return absl::OkStatus();
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
  const int64_t step = context.global_step >= 0 ? context.global_step : context.run_index + 1;
  if (step >= stop_at_) context.RequestStop();
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

CheckpointSaverHook::CheckpointSaverHook(CheckpointSaverOptions options)
    : options_(std::move(options)) {}
CheckpointSaverHook::~CheckpointSaverHook() = default;

Status CheckpointSaverHook::Begin(Graph*) {
  if (options_.model_dir.empty()) {
    return absl::InvalidArgumentError(
        "CheckpointSaverHook: model_dir is empty; give the directory checkpoints go to");
  }
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "CheckpointSaverHook", "save_secs", options_.save_secs,
      "give a period in seconds, or 0 to save by save_steps or only at End"));
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "CheckpointSaverHook", "save_delta_checkpoints_secs", options_.save_delta_checkpoints_secs,
      "give a period in seconds, or 0 for no delta checkpoints"));
  if (options_.save_steps > 0 && options_.save_secs > 0) {
    return absl::InvalidArgumentError(
        fmt::format("CheckpointSaverHook: save_steps {} and save_secs {}: set at most one of them",
                    options_.save_steps, options_.save_secs));
  }
  return absl::OkStatus();
}

Status CheckpointSaverHook::AfterCreateSession(Session& session) {
  SaverOptions o;
  o.model_dir = options_.model_dir;
  o.keep_checkpoint_max = options_.keep_checkpoint_max;
  o.is_incremental_checkpoint = options_.is_incremental_checkpoint;
  RECSDK_ASSIGN_OR_RETURN(saver_, Saver::Create(session, o));
  last_full_time_ = last_delta_time_ = Now();
  return absl::OkStatus();
}

Status CheckpointSaverHook::SaveAt(int64_t step, bool delta) {
  RECSDK_ASSIGN_OR_RETURN(std::string dir, delta ? saver_->SaveDelta(step) : saver_->Save(step));
  saved_.push_back(dir);
  if (options_.log) Emit(options_.sink, fmt::format("saved checkpoint {}", dir));
  const double now = Now();
  last_delta_time_ = now;
  if (!delta) {
    last_full_time_ = now;
    last_saved_step_ = step;
  }
  return absl::OkStatus();
}

double CheckpointSaverHook::Now() const { return options_.clock ? options_.clock() : NowSeconds(); }

Status CheckpointSaverHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor>) {
  const int64_t step = Step(context);
  last_step_ = step;
  KeyStage* stage =
      context.key_stage != nullptr && context.key_stage->channel() == KeyStageChannel::kTrain
          ? context.key_stage
          : nullptr;
  if (stage != key_stage_) {
    saver_->AttachKeyStage(stage);
    key_stage_ = stage;
  }
  const double now = Now();
  Due due = pending_;
  const bool full_due =
      (options_.save_steps > 0 && step % options_.save_steps == 0 && step != last_saved_step_) ||
      (options_.save_secs > 0 && now - last_full_time_ >= options_.save_secs);
  if (full_due) {
    due = Due::kFull;
  } else if (due == Due::kNone && options_.is_incremental_checkpoint &&
             options_.save_delta_checkpoints_secs > 0 && step != last_saved_step_ &&
             now - last_delta_time_ >= options_.save_delta_checkpoints_secs) {
    // Nothing to build on yet: the first checkpoint of the run is a full one.
    due = last_saved_step_ >= 0 ? Due::kDelta : Due::kFull;
  }
  Status saved;
  if (due != Due::kNone) {
    if (stage != nullptr && !stage->Quiescent()) {
      // The key stage has changed the tables for batches not yet run: stop it reading, and save
      // at the first step end where the training loop has caught up (at most prefetch_batches
      // steps later).
      stage->Quiesce();
      pending_ = due;
      return absl::OkStatus();
    }
    pending_ = Due::kNone;
    saved = SaveAt(step, due == Due::kDelta);
  }
  // The next save's step may be known (save_steps, the last step): let the stage read no batch
  // past it, so the tables are consistent right at that step without a pause in prefetching (one
  // batch per step). Set before the next Next call, which would otherwise resume reading freely.
  int64_t next = std::numeric_limits<int64_t>::max();
  if (options_.save_steps > 0) next = (step / options_.save_steps + 1) * options_.save_steps;
  if (options_.last_step >= 0) {
    // At the last step the limit stays where it is: End saves this consistent moment.
    next = step >= options_.last_step ? std::numeric_limits<int64_t>::max()
                                      : std::min(next, options_.last_step);
  }
  if (stage != nullptr && next != std::numeric_limits<int64_t>::max()) {
    stage->Quiesce(stage->batches_consumed() + (next - step));
  }
  return saved;
}

Status CheckpointSaverHook::End(Session&) {
  if (saver_ == nullptr || last_step_ < 0 || last_step_ == last_saved_step_) {
    return absl::OkStatus();
  }
  if (key_stage_ != nullptr && !key_stage_->Quiescent()) {
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
          last_step_);
    }
    saver_->AttachKeyStage(nullptr);
    key_stage_ = nullptr;
  }
  return SaveAt(last_step_, false);
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

ProgressHook::ProgressHook(ProgressHookOptions options) : options_(std::move(options)) {
  if (options_.out == nullptr) options_.out = stdout;
  terminal_ = options_.terminal.has_value() ? *options_.terminal : isatty(fileno(options_.out));
}

Status ProgressHook::BeforeRun(SessionRunContext& context, SessionRunArgs* args) {
  if (options_.every_n_steps < 1) {
    return absl::InvalidArgumentError(
        fmt::format("ProgressHook: every_n_steps {} is below 1", options_.every_n_steps));
  }
  if (start_ < 0) start_ = NowSeconds();
  const int64_t next = context.run_index + 1;
  due_ = next % options_.every_n_steps == 0 ||
         (options_.total_steps > 0 && next == options_.total_steps);
  if (due_ && options_.loss.has_value()) args->fetches.push_back(*options_.loss);
  return absl::OkStatus();
}

Status ProgressHook::AfterRun(SessionRunContext& context, absl::Span<const Tensor> results) {
  ++runs_;
  rows_ += context.batch_rows;
  if (!due_) return absl::OkStatus();
  const double secs = std::max(NowSeconds() - start_, 1e-9);
  const double rate = static_cast<double>(runs_) / secs;
  const int64_t step = options_.first_step + runs_;
  std::string line =
      options_.total_steps > 0
          ? fmt::format("step {}/{}", step, options_.first_step + options_.total_steps)
          : fmt::format("step {}", step);
  line += fmt::format("  {:.1f} steps/s", rate);
  if (rows_ > 0) line += fmt::format("  {:.0f} samples/s", static_cast<double>(rows_) / secs);
  if (options_.loss.has_value() && !results.empty()) {
    RECSDK_ASSIGN_OR_RETURN(double loss, ScalarOf(results[0], "ProgressHook loss"));
    line += fmt::format("  loss {:.4f}", loss);
  }
  if (options_.total_steps > runs_) {
    line += fmt::format("  ETA {:.0f}s", static_cast<double>(options_.total_steps - runs_) / rate);
  }
  if (terminal_) {
    std::fprintf(options_.out, "\r\033[K%s", line.c_str());  // rewrite the line in place
    line_open_ = true;
  } else {
    std::fprintf(options_.out, "%s\n", line.c_str());
  }
  std::fflush(options_.out);
  return absl::OkStatus();
}

Status ProgressHook::End(Session&) {
  if (line_open_) {
    std::fprintf(options_.out, "\n");
    std::fflush(options_.out);
    line_open_ = false;
  }
  return absl::OkStatus();
}

}  // namespace recsdk
