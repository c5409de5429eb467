// wide_deep.cc: Wide & Deep (Cheng et al. 2016) on the Estimator, on planted data.
//
// Data: kFields categorical fields; field f draws ids 0..FieldVocabulary(f)-1 with a skew (u^2
// of a uniform u), so the head ids are seen often. The planted logit is known, so its own AUC on
// the held-out rows is the ceiling:
//   logit = -0.3 + 0.4 sum_f w_f(id_f)                          (per-id weights, all fields)
//         + 0.8 sum_c w'_c(cross_c)                             (two crossed fields: memorisation)
//         + 0.7 sum_{(i,j) in kLatentPairs} <z_i(id_i), z_j(id_j)>  (4-d latents: generalisation)
// with every w, w', z a fixed pseudo-random value in [-1, 1]. A logistic regression over the ids
// and the same crosses (the wide part alone) learns the first two lines only; the latent
// interactions are what the deep part is for.
//
// Model: the wide part is a linear model over the ids and the crossed ids, all in one table
// "wide" of dim 1 (keys slot << 32 | id), sum-pooled to a logit and trained by FTRL, as in the
// paper; the deep part looks the kFields ids up in "deep_embeddings" (dim 8, LazyAdam), flattens
// them and runs a ReLU tower (128-64) to a logit; the two logits add; sigmoid cross-entropy.
// Adam for the tower. Lookups run in the key stage (modify_graph). One Estimator: Train over one
// epoch, then Evaluate on the held-out rows (AUC).
//
// Threading: one thread drives the Estimator (the key stage runs its own workers).
#include "samples/wide_deep/wide_deep.h"

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

namespace wide_deep {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code

constexpr int64_t kVocabulary[kFields] = {50, 30, 1000, 40, 300, 2000, 500, 20};
constexpr int kCross[kCrosses][2] = {{0, 1}, {3, 7}};
constexpr int kLatentDim = 4;
constexpr int kLatentPairs[][2] = {{0, 4}, {1, 3}, {4, 6}, {2, 7}, {5, 1}};

// Planted weight: a fixed pseudo-random value in [-1, 1] of (table, a, b).
double Weight(uint64_t table, uint64_t a, int64_t b) {
  uint64_t x = static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull + table * 0xBF58476D1CE4E5B9ull +
               a * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B4D5ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2 - 1;
}

// Key of an id in slot s (fields 0..kFields-1, then the crosses): one table holds every slot.
int64_t Key(int slot, int64_t id) { return (static_cast<int64_t>(slot) << 32) | id; }

InputFn Input(const PlantedRows& rows, int64_t batch_size, bool training) {
  return [&rows, batch_size, training]() -> StatusOr<std::unique_ptr<Dataset>> {
    std::vector<int64_t> wide, deep;
    wide.reserve(rows.n * (kFields + kCrosses));
    deep.reserve(rows.n * kFields);
    for (int64_t i = 0; i < rows.n; ++i) {
      const int64_t* ids = &rows.ids[i * kFields];
      for (int f = 0; f < kFields; ++f) {
        wide.push_back(Key(f, ids[f]));
        deep.push_back(Key(f, ids[f]));
      }
      for (int c = 0; c < kCrosses; ++c) wide.push_back(Key(kFields + c, CrossId(c, ids)));
    }
    std::vector<float> labels(rows.labels.begin(), rows.labels.end());
    auto data = InMemoryDataset({{"wide_ids", std::move(wide), kFields + kCrosses},
                                 {"deep_ids", std::move(deep), kFields},
                                 {"label", std::move(labels), 1}},
                                4096);
    if (!data.ok()) return data.status();
    BatchOptions batching;
    batching.drop_remainder = training;
    return BatchRows(*std::move(data), batch_size, batching);
  };
}

ModelFn MakeModelFn(const WideDeepOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    int64_t wide_vocabulary = 0, deep_vocabulary = 0;
    for (int k = 0; k < kFields; ++k) deep_vocabulary += kVocabulary[k];
    wide_vocabulary = deep_vocabulary;
    for (int c = 0; c < kCrosses; ++c) {
      wide_vocabulary += kVocabulary[kCross[c][0]] * kVocabulary[kCross[c][1]];
    }
    TableConfig wide_config;
    wide_config.name = "wide";
    wide_config.dim = 1;
    wide_config.device_vocabulary_size = wide_vocabulary;
    wide_config.initializer = Initializer::Zeros();  // a linear model starts at 0
    auto wide_table =
        create_table(s, wide_config,
                     SparseOptimizerConfig::FTRL(static_cast<float>(o.wide_learning_rate), -0.5f,
                                                 static_cast<float>(o.wide_initial_accumulator),
                                                 0.0f, static_cast<float>(o.wide_l2)));
    if (!wide_table.ok()) return wide_table.status();
    TableConfig deep_config;
    deep_config.name = "deep_embeddings";
    deep_config.dim = o.embedding_dim;
    deep_config.device_vocabulary_size = deep_vocabulary;
    deep_config.initializer =
        Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed) + 1);
    auto deep_table = create_table(
        s, deep_config, SparseOptimizerConfig::LazyAdam(static_cast<float>(o.deep_learning_rate)));
    if (!deep_table.ok()) return deep_table.status();

    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.name = "wide_lookup";
    lookup.combiner = Combiner::kSum;
    auto wide = sparse_lookup(s, *wide_table, f.at("wide_ids"), lookup);  // [B, 1]
    if (!wide.ok()) return wide.status();
    lookup.name = "deep_lookup";
    lookup.combiner.reset();
    auto deep = sparse_lookup(s, *deep_table, f.at("deep_ids"), lookup);  // [B, F, dim]
    if (!deep.ok()) return deep.status();

    layers::MlpOptions tower;
    tower.hidden_units = o.deep_units;
    tower.output_units = 1;
    tower.name = "deep";
    const Output deep_logit =
        layers::Mlp(s, ops::Reshape(s, *deep, {-1, kFields * o.embedding_dim}), tower);
    const Output logit = ops::Add(s.WithOpName("logit"), *wide, deep_logit);
    const Output prob = ops::Sigmoid(s.WithOpName("prob"), logit);
    EstimatorSpec spec;
    spec.predictions["prob"] = prob;
    if (mode == ModeKeys::kPredict) return spec;
    const Output label = labels.at("label");
    spec.loss =
        ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, label, logit));
    spec.eval_metric_ops.push_back({"auc", MetricKind::kAuc, prob, label});
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

