// estimator_run.cc: the samples' Estimator run around their models (estimator_run.h).
#include "samples/common/estimator_run.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <utility>

#include "fmt/format.h"
#include "recsdk/config_file.h"
#include "samples/common/precision_check.h"

namespace samples {

using namespace recsdk;  // NOLINT: a sample reads like user code

std::FILE* OutputOf(const RunOptions& o) { return o.out != nullptr ? o.out : stdout; }

Status ValidateRunOptions(const std::string& sample, const RunOptions& o,
                          const std::string& units_flag, const std::vector<int64_t>& units) {
  if (o.batch_size < 1 || o.train_rows < o.batch_size || o.eval_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("{}: batch_size {} (>= 1), train_rows {} (at least one batch), eval_rows {} "
                    "(>= 1)",
                    sample, o.batch_size, o.train_rows, o.eval_rows));
  }
  if (o.embedding_dim < 1 || units.empty() || o.threads < 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: embedding_dim {} (>= 1), {} ({} layers, >= 1), threads {} (>= 0)", sample,
                    o.embedding_dim, units_flag, units.size(), o.threads));
  }
  return absl::OkStatus();
}

InputFn BatchedInput(std::function<std::vector<InMemoryColumn>()> make_columns, int64_t batch_size,
                     bool training) {
  return [make_columns = std::move(make_columns), batch_size,
          training]() -> StatusOr<std::unique_ptr<Dataset>> {
    auto data = InMemoryDataset(make_columns(), 4096);
    if (!data.ok()) return data.status();
    BatchOptions batching;
    batching.drop_remainder = training;
    return BatchRows(*std::move(data), batch_size, batching);
  };
}

StatusOr<Node*> TrainOp(const Scope& s, Output loss, double dense_learning_rate) {
  AdamOptions adam_options;
  adam_options.learning_rate = dense_learning_rate;
  AdamOptimizer adam(adam_options);
  auto dense = adam.Minimize(s, loss);
  if (!dense.ok()) return dense.status();
  auto sparse = SparseMinimize(s, loss);
  if (!sparse.ok()) return sparse.status();
  return ops::Group(s, {*dense, *sparse});
}

StatusOr<EstimatorSpec> BinaryClassifierSpec(const Scope& s, Output logit, const Labels& labels,
                                             ModeKeys mode, double dense_learning_rate) {
  const Output prob = ops::Sigmoid(s.WithOpName("prob"), logit);
  EstimatorSpec spec;
  spec.predictions["prob"] = prob;
  if (mode == ModeKeys::kPredict) return spec;
  const Output label = labels.at("label");
  spec.loss =
      ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, label, logit));
  spec.eval_metric_ops.push_back({"auc", MetricKind::kAuc, prob, label});
  if (mode == ModeKeys::kTrain) {
    auto train_op = TrainOp(s, spec.loss, dense_learning_rate);
    if (!train_op.ok()) return train_op.status();
    spec.train_op = *train_op;
  }
  return spec;
}

StatusOr<TrainEvalResult> TrainAndEvaluate(const RunOptions& o, ModelFn model_fn,
                                           const InputFn& train, const InputFn& eval,
                                           std::vector<std::string> label_columns) {
  if (!o.model_dir.empty()) std::filesystem::remove_all(o.model_dir);
  RunConfig config;
  config.model_dir = o.model_dir;
  config.save_checkpoints_secs = 0;  // one checkpoint, at the end of Train
  config.log_step_count_steps = std::max<int64_t>(1, o.train_rows / o.batch_size / 5);
  config.seed = o.seed;
  // --session_config FILE or SESSION_CONFIG=FILE: any session option, read by the parser
  // `recsdk validate-config` uses; a nonzero --threads overrides its intra_op_parallelism.
  std::string config_file = o.session_config;
  if (const char* env = std::getenv("SESSION_CONFIG"); config_file.empty() && env != nullptr) {
    config_file = env;
  }
  if (!config_file.empty()) {
    StatusOr<SessionConfig> file = SessionConfigFromFile(config_file);
    if (!file.ok()) return file.status();
    config.session_config = *std::move(file);
  }
  if (o.threads != 0 || config_file.empty()) config.session_config.intra_op_parallelism = o.threads;
  // PRECISION_CHECK=1: the spec's monitoring mode (samples/common/precision_check.h).
  auto precision_check = PrecisionCheckFromEnv("PRECISION_CHECK");
  if (!precision_check.ok()) return precision_check.status();
  if (Status s = ApplyPrecisionCheck("PRECISION_CHECK", *precision_check, &config.session_config,
                                     OutputOf(o));
      !s.ok()) {
    return s;
  }
  EstimatorOptions options;
  options.label_columns = std::move(label_columns);
  options.log = OutputOf(o);
  auto est = Estimator::Create(std::move(model_fn), config, {}, options);
  if (!est.ok()) return est.status();

  TrainEvalResult result;
  const auto start = std::chrono::steady_clock::now();
  if (Status s = (*est)->Train(train); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto step = (*est)->global_step();
  if (!step.ok()) return step.status();
  result.steps = *step;
  result.train_samples_per_second = seconds > 0 ? result.steps * o.batch_size / seconds : 0;
  auto metrics = (*est)->Evaluate(eval);
  if (!metrics.ok()) return metrics.status();
  result.metrics = *std::move(metrics);
  return result;
}

StatusOr<HeldOutResult> RunHeldOut(
    const std::string& sample, const RunOptions& o, ModelFn model_fn,
    const std::function<PlantedRows(int64_t n, uint64_t stream)>& make_rows,
    const std::function<InputFn(const PlantedRows& rows, int64_t batch_size, bool training)>&
        input) {
  const PlantedRows train = make_rows(o.train_rows, 2 * o.seed);
  const PlantedRows eval = make_rows(o.eval_rows, 2 * o.seed + 1);
  auto trained =
      TrainAndEvaluate(o, std::move(model_fn), input(train, o.batch_size, /*training=*/true),
                       input(eval, o.batch_size, /*training=*/false));
  if (!trained.ok()) return trained.status();
  HeldOutResult result;
  result.steps = trained->steps;
  result.train_samples_per_second = trained->train_samples_per_second;
  result.auc = trained->metrics.at("auc");
  auto planted_auc = PlantedAuc(eval.logits, eval.labels);
  if (!planted_auc.ok()) return planted_auc.status();
  result.planted_auc = *planted_auc;
  std::fprintf(OutputOf(o),
               "%s: %lld steps, %.0f samples/s; held-out AUC %.4f (planted model %.4f) on %lld "
               "rows\n",
               sample.c_str(), static_cast<long long>(result.steps),
               result.train_samples_per_second, result.auc, result.planted_auc,
               static_cast<long long>(o.eval_rows));
  return result;
}

}  // namespace samples
