// mmoe.cc: MMoE (Ma et al. 2018, multi-gate mixture of experts) on the Estimator, on planted
// data with two correlated tasks.
//
// Data: kFields categorical fields; field f draws ids 0..FieldVocabulary(f)-1 with a skew (u^2
// of a uniform u), so the head ids are seen often. Each (field, id) has fixed pseudo-random
// weights s, a, b and a 4-d latent vector z, every value in [-1, 1]. The planted logits are
// known, so their own AUCs on the held-out rows are the ceilings:
//   shared  = 0.3 sum_f s_f(id_f) + 0.6 sum_{(i,j) in kSharedPairs} <z_i(id_i), z_j(id_j)>
//   logit_0 = -0.3 + shared + 0.35 sum_f a_f(id_f)
//   logit_1 = -1.0 + shared + 0.35 sum_f b_f(id_f) + 0.6 <z_1(id_1), z_6(id_6)>
// The two tasks share most of their signal (the correlation of the logits is about 0.7; Run
// prints it), as a click and a conversion do; a logistic regression per task learns the
// first-order parts only.
//
// Model (the paper's): one table "embeddings" (dim 8, keys field << 32 | id, [B, 8, 8] from one
// sparse_lookup), flattened; layers::MixtureOfExperts: 4 shared ReLU experts (128) and one softmax
// gate per task; per task a tower (ReLU 32) and a logit; the loss is the sum of both tasks' mean
// sigmoid cross-entropies. LazyAdam for the table, Adam for the rest. Lookups run in the key
// stage (modify_graph). One Estimator: Train over one epoch, then Evaluate (AUC per task).
//
// Threading: one thread drives the Estimator (the key stage runs its own workers).
#include "samples/mmoe/mmoe.h"

#include <cmath>
#include <string>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"
#include "samples/common/estimator_run.h"
#include "samples/common/flags.h"
#include "samples/common/planted.h"

namespace mmoe {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code
using samples::PlantedWeight;

constexpr int64_t kVocabulary[kFields] = {60, 40, 300, 150, 20, 500, 200, 30};
constexpr int kLatentDim = 4;
constexpr int kSharedPairs[][2] = {{0, 2}, {1, 5}, {3, 6}, {2, 7}, {4, 5}};

// Input: every field's ids in one column (one table holds every field), one label column a task.
InputFn Input(const PlantedRows& rows, int64_t batch_size, bool training) {
  return samples::BatchedInput(
      [&rows]() {
        std::vector<InMemoryColumn> columns = {
            {"ids", samples::FieldKeys(rows.ids, kFields), kFields}};
        for (int t = 0; t < kTasks; ++t) {
          columns.push_back({fmt::format("label_{}", t),
                             std::vector<float>(rows.labels[t].begin(), rows.labels[t].end()), 1});
        }
        return columns;
      },
      batch_size, training);
}

ModelFn MakeModelFn(const MmoeOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    int64_t vocabulary = 0;
    for (int k = 0; k < kFields; ++k) vocabulary += kVocabulary[k];
    TableConfig config;
    config.name = "embeddings";
    config.dim = o.embedding_dim;
    config.device_vocabulary_size = vocabulary;
    config.initializer = Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed) + 1);
    auto table = create_table(
        s, config, SparseOptimizerConfig::LazyAdam(static_cast<float>(o.sparse_learning_rate)));
    if (!table.ok()) return table.status();
    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.name = "embedding_lookup";
    auto fields = sparse_lookup(s, *table, f.at("ids"), lookup);  // [B, F, dim]
    if (!fields.ok()) return fields.status();

    layers::MixtureOfExpertsOptions moe;
    moe.num_experts = o.experts;
    moe.num_tasks = kTasks;
    moe.expert.hidden_units = o.expert_units;
    auto task_inputs =
        layers::MixtureOfExperts(s, ops::Reshape(s, *fields, {-1, kFields * o.embedding_dim}), moe);
    if (!task_inputs.ok()) return task_inputs.status();

    EstimatorSpec spec;
    Output logits[kTasks], probs[kTasks];
    for (int t = 0; t < kTasks; ++t) {
      layers::MlpOptions tower;
      tower.hidden_units = o.tower_units;
      tower.output_units = 1;
      tower.name = fmt::format("tower_{}", t);
      logits[t] = layers::Mlp(s, (*task_inputs)[t], tower);
      probs[t] = ops::Sigmoid(s.WithOpName(fmt::format("prob_{}", t)), logits[t]);
      spec.predictions[fmt::format("prob_{}", t)] = probs[t];
    }
    if (mode == ModeKeys::kPredict) return spec;
    std::vector<Output> losses;
    for (int t = 0; t < kTasks; ++t) {
      const Output label = labels.at(fmt::format("label_{}", t));
      losses.push_back(ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits[t])));
      spec.eval_metric_ops.push_back({fmt::format("auc_{}", t), MetricKind::kAuc, probs[t], label});
    }
    spec.loss = ops::AddN(s.WithOpName("loss"), losses);
    if (mode == ModeKeys::kTrain) {
      auto train_op = samples::TrainOp(s, spec.loss, o.dense_learning_rate);
      if (!train_op.ok()) return train_op.status();
      spec.train_op = *train_op;
    }
    return spec;
  };
}