Status Validate(const WideDeepOptions& o) {
  if (o.batch_size < 1 || o.train_rows < o.batch_size || o.eval_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("wide_deep: batch_size {} (>= 1), train_rows {} (at least one batch), "
                    "eval_rows {} (>= 1)",
                    o.batch_size, o.train_rows, o.eval_rows));
  }
  if (o.embedding_dim < 1 || o.deep_units.empty() || o.threads < 0) {
    return absl::InvalidArgumentError(
        fmt::format("wide_deep: embedding_dim {} (>= 1), deep_units ({} layers, >= 1), threads "
                    "{} (>= 0)",
                    o.embedding_dim, o.deep_units.size(), o.threads));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

std::pair<int, int> CrossFields(int c) { return {kCross[c][0], kCross[c][1]}; }

int64_t CrossId(int c, const int64_t* ids) {
  return ids[kCross[c][0]] * kVocabulary[kCross[c][1]] + ids[kCross[c][1]];
}

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  std::mt19937_64 rng(0x3DEE9 + stream);
  std::uniform_real_distribution<double> uniform(0, 1);
  PlantedRows r;
  r.n = n;
  r.ids.resize(n * kFields);
  for (int64_t i = 0; i < n; ++i) {
    int64_t* ids = &r.ids[i * kFields];
    double logit = -0.3;
    for (int f = 0; f < kFields; ++f) {
      const double u = uniform(rng);
      ids[f] = std::min<int64_t>(kVocabulary[f] - 1, static_cast<int64_t>(u * u * kVocabulary[f]));
      logit += 0.4 * Weight(1, f, ids[f]);
    }
    for (int c = 0; c < kCrosses; ++c) logit += 0.8 * Weight(2, c, CrossId(c, ids));
    for (const auto& pair : kLatentPairs) {
      double dot = 0;
      for (int k = 0; k < kLatentDim; ++k) {
        dot += Weight(3 + k, pair[0], ids[pair[0]]) * Weight(3 + k, pair[1], ids[pair[1]]);
      }
      logit += 0.7 * dot;
    }
    r.logits.push_back(logit);
    r.labels.push_back(uniform(rng) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f);
  }
  return r;
}

