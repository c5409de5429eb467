// dcnv2.cc: the spec's DCNv2 Model Development Guide, step by step, on recsdk's sess.run path.
//
// Data: planted Criteo-format TSV written by the sample itself (13 integer counts, 26 hex ids per
// row, label first), read back with CriteoDataset (DenseTransform::kLog1p). Field f draws ids
// 1..FieldVocabulary(f) (20 to 300) with a skew (u^2 of a uniform u), so the head ids are seen
// often. The planted logit is known, so its own AUC on the held-out rows is the ceiling:
//   logit = -0.8 + 0.25 sum_f w_f(id_f)                               (per-id weights, all fields)
//         + 0.3 sum_d a_d (log1p(count_d) - 1.5)                      (dense)
//         + 0.6 sum_{p<6} <z_{2p}(id_{2p}), z_{2p+1}(id_{2p+1})>       (6 field pairs, 4-d latents)
//         + 0.5 (log1p(count_0) - 1.5) w'_13(id_13)                   (a dense x id cross)
// with every w, a, z a fixed pseudo-random value in [-1, 1]. A logistic regression over the same
// features can learn the first two lines only; the crosses are what a cross network is for.
//
// Model (the guide's): all 26 fields in one table "sparse_embeddings": the FeatureSpec
// "sparse_feature" merges the reader's C1..C26 into one [B, 26] column, field f's ids offset by
// the sizes of the fields before it (the guide's preprocessing; MergeFeatureFields), and one
// sparse_lookup of [B, 26] ids -> [B, 26, dim]; the 13 dense features normalised (BatchNorm by
// default); x0 = [dense, embeddings]; a DCNv2 cross network (3 CrossLayers) beside a deep tower
// (256-128 ReLU), or the tower on the cross network (--structure=stacked); one logit; sigmoid
// cross-entropy. Adam (with a linear warm-up) for the dense variables and LazyAdam for the
// table, both behind the guide's static loss scale 65536. The evaluation branch is the same
// model built again under variable reuse with is_train=false lookups and BatchNorm in inference.
//
// Threading: one thread drives the Session; kernels use SessionConfig::intra_op_parallelism.
#include "samples/dcnv2/dcnv2.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "fmt/format.h"
#include "recsdk/config_file.h"
#include "recsdk/recsdk.h"
#include "samples/common/flags.h"
#include "samples/common/precision_check.h"

// Debian's Abseil (20220623) has no status macros and recsdk keeps its own internal; a user
// program defines these two, as here.
#define DCNV2_CONCAT_INNER(a, b) a##b
#define DCNV2_CONCAT(a, b) DCNV2_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    const ::absl::Status dcnv2_status = (expr);  \
    if (!dcnv2_status.ok()) return dcnv2_status; \
  } while (false)
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(DCNV2_CONCAT(dcnv2_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)    \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

namespace dcnv2 {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code

constexpr int kLatent = 4;
constexpr int kCrossPairs = 6;

// Planted value of (kind, field, id, k): a fixed pseudo-random number in [-1, 1].
double Planted(uint64_t kind, uint64_t field, int64_t id, uint64_t k = 0) {
  uint64_t x = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull + field * 0xBF58476D1CE4E5B9ull +
               kind * 0x94D049BB133111EBull + k * 0xD6E8FEB86CD8B4D5ull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B4D5ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2 - 1;
}

std::FILE* Out(const Dcnv2Options& o) { return o.out != nullptr ? o.out : stdout; }

// PrecisionCheck: PRECISION_CHECK=1 (samples/common/precision_check.h) traces the session's steps.
Status PrecisionCheck(const Dcnv2Options& o, SessionConfig* config) {
  auto knobs = samples::PrecisionCheckFromEnv("dcnv2");
  if (!knobs.ok()) return knobs.status();
  return samples::ApplyPrecisionCheck("dcnv2", *knobs, config, Out(o));
}

}  // namespace

int64_t FieldVocabulary(int f) { return 20 * (1 + f % 5) * (1 + f % 3); }

float DenseValue(int64_t count) {
  return count < 0 ? 0.0f : static_cast<float>(std::log1p(static_cast<double>(count)));
}

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  std::mt19937_64 rng(0xDC12 + stream * 7919);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::normal_distribution<double> normal(1.2, 1.1);
  PlantedRows r;
  r.n = n;
  r.counts.resize(n * kDenseFields);
  r.ids.resize(n * kSparseFields);
  r.labels.resize(n);
  r.logits.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t* counts = &r.counts[i * kDenseFields];
    int64_t* ids = &r.ids[i * kSparseFields];
    double logit = -0.8;
    for (int d = 0; d < kDenseFields; ++d) {
      // Counts like Criteo's: log-normal, a few fields empty.
      counts[d] = uniform(rng) < 0.03 ? -1 : static_cast<int64_t>(std::exp(normal(rng)));
      logit += 0.3 * Planted(1, d, 0) * (DenseValue(counts[d]) - 1.5);
    }
    for (int f = 0; f < kSparseFields; ++f) {
      const double u = uniform(rng);
      ids[f] = uniform(rng) < 0.02 ? 0 : 1 + static_cast<int64_t>(u * u * FieldVocabulary(f));
      if (ids[f] != 0) logit += 0.25 * Planted(2, f, ids[f]);
    }
    for (int p = 0; p < kCrossPairs; ++p) {
      const int f = 2 * p, g = 2 * p + 1;
      if (ids[f] == 0 || ids[g] == 0) continue;
      double dot = 0;
      for (int k = 0; k < kLatent; ++k) dot += Planted(3, f, ids[f], k) * Planted(3, g, ids[g], k);
      logit += 0.6 * dot;
    }
    if (ids[13] != 0) logit += 0.5 * (DenseValue(counts[0]) - 1.5) * Planted(4, 13, ids[13]);
    r.logits[i] = logit;
    r.labels[i] = uniform(rng) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f;
  }
  return r;
}

