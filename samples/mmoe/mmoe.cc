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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"

namespace mmoe {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code

constexpr int64_t kVocabulary[kFields] = {60, 40, 300, 150, 20, 500, 200, 30};
constexpr int kLatentDim = 4;
constexpr int kSharedPairs[][2] = {{0, 2}, {1, 5}, {3, 6}, {2, 7}, {4, 5}};

// Planted weight: a fixed pseudo-random value in [-1, 1] of (table, a, b).
double Weight(uint64_t table, uint64_t a, int64_t b) {
  uint64_t x = static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull + table * 0xBF58476D1CE4E5B9ull +
               a * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B4D5ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2 - 1;
}

// Key of an id of field f: one table holds every field.
int64_t Key(int f, int64_t id) { return (static_cast<int64_t>(f) << 32) | id; }

InputFn Input(const PlantedRows& rows, int64_t batch_size, bool training) {
  return [&rows, batch_size, training]() -> StatusOr<std::unique_ptr<Dataset>> {
    std::vector<int64_t> keys(rows.ids.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = Key(i % kFields, rows.ids[i]);
    std::vector<InMemoryColumn> columns = {{"ids", std::move(keys), kFields}};
    for (int t = 0; t < kTasks; ++t) {
      columns.push_back({fmt::format("label_{}", t),
                         std::vector<float>(rows.labels[t].begin(), rows.labels[t].end()), 1});
    }
    auto data = InMemoryDataset(std::move(columns), 4096);
    if (!data.ok()) return data.status();
    BatchOptions batching;
    batching.drop_remainder = training;
    return BatchRows(*std::move(data), batch_size, batching);
  };
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
      AdamOptions adam_options;
      adam_options.learning_rate = o.dense_learning_rate;
      AdamOptimizer adam(adam_options);
      auto dense = adam.Minimize(s, spec.loss);
      if (!dense.ok()) return dense.status();
      auto sparse = SparseMinimize(s, spec.loss);
      if (!sparse.ok()) return sparse.status();
      spec.train_op = ops::Group(s, {*dense, *sparse});
    }
    return spec;
  };
}

Status Validate(const MmoeOptions& o) {
  if (o.batch_size < 1 || o.train_rows < o.batch_size || o.eval_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("mmoe: batch_size {} (>= 1), train_rows {} (at least one batch), eval_rows "
                    "{} (>= 1)",
                    o.batch_size, o.train_rows, o.eval_rows));
  }
  if (o.embedding_dim < 1 || o.tower_units.empty() || o.threads < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "mmoe: embedding_dim {} (>= 1), tower_units ({} layers, >= 1), threads {} (>= 0)",
        o.embedding_dim, o.tower_units.size(), o.threads));
  }
  // experts and expert_units are the MixtureOfExperts layer's to check: its error names them.
  return absl::OkStatus();
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  std::mt19937_64 rng(0x33033E + stream);
  std::uniform_real_distribution<double> uniform(0, 1);
  PlantedRows r;
  r.n = n;
  r.ids.resize(n * kFields);
  double z[kFields][kLatentDim];
  for (int64_t i = 0; i < n; ++i) {
    int64_t* ids = &r.ids[i * kFields];
    double shared = 0, own[kTasks] = {-0.3, -1.0};
    for (int f = 0; f < kFields; ++f) {
      const double u = uniform(rng);
      ids[f] = std::min<int64_t>(kVocabulary[f] - 1, static_cast<int64_t>(u * u * kVocabulary[f]));
      shared += 0.3 * Weight(1, f, ids[f]);
      for (int t = 0; t < kTasks; ++t) own[t] += 0.35 * Weight(2 + t, f, ids[f]);
      for (int k = 0; k < kLatentDim; ++k) z[f][k] = Weight(4 + k, f, ids[f]);
    }
    for (const auto& p : kSharedPairs)
      for (int k = 0; k < kLatentDim; ++k) shared += 0.6 * z[p[0]][k] * z[p[1]][k];
    for (int k = 0; k < kLatentDim; ++k) own[1] += 0.6 * z[1][k] * z[6][k];
    for (int t = 0; t < kTasks; ++t) {
      const double logit = shared + own[t];
      r.logits[t].push_back(logit);
      r.labels[t].push_back(uniform(rng) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f);
    }
  }
  return r;
}

