// little_demo.cc: the spec's little_demo on the Estimator. Per sample 8 user ids (of 200,000)
// and 16 item ids (of 80,000), two labels label_0 / label_1 drawn from a planted logistic model
// of the ids (so the AUC per head means something, and the planted model's own AUC is the
// ceiling). user_table (dim 32, gradients sum_gradients_and_div_by_ranksize) is looked up
// 1 + MULTI_LOOKUP_TIMES times and item_table (dim 8) once, each sum-pooled over its ids and
// concatenated; an MLP 1024-512-256-128 (ReLU) feeds two logit heads; the loss is the sum of both
// heads' sigmoid cross-entropies (both heads train); Adam 0.01 for the dense part, LazyAdam 0.01
// (LazyAdamByAddress under dynamic expansion) for the tables. Train 200 steps, evaluate 10
// batches every 100 steps, save a checkpoint every 100 steps; at step 50 set_threshold lowers the
// tables' admission threshold from 2 to 1. Exports the tables as .npy at the end. CACHE_MODE DDR
// and SSD put the tables on tiers (little_demo.h); they train bitwise as HBM when deterministic.
//
// Threading: one thread drives the Estimator (the key stages run their own workers).
#include "samples/little_demo/little_demo.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/initialize.h"
#include "recsdk/recsdk.h"
#include "samples/common/planted.h"
#include "samples/common/precision_check.h"

namespace little_demo {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code

constexpr int kUserIds = 8, kItemIds = 16;
constexpr int64_t kUserVocab = 200000, kItemVocab = 80000;
constexpr int64_t kPaddingKey = -1;
constexpr int64_t kStartTime = 1700000000;

// Planted weight of an id for a head: a fixed pseudo-random value in [-1, 1].
using samples::PlantedWeight;

struct Rows {
  std::vector<int64_t> user, item, timestamp;
  std::vector<float> label[2];
  std::vector<double> logit[2];
};

// MakeRows: n samples of stream `stream` (training streams and the held-out one never overlap).
// Ids are skewed (u^4 of a uniform u: a quarter of the draws fall in the first 0.4% of the ids)
// and the planted weight of an id shrinks with its rank, so the frequent ids, which 200 steps see
// often, carry most of the signal, as in real click data.
Rows MakeRows(int64_t n, uint64_t stream, bool padding) {
  std::mt19937_64 rng(0xD3D0 + stream);
  std::uniform_real_distribution<double> uniform(0, 1);
  Rows r;
  for (int64_t i = 0; i < n; ++i) {
    double logit[2] = {0, 0};
    const int pad = padding ? static_cast<int>(uniform(rng) * 4) : 0;
    for (int j = 0; j < kUserIds; ++j) {
      const double u = uniform(rng);
      int64_t id = static_cast<int64_t>(u * u * u * u * kUserVocab);
      if (j >= kUserIds - pad) id = kPaddingKey;
      r.user.push_back(id);
      if (id == kPaddingKey) continue;
      const double scale = 1.5 / (1.0 + static_cast<double>(id) / 1000.0);
      for (int h = 0; h < 2; ++h) logit[h] += scale * PlantedWeight(1, h, id);
    }
    for (int j = 0; j < kItemIds; ++j) {
      const double u = uniform(rng);
      const int64_t id = static_cast<int64_t>(u * u * u * u * kItemVocab);
      r.item.push_back(id);
      const double scale = 0.8 / (1.0 + static_cast<double>(id) / 400.0);
      for (int h = 0; h < 2; ++h) logit[h] += scale * PlantedWeight(2, h, id);
    }
    for (int h = 0; h < 2; ++h) {
      r.logit[h].push_back(logit[h]);
      r.label[h].push_back(uniform(rng) < 1 / (1 + std::exp(-logit[h])) ? 1.0f : 0.0f);
    }
    r.timestamp.push_back(kStartTime + (static_cast<int64_t>(stream) << 24) + i);
  }
  return r;
}

// SsdSuffix: "" for one process, "-rank<r>" for rank r of several (each rank's SSD tier files).
std::string SsdSuffix(int rank, int ranks) {
  return ranks > 1 ? fmt::format("-rank{}", rank) : std::string();
}

// Input: `rows` rows of stream `stream` per rank, in batches of batch_size; with several ranks
// the rows are those of every rank together, and each rank reads its shard (Shard, the spec's
// dataset.shard(rank_size, rank_id)).
InputFn Input(const DemoOptions& o, int64_t rows, uint64_t stream) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    const int ranks = get_rank_size().value_or(1);
    Rows r = MakeRows(rows * ranks, stream, o.use_padding_keys);
    std::vector<InMemoryColumn> columns = {{"user_ids", r.user, kUserIds},
                                           {"item_ids", r.item, kItemIds},
                                           {"label_0", r.label[0], 1},
                                           {"label_1", r.label[1], 1}};
    if (o.use_timestamp) columns.push_back({"timestamp", r.timestamp, 0});
    auto data = InMemoryDataset(std::move(columns), 4096);
    if (!data.ok()) return data.status();
    if (ranks > 1) {
      data = Shard(*std::move(data), ranks, get_rank_id().value_or(0));
      if (!data.ok()) return data.status();
    }
    BatchOptions batching;
    batching.drop_remainder = true;  // static send_count needs full batches
    return BatchRows(*std::move(data), o.batch_size, batching);
  };
}

}  // namespace

