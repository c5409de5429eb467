// xdeepfm.h: xDeepFM (Lian et al. 2018) on the Estimator, as a library so a test can train it.
// The model and the planted data are described in xdeepfm.cc and README.md.
// Threading: one caller.
#ifndef RECSDK_SAMPLES_XDEEPFM_H_
#define RECSDK_SAMPLES_XDEEPFM_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "recsdk/status.h"
#include "samples/common/planted.h"

namespace xdeepfm {

inline constexpr int kFields = 10;  // categorical fields per sample

// XDeepFmOptions: the run's sizes and the model's knobs (flags of the same names).
struct XDeepFmOptions {
  int64_t train_rows = 2000000;  // planted training rows (one epoch)
  int64_t eval_rows = 100000;    // held-out rows of another random stream
  int64_t batch_size = 512;
  int embedding_dim = 8;                        // the field embeddings (CIN and DNN input)
  std::vector<int64_t> cin_layers = {32, 32};   // layers::CinOptions::layer_sizes
  std::vector<int64_t> deep_units = {128, 64};  // the DNN's ReLU layers
  double sparse_learning_rate = 0.01;           // LazyAdam on both tables
  double dense_learning_rate = 0.001;           // Adam on the CIN, the DNN and the output
  int threads = 0;                              // SessionConfig::intra_op_parallelism (0: all)
  uint64_t seed = 1;
  std::string model_dir = "xdeepfm_model";  // checkpoints and summaries ("" writes none)
  // session_config: --session_config FILE (or SESSION_CONFIG=FILE; the flag wins): any session
  // option from a JSON file as `recsdk validate-config` checks it. A nonzero --threads overrides
  // the file's intra_op_parallelism.
  std::string session_config;
  std::FILE* out = nullptr;  // default stdout
};

// ParseOptions: "--name=value" or "--name value" for every field above but `out`
// (--cin_layers=a,b,..., --deep_units=a,b,...). InvalidArgument naming an unknown flag or a bad
// value.
recsdk::StatusOr<XDeepFmOptions> ParseOptions(int argc, char** argv);

// PlantedRows: n samples of the planted model: kFields ids per sample (field f draws from
// 0..FieldVocabulary(f) - 1), the label drawn from sigmoid(logit), and the logit itself.
using PlantedRows = samples::PlantedRows;

// MakePlantedRows: rows of random stream `stream` (train and eval use different streams).
PlantedRows MakePlantedRows(int64_t n, uint64_t stream);
// FieldVocabulary: the number of distinct ids of field f (0..kFields-1).
int64_t FieldVocabulary(int f);

// XDeepFmResult: held-out AUC, the planted model's AUC on the same rows, the throughput.
using XDeepFmResult = samples::HeldOutResult;

// Run: makes the planted data, trains one epoch with the Estimator, evaluates the held-out rows;
// prints the Estimator's progress lines, samples/s and the AUC beside the planted model's.
recsdk::StatusOr<XDeepFmResult> Run(const XDeepFmOptions& options);

}  // namespace xdeepfm

#endif  // RECSDK_SAMPLES_XDEEPFM_H_