StatusOr<MmoeResult> Run(const MmoeOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  std::FILE* out = o.out != nullptr ? o.out : stdout;
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
  if (!o.model_dir.empty()) std::filesystem::remove_all(o.model_dir);

  RunConfig config;
  config.model_dir = o.model_dir;
  config.save_checkpoints_secs = 0;  // one checkpoint, at the end of Train
  config.log_step_count_steps = std::max<int64_t>(1, o.train_rows / o.batch_size / 5);
  config.seed = o.seed;
  config.session_config.intra_op_parallelism = o.threads;
  EstimatorOptions options;
  options.label_columns = {"label_0", "label_1"};
  options.log = out;
  auto est = Estimator::Create(MakeModelFn(o), config, {}, options);
  if (!est.ok()) return est.status();

  MmoeResult result;
  const auto start = std::chrono::steady_clock::now();
  if (Status s = (*est)->Train(Input(train, o.batch_size, /*training=*/true)); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto step = (*est)->global_step();
  if (!step.ok()) return step.status();
  result.steps = *step;
  result.train_samples_per_second = seconds > 0 ? result.steps * o.batch_size / seconds : 0;
  auto metrics = (*est)->Evaluate(Input(eval, o.batch_size, /*training=*/false));
  if (!metrics.ok()) return metrics.status();
  for (int t = 0; t < kTasks; ++t) {
    result.auc[t] = metrics->at(fmt::format("auc_{}", t));
    std::vector<float> planted(eval.logits[t].begin(), eval.logits[t].end());
    auto planted_auc = Auc(planted, eval.labels[t]);
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
  std::string bad;  // the first bad value's message
  auto integer = [&bad](const std::string& name, const std::string& v, auto* out) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') bad = fmt::format("mmoe: --{}={} is not an integer", name, v);
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
  };
  auto real = [&bad](const std::string& name, const std::string& v, double* out) {
    char* end = nullptr;
    *out = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(*out) || *out <= 0) {
      bad = fmt::format("mmoe: --{}={} is not a number > 0", name, v);
    }
  };
  auto list = [&](const std::string& name, const std::string& v, std::vector<int64_t>* out) {
    out->clear();
    for (size_t p = 0; p <= v.size() && bad.empty();) {
      const size_t q = std::min(v.find(',', p), v.size());
      int64_t units = 0;
      integer(name, v.substr(p, q - p), &units);
      if (bad.empty() && units < 1) bad = fmt::format("mmoe: --{}={}: a layer < 1", name, v);
      out->push_back(units);
      p = q + 1;
    }
  };
  using Setter = std::function<void(const std::string& name, const std::string& v)>;
  const std::map<std::string, Setter> flags = {
      {"train_rows", [&](auto& n, auto& v) { integer(n, v, &o.train_rows); }},
      {"eval_rows", [&](auto& n, auto& v) { integer(n, v, &o.eval_rows); }},
      {"batch_size", [&](auto& n, auto& v) { integer(n, v, &o.batch_size); }},
      {"embedding_dim", [&](auto& n, auto& v) { integer(n, v, &o.embedding_dim); }},
      {"threads", [&](auto& n, auto& v) { integer(n, v, &o.threads); }},
      {"seed", [&](auto& n, auto& v) { integer(n, v, &o.seed); }},
      {"sparse_learning_rate", [&](auto& n, auto& v) { real(n, v, &o.sparse_learning_rate); }},
      {"dense_learning_rate", [&](auto& n, auto& v) { real(n, v, &o.dense_learning_rate); }},
      {"model_dir", [&](auto&, auto& v) { o.model_dir = v; }},
      {"experts", [&](auto& n, auto& v) { integer(n, v, &o.experts); }},
      {"expert_units", [&](auto& n, auto& v) { list(n, v, &o.expert_units); }},
      {"tower_units", [&](auto& n, auto& v) { list(n, v, &o.tower_units); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(fmt::format("mmoe: unexpected argument \"{}\"", arg));
    }
    arg = arg.substr(2);
    std::string v;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      v = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("mmoe: --{} needs a value", arg));
    }
    const auto flag = flags.find(arg);
    if (flag == flags.end()) {
      return absl::InvalidArgumentError(
          fmt::format("mmoe: unknown flag --{}; see samples/mmoe/mmoe.h for the flags", arg));
    }
    flag->second(arg, v);
    if (!bad.empty()) return absl::InvalidArgumentError(bad);
  }
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace mmoe
