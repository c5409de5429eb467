// recsdk/initialize.h: the spec's framework initialisation (mx_rec.util.initialize): init(...)
// before training, terminate_config_initializer() after it.
//
// init records the job's settings in the process-wide ConfigInitializer, which the Estimator
// reads (train_steps, eval_steps, max_steps, save_steps, if_load, restore_model_version,
// is_incremental_checkpoint, save_delta_checkpoints_secs), and which create_table and
// sparse_lookup read as the spec's do (use_dynamic_expansion, use_dynamic: the defaults of the
// tables and lookups made while init is in effect). Unknown or
// contradictory settings are errors naming the setting (the Python original ignores unknown
// ones). bind_cpu pins the process's threads to the cores of its local rank.
// terminate_config_initializer stops every key stage still running, releases the settings, and
// is safe to call twice; init registers it to run at exit.
//
// Threading: init and terminate_config_initializer are thread-safe; call terminate from the
// thread that runs the training loops, after them (it stops their key stages).
#ifndef RECSDK_INITIALIZE_H_
#define RECSDK_INITIALIZE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/status.h"

namespace recsdk {

// InitOptions: the settings of init (the spec's init keyword arguments). FromSettings parses them
// from strings.
struct InitOptions {
  // max_steps / train_steps / eval_steps / save_steps: -1 (default) = until the data ends;
  // >= 0 otherwise; not all four 0. train_steps <= max_steps when both are set.
  int64_t max_steps = -1;
  int64_t train_steps = -1;
  int64_t eval_steps = -1;
  int64_t save_steps = -1;
  // if_load: restore the latest checkpoint of model_dir before training. Default false.
  bool if_load = false;
  // use_dynamic: dynamic shapes for lookups. Takes effect on every sparse_lookup called while
  // this init is in effect whose SparseLookupOptions::use_dynamic is unset (a lookup that sets it
  // keeps its own); false then needs the lookup's send_count > 0 (static shape). Default true.
  bool use_dynamic = true;
  // use_dynamic_expansion: tables grow as keys arrive. true turns on
  // TableConfig::use_dynamic_expansion for every create_table called while this init is in
  // effect; such a table needs a by-address sparse optimizer, no host tier and no eviction, and
  // create_table is an InvalidArgument naming this option where it has not. false leaves each
  // table's own setting. Tables created before init are not changed. Default false.
  bool use_dynamic_expansion = false;
  // bind_cpu: pin the process's threads to the cores of its local rank (LOCAL_RANK /
  // OMPI_COMM_WORLD_LOCAL_RANK among LOCAL_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE ranks, 0 of 1 by
  // default), NUMA node by NUMA node; where the OS refuses, a logged no-op. A rank variable that
  // is set but is not a decimal integer (a rank >= 0, a size >= 1), or a rank not below the size,
  // makes init an InvalidArgument naming the variable and its value. Default false.
  bool bind_cpu = false;
  // is_incremental_checkpoint: also save delta checkpoints every save_delta_checkpoints_secs
  // (> 0 needed then; > 0 needs it). Default false.
  bool is_incremental_checkpoint = false;
  // save_delta_checkpoints_secs: seconds between delta checkpoints, with is_incremental_checkpoint.
  // Default 0.
  int64_t save_delta_checkpoints_secs = 0;
  // restore_model_version: the global step of the checkpoint to restore (-1: the latest); needs
  // if_load.
  int64_t restore_model_version = -1;

  // Validate: InvalidArgument naming the setting, its value, the rule and the fix.
  Status Validate() const;
  // FromSettings: options from name -> value text (a config file, flags), with the names above.
  // An unknown name, a bad value or a contradiction is an InvalidArgument naming it.
  static StatusOr<InitOptions> FromSettings(const std::map<std::string, std::string>& settings);
};

// ConfigInitializer: the settings of the running job (the spec's ConfigInitializer).
class ConfigInitializer {
 public:
  // Get: the instance after init, or null before init / after terminate_config_initializer.
  static const ConfigInitializer* Get();
  // options: the settings init was given.
  const InitOptions& options() const { return options_; }
  // bound_cpus: the cores bind_cpu pinned the threads to (empty when not bound).
  const std::vector<int>& bound_cpus() const { return bound_cpus_; }

  // ConfigInitializer: init makes the instance; use Get().
  explicit ConfigInitializer(InitOptions options) : options_(std::move(options)) {}

 private:
  friend Status init(const InitOptions& options);
  InitOptions options_;
  std::vector<int> bound_cpus_;
};

// init: validates and records `options` (FailedPrecondition when already initialised: call
// terminate_config_initializer first), binds CPUs when asked and registers the exit handler.
Status init(const InitOptions& options);
// terminate_config_initializer: stops the key stages still running (KeyStage::Stop), forgets the
// settings. Idempotent; safe at exit.
void terminate_config_initializer();

}  // namespace recsdk

#endif  // RECSDK_INITIALIZE_H_