Status WriteCriteoTsv(const std::string& path, const PlantedRows& rows) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        fmt::format("dcnv2: cannot write \"{}\"; check --data_dir", tmp));
  }
  std::string line;
  for (int64_t i = 0; i < rows.n; ++i) {
    line = rows.labels[i] > 0.5f ? "1" : "0";
    for (int d = 0; d < kDenseFields; ++d) {
      const int64_t c = rows.counts[i * kDenseFields + d];
      line += c < 0 ? std::string("\t") : fmt::format("\t{}", c);
    }
    for (int s = 0; s < kSparseFields; ++s) {
      const int64_t id = rows.ids[i * kSparseFields + s];
      line += id == 0 ? std::string("\t") : fmt::format("\t{:08x}", id);
    }
    line += '\n';
    std::fputs(line.c_str(), f);
  }
  const bool ok = std::fflush(f) == 0 && std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(fmt::format("dcnv2: writing \"{}\" failed", path));
  }
  return absl::OkStatus();
}

namespace {

// The model's graph: placeholders fed per batch, the training step and the evaluation output.
struct Model {
  Graph graph;
  Output dense, ids, label;  // [B,13] float32, [B,26] int64 keys, [B,1] float32
  Output loss, eval_prob;
  Node* train = nullptr;
  Node* init = nullptr;
};

// Tower: embeddings + dense -> cross network beside (or under) the deep tower -> one logit.
StatusOr<Output> Tower(const Scope& s, const SparseTable& table, const Model& m, bool training,
                       const Dcnv2Options& o) {
  // Guide step 1: sparse_lookup replaces tf.nn.embedding_lookup (one lookup, all 26 fields).
  SparseLookupOptions lookup;
  lookup.name = training ? "sparse_lookup" : "eval_sparse_lookup";
  lookup.is_train = training;
  lookup.is_grad = training;
  ASSIGN_OR_RETURN(Output emb, sparse_lookup(s, table, m.ids, lookup));
  const Output flat = ops::Reshape(s, emb, {-1, kSparseFields * o.embedding_dim});

  Output dense = m.dense;
  if (o.dense_norm == "batch") {
    layers::BatchNormOptions bn;
    bn.name = "dense_norm";
    bn.mode = training ? layers::NormMode::kTraining : layers::NormMode::kInference;
    ASSIGN_OR_RETURN(dense, layers::BatchNorm(s, dense, bn));
  } else if (o.dense_norm == "layer") {
    layers::LayerNormOptions ln;
    ln.name = "dense_norm";
    ASSIGN_OR_RETURN(dense, layers::LayerNorm(s, dense, ln));
  }
  const Output x0 = ops::Concat(s, {dense, flat}, 1);

  layers::CrossNetworkOptions cross;
  cross.num_layers = o.cross_layers;
  if (o.cross == "low_rank" || o.cross == "mixture") {
    cross.layer.structure = o.cross == "low_rank" ? layers::CrossStructure::kLowRank
                                                  : layers::CrossStructure::kMixtureOfLowRank;
    cross.layer.rank = o.rank;
    if (o.cross == "mixture") cross.layer.num_experts = o.experts;
  }
  ASSIGN_OR_RETURN(Output crossed, layers::CrossNetwork(s, x0, cross));

  layers::MlpOptions deep;
  deep.name = "deep";
  deep.hidden_units = o.deep_units;
  Output head;
  if (o.structure == "stacked") {
    head = layers::Mlp(s, crossed, deep);
  } else {
    head = ops::Concat(s, {crossed, layers::Mlp(s, x0, deep)}, 1);
  }
  layers::DenseOptions logit;
  logit.units = 1;
  logit.name = "logits";
  const Output logits = layers::Dense(s, head, logit);
  if (!s.ok()) return s.status();
  return logits;
}

Status Build(const Dcnv2Options& o, Model* m) {
  m->graph.set_random_seed(static_cast<int64_t>(o.seed));
  // Variable reuse: the evaluation branch below shares every weight of the training one.
  const Scope s = Scope(&m->graph).WithVariableReuse();
  const int64_t b = o.batch_size;
  m->dense =
      ops::Placeholder(s.WithOpName("dense_feature"), DType::kFloat32, Shape{b, kDenseFields});
  m->ids = ops::Placeholder(s.WithOpName("sparse_feature"), DType::kInt64, Shape{b, kSparseFields});
  m->label = ops::Placeholder(s.WithOpName("label"), DType::kFloat32, Shape{b, 1});

  // Guide step 1.2: create_table replaces tf.get_variable; one table for the 26 merged fields.
  TableConfig table_config;
  table_config.name = "sparse_embeddings";
  table_config.dim = o.embedding_dim;
  int64_t keys = 0;
  for (int f = 0; f < kSparseFields; ++f) keys += FieldVocabulary(f) + 1;
  table_config.device_vocabulary_size = keys;
  table_config.initializer = Initializer::TruncatedNormal(0, 0.05);
  // Guide step 2: LazyAdam for the table (the sparse optimizer is fixed with the table here).
  ASSIGN_OR_RETURN(
      SparseTable table,
      create_table(s, table_config,
                   SparseOptimizerConfig::LazyAdam(static_cast<float>(o.sparse_learning_rate))));

  ASSIGN_OR_RETURN(Output logits, Tower(s, table, *m, /*training=*/true, o));
  m->loss = ops::ReduceMean(s.WithOpName("loss"),
                            ops::SigmoidCrossEntropyWithLogits(s, m->label, logits));

  // Guide step 2: Adam for the dense layers, both optimizers behind the static loss scale.
  AdamOptions adam;
  adam.learning_rate = o.dense_learning_rate;
  adam.learning_rate_schedule.warmup_steps = o.warmup_steps;
  std::shared_ptr<Optimizer> dense_optimizer = std::make_shared<AdamOptimizer>(adam);
  if (o.loss_scale != 1) {
    dense_optimizer = std::make_shared<DenseLossScaleOptimizer>(dense_optimizer, o.loss_scale);
  }
  SparseLossScaleOptimizer sparse_optimizer(o.loss_scale);
  // Guide step 3: gradients of the dense variables and of the table, each applied by its
  // optimizer (compute_gradients / apply_gradients inside Minimize).
  ASSIGN_OR_RETURN(Node * dense_train, dense_optimizer->Minimize(s, m->loss));
  ASSIGN_OR_RETURN(Node * sparse_train, sparse_optimizer.Minimize(s, m->loss));
  m->train = ops::Group(s.WithOpName("train"), {dense_train, sparse_train});

  const Scope eval = s.NewNameScope("eval");
  ASSIGN_OR_RETURN(Output eval_logits, Tower(eval, table, *m, /*training=*/false, o));
  m->eval_prob = ops::Sigmoid(eval.WithOpName("prob"), eval_logits);
  // Guide step 4.2: the initializer of every variable (tables are made by the Session).
  m->init = GlobalVariablesInitializer(s);
  return s.status();
}

// SparseFeature: the guide's sparse_feature, the 26 fields C1..C26 merged for one table: field f
// starts where field f - 1's ids (0..FieldVocabulary(f - 1)) end, as the guide's preprocessing
// offsets them.
constexpr char kSparseFeature[] = "sparse_feature";

FeatureSpec SparseFeature() {
  FeatureSpec spec;
  spec.name = kSparseFeature;
  spec.table_name = "sparse_embeddings";
  int64_t offset = 0;
  for (int f = 0; f < kSparseFields; ++f) {
    spec.fields.push_back(fmt::format("C{}", f + 1));
    spec.field_offsets.push_back(offset);
    offset += FieldVocabulary(f) + 1;
  }
  return spec;
}

// Feeds: one batch's columns as the model's placeholders.
StatusOr<FeedList> Feeds(const Model& m, const Batch& batch) {
  ASSIGN_OR_RETURN(Tensor dense, batch.Column("dense"));
  ASSIGN_OR_RETURN(Tensor label, batch.Column("label"));
  ASSIGN_OR_RETURN(Tensor keys, batch.Column(kSparseFeature));
  return FeedList{{m.dense, dense}, {m.ids, keys}, {m.label, label}};
}

StatusOr<std::unique_ptr<Dataset>> Batches(const std::string& file, const Dcnv2Options& o,
                                           bool training) {
  CriteoOptions criteo;
  criteo.dense_transform = DenseTransform::kLog1p;
  ASSIGN_OR_RETURN(auto data, CriteoDataset({file}, criteo));
  ASSIGN_OR_RETURN(data, MergeFeatureFields(std::move(data), {SparseFeature()}));
  BatchOptions batching;
  // Training: full batches (fixed shapes). Evaluation: the last batch padded, results trimmed.
  batching.drop_remainder = training;
  batching.pad_remainder = !training;
  return BatchRows(std::move(data), o.batch_size, batching);
}

Status Validate(const Dcnv2Options& o) {
  auto bad = [](std::string what) { return absl::InvalidArgumentError("dcnv2: " + what); };
  if (o.train_rows < o.batch_size || o.eval_rows < 1 || o.batch_size < 1 || o.epochs < 1) {
    return bad(fmt::format(
        "train_rows {} must hold at least one batch of batch_size {} (>= 1), eval_rows {} and "
        "epochs {} must be >= 1",
        o.train_rows, o.batch_size, o.eval_rows, o.epochs));
  }
  if (o.cross != "full" && o.cross != "low_rank" && o.cross != "mixture") {
    return bad(fmt::format("--cross={} is not full, low_rank or mixture", o.cross));
  }
  if (o.structure != "parallel" && o.structure != "stacked") {
    return bad(fmt::format("--structure={} is not parallel or stacked", o.structure));
  }
  if (o.dense_norm != "batch" && o.dense_norm != "layer" && o.dense_norm != "none") {
    return bad(fmt::format("--dense_norm={} is not batch, layer or none", o.dense_norm));
  }
  if (o.embedding_dim < 1 || o.deep_units.empty()) {
    return bad("embedding_dim must be >= 1 and deep_units non-empty");
  }
  if (o.mode != "train" && o.mode != "race" && o.mode != "write_data") {
    return bad(fmt::format("--mode={} is not train, race or write_data", o.mode));
  }
  if (o.warmup < 0 || o.windows < 1 || o.window_steps < 1 || o.loss_steps < 0) {
    return bad(fmt::format(
        "--warmup={} must be >= 0, --windows={} and --window_steps={} >= 1, --loss_steps={} >= 0",
        o.warmup, o.windows, o.window_steps, o.loss_steps));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<Dcnv2Result> Run(const Dcnv2Options& o) {
  RETURN_IF_ERROR(Validate(o));
  if (o.mode == "race") return RunRace(o);
  std::FILE* out = Out(o);
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  const std::string train_file = o.data_dir + "/train.tsv", eval_file = o.data_dir + "/eval.tsv";
  const PlantedRows eval_rows = MakePlantedRows(o.eval_rows, 2 * o.seed + 1);
  RETURN_IF_ERROR(WriteCriteoTsv(train_file, MakePlantedRows(o.train_rows, 2 * o.seed)));
  RETURN_IF_ERROR(WriteCriteoTsv(eval_file, eval_rows));
  if (o.mode == "write_data") return Dcnv2Result{};

  Model m;
  RETURN_IF_ERROR(Build(o, &m));
  SessionConfig config = o.session_config.value_or(SessionConfig{});
  if (o.threads != 0 || !o.session_config.has_value()) config.intra_op_parallelism = o.threads;
  RETURN_IF_ERROR(PrecisionCheck(o, &config));
  ASSIGN_OR_RETURN(std::unique_ptr<Session> sess, Session::Create(m.graph, config));
  RETURN_IF_ERROR(sess->Run({}, {}, {m.init->name()}, nullptr));

  Dcnv2Result result;
  int64_t samples = 0;
  double seconds = 0, loss_sum = 0;
  int64_t loss_count = 0;
  const int64_t report_every = std::max<int64_t>(1, o.train_rows / o.batch_size / 5);
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    ASSIGN_OR_RETURN(auto data, Batches(train_file, o, /*training=*/true));
    Batch batch;
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      ASSIGN_OR_RETURN(bool more, data->GetNext(&batch));
      if (!more) break;
      ASSIGN_OR_RETURN(FeedList feeds, Feeds(m, batch));
      std::vector<Tensor> fetched;
      RETURN_IF_ERROR(sess->Run(feeds, {m.loss}, {m.train->name()}, &fetched));
      loss_sum += fetched[0].scalar<float>();
      ++loss_count;
      samples += batch.num_rows();
      if (++result.steps % report_every == 0) {
        std::fprintf(out, "epoch %lld step %lld loss %.4f\n", static_cast<long long>(epoch),
                     static_cast<long long>(result.steps), loss_sum / loss_count);
        loss_sum = 0;
        loss_count = 0;
      }
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  result.train_samples_per_second = seconds > 0 ? samples / seconds : 0;

  std::vector<float> scores, labels;
  ASSIGN_OR_RETURN(auto data, Batches(eval_file, o, /*training=*/false));
  Batch batch;
  while (true) {
    ASSIGN_OR_RETURN(bool more, data->GetNext(&batch));
    if (!more) break;
    ASSIGN_OR_RETURN(FeedList feeds, Feeds(m, batch));
    std::vector<Tensor> fetched;
    RETURN_IF_ERROR(sess->Run(feeds, {m.eval_prob}, {}, &fetched));
    const float* p = fetched[0].data<float>();
    ASSIGN_OR_RETURN(Tensor label, batch.Column("label"));
    for (int64_t r = 0; r < batch.num_valid(); ++r) {
      scores.push_back(p[r]);
      labels.push_back(label.data<float>()[r]);
    }
  }
  ASSIGN_OR_RETURN(result.auc, Auc(scores, labels));
  ASSIGN_OR_RETURN(result.log_loss, LogLoss(scores, labels));
  std::vector<float> planted(eval_rows.logits.begin(), eval_rows.logits.end());
  ASSIGN_OR_RETURN(result.planted_auc, Auc(planted, eval_rows.labels));
  std::fprintf(out,
               "dcnv2 (%s cross x%d, %s): %lld steps, %.0f samples/s; held-out AUC %.4f "
               "(planted model %.4f), log loss %.4f\n",
               o.cross.c_str(), o.cross_layers, o.structure.c_str(),
               static_cast<long long>(result.steps), result.train_samples_per_second, result.auc,
               result.planted_auc, result.log_loss);
  // Guide step 4.3: close the Session (terminate_config_initializer has nothing to release here).
  RETURN_IF_ERROR(sess->Close());
  return result;
}

StatusOr<Dcnv2Result> RunRace(const Dcnv2Options& o) {
  RETURN_IF_ERROR(Validate(o));
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  const std::string train_file = o.data_dir + "/train.tsv";
  if (!std::filesystem::exists(train_file, ec)) {
    RETURN_IF_ERROR(WriteCriteoTsv(train_file, MakePlantedRows(o.train_rows, 2 * o.seed)));
  }
  Model m;
  RETURN_IF_ERROR(Build(o, &m));
  SessionConfig config = o.session_config.value_or(SessionConfig{});
  if (o.threads != 0 || !o.session_config.has_value()) config.intra_op_parallelism = o.threads;
  RETURN_IF_ERROR(PrecisionCheck(o, &config));
  ASSIGN_OR_RETURN(std::unique_ptr<Session> sess, Session::Create(m.graph, config));
  RETURN_IF_ERROR(sess->Run({}, {}, {m.init->name()}, nullptr));

  // The whole file as fed batches, before any timing: the timed loop is the training step alone.
  std::vector<FeedList> feeds;
  {
    ASSIGN_OR_RETURN(auto data, Batches(train_file, o, /*training=*/true));
    Batch batch;
    while (true) {
      ASSIGN_OR_RETURN(bool more, data->GetNext(&batch));
      if (!more) break;
      ASSIGN_OR_RETURN(FeedList f, Feeds(m, batch));
      feeds.push_back(std::move(f));
    }
  }
  if (feeds.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "dcnv2: {} holds fewer than batch_size {} rows; remove it to have it written again",
        train_file, o.batch_size));
  }

  Dcnv2Result result;
  std::vector<double> losses;
  std::vector<Tensor> fetched;
  auto step = [&]() -> Status {
    RETURN_IF_ERROR(
        sess->Run(feeds[result.steps % feeds.size()], {m.loss}, {m.train->name()}, &fetched));
    losses.push_back(fetched[0].scalar<float>());
    ++result.steps;
    return absl::OkStatus();
  };
  auto cpu_seconds = [] {
    return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;  // all threads of the process
  };
  for (int64_t i = 0; i < o.warmup; ++i) RETURN_IF_ERROR(step());
  std::vector<double> rates;
  const double cpu0 = cpu_seconds();
  for (int64_t w = 0; w < o.windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.window_steps; ++i) RETURN_IF_ERROR(step());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(o.window_steps * o.batch_size) / s);
  }
  const double cpu_ms_per_step =
      (cpu_seconds() - cpu0) * 1e3 / static_cast<double>(o.windows * o.window_steps);
  const int64_t loss_steps = o.loss_steps > 0 ? o.loss_steps : result.steps;
  while (result.steps < loss_steps) RETURN_IF_ERROR(step());
  const int64_t tail_begin = std::max<int64_t>(0, loss_steps - 5);
  double tail = 0;
  for (int64_t i = tail_begin; i < loss_steps; ++i) tail += losses[i];
  tail /= static_cast<double>(loss_steps - tail_begin);

  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  result.train_samples_per_second =
      n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  std::string windows;
  for (double r : rates) windows += fmt::format("{}{:.1f}", windows.empty() ? "" : ",", r);
  std::fprintf(Out(o),
               "{\"impl\":\"recsdk\",\"model\":\"dcnv2\",\"threads\":%d,"
               "\"optimizer\":\"adam+lazy_adam\",\"cross\":\"%s\",\"batch\":%lld,"
               "\"batches\":%zu,\"samples_per_s\":%.1f,\"windows\":[%s],"
               "\"first_loss\":%.6f,\"loss_steps\":%lld,\"loss\":%.6f,"
               "\"cpu_ms_per_step\":%.2f}\n",
               config.intra_op_parallelism, o.cross.c_str(), static_cast<long long>(o.batch_size),
               feeds.size(), result.train_samples_per_second, windows.c_str(), losses[0],
               static_cast<long long>(loss_steps), tail, cpu_ms_per_step);
  RETURN_IF_ERROR(sess->Close());
  return result;
}