ModelFn MakeModelFn(const DemoOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    const SparseOptimizerConfig sparse_opt = o.use_dynamic_expansion
                                                 ? SparseOptimizerConfig::LazyAdamByAddress(0.01f)
                                                 : SparseOptimizerConfig::LazyAdam(0.01f);
    auto table_config = [&](const char* name, int dim, int64_t vocab) {
      TableConfig c;
      c.name = name;
      c.dim = dim;
      c.device_vocabulary_size = vocab;
      if (o.cache_mode != "HBM") {
        // DDR: the device tier caches a quarter of the keys, host memory holds them all. SSD: host
        // memory caches another tenth, the files under model_dir/ssd hold them all.
        c.device_vocabulary_size = vocab / 4;
        c.host_vocabulary_size = o.cache_mode == "DDR" ? vocab : vocab / 10;
        if (o.cache_mode == "SSD") {
          c.ssd_vocabulary_size = vocab;
          c.ssd_data_path = {o.model_dir + "/ssd" +
                             SsdSuffix(get_rank_id().value_or(0), get_rank_size().value_or(1))};
        }
      }
      // The run's seed seeds the tables' rows too, so SEED changes every initial value.
      c.initializer = Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed));
      c.use_dynamic_expansion = o.use_dynamic_expansion;
      c.access_threshold = 2;  // lowered to 1 at threshold_step (SetThresholdHook)
      if (o.use_timestamp) c.eviction_threshold = 3600;
      if (o.use_padding_keys) c.padding_keys = {kPaddingKey};
      return c;
    };
    TableConfig user_config = table_config("user_table", 32, kUserVocab);
    user_config.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";
    auto user_table = create_table(s, user_config, sparse_opt);
    if (!user_table.ok()) return user_table.status();
    auto item_table = create_table(s, table_config("item_table", 8, kItemVocab), sparse_opt);
    if (!item_table.ok()) return item_table.status();

    SparseLookupOptions lookup;
    lookup.combiner = Combiner::kSum;
    lookup.modify_graph = o.use_modify_graph;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.use_dynamic = o.use_dynamic;
    if (o.use_timestamp) lookup.timestamps = f.at("timestamp");
    std::vector<Output> parts;
    const int user_lookups = 1 + (o.use_multi_lookup ? o.multi_lookup_times : 0);
    for (int i = 0; i < user_lookups; ++i) {
      lookup.name = fmt::format("user_lookup_{}", i);
      lookup.send_count = o.batch_size * kUserIds;
      auto emb = sparse_lookup(s, *user_table, f.at("user_ids"), lookup);
      if (!emb.ok()) return emb.status();
      parts.push_back(*emb);
    }
    lookup.name = "item_lookup";
    lookup.send_count = o.batch_size * kItemIds;
    auto item = sparse_lookup(s, *item_table, f.at("item_ids"), lookup);
    if (!item.ok()) return item.status();
    parts.push_back(*item);

    layers::MlpOptions mlp;
    mlp.hidden_units = o.hidden_units;
    mlp.name = "tower";
    const Output h = layers::Mlp(s, ops::Concat(s, parts, 1), mlp);
    EstimatorSpec spec;
    Output logits[2], probs[2];
    for (int k = 0; k < 2; ++k) {
      layers::DenseOptions head;
      head.units = 1;
      head.name = fmt::format("head_{}", k);
      logits[k] = layers::Dense(s, h, head);
      probs[k] = ops::Sigmoid(s, logits[k]);
      spec.predictions[fmt::format("prob_{}", k)] = probs[k];
    }
    if (mode == ModeKeys::kPredict) return spec;
    Output loss;
    for (int k = 0; k < 2; ++k) {
      const Output label = labels.at(fmt::format("label_{}", k));
      const Output head_loss =
          ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits[k]));
      loss = k == 0 ? head_loss : ops::Add(s.WithOpName("loss"), loss, head_loss);
      spec.eval_metric_ops.push_back({fmt::format("auc_{}", k), MetricKind::kAuc, probs[k], label});
      spec.eval_metric_ops.push_back(
          {fmt::format("log_loss_{}", k), MetricKind::kLogLoss, probs[k], label});
    }
    spec.loss = loss;
    if (mode == ModeKeys::kTrain) {
      AdamOptions adam_options;
      adam_options.learning_rate = 0.01;
      // With several ranks the dense gradients are averaged over them (the spec's
      // npu_distributed_optimizer_wrapper); the tables are sharded over the ranks by themselves.
      std::shared_ptr<Optimizer> adam = std::make_shared<AdamOptimizer>(adam_options);
      if (get_rank_size().value_or(1) > 1) adam = npu_distributed_optimizer_wrapper(adam);
      auto dense = adam->Minimize(s, loss);
      if (!dense.ok()) return dense.status();
      auto sparse = SparseMinimize(s, loss);
      if (!sparse.ok()) return sparse.status();
      spec.train_op = ops::Group(s, {*dense, *sparse});
    }
    return spec;
  };
}

