// estimator_run.h: what the planted-data samples (wide_deep, xdeepfm, mmoe) do the same way around
// their models: check the sizes, feed in-memory rows in batches, end a model with the loss, the
// metric and the train op, and run one Estimator through one epoch of training and one
// evaluation, timed. Threading: one caller, as the Estimator.
#ifndef RECSDK_SAMPLES_COMMON_ESTIMATOR_RUN_H_
#define RECSDK_SAMPLES_COMMON_ESTIMATOR_RUN_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"
#include "samples/common/planted.h"

namespace samples {

// RunOptions: the options every planted-data sample has (see wide_deep.h for each field).
struct RunOptions {
  int64_t train_rows = 0;
  int64_t eval_rows = 0;
  int64_t batch_size = 0;
  int embedding_dim = 0;
  int threads = 0;
  uint64_t seed = 0;
  std::string model_dir;
  std::string session_config;  // a session config file ("": SESSION_CONFIG, else none)
  std::FILE* out = nullptr;    // default stdout
};

// RunOptionsOf: the shared fields of a sample's options.
template <typename Options>
RunOptions RunOptionsOf(const Options& o) {
  RunOptions r;
  r.train_rows = o.train_rows;
  r.eval_rows = o.eval_rows;
  r.batch_size = o.batch_size;
  r.embedding_dim = o.embedding_dim;
  r.threads = o.threads;
  r.seed = o.seed;
  r.model_dir = o.model_dir;
  r.session_config = o.session_config;
  r.out = o.out;
  return r;
}

// OutputOf: where the sample prints (o.out, default stdout).
std::FILE* OutputOf(const RunOptions& o);

// ValidateRunOptions: InvalidArgument, starting with the sample's name, unless batch_size >= 1,
// train_rows holds at least one batch, eval_rows >= 1, embedding_dim >= 1, the layer list of the
// flag `units_flag` is not empty and threads >= 0.
[[nodiscard]] recsdk::Status ValidateRunOptions(const std::string& sample, const RunOptions& o,
                                                const std::string& units_flag,
                                                const std::vector<int64_t>& units);

// BatchedInput: an InputFn over the columns `make_columns` returns (called each time the
// Estimator asks for the data), in batches of batch_size; in training a short last batch is
// dropped (static shapes), in evaluation every row counts.
recsdk::InputFn BatchedInput(std::function<std::vector<recsdk::InMemoryColumn>()> make_columns,
                             int64_t batch_size, bool training);

// TrainOp: Adam at dense_learning_rate on the dense variables, grouped with SparseMinimize (each
// table's own optimizer), both from one backward pass of `loss`.
recsdk::StatusOr<recsdk::Node*> TrainOp(const recsdk::Scope& s, recsdk::Output loss,
                                        double dense_learning_rate);

// BinaryClassifierSpec: the spec of a model with one logit per row and the label column "label":
// prediction "prob" (the op "prob"); outside predict, the loss "loss" (mean sigmoid
// cross-entropy) and the metric "auc"; in training TrainOp.
recsdk::StatusOr<recsdk::EstimatorSpec> BinaryClassifierSpec(const recsdk::Scope& s,
                                                             recsdk::Output logit,
                                                             const recsdk::Labels& labels,
                                                             recsdk::ModeKeys mode,
                                                             double dense_learning_rate);

// TrainEvalResult: the global step after training, the training throughput and the evaluation's
// metrics (by name, as Estimator::Evaluate returns them).
struct TrainEvalResult {
  int64_t steps = 0;
  double train_samples_per_second = 0;
  recsdk::EvalResult metrics;
};

// TrainAndEvaluate: one Estimator over `model_fn` (model_dir emptied first; its session options
// from o.session_config or SESSION_CONFIG when given, then PRECISION_CHECK; one checkpoint, at
// the end of Train; five progress lines per epoch; its lines go to the sample's output), trained
// on `train` and evaluated on `eval`. label_columns: the batch columns that are labels.
recsdk::StatusOr<TrainEvalResult> TrainAndEvaluate(
    const RunOptions& o, recsdk::ModelFn model_fn, const recsdk::InputFn& train,
    const recsdk::InputFn& eval, std::vector<std::string> label_columns = {"label"});

// RunHeldOut: a one-label sample's run after its first line: the training rows (stream 2 * seed)
// and the held-out rows (2 * seed + 1) from make_rows, TrainAndEvaluate over input(rows,
// batch_size, training), then the sample's last line (steps, samples/s, the held-out AUC beside
// the planted model's on the same rows).
recsdk::StatusOr<HeldOutResult> RunHeldOut(
    const std::string& sample, const RunOptions& o, recsdk::ModelFn model_fn,
    const std::function<PlantedRows(int64_t n, uint64_t stream)>& make_rows,
    const std::function<recsdk::InputFn(const PlantedRows& rows, int64_t batch_size,
                                        bool training)>& input);

}  // namespace samples

#endif  // RECSDK_SAMPLES_COMMON_ESTIMATOR_RUN_H_