StatusOr<Dcnv2Options> ParseOptions(int argc, char** argv) {
  Dcnv2Options o;
  // The flag is read after the variable, so --session_config wins over SESSION_CONFIG.
  auto read_session_config = [&o](const std::string& path) -> Status {
    StatusOr<SessionConfig> config = SessionConfigFromFile(path);
    if (!config.ok()) {
      return absl::Status(config.status().code(),
                          fmt::format("dcnv2: {}", std::string(config.status().message())));
    }
    o.session_config = *std::move(config);
    return absl::OkStatus();
  };
  if (const char* path = std::getenv("SESSION_CONFIG")) RETURN_IF_ERROR(read_session_config(path));
  auto set = [&](const std::string& arg, const std::string& v) -> Status {
    char* end = nullptr;
    auto integer = [&]() -> StatusOr<int64_t> {
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') {
        return absl::InvalidArgumentError(fmt::format("dcnv2: --{}={} is not an integer", arg, v));
      }
      return static_cast<int64_t>(n);
    };
    auto real = [&]() -> StatusOr<double> {
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(x)) {
        return absl::InvalidArgumentError(fmt::format("dcnv2: --{}={} is not a number", arg, v));
      }
      return x;
    };
    if (arg == "train_rows") {
      ASSIGN_OR_RETURN(o.train_rows, integer());
    } else if (arg == "eval_rows") {
      ASSIGN_OR_RETURN(o.eval_rows, integer());
    } else if (arg == "batch_size") {
      ASSIGN_OR_RETURN(o.batch_size, integer());
    } else if (arg == "epochs") {
      ASSIGN_OR_RETURN(o.epochs, integer());
    } else if (arg == "embedding_dim") {
      ASSIGN_OR_RETURN(int64_t n, integer());
      o.embedding_dim = static_cast<int>(n);
    } else if (arg == "cross_layers") {
      ASSIGN_OR_RETURN(int64_t n, integer());
      o.cross_layers = static_cast<int>(n);
    } else if (arg == "cross") {
      o.cross = v;
    } else if (arg == "rank") {
      ASSIGN_OR_RETURN(o.rank, integer());
    } else if (arg == "experts") {
      ASSIGN_OR_RETURN(o.experts, integer());
    } else if (arg == "deep_units") {
      o.deep_units.clear();
      for (size_t p = 0; p <= v.size();) {
        const size_t q = std::min(v.find(',', p), v.size());
        const std::string part = v.substr(p, q - p);
        const long long n = std::strtoll(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || n < 1) {
          return absl::InvalidArgumentError(
              fmt::format("dcnv2: --deep_units={}: \"{}\" is not a positive integer", v, part));
        }
        o.deep_units.push_back(n);
        p = q + 1;
      }
    } else if (arg == "structure") {
      o.structure = v;
    } else if (arg == "dense_norm") {
      o.dense_norm = v;
    } else if (arg == "dense_learning_rate") {
      ASSIGN_OR_RETURN(o.dense_learning_rate, real());
    } else if (arg == "sparse_learning_rate") {
      ASSIGN_OR_RETURN(o.sparse_learning_rate, real());
    } else if (arg == "warmup_steps") {
      ASSIGN_OR_RETURN(o.warmup_steps, integer());
    } else if (arg == "loss_scale") {
      ASSIGN_OR_RETURN(o.loss_scale, real());
    } else if (arg == "threads") {
      ASSIGN_OR_RETURN(int64_t n, integer());
      o.threads = static_cast<int>(n);
    } else if (arg == "seed") {
      ASSIGN_OR_RETURN(int64_t n, integer());
      o.seed = static_cast<uint64_t>(n);
    } else if (arg == "data_dir") {
      o.data_dir = v;
    } else if (arg == "mode") {
      o.mode = v;
    } else if (arg == "warmup") {
      ASSIGN_OR_RETURN(o.warmup, integer());
    } else if (arg == "windows") {
      ASSIGN_OR_RETURN(o.windows, integer());
    } else if (arg == "window_steps") {
      ASSIGN_OR_RETURN(o.window_steps, integer());
    } else if (arg == "loss_steps") {
      ASSIGN_OR_RETURN(o.loss_steps, integer());
    } else if (arg == "session_config") {
      RETURN_IF_ERROR(read_session_config(v));
    } else {
      return samples::UnknownFlag("dcnv2", arg);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(samples::ForEachFlag("dcnv2", argc, argv, set));
  RETURN_IF_ERROR(Validate(o));
  return o;
}

}  // namespace dcnv2
