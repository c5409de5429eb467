// recsdk/run_config.h: RunConfig, the spec's NPURunConfig: where the Estimator keeps its model
// directory, how often it saves checkpoints and summaries and logs, its seed, and the session
// options NPURunConfig carries, forwarded to the SessionConfig it holds.
//
// The session options NPURunConfig carries (deterministic, op_select_implmode,
// iterations_per_loop, precision_mode, enable_data_pre_proc, mix_compile_mode) override the
// SessionConfig's fields of the same names and are validated with it. The arguments NPURunConfig
// does not support (train_distribute, device_fn, protocol,
// eval_distribute, experimental_distribute) are rejected with the spec's advice.
//
// Threading: a plain struct.
#ifndef RECSDK_RUN_CONFIG_H_
#define RECSDK_RUN_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "recsdk/config.h"
#include "recsdk/status.h"

namespace recsdk {

// RunConfig: the Estimator's run settings (see the file comment). Validate() checks them when the
// Estimator is created.
struct RunConfig {
  // model_dir: checkpoints, event files (and eval/ for evaluation summaries). Empty: none are
  // written (Train still runs; a CheckpointSaverHook then has nowhere to save and is not added).
  std::string model_dir;
  // save_checkpoints_steps / save_checkpoints_secs: how often Train saves a checkpoint; at most
  // one of them > 0 (as TensorFlow's RunConfig); both <= 0 saves only at the end of Train.
  // Default: every 600 seconds, as TensorFlow's.
  int64_t save_checkpoints_steps = 0;
  double save_checkpoints_secs = 600;
  // keep_checkpoint_max: checkpoints kept (older ones deleted), >= 1. Default 5.
  int keep_checkpoint_max = 5;
  // save_summary_steps: steps between TensorBoard summaries (loss, steps/s, table sizes) in
  // model_dir; 0 disables; >= 0. Default 100.
  int64_t save_summary_steps = 100;
  // log_step_count_steps: steps between progress lines (steps/s, samples/s, loss, ETA); 0
  // disables; >= 0. Default 100.
  int64_t log_step_count_steps = 100;
  // session_config: the Session's options (config.h).
  SessionConfig session_config;
  // seed: the graph's random seed (TensorFlow's tf_random_seed). Unset: the graph's default.
  std::optional<uint64_t> seed;

  // NPURunConfig's session options: each one set here overrides session_config's field of the
  // same name (config.h documents them); unset leaves session_config as it is.
  std::optional<bool> deterministic;
  // op_select_implmode: SessionConfig's.
  std::optional<std::string> op_select_implmode;
  // iterations_per_loop: training steps per loop. The Estimator runs its hooks once per loop
  // (MonitoredSession::RunLoop: they see the step the loop ended at, and the last loop stops at
  // the asked step), so save_checkpoints_steps, save_summary_steps and log_step_count_steps must
  // be multiples of it (Estimator::Create names the one that is not). Evaluation runs one step
  // per call. In Session mode, Session::RunLoop runs that many steps per call.
  std::optional<int64_t> iterations_per_loop;
  // precision_mode, enable_data_pre_proc, mix_compile_mode: SessionConfig's.
  std::optional<std::string> precision_mode;
  std::optional<bool> enable_data_pre_proc;
  std::optional<bool> mix_compile_mode;
  // distribute: the spec's distribution strategy object; must stay empty (Validate refuses it
  // with the reason): a job of several ranks is started by mpirun instead (recsdk/distributed.h).
  std::string distribute;

  // Arguments of TensorFlow's RunConfig that NPURunConfig does not support. Setting any of them
  // is an InvalidArgument with the spec's advice: delete it.
  std::optional<std::string> train_distribute, device_fn, protocol, eval_distribute,
      experimental_distribute;

  // Validate: InvalidArgument naming the first option that breaks its rule, its value and the
  // fix; the forwarded SessionConfig is validated too.
  Status Validate() const;
  // EffectiveSessionConfig: session_config with the forwarded options applied.
  SessionConfig EffectiveSessionConfig() const;
};

// NPURunConfig: the spec's name.
using NPURunConfig = RunConfig;

}  // namespace recsdk

#endif  // RECSDK_RUN_CONFIG_H_