StatusOr<WideDeepResult> Run(const WideDeepOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  std::FILE* out = o.out != nullptr ? o.out : stdout;
  std::fprintf(out,
               "wide_deep: %lld train rows, %lld held-out rows, batch %lld; wide FTRL %.3g, deep "
               "dim %d, tower %s\n",
               static_cast<long long>(o.train_rows), static_cast<long long>(o.eval_rows),
               static_cast<long long>(o.batch_size), o.wide_learning_rate, o.embedding_dim,
               fmt::format("{}", fmt::join(o.deep_units, "-")).c_str());
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
  options.log = out;
  auto est = Estimator::Create(MakeModelFn(o), config, {}, options);
  if (!est.ok()) return est.status();

  WideDeepResult result;
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
  result.auc = metrics->at("auc");
  std::vector<float> planted(eval.logits.begin(), eval.logits.end());
  auto planted_auc = Auc(planted, eval.labels);
  if (!planted_auc.ok()) return planted_auc.status();
  result.planted_auc = *planted_auc;
  std::fprintf(out,
               "wide_deep: %lld steps, %.0f samples/s; held-out AUC %.4f (planted model %.4f) on "
               "%lld rows\n",
               static_cast<long long>(result.steps), result.train_samples_per_second, result.auc,
               result.planted_auc, static_cast<long long>(o.eval_rows));
  return result;
}

StatusOr<WideDeepOptions> ParseOptions(int argc, char** argv) {
  WideDeepOptions o;
  std::string bad;  // the first bad value's message
  auto integer = [&bad](const std::string& name, const std::string& v, auto* out) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') {
      bad = fmt::format("wide_deep: --{}={} is not an integer", name, v);
    }
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
  };
  auto real = [&bad](const std::string& name, const std::string& v, double* out) {
    char* end = nullptr;
    *out = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(*out) || *out <= 0) {
      bad = fmt::format("wide_deep: --{}={} is not a number > 0", name, v);
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
      {"wide_learning_rate", [&](auto& n, auto& v) { real(n, v, &o.wide_learning_rate); }},
      {"wide_initial_accumulator",
       [&](auto& n, auto& v) { real(n, v, &o.wide_initial_accumulator); }},
      {"wide_l2", [&](auto& n, auto& v) { real(n, v, &o.wide_l2); }},
      {"deep_learning_rate", [&](auto& n, auto& v) { real(n, v, &o.deep_learning_rate); }},
      {"dense_learning_rate", [&](auto& n, auto& v) { real(n, v, &o.dense_learning_rate); }},
      {"model_dir", [&](auto&, auto& v) { o.model_dir = v; }},
      {"deep_units",
       [&](auto& n, auto& v) {
         o.deep_units.clear();
         for (size_t p = 0; p <= v.size() && bad.empty();) {
           const size_t q = std::min(v.find(',', p), v.size());
           int64_t units = 0;
           integer(n, v.substr(p, q - p), &units);
           if (bad.empty() && units < 1) bad = fmt::format("wide_deep: --{}={}: a layer < 1", n, v);
           o.deep_units.push_back(units);
           p = q + 1;
         }
       }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(fmt::format("wide_deep: unexpected argument \"{}\"", arg));
    }
    arg = arg.substr(2);
    std::string v;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      v = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("wide_deep: --{} needs a value", arg));
    }
    const auto flag = flags.find(arg);
    if (flag == flags.end()) {
      return absl::InvalidArgumentError(fmt::format(
          "wide_deep: unknown flag --{}; see samples/wide_deep/wide_deep.h for the flags", arg));
    }
    flag->second(arg, v);
    if (!bad.empty()) return absl::InvalidArgumentError(bad);
  }
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace wide_deep