namespace {

// TableHook: per step block, each table's size and capacity.
class TableHook final : public SessionRunHook {
 public:
  TableHook(int64_t every, std::FILE* out) : every_(every), out_(out) {}
  Status AfterRun(SessionRunContext& c, absl::Span<const Tensor>) override {
    if (c.global_step % every_ != 0) return absl::OkStatus();
    auto tables = SessionTables(*c.session);
    if (!tables.ok()) return tables.status();
    std::string line =
        fmt::format("{}step {} tables:", isatty(fileno(out_)) ? "\n" : "", c.global_step);
    for (const EmbeddingTable* t : *tables) {
      line += fmt::format(" {} {} rows / capacity {}", t->name(), t->size(), t->capacity());
    }
    std::fprintf(out_, "%s\n", line.c_str());
    return absl::OkStatus();
  }

 private:
  int64_t every_;
  std::FILE* out_;
};

// LossRecorder: appends each training step's loss to a vector (DemoOptions::losses).
class LossRecorder final : public SessionRunHook {
 public:
  explicit LossRecorder(std::vector<float>* losses) : losses_(losses) {}
  Status BeforeRun(SessionRunContext&, SessionRunArgs* args) override {
    args->fetches.push_back(TensorName("loss"));
    return absl::OkStatus();
  }
  Status AfterRun(SessionRunContext&, absl::Span<const Tensor> results) override {
    if (!results.empty()) losses_->push_back(results[0].scalar<float>());
    return absl::OkStatus();
  }

 private:
  std::vector<float>* losses_;
};

double PlantedAuc(const DemoOptions& o, int head, uint64_t stream, int64_t rows) {
  const Rows r = MakeRows(rows, stream, o.use_padding_keys);
  std::vector<float> scores(r.logit[head].begin(), r.logit[head].end());
  auto auc = Auc(scores, r.label[head]);
  return auc.ok() ? *auc : 0;
}

bool EnvBool(const char* name, bool fallback, Status* error) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  const std::string s(v);
  if (s == "1" || s == "True" || s == "true") return true;
  if (s == "0" || s == "False" || s == "false") return false;
  *error = absl::InvalidArgumentError(
      fmt::format("little_demo: environment variable {}=\"{}\" is not 0/1/True/False", name, s));
  return fallback;
}

