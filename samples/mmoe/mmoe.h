// mmoe.h: MMoE (Ma et al. 2018, multi-gate mixture of experts) on the Estimator, as a library so
// a test can train it. The model and the planted data are described in mmoe.cc and README.md.
// Threading: one caller.
#ifndef RECSDK_SAMPLES_MMOE_H_
#define RECSDK_SAMPLES_MMOE_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "recsdk/status.h"

namespace mmoe {

inline constexpr int kFields = 8;  // categorical fields per sample
inline constexpr int kTasks = 2;   // labels "label_0" and "label_1"

// MmoeOptions: the run's sizes and the model's knobs (flags of the same names).
struct MmoeOptions {
  int64_t train_rows = 4000000;  // planted training rows (one epoch)
  int64_t eval_rows = 100000;    // held-out rows of another random stream
  int64_t batch_size = 512;
  int embedding_dim = 8;
  int64_t experts = 4;                        // shared experts
  std::vector<int64_t> expert_units = {128};  // each expert's ReLU layers
  std::vector<int64_t> tower_units = {32};    // each task tower's ReLU layers
  double sparse_learning_rate = 0.01;         // LazyAdam on the table
  double dense_learning_rate = 0.001;         // Adam on experts, gates and towers
  int threads = 0;                            // SessionConfig::intra_op_parallelism (0: all)
  uint64_t seed = 1;
  std::string model_dir = "mmoe_model";  // checkpoints and summaries ("" writes none)
  // session_config: --session_config FILE (or SESSION_CONFIG=FILE; the flag wins): any session
  // option from a JSON file as `recsdk validate-config` checks it. A nonzero --threads overrides
  // the file's intra_op_parallelism.
  std::string session_config;
  std::FILE* out = nullptr;  // default stdout
};

// ParseOptions: "--name=value" or "--name value" for every field above but `out`
// (--expert_units=a,b,..., --tower_units=a,b,...). InvalidArgument naming an unknown flag or a
// bad value.
recsdk::StatusOr<MmoeOptions> ParseOptions(int argc, char** argv);

// PlantedRows: n samples of the planted model: kFields ids per sample (field f draws from
// 0..FieldVocabulary(f) - 1), and per task the label drawn from sigmoid(logit) and the logit.
struct PlantedRows {
  int64_t n = 0;
  std::vector<int64_t> ids;  // [n][kFields]
  std::vector<float> labels[kTasks];
  std::vector<double> logits[kTasks];
};

// MakePlantedRows: rows of random stream `stream` (train and eval use different streams).
PlantedRows MakePlantedRows(int64_t n, uint64_t stream);
// FieldVocabulary: the number of distinct ids of field f (0..kFields-1).
int64_t FieldVocabulary(int f);

// MmoeResult: per task the held-out AUC and the planted model's AUC on the same rows; the
// correlation of the two tasks' planted logits; the throughput.
struct MmoeResult {
  double auc[kTasks] = {0, 0};
  double planted_auc[kTasks] = {0, 0};
  double planted_correlation = 0;
  double train_samples_per_second = 0;
  int64_t steps = 0;
};

// Run: makes the planted data, trains one epoch with the Estimator, evaluates the held-out rows;
// prints the Estimator's progress lines, samples/s and each task's AUC beside the planted
// model's.
recsdk::StatusOr<MmoeResult> Run(const MmoeOptions& options);

}  // namespace mmoe

#endif  // RECSDK_SAMPLES_MMOE_H_
