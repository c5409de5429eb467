// xdeepfm.cc: xDeepFM (Lian et al. 2018) on the Estimator, on planted data.
//
// Data: kFields categorical fields; field f draws ids 0..FieldVocabulary(f)-1 with a skew (u^2
// of a uniform u), so the head ids are seen often. Each (field, id) has a fixed pseudo-random
// weight w and a 4-d latent vector z, every value in [-1, 1]. The planted logit is known, so its
// own AUC on the held-out rows is the ceiling:
//   logit = -0.3 + 0.4 sum_f w_f(id_f)                                   (first order)
//         + 0.25 sum_{i<j} <z_i(id_i), z_j(id_j)>                        (FM: every field pair)
//         + 1.0 sum_{(a,b,c) in kTriples} sum_k z_a,k z_b,k z_c,k         (three 3rd-order terms)
// A logistic regression over the ids learns the first line only; the vector-wise interactions of
// the second and third orders are what the CIN's layers 1 and 2 compute.
//
// Model (the paper's): a linear part (table "linear" of dim 1, sum-pooled to a logit); the field
// embeddings (table "embeddings", dim 8, [B, 10, 8] from one sparse_lookup) feed a CIN
// (layers::Cin, 32-32 maps, split_half) and a DNN (ReLU 128-64); the CIN's pooled maps and the
// DNN's last layer go through one output unit, added to the linear logit; sigmoid cross-entropy.
// LazyAdam for both tables, Adam for the rest. Lookups run in the key stage (modify_graph). One
// Estimator: Train over one epoch, then Evaluate on the held-out rows (AUC).
//
// Threading: one thread drives the Estimator (the key stage runs its own workers).
#include "samples/xdeepfm/xdeepfm.h"

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

namespace xdeepfm {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code

constexpr int64_t kVocabulary[kFields] = {60, 40, 300, 150, 20, 500, 200, 30, 100, 50};
constexpr int kLatentDim = 4;
constexpr int kTriples[][3] = {{0, 1, 4}, {2, 3, 7}, {5, 8, 9}};

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
    std::vector<float> labels(rows.labels.begin(), rows.labels.end());
    auto data =
        InMemoryDataset({{"ids", std::move(keys), kFields}, {"label", std::move(labels), 1}}, 4096);
    if (!data.ok()) return data.status();
    BatchOptions batching;
    batching.drop_remainder = training;
    return BatchRows(*std::move(data), batch_size, batching);
  };
}

ModelFn MakeModelFn(const XDeepFmOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    int64_t vocabulary = 0;
    for (int k = 0; k < kFields; ++k) vocabulary += kVocabulary[k];
    const auto sparse_opt =
        SparseOptimizerConfig::LazyAdam(static_cast<float>(o.sparse_learning_rate));
    TableConfig linear_config;
    linear_config.name = "linear";
    linear_config.dim = 1;
    linear_config.device_vocabulary_size = vocabulary;
    linear_config.initializer = Initializer::Zeros();  // a linear model starts at 0
    auto linear_table = create_table(s, linear_config, sparse_opt);
    if (!linear_table.ok()) return linear_table.status();
    TableConfig embedding_config;
    embedding_config.name = "embeddings";
    embedding_config.dim = o.embedding_dim;
    embedding_config.device_vocabulary_size = vocabulary;
    embedding_config.initializer =
        Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed) + 1);
    auto embedding_table = create_table(s, embedding_config, sparse_opt);
    if (!embedding_table.ok()) return embedding_table.status();

    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.name = "linear_lookup";
    lookup.combiner = Combiner::kSum;
    auto linear = sparse_lookup(s, *linear_table, f.at("ids"), lookup);  // [B, 1]
    if (!linear.ok()) return linear.status();
    lookup.name = "embedding_lookup";
    lookup.combiner.reset();
    auto fields = sparse_lookup(s, *embedding_table, f.at("ids"), lookup);  // [B, F, dim]
    if (!fields.ok()) return fields.status();

    layers::CinOptions cin_options;
    cin_options.layer_sizes = o.cin_layers;
    auto cin = layers::Cin(s, *fields, cin_options);  // [B, sum of the pooled maps]
    if (!cin.ok()) return cin.status();
    layers::MlpOptions dnn;
    dnn.hidden_units = o.deep_units;
    dnn.name = "dnn";
    const Output hidden =
        layers::Mlp(s, ops::Reshape(s, *fields, {-1, kFields * o.embedding_dim}), dnn);
    layers::DenseOptions output;
    output.units = 1;
    output.name = "output";
    const Output logit = ops::Add(s.WithOpName("logit"), *linear,
                                  layers::Dense(s, ops::Concat(s, {*cin, hidden}, 1), output));
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