// PrecisionCheckOf: the PRECISION_CHECK knobs of the options.
samples::PrecisionCheckOptions PrecisionCheckOf(const DemoOptions& o) {
  samples::PrecisionCheckOptions p;
  p.on = o.precision_check;
  p.dir = o.precision_check_dir;
  p.steps = o.precision_check_steps;
  p.tensors = o.precision_check_tensors;
  return p;
}

}  // namespace

StatusOr<DemoOptions> ParseOptions(int argc, char** argv) {
  DemoOptions o;
  Status error;
  std::map<std::string, std::string> settings;  // lower-case name -> text
  for (const char* env :
       {"USE_MODE", "CACHE_MODE", "USE_DYNAMIC", "USE_DYNAMIC_EXPANSION", "USE_MULTI_LOOKUP",
        "MULTI_LOOKUP_TIMES", "USE_MODIFY_GRAPH", "USE_TIMESTAMP", "USE_DETERMINISTIC",
        "USE_PADDING_KEYS", "KEY_PROCESS_THREAD_NUM", "SESSION_CONFIG", "PRECISION_CHECK",
        "PRECISION_CHECK_DIR", "PRECISION_CHECK_STEPS", "PRECISION_CHECK_TENSORS", "SEED"}) {
    if (const char* v = std::getenv(env)) {
      std::string name(env);
      for (char& c : name) c = static_cast<char>(std::tolower(c));
      settings[name] = v;
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          fmt::format("little_demo: unexpected argument \"{}\"", arg));
    }
    arg = arg.substr(2);
    std::string value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("little_demo: --{} needs a value", arg));
    }
    settings[arg] = value;
  }
  auto as_bool = [&](const std::string& name, const std::string& v, bool* out) -> Status {
    if (v == "1" || v == "True" || v == "true") {
      *out = true;
    } else if (v == "0" || v == "False" || v == "false") {
      *out = false;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("little_demo: {} = \"{}\" is not 0/1/True/False", name, v));
    }
    return absl::OkStatus();
  };
  auto as_int = [&](const std::string& name, const std::string& v, int64_t* out) -> Status {
    char* end = nullptr;
    *out = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') {
      return absl::InvalidArgumentError(
          fmt::format("little_demo: {} = \"{}\" is not an integer", name, v));
    }
    return absl::OkStatus();
  };
  (void)EnvBool;
  for (const auto& [name, v] : settings) {
    Status s;
    int64_t n = 0;
    if (name == "use_mode") {
      o.use_mode = v;
    } else if (name == "cache_mode") {
      o.cache_mode = v;
    } else if (name == "use_dynamic") {
      s = as_bool(name, v, &o.use_dynamic);
    } else if (name == "use_dynamic_expansion") {
      s = as_bool(name, v, &o.use_dynamic_expansion);
    } else if (name == "use_multi_lookup") {
      s = as_bool(name, v, &o.use_multi_lookup);
    } else if (name == "multi_lookup_times") {
      s = as_int(name, v, &n);
      o.multi_lookup_times = static_cast<int>(n);
    } else if (name == "use_modify_graph") {
      s = as_bool(name, v, &o.use_modify_graph);
    } else if (name == "use_timestamp") {
      s = as_bool(name, v, &o.use_timestamp);
    } else if (name == "use_deterministic") {
      s = as_bool(name, v, &o.use_deterministic);
    } else if (name == "use_padding_keys") {
      s = as_bool(name, v, &o.use_padding_keys);
    } else if (name == "key_process_thread_num") {
      s = as_int(name, v, &n);
      o.key_process_thread_num = static_cast<int>(n);
    } else if (name == "train_steps") {
      s = as_int(name, v, &o.train_steps);
    } else if (name == "batch_size") {
      s = as_int(name, v, &o.batch_size);
    } else if (name == "model_dir") {
      o.model_dir = v;
    } else if (name == "export_dir") {
      o.export_dir = v;
    } else if (name == "session_config") {
      StatusOr<SessionConfig> config = SessionConfigFromFile(v);
      if (!config.ok()) {
        return absl::Status(config.status().code(),
                            fmt::format("little_demo: {}", std::string(config.status().message())));
      }
      o.session_config = *std::move(config);
    } else if (name == "precision_check") {
      s = as_bool(name, v, &o.precision_check);
    } else if (name == "precision_check_dir") {
      o.precision_check_dir = v;
    } else if (name == "precision_check_steps") {
      o.precision_check_steps = v;
    } else if (name == "precision_check_tensors") {
      s = as_bool(name, v, &o.precision_check_tensors);
    } else if (name == "seed") {
      s = as_int(name, v, &n);
      if (s.ok() && n < 0) {
        s = absl::InvalidArgumentError(
            fmt::format("little_demo: SEED {} is negative; give a seed >= 0", n));
      }
      o.seed = static_cast<uint64_t>(n);
    } else if (name == "hidden_units") {
      o.hidden_units.clear();
      for (size_t b = 0; b < v.size();) {
        size_t e = v.find(',', b);
        if (e == std::string::npos) e = v.size();
        s = as_int(name, v.substr(b, e - b), &n);
        if (!s.ok()) break;
        o.hidden_units.push_back(n);
        b = e + 1;
      }
    } else {
      return absl::InvalidArgumentError(fmt::format(
          "little_demo: unknown flag --{}; the knobs are use_mode, cache_mode, use_dynamic, "
          "use_dynamic_expansion, use_multi_lookup, multi_lookup_times, use_modify_graph, "
          "use_timestamp, use_deterministic, use_padding_keys, key_process_thread_num, "
          "train_steps, batch_size, model_dir, export_dir, hidden_units, session_config, "
          "precision_check, precision_check_dir, precision_check_steps, "
          "precision_check_tensors, seed",
          name));
    }
    if (!s.ok()) return s;
  }
  if (o.precision_check) {
    // Checked here so the error names the knob, not the dump_step it becomes.
    SessionConfig trace;
    if (Status s =
            samples::ApplyPrecisionCheck("little_demo", PrecisionCheckOf(o), &trace, nullptr);
        !s.ok()) {
      return s;
    }
  }
  if (o.use_mode != "train" && o.use_mode != "load_and_train" && o.use_mode != "predict") {
    return absl::InvalidArgumentError(fmt::format(
        "little_demo: USE_MODE \"{}\" is not train, load_and_train or predict", o.use_mode));
  }
  if (o.cache_mode != "HBM" && o.cache_mode != "DDR" && o.cache_mode != "SSD") {
    return absl::InvalidArgumentError(
        fmt::format("little_demo: CACHE_MODE \"{}\" is not HBM, DDR or SSD", o.cache_mode));
  }
  if (o.multi_lookup_times < 0 || o.multi_lookup_times > 100 || o.key_process_thread_num < 0 ||
      o.train_steps < 1 || o.batch_size < 1 || o.hidden_units.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "little_demo: MULTI_LOOKUP_TIMES {} (0..100), KEY_PROCESS_THREAD_NUM {} (>= 0), "
        "train_steps {} (>= 1), batch_size {} (>= 1), hidden_units ({} layers, >= 1)",
        o.multi_lookup_times, o.key_process_thread_num, o.train_steps, o.batch_size,
        o.hidden_units.size()));
  }
  return o;
}

