// wide_deep.h: Wide & Deep (Cheng et al. 2016) on the Estimator, as a library so a test can train
// it. The model and the planted data are described in wide_deep.cc and README.md.
// Threading: one caller.
#ifndef RECSDK_SAMPLES_WIDE_DEEP_H_
#define RECSDK_SAMPLES_WIDE_DEEP_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/status.h"
#include "samples/common/planted.h"

namespace wide_deep {

inline constexpr int kFields = 8;   // categorical fields per sample
inline constexpr int kCrosses = 2;  // crossed fields the wide part sees (CrossFields)

// WideDeepOptions: the run's sizes and the model's knobs (flags of the same names).
struct WideDeepOptions {
  int64_t train_rows = 4000000;  // planted training rows (one epoch)
  int64_t eval_rows = 100000;    // held-out rows of another random stream
  int64_t batch_size = 512;
  int embedding_dim = 8;                        // the deep part's table
  std::vector<int64_t> deep_units = {128, 64};  // ReLU layers of the deep tower
  // wide_learning_rate, wide_initial_accumulator: FTRL's alpha and first accumulator value on
  // the wide table. The sparse gradient of a mean loss carries 1/batch_size, so next to FTRL's
  // default accumulator 0.1 a weight barely moves: at 1M rows the spec's defaults (0.001, 0.1)
  // give AUC 0.713 (the deep part alone), 0.1 with 0.1 gives 0.717, 0.1 with 1e-4 gives 0.741
  // (alpha 0.02 / 0.05 / 0.5 / 2 with 1e-4: 0.729 / 0.737 / 0.732 / 0.709). README.md.
  double wide_learning_rate = 0.1;
  double wide_initial_accumulator = 1e-4;
  double wide_l2 = 1e-4;               // FTRL l2 (per touched weight)
  double deep_learning_rate = 0.01;    // LazyAdam on the deep table
  double dense_learning_rate = 0.001;  // Adam on the tower
  int threads = 0;                     // SessionConfig::intra_op_parallelism (0: all)
  uint64_t seed = 1;
  std::string model_dir = "wide_deep_model";  // checkpoints and summaries ("" writes none)
  // session_config: --session_config FILE (or SESSION_CONFIG=FILE; the flag wins): any session
  // option from a JSON file as `recsdk validate-config` checks it. A nonzero --threads overrides
  // the file's intra_op_parallelism.
  std::string session_config;
  std::FILE* out = nullptr;  // default stdout
};

// ParseOptions: "--name=value" or "--name value" for every field above but `out`
// (--deep_units=a,b,...). InvalidArgument naming an unknown flag or a bad value.
recsdk::StatusOr<WideDeepOptions> ParseOptions(int argc, char** argv);

// PlantedRows: n samples of the planted model: kFields ids per sample (field f draws from
// 0..FieldVocabulary(f) - 1), the label drawn from sigmoid(logit), and the logit itself.
using PlantedRows = samples::PlantedRows;

// MakePlantedRows: rows of random stream `stream` (train and eval use different streams).
PlantedRows MakePlantedRows(int64_t n, uint64_t stream);
// FieldVocabulary: the number of distinct ids of field f (0..kFields-1).
int64_t FieldVocabulary(int f);
// CrossFields: the two fields crossed in cross c (0..kCrosses-1).
std::pair<int, int> CrossFields(int c);
// CrossId: the id of cross c for a sample's ids (a * vocabulary(b) + b: every pair distinct).
int64_t CrossId(int c, const int64_t* sample_ids);

// WideDeepResult: held-out AUC, the planted model's AUC on the same rows, the throughput.
using WideDeepResult = samples::HeldOutResult;

// Run: makes the planted data, trains one epoch with the Estimator, evaluates the held-out rows;
// prints the Estimator's progress lines, samples/s and the AUC beside the planted model's.
recsdk::StatusOr<WideDeepResult> Run(const WideDeepOptions& options);

}  // namespace wide_deep

#endif  // RECSDK_SAMPLES_WIDE_DEEP_H_
