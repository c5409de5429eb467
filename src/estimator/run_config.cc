// run_config.cc: RunConfig::Validate and the options it forwards to the SessionConfig.
#include "recsdk/run_config.h"

#include "fmt/format.h"
#include "src/common/finite_option.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

Status Unsupported(const char* name, const std::optional<std::string>& value) {
  if (!value.has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "RunConfig: {} (\"{}\") is not supported in NPURunConfig; delete it from the script (the "
      "spec: train_distribute, device_fn, protocol, eval_distribute and experimental_distribute "
      "are not supported; to train on several processes start the program under mpirun, see "
      "docs/distributed.md)",
      name, *value));
}

}  // namespace

Status RunConfig::Validate() const {
  RECSDK_RETURN_IF_ERROR(Unsupported("train_distribute", train_distribute));
  RECSDK_RETURN_IF_ERROR(Unsupported("device_fn", device_fn));
  RECSDK_RETURN_IF_ERROR(Unsupported("protocol", protocol));
  RECSDK_RETURN_IF_ERROR(Unsupported("eval_distribute", eval_distribute));
  RECSDK_RETURN_IF_ERROR(Unsupported("experimental_distribute", experimental_distribute));
  // Before the comparisons below, which are all false for NaN.
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "RunConfig", "save_checkpoints_secs", save_checkpoints_secs,
      "give a period in seconds (default 600), or 0 to save only at the end of Train"));
  if (save_checkpoints_steps > 0 && save_checkpoints_secs > 0) {
    return absl::InvalidArgumentError(fmt::format(
        "RunConfig: save_checkpoints_steps {} and save_checkpoints_secs {} are both set; set at "
        "most one (set save_checkpoints_secs = 0 to save by steps)",
        save_checkpoints_steps, save_checkpoints_secs));
  }
  if (keep_checkpoint_max < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "RunConfig: keep_checkpoint_max {} is below 1; keep at least the latest checkpoint",
        keep_checkpoint_max));
  }
  if (save_summary_steps < 0 || log_step_count_steps < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "RunConfig: save_summary_steps {} / log_step_count_steps {}: each must be >= 0 (0 "
        "disables)",
        save_summary_steps, log_step_count_steps));
  }
  if (!distribute.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "RunConfig: distribute = \"{}\": a strategy object is not how recsdk distributes; leave "
        "it empty and start the program under mpirun (every rank holds a shard of every table "
        "and trains, the dense gradients are all-reduced: docs/distributed.md)",
        distribute));
  }
  const Status s = EffectiveSessionConfig().Validate();
  if (!s.ok()) {
    return absl::Status(s.code(), fmt::format("RunConfig: session_config: {}", s.message()));
  }
  return absl::OkStatus();
}

SessionConfig RunConfig::EffectiveSessionConfig() const {
  SessionConfig c = session_config;
  if (deterministic.has_value()) c.deterministic = *deterministic;
  if (op_select_implmode.has_value()) c.op_select_implmode = *op_select_implmode;
  if (iterations_per_loop.has_value()) c.iterations_per_loop = *iterations_per_loop;
  if (precision_mode.has_value()) c.precision_mode = *precision_mode;
  if (enable_data_pre_proc.has_value()) c.enable_data_pre_proc = *enable_data_pre_proc;
  if (mix_compile_mode.has_value()) c.mix_compile_mode = *mix_compile_mode;
  return c;
}

}  // namespace recsdk