StatusOr<DemoResult> Run(const DemoOptions& o) {
  const StatusOr<int> world = get_rank_size();
  if (!world.ok()) return world.status();
  const int ranks = *world;
  const int rank = get_rank_id().value_or(0);
  // Under mpirun rank 0 reports; the others print only their errors (main's).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(
      rank == 0 ? nullptr : std::fopen("/dev/null", "w"), &std::fclose);
  std::FILE* out = quiet != nullptr ? quiet.get() : o.out != nullptr ? o.out : stdout;
  auto print = [out](const std::string& line) {
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
  };
  print(fmt::format(
      "little_demo: USE_MODE={} CACHE_MODE={} USE_DYNAMIC={} USE_DYNAMIC_EXPANSION={} "
      "USE_MULTI_LOOKUP={} MULTI_LOOKUP_TIMES={} USE_MODIFY_GRAPH={} USE_TIMESTAMP={} "
      "USE_DETERMINISTIC={} USE_PADDING_KEYS={}; batch {}, MLP {}",
      o.use_mode, o.cache_mode, o.use_dynamic, o.use_dynamic_expansion, o.use_multi_lookup,
      o.multi_lookup_times, o.use_modify_graph, o.use_timestamp, o.use_deterministic,
      o.use_padding_keys, o.batch_size, fmt::join(o.hidden_units, "-")));
  const bool load = o.use_mode != "train";
  if (ranks > 1) {
    print(
        fmt::format("{} ranks: each trains on its shard of the rows ({} per rank and step); the "
                    "tables are sharded over the ranks",
                    ranks, o.batch_size));
  }
  // model_dir is every rank's (one host, or a shared file system): rank 0 clears it.
  if (!load && rank == 0) std::filesystem::remove_all(o.model_dir);
  if (ranks > 1) {
    const StatusOr<bool> ready = AllRanksAgree(true, "model_dir is ready");
    if (!ready.ok()) return ready.status();
  }
  if (o.cache_mode == "SSD") {
    // Each rank's SSD tier in a directory of its own.
    std::filesystem::create_directories(o.model_dir + "/ssd" + SsdSuffix(rank, ranks));
  }

  InitOptions init_options;
  init_options.train_steps = o.train_steps;
  init_options.eval_steps = o.eval_steps;
  init_options.save_steps = o.eval_every;
  init_options.if_load = load;
  init_options.use_dynamic = o.use_dynamic;
  init_options.use_dynamic_expansion = o.use_dynamic_expansion;
  if (Status s = init(init_options); !s.ok()) return s;
  struct Terminate {
    ~Terminate() { terminate_config_initializer(); }
  } terminate;

  RunConfig config;
  config.model_dir = o.model_dir;
  config.save_checkpoints_secs = 0;
  config.save_checkpoints_steps = o.eval_every;
  config.save_summary_steps = 10;
  config.log_step_count_steps = std::min<int64_t>(50, o.train_steps);
  config.keep_checkpoint_max = 3;
  config.seed = o.seed;
  if (o.session_config.has_value()) config.session_config = *o.session_config;
  // PRECISION_CHECK=1: the trace (samples/common/precision_check.h), as in every sample.
  if (Status s = samples::ApplyPrecisionCheck("little_demo", PrecisionCheckOf(o),
                                              &config.session_config, out);
      !s.ok()) {
    return s;
  }
  if (o.use_deterministic) config.deterministic = true;
  if (o.intra_op_parallelism != 0 || !o.session_config.has_value()) {
    config.session_config.intra_op_parallelism = o.intra_op_parallelism;
  }
  EstimatorOptions options;
  options.label_columns = {"label_0", "label_1"};
  options.log = out;
  if (o.key_process_thread_num > 0)
    options.key_stage.key_process_thread_num = o.key_process_thread_num;
  auto est = Estimator::Create(MakeModelFn(o), config, {}, options);
  if (!est.ok()) return est.status();

  const int64_t eval_rows = o.eval_steps * o.batch_size;
  const InputFn eval_input = Input(o, eval_rows, /*stream=*/0);
  DemoResult result;
  // Each rank evaluates eval_rows of its own: the AUC is that of all ranks' rows together.
  for (int h = 0; h < 2; ++h) result.planted_auc[h] = PlantedAuc(o, h, 0, eval_rows * ranks);

  if (o.use_mode == "predict") {
    std::vector<float> scores[2], labels[2];
    Status s =
        (*est)->Predict(eval_input, [&](const Batch& b, const std::map<std::string, Tensor>& p) {
          for (int h = 0; h < 2; ++h) {
            const Tensor& prob = p.at(fmt::format("prob_{}", h));
            const Tensor* label = b.column(fmt::format("label_{}", h));
            for (int64_t r = 0; r < prob.shape().dim(0); ++r) {
              scores[h].push_back(prob.data<float>()[r]);
              labels[h].push_back(label->data<float>()[r]);
            }
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    for (int h = 0; h < 2; ++h) {
      // The AUC of every rank's rows (each rank predicted its shard).
      auto auc = MakeStreamingMetric(MetricKind::kAuc);
      if (!auc.ok()) return auc.status();
      if (Status s = (*auc)->Update(scores[h], labels[h]); !s.ok()) return s;
      if (Status s = MergeMetricOverRanks(**auc); !s.ok()) return s;
      auto value = (*auc)->Result();
      if (!value.ok()) return value.status();
      result.auc[h] = *value;
    }
    auto step = (*est)->global_step();
    if (!step.ok()) return step.status();
    result.global_step = *step;
    print(fmt::format("predicted {} rows{} with the model of step {}", scores[0].size(),
                      ranks > 1 ? " on rank 0 (each rank predicts its shard)" : "",
                      result.global_step));
  } else {
    int64_t start = 0;
    uint64_t stream = 1;
    if (load) {  // builds the model, restores the checkpoint, shows what it scores
      auto restored = (*est)->Evaluate(eval_input);
      if (!restored.ok()) return restored.status();
      start = static_cast<int64_t>(restored->at("global_step"));
      stream = 2 + static_cast<uint64_t>(start);  // new data for the continued training
    }
    HookList hooks = {std::make_shared<SetThresholdHook>("user_table", 1, o.threshold_step),
                      std::make_shared<SetThresholdHook>("item_table", 1, o.threshold_step),
                      std::make_shared<TableHook>(config.log_step_count_steps, out)};
    if (o.losses != nullptr) hooks.push_back(std::make_shared<LossRecorder>(o.losses));
    if (o.use_timestamp) {
      hooks.push_back(AsSessionRunHook(EvictHook(true, 0, o.eval_every)));
    }
    TrainSpec train{Input(o, o.train_steps * o.batch_size, stream), start + o.train_steps, hooks};
    EvalSpec eval;
    eval.input_fn = eval_input;
    eval.steps = o.eval_steps;
    eval.every_n_steps = o.eval_every;
    auto last = (*est)->TrainAndEvaluate(train, eval);
    if (!last.ok()) return last.status();
    result.auc[0] = last->at("auc_0");
    result.auc[1] = last->at("auc_1");
    result.global_step = static_cast<int64_t>(last->at("global_step"));
  }
  for (int h = 0; h < 2; ++h) {
    print(fmt::format("head {}: AUC {:.4f} (planted model AUC {:.4f}) on {} held-out rows", h,
                      result.auc[h], result.planted_auc[h], eval_rows * ranks));
  }
  if (!o.export_dir.empty()) {
    if (o.use_mode != "predict") {  // the spec's export_saved_model of the trained model
      std::vector<ServingInputColumn> serving = {
          {"user_ids", DType::kInt64, Shape{Shape::kUnknownDim, kUserIds}},
          {"item_ids", DType::kInt64, Shape{Shape::kUnknownDim, kItemIds}}};
      if (o.use_timestamp) serving.push_back({"timestamp", DType::kInt64, Shape{}});
      auto bundle = (*est)->ExportSavedModel(o.export_dir + "/saved_model", serving);
      if (!bundle.ok()) return bundle.status();
    }
    std::filesystem::create_directories(o.export_dir);
    for (const char* name : {"user_table", "item_table"}) {
      auto table = LookupTable(*(*est)->session(), name);
      if (!table.ok()) return table.status();
      // With several ranks each holds its shard of the table: one pair of files per rank.
      const std::string base =
          o.export_dir + "/" + name + (ranks > 1 ? fmt::format(".rank{}", rank) : "");
      if (Status s = (*table)->ExportNpy(base + "_keys.npy", base + "_values.npy"); !s.ok()) {
        return s;
      }
      print(fmt::format("exported {} rows of {} to {}_{{keys,values}}.npy", (*table)->size(), name,
                        base));
    }
  }
  print("Demo done!");
  return result;
}

}  // namespace little_demo