// experts and expert_units are the MixtureOfExperts layer's to check: its error names them.
Status Validate(const MmoeOptions& o) {
  return samples::ValidateRunOptions("mmoe", samples::RunOptionsOf(o), "tower_units",
                                     o.tower_units);
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  samples::PlantedStream draw(0x33033E + stream);
  PlantedRows r;
  r.n = n;
  r.ids.resize(n * kFields);
  double z[kFields][kLatentDim];
  for (int64_t i = 0; i < n; ++i) {
    int64_t* ids = &r.ids[i * kFields];
    draw.DrawIds(kVocabulary, kFields, ids);
    double shared = 0, own[kTasks] = {-0.3, -1.0};
    for (int f = 0; f < kFields; ++f) {
      shared += 0.3 * PlantedWeight(1, f, ids[f]);
      for (int t = 0; t < kTasks; ++t) own[t] += 0.35 * PlantedWeight(2 + t, f, ids[f]);
      for (int k = 0; k < kLatentDim; ++k) z[f][k] = PlantedWeight(4 + k, f, ids[f]);
    }
    for (const auto& p : kSharedPairs)
      for (int k = 0; k < kLatentDim; ++k) shared += 0.6 * z[p[0]][k] * z[p[1]][k];
    for (int k = 0; k < kLatentDim; ++k) own[1] += 0.6 * z[1][k] * z[6][k];
    for (int t = 0; t < kTasks; ++t) {
      const double logit = shared + own[t];
      r.logits[t].push_back(logit);
      r.labels[t].push_back(draw.DrawLabel(logit));
    }
  }
  return r;
}

StatusOr<MmoeResult> Run(const MmoeOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  const samples::RunOptions run = samples::RunOptionsOf(o);
  std::FILE* out = samples::OutputOf(run);
  std::fprintf(out,
               "mmoe: %lld train rows, %lld held-out rows, batch %lld; dim %d, %lld experts %s, "
               "towers %s\n",
               static_cast<long long>(o.train_rows), static_cast<long long>(o.eval_rows),
               static_cast<long long>(o.batch_size), o.embedding_dim,
               static_cast<long long>(o.experts),
               fmt::format("{}", fmt::join(o.expert_units, "-")).c_str(),
               fmt::format("{}", fmt::join(o.tower_units, "-")).c_str());
  const PlantedRows train = MakePlantedRows(o.train_rows, 2 * o.seed);
  const PlantedRows eval = MakePlantedRows(o.eval_rows, 2 * o.seed + 1);
  auto trained = samples::TrainAndEvaluate(
      run, MakeModelFn(o), Input(train, o.batch_size, /*training=*/true),
      Input(eval, o.batch_size, /*training=*/false), {"label_0", "label_1"});
  if (!trained.ok()) return trained.status();
  MmoeResult result;
  result.steps = trained->steps;
  result.train_samples_per_second = trained->train_samples_per_second;
  for (int t = 0; t < kTasks; ++t) {
    result.auc[t] = trained->metrics.at(fmt::format("auc_{}", t));
    auto planted_auc = samples::PlantedAuc(eval.logits[t], eval.labels[t]);
    if (!planted_auc.ok()) return planted_auc.status();
    result.planted_auc[t] = *planted_auc;
  }
  double mean[kTasks] = {0, 0}, cov = 0, var[kTasks] = {0, 0};
  for (int t = 0; t < kTasks; ++t) {
    for (double l : eval.logits[t]) mean[t] += l / static_cast<double>(eval.n);
  }
  for (int64_t i = 0; i < eval.n; ++i) {
    const double d0 = eval.logits[0][i] - mean[0], d1 = eval.logits[1][i] - mean[1];
    cov += d0 * d1;
    var[0] += d0 * d0;
    var[1] += d1 * d1;
  }
  result.planted_correlation = cov / std::sqrt(var[0] * var[1]);
  std::fprintf(out, "mmoe: %lld steps, %.0f samples/s; planted logits correlate %.2f\n",
               static_cast<long long>(result.steps), result.train_samples_per_second,
               result.planted_correlation);
  for (int t = 0; t < kTasks; ++t) {
    std::fprintf(out, "mmoe: task %d held-out AUC %.4f (planted model %.4f) on %lld rows\n", t,
                 result.auc[t], result.planted_auc[t], static_cast<long long>(o.eval_rows));
  }
  return result;
}

StatusOr<MmoeOptions> ParseOptions(int argc, char** argv) {
  MmoeOptions o;
  samples::Flags flags("mmoe");
  samples::AddRunFlags(&flags, &o);
  flags.PositiveNumber("sparse_learning_rate", &o.sparse_learning_rate);
  flags.Integer("experts", &o.experts);
  flags.LayerSizes("expert_units", &o.expert_units);
  flags.LayerSizes("tower_units", &o.tower_units);
  if (Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace mmoe
