// little_demo.h: the spec's little_demo on the Estimator, as a library so tests run each USE_MODE.
// See little_demo.cc for the model. Threading: one caller.
#ifndef RECSDK_SAMPLES_LITTLE_DEMO_H_
#define RECSDK_SAMPLES_LITTLE_DEMO_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/config_file.h"
#include "recsdk/estimator.h"
#include "recsdk/status.h"

namespace little_demo {

// DemoOptions: the spec's knobs (environment variables of its run.sh, and flags of the same
// names in lower case) and the run's sizes.
struct DemoOptions {
  std::string use_mode = "train";  // USE_MODE: train, load_and_train, predict
  // CACHE_MODE: HBM (every row on the device), DDR (device tier a quarter of each table's keys,
  // the rest in host memory) or SSD (device a quarter, host a tenth, the rest in files under
  // model_dir/ssd).
  std::string cache_mode = "HBM";
  bool use_dynamic = true;             // USE_DYNAMIC: dynamic shapes (else send_count padding)
  bool use_dynamic_expansion = false;  // USE_DYNAMIC_EXPANSION (LazyAdamByAddress)
  bool use_multi_lookup = true;        // USE_MULTI_LOOKUP: look the user table up 1 + times
  int multi_lookup_times = 2;          // MULTI_LOOKUP_TIMES
  bool use_modify_graph = true;        // USE_MODIFY_GRAPH: key work in the key stage
  bool use_timestamp = false;          // USE_TIMESTAMP: timestamps + eviction (EvictHook)
  bool use_deterministic = false;      // USE_DETERMINISTIC
  bool use_padding_keys = false;       // USE_PADDING_KEYS: short samples padded with key -1
  int key_process_thread_num = 0;      // KEY_PROCESS_THREAD_NUM (0: the stage's default)
  int intra_op_parallelism = 0;        // threads per kernel (0: all hardware threads)
  // session_config: SESSION_CONFIG=FILE or --session_config FILE, any session option of the spec
  // (enable_dump, precision_mode, ...) from a JSON file as `recsdk validate-config` checks it;
  // unset: the defaults. USE_DETERMINISTIC and a nonzero intra_op_parallelism override the file.
  std::optional<recsdk::SessionConfig> session_config;
  // PRECISION_CHECK=1 (the spec's monitoring mode, samples/common/precision_check.h, as in every
  // sample): the training steps of precision_check_steps (dump_step syntax) are traced under
  // precision_check_dir/<time>/: every op's inputs and outputs (a dump, dump_mode "all": batch
  // ids, lookups, dense outputs, loss, gradients, updates) as the CRC-32C of their elements and
  // their first values (dump_checksums), or whole with PRECISION_CHECK_TENSORS=1;
  // `recsdk precision-check RUN_A RUN_B` names the first step and stage where two runs diverge.
  // Overrides the session config file's dump options.
  bool precision_check = false;
  std::string precision_check_dir = "precision_check";  // PRECISION_CHECK_DIR
  std::string precision_check_steps = "0-9";            // PRECISION_CHECK_STEPS
  bool precision_check_tensors = false;                 // PRECISION_CHECK_TENSORS
  uint64_t seed = 20240807;  // SEED: RunConfig::seed and the tables' initializer seed

  int64_t train_steps = 200;  // per Train call (load_and_train trains this many more)
  int64_t eval_steps = 10;    // batches per evaluation
  int64_t eval_every = 100;   // steps between evaluations and checkpoints
  int64_t batch_size = 512;
  std::vector<int64_t> hidden_units = {1024, 512, 256, 128};
  int64_t threshold_step = 50;  // set_threshold at this step
  std::string model_dir = "little_demo_model";
  // export_dir: tables as .npy and (after training) the inference bundle in saved_model/<time>
  // ("" skips both).
  std::string export_dir = "little_demo_export";
  std::FILE* out = nullptr;  // default stdout
  // losses: when set, every training step's loss is appended (for determinism checks).
  std::vector<float>* losses = nullptr;
};

// ParseOptions: environment variables first, then flags ("--use_mode=train" or "--use_mode
// train", plus --train_steps, --batch_size, --model_dir, --export_dir, --hidden_units=a,b,..,
// --session_config FILE). InvalidArgument naming an unknown flag or a bad value; a session config
// file that cannot be read or parsed is an error naming the file.
recsdk::StatusOr<DemoOptions> ParseOptions(int argc, char** argv);

// MakeModelFn: the little_demo model as an Estimator model_fn. Its features are "user_ids"
// ([batch, 8] int64) and "item_ids" ([batch, 16]); its labels "label_0" and "label_1" ([batch, 1]
// float32). Also used by the race harness (samples/dlrm --mode little_demo), with
// use_modify_graph false so the lookups run in the graph.
recsdk::ModelFn MakeModelFn(const DemoOptions& options);

// DemoResult: the last evaluation's per-head AUC beside the planted model's.
struct DemoResult {
  double auc[2] = {0, 0};
  double planted_auc[2] = {0, 0};
  int64_t global_step = 0;
};

// Run: one run in options.use_mode. Prints per step block the loss, table sizes and capacities,
// steps/s, each evaluation, and "Demo done!" at the end.
recsdk::StatusOr<DemoResult> Run(const DemoOptions& options);

}  // namespace little_demo

#endif  // RECSDK_SAMPLES_LITTLE_DEMO_H_