Status Validate(const XDeepFmOptions& o) {
  if (o.batch_size < 1 || o.train_rows < o.batch_size || o.eval_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("xdeepfm: batch_size {} (>= 1), train_rows {} (at least one batch), "
                    "eval_rows {} (>= 1)",
                    o.batch_size, o.train_rows, o.eval_rows));
  }
  if (o.embedding_dim < 1 || o.deep_units.empty() || o.threads < 0) {
    return absl::InvalidArgumentError(
        fmt::format("xdeepfm: embedding_dim {} (>= 1), deep_units ({} layers, >= 1), threads "
                    "{} (>= 0)",
                    o.embedding_dim, o.deep_units.size(), o.threads));
  }
  // cin_layers are the Cin layer's to check: its error names the layer sizes and the fix.
  return absl::OkStatus();
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  std::mt19937_64 rng(0xDEEF + stream);
  std::uniform_real_distribution<double> uniform(0, 1);
  PlantedRows r;
  r.n = n;
  r.ids.resize(n * kFields);
  double z[kFields][kLatentDim];
  for (int64_t i = 0; i < n; ++i) {
    int64_t* ids = &r.ids[i * kFields];
    double logit = -0.3;
    for (int f = 0; f < kFields; ++f) {
      const double u = uniform(rng);
      ids[f] = std::min<int64_t>(kVocabulary[f] - 1, static_cast<int64_t>(u * u * kVocabulary[f]));
      logit += 0.4 * Weight(1, f, ids[f]);
      for (int k = 0; k < kLatentDim; ++k) z[f][k] = Weight(2 + k, f, ids[f]);
    }
    for (int a = 0; a < kFields; ++a)
      for (int b = a + 1; b < kFields; ++b)
        for (int k = 0; k < kLatentDim; ++k) logit += 0.25 * z[a][k] * z[b][k];
    for (const auto& t : kTriples)
      for (int k = 0; k < kLatentDim; ++k) logit += 1.0 * z[t[0]][k] * z[t[1]][k] * z[t[2]][k];
    r.logits.push_back(logit);
    r.labels.push_back(uniform(rng) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f);
  }
  return r;
}

StatusOr<XDeepFmResult> Run(const XDeepFmOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  std::FILE* out = o.out != nullptr ? o.out : stdout;
  std::fprintf(out,
               "xdeepfm: %lld train rows, %lld held-out rows, batch %lld; dim %d, CIN %s, DNN %s\n",
               static_cast<long long>(o.train_rows), static_cast<long long>(o.eval_rows),
               static_cast<long long>(o.batch_size), o.embedding_dim,
               fmt::format("{}", fmt::join(o.cin_layers, "-")).c_str(),
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

  XDeepFmResult result;
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
               "xdeepfm: %lld steps, %.0f samples/s; held-out AUC %.4f (planted model %.4f) on "
               "%lld rows\n",
               static_cast<long long>(result.steps), result.train_samples_per_second, result.auc,
               result.planted_auc, static_cast<long long>(o.eval_rows));
  return result;
}

StatusOr<XDeepFmOptions> ParseOptions(int argc, char** argv) {
  XDeepFmOptions o;
  std::string bad;  // the first bad value's message
  auto integer = [&bad](const std::string& name, const std::string& v, auto* out) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') bad = fmt::format("xdeepfm: --{}={} is not an integer", name, v);
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
  };
  auto real = [&bad](const std::string& name, const std::string& v, double* out) {
    char* end = nullptr;
    *out = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(*out) || *out <= 0) {
      bad = fmt::format("xdeepfm: --{}={} is not a number > 0", name, v);
    }
  };
  auto list = [&](const std::string& name, const std::string& v, std::vector<int64_t>* out) {
    out->clear();
    for (size_t p = 0; p <= v.size() && bad.empty();) {
      const size_t q = std::min(v.find(',', p), v.size());
      int64_t units = 0;
      integer(name, v.substr(p, q - p), &units);
      if (bad.empty() && units < 1) bad = fmt::format("xdeepfm: --{}={}: a layer < 1", name, v);
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
      {"cin_layers", [&](auto& n, auto& v) { list(n, v, &o.cin_layers); }},
      {"deep_units", [&](auto& n, auto& v) { list(n, v, &o.deep_units); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(fmt::format("xdeepfm: unexpected argument \"{}\"", arg));
    }
    arg = arg.substr(2);
    std::string v;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      v = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("xdeepfm: --{} needs a value", arg));
    }
    const auto flag = flags.find(arg);
    if (flag == flags.end()) {
      return absl::InvalidArgumentError(fmt::format(
          "xdeepfm: unknown flag --{}; see samples/xdeepfm/xdeepfm.h for the flags", arg));
    }
    flag->second(arg, v);
    if (!bad.empty()) return absl::InvalidArgumentError(bad);
  }
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace xdeepfm
