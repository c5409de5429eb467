// key_stage_tiers_test.cc: tiered tables (host and SSD tiers, src/table/table_tiers.cc) trained
// through the key stage (src/session/key_stage/key_stage.cc), which plans the swaps ahead of
// compute: a model trains to bitwise the same losses and exported tables with a small device tier
// plus host (and SSD) tiers as with every row on the device, also when the stage runs batches ahead
// on several threads (a two-table model, and a 26-feature Criteo-shaped one with a table per
// feature); a device tier that cannot hold two consecutive batches is an error naming the table,
// the number and the setting; the device tier counts against variable_memory_max_size; and the
// spec's rules for tiers.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/session/table_ops.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::SmallTable;
using testing::ValueOrDie;

constexpr int kFeatures = 3;
constexpr int64_t kBatch = 32;

// Tiers: the layout of both tables (device-only when host == 0).
struct Tiers {
  int64_t device = 4096, host = 0, ssd = 0;
};

std::unique_ptr<Dataset> Batches(int64_t rows = 1024) {
  SyntheticOptions d;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, 400);
  d.ids_per_feature = 2;
  d.num_dense = 3;
  d.with_timestamps = true;
  d.timestamp_step = 1;
  d.seed = 5;
  d.block_rows = 200;
  return ValueOrDie(BatchRows(ValueOrDie(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
}

std::string SsdDir(const std::string& tag) {
  const std::string dir = testing::TempDir() + "/tiers_ssd_" + tag;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TableConfig WithTiers(TableConfig c, const Tiers& t, const std::string& ssd_dir) {
  c.device_vocabulary_size = t.device;
  c.host_vocabulary_size = t.host;
  c.ssd_vocabulary_size = t.ssd;
  if (t.ssd > 0) c.ssd_data_path = {ssd_dir};
  return c;
}

struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

// Two tables: "user" (LazyAdam, admission 2, looked up by C1 and C2) and "item" (Adagrad by
// address, with timestamps, looked up by C3); an MLP on top; the lookups moved to
// the key stage (modify_graph).
Built BuildModel(const Tiers& tiers, const std::string& tag, bool modify_graph = true) {
  Built b;
  Scope s(b.graph.get());
  b.graph->set_random_seed(11);
  TableConfig user = WithTiers(SmallTable("user", 8), tiers, SsdDir(tag + "_user"));
  user.access_threshold = 2;
  TableConfig item = WithTiers(SmallTable("item", 8), tiers, SsdDir(tag + "_item"));
  item.access_threshold = 0;
  item.eviction_threshold = 8;
  SparseTable t1 = ValueOrDie(create_table(s, user, SparseOptimizerConfig::LazyAdam(0.01f)));
  SparseTable t2 =
      ValueOrDie(create_table(s, item, SparseOptimizerConfig::AdagradByAddress(0.05f)));
  std::vector<Output> ids;
  for (int f = 1; f <= kFeatures; ++f) {
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kBatch, 2}));
  }
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 3});
  Output ts = DatasetColumn(s, "timestamp", DType::kInt64, Shape{kBatch});
  SparseLookupOptions o1;
  o1.modify_graph = modify_graph;
  o1.combiner = Combiner::kSum;
  std::vector<Output> parts = ValueOrDie(sparse_lookup(s, t1, {ids[0], ids[1]}, o1));
  SparseLookupOptions o2 = o1;
  o2.timestamps = ts;
  parts.push_back(ValueOrDie(sparse_lookup(s, t2, ids[2], o2)));
  parts.push_back(dense);
  Output x = ops::Concat(s, parts, 1);
  Output logits = layers::Mlp(s, x, {.hidden_units = {16}, .output_units = 1});
  b.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  Node* dense_train = ValueOrDie(adam.Minimize(s, b.loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, b.loss));
  b.train = ops::Group(s, {dense_train, sparse_train});
  b.init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (modify_graph) ValueOrDie(ModifyGraph(b.graph.get()));
  return b;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Model: what Train builds and feeds. `build` makes the graph (its layout bound in), `batches`
// the data, `tables` are exported and compared (keys and values), `stats_table` is the table
// whose TierStats the result keeps.
struct Model {
  std::function<Built(const std::string& tag)> build;
  std::function<std::unique_ptr<Dataset>()> batches;
  std::vector<std::string> tables;
  std::string stats_table;
};

// TwoTables: BuildModel's model with both tables at `tiers`.
Model TwoTables(const Tiers& tiers) {
  return Model{[tiers](const std::string& tag) { return BuildModel(tiers, tag); },
               [] { return Batches(); },
               {"user", "item"},
               "user"};
}

struct RunResult {
  Status status;
  std::vector<float> losses;
  std::vector<std::string> exports;    // per table of Model::tables: keys, then values
  internal::TierStats stats;           // of Model::stats_table
  int64_t promoted = 0, ssd_rows = 0;  // all tables: rows moved up to the device, rows on SSD
};

RunResult Train(const Model& model, const std::string& tag, int threads, int prefetch) {
  Built b = model.build(tag);
  SessionConfig config;
  config.deterministic = true;
  auto session = ValueOrDie(Session::Create(*b.graph, config));
  EXPECT_TRUE(session->Run({}, {}, {b.init}).ok());
  KeyStageOptions ko;
  ko.key_process_thread_num = threads;
  ko.prefetch_batches = prefetch;
  auto stage = ValueOrDie(StartAscPipeline(*session, model.batches(), ko));
  RunResult r;
  FeedList feeds;
  // Eviction through AfterStep is capped below the batches the stage has resolved ahead, which
  // depends on timing, so the bitwise comparisons run without it (table_tiers_test covers
  // eviction across tiers deterministically).
  EvictHook hook(false, 0, 5);
  int64_t step = 0;
  for (;;) {
    StatusOr<bool> next = stage->Next(&feeds);
    if (!next.ok()) {
      r.status = next.status();
      break;
    }
    if (!*next) break;
    auto out = session->Run(feeds, {b.loss}, {b.train});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) break;
    r.losses.push_back((*out)[0].scalar<float>());
    EXPECT_EQ(ValueOrDie(stage->AfterStep(hook, ++step)), 0);
  }
  stage->Stop();
  if (!r.status.ok()) return r;
  const std::string dir = testing::TempDir() + "/tiers_export_" + tag;
  std::filesystem::create_directories(dir);
  for (const std::string& name : model.tables) {
    EmbeddingTable* t = ValueOrDie(LookupTable(*session, name));
    const std::string keys = dir + "/" + name + "_k.npy", values = dir + "/" + name + "_v.npy";
    EXPECT_TRUE(t->ExportNpy(keys, values).ok()) << name;
    r.exports.push_back(ReadFile(keys));
    r.exports.push_back(ReadFile(values));
    r.promoted += internal::GetTierStats(*t).promoted;
    r.ssd_rows += internal::GetTierStats(*t).ssd_rows;
    if (name == model.stats_table) r.stats = internal::GetTierStats(*t);
  }
  return r;
}

void ExpectSame(const RunResult& a, const RunResult& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    ASSERT_EQ(a.losses[i], b.losses[i]) << "step " << i + 1;  // bitwise: same floats
  }
  ASSERT_EQ(a.exports.size(), b.exports.size());
  for (size_t i = 0; i < a.exports.size(); ++i) {
    EXPECT_EQ(a.exports[i], b.exports[i]) << "export " << i;  // the .npy bytes
  }
}

// The device tier holds about 10% of the user keys that get rows (about 3 batches' worth here);
// the rest goes to host memory, and with SSD most of it to files.
TEST(KeyStageTiersTest, TieredTrainingMatchesAllOnDevice) {
  const RunResult full = Train(TwoTables(Tiers{}), "full", 1, 1);
  ASSERT_TRUE(full.status.ok()) << full.status;
  ASSERT_EQ(full.losses.size(), 32u);
  const RunResult host = Train(TwoTables(Tiers{.device = 200, .host = 4096}), "host", 1, 1);
  ExpectSame(full, host, "host");
  EXPECT_GT(host.stats.promoted, 0);
  EXPECT_GT(host.stats.host_rows, 0);
  const RunResult ssd =
      Train(TwoTables(Tiers{.device = 120, .host = 40, .ssd = 4096}), "ssd", 1, 1);
  ExpectSame(full, ssd, "ssd");
  EXPECT_GT(ssd.stats.ssd_rows, 0) << ssd.stats.device_rows << " " << ssd.stats.host_rows;
  // Running ahead (4 batches, 3 threads) pins more batches at once: the stage waits for the loop
  // when the device is full of them, and the results do not change.
  const RunResult host_ahead =
      Train(TwoTables(Tiers{.device = 200, .host = 4096}), "host_ahead", 3, 4);
  ExpectSame(full, host_ahead, "host_ahead");
  const RunResult ahead =
      Train(TwoTables(Tiers{.device = 120, .host = 40, .ssd = 4096}), "ahead", 3, 4);
  ExpectSame(full, ahead, "ahead");
}

// A Criteo-shaped model: 26 categorical features, each with its own table (vocabularies of 500
// to 2000 keys, Zipf(1.05) ids, one id per feature), 13 dense features and an MLP; the tables'
// optimizers cycle through SGD, Adagrad, LazyAdam and Adagrad by address, every fifth table
// admits keys on their second sighting. Small vocabularies, batches and steps keep it quick.
constexpr int kCriteoFeatures = 26;
constexpr int64_t kCriteoBatch = 16;
constexpr int64_t kCriteoSteps = 80;

int64_t CriteoVocabulary(int f) { return 500 + 100 * ((f * 7) % 16); }

std::unique_ptr<Dataset> CriteoBatches() {
  SyntheticOptions d;
  d.num_rows = kCriteoBatch * kCriteoSteps;
  d.vocabulary_sizes.clear();
  for (int f = 1; f <= kCriteoFeatures; ++f) d.vocabulary_sizes.push_back(CriteoVocabulary(f));
  d.ids_per_feature = 1;
  d.num_dense = 13;
  d.seed = 26;
  d.block_rows = 100;
  return ValueOrDie(
      BatchRows(ValueOrDie(SyntheticDataset(d)), kCriteoBatch, {.drop_remainder = true}));
}

// CriteoLayout: each table's tiers as fractions of its vocabulary (host 0: device only).
struct CriteoLayout {
  double device = 1.0, host = 0.0;
  bool ssd = false;  // the rest on SSD
};

Built BuildCriteoModel(const CriteoLayout& layout, const std::string& tag) {
  Built b;
  Scope s(b.graph.get());
  b.graph->set_random_seed(26);
  std::vector<Output> parts;
  SparseLookupOptions o;
  o.modify_graph = true;
  o.combiner = Combiner::kSum;  // [batch, dim] per feature
  for (int f = 1; f <= kCriteoFeatures; ++f) {
    const int64_t vocab = CriteoVocabulary(f);
    const std::string name = "t" + std::to_string(f);
    TableConfig c = SmallTable(name, 4, vocab);
    if (layout.host > 0) {
      c = WithTiers(c,
                    Tiers{.device = static_cast<int64_t>(std::ceil(layout.device * vocab)),
                          .host = static_cast<int64_t>(std::ceil(layout.host * vocab)),
                          .ssd = layout.ssd ? vocab : 0},
                    SsdDir(tag + "_" + name));
    }
    if (f % 5 == 0) c.access_threshold = 2;
    const SparseOptimizerConfig optimizers[] = {
        SparseOptimizerConfig::SGD(0.05f), SparseOptimizerConfig::Adagrad(0.05f),
        SparseOptimizerConfig::LazyAdam(0.01f), SparseOptimizerConfig::AdagradByAddress(0.05f)};
    SparseTable t = ValueOrDie(create_table(s, c, optimizers[f % 4]));
    Output ids = DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kCriteoBatch, 1});
    parts.push_back(ValueOrDie(sparse_lookup(s, t, ids, o)));
  }
  parts.push_back(DatasetColumn(s, "dense", DType::kFloat32, Shape{kCriteoBatch, 13}));
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kCriteoBatch, 1});
  Output x = ops::Concat(s, parts, 1);
  Output logits = layers::Mlp(s, x, {.hidden_units = {16}, .output_units = 1});
  b.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  b.train =
      ops::Group(s, {ValueOrDie(adam.Minimize(s, b.loss)), ValueOrDie(SparseMinimize(s, b.loss))});
  b.init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  ValueOrDie(ModifyGraph(b.graph.get()));
  return b;
}

Model Criteo(const CriteoLayout& layout) {
  std::vector<std::string> tables;
  for (int f = 1; f <= kCriteoFeatures; ++f) tables.push_back("t" + std::to_string(f));
  return Model{[layout](const std::string& tag) { return BuildCriteoModel(layout, tag); },
               CriteoBatches, tables, "t1"};
}

// Issue 14's transparency on the Criteo shape: with every table's device tier at 10% of its
// vocabulary (the rest in host memory, or host at 10% and the rest on SSD), the losses and all 26
// exported tables are bitwise those of the run with everything on the device.
TEST(KeyStageTiersTest, CriteoShapedModelTrainsTheSameWithTheDeviceAtTenPercent) {
  const RunResult full = Train(Criteo({}), "criteo_full", 1, 1);
  ASSERT_TRUE(full.status.ok()) << full.status;
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(kCriteoSteps));
  EXPECT_EQ(full.promoted, 0);
  const RunResult host = Train(Criteo({.device = 0.1, .host = 1.0}), "criteo_host", 1, 1);
  ExpectSame(full, host, "host");
  EXPECT_GT(host.promoted, 0);  // rows came back from the host tier
  const RunResult ssd =
      Train(Criteo({.device = 0.1, .host = 0.1, .ssd = true}), "criteo_ssd", 2, 2);
  ExpectSame(full, ssd, "ssd");
  EXPECT_GT(ssd.ssd_rows, 0);
}

TEST(KeyStageTiersTest, DeviceTierBelowTwoBatchesIsAnErrorNamingTheSetting) {
  const RunResult r = Train(TwoTables(Tiers{.device = 60, .host = 4096}), "small", 1, 1);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.status;
  const std::string m(r.status.message());
  // Both tables have the small device tier; the first resolved reports.
  EXPECT_TRUE(m.find("table \"user\"") != std::string::npos ||
              m.find("table \"item\"") != std::string::npos)
      << m;
  EXPECT_NE(m.find("device_vocabulary_size 60"), std::string::npos) << m;
  EXPECT_NE(m.find("unique keys of two consecutive batches"), std::string::npos) << m;
}

// The device tier is a separate allocation counted against variable_memory_max_size (beside the
// dense variables): a session whose limit cannot hold it refuses the table with
// ResourceExhausted naming the limit, the bytes asked for and the table; one that can counts it.
TEST(KeyStageTiersTest, DeviceTierCountsAgainstVariableMemoryMaxSize) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("user", 8, /*vocab=*/1000);
  c.host_vocabulary_size = 4096;
  ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t tier_bytes = 1000 * 8 * sizeof(float);  // SGD keeps no slots
  ASSERT_EQ(internal::DeviceTierBytes(
                *ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)))),
            tier_bytes);
  {
    SessionConfig config;
    config.variable_memory_max_size = tier_bytes - 1;
    auto session = ValueOrDie(Session::Create(g, config));
    StatusOr<EmbeddingTable*> t = LookupTable(*session, "user");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
    const std::string m(t.status().message());
    EXPECT_NE(m.find("table \"user\""), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(tier_bytes) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(tier_bytes - 1) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("raise variable_memory_max_size"), std::string::npos) << m;
    EXPECT_EQ(session->stats().variable_bytes_in_use, 0);
  }
  SessionConfig config;
  config.variable_memory_max_size = tier_bytes;
  auto session = ValueOrDie(Session::Create(g, config));
  ASSERT_TRUE(LookupTable(*session, "user").ok());
  EXPECT_EQ(session->stats().variable_bytes_in_use, tier_bytes);
  ASSERT_TRUE(session->Close().ok());
  EXPECT_EQ(session->stats().variable_bytes_in_use, 0);  // Close released the tier's charge
}

TEST(KeyStageTiersTest, TieredTablesNeedTheKeyStageAndAllTablesTiered) {
  // In-graph lookups of a tiered table are refused (the spec runs their key work in the key
  // stage).
  {
    Built b = BuildModel(Tiers{.device = 200, .host = 4096}, "ingraph", /*modify_graph=*/false);
    auto session = ValueOrDie(Session::Create(*b.graph));
    ASSERT_TRUE(session->Run({}, {}, {b.init}).ok());
    auto data = Batches(64);
    Batch batch;
    ASSERT_TRUE(ValueOrDie(data->GetNext(&batch)));
    FeedList feeds;
    for (const char* c : {"C1", "C2", "C3", "label", "dense", "timestamp"}) {
      feeds.emplace_back(c, *batch.column(c));
    }
    auto out = session->Run(feeds, {b.loss}, {b.train});
    ASSERT_FALSE(out.ok());
    EXPECT_NE(std::string(out.status().message()).find("key stage"), std::string::npos)
        << out.status();
  }
  // A tiered table beside a flat one: refused when the stage starts.
  Graph g;
  Scope s(&g);
  TableConfig a = SmallTable("a", 4);
  a.host_vocabulary_size = 100;
  TableConfig flat = SmallTable("b", 4);
  SparseTable ta = ValueOrDie(create_table(s, a, SparseOptimizerConfig::SGD(0.1f)));
  SparseTable tb = ValueOrDie(create_table(s, flat, SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions o;
  o.modify_graph = true;
  Output ids = DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 2});
  Output ea = ValueOrDie(sparse_lookup(s, ta, ids, o));
  Output eb = ValueOrDie(sparse_lookup(s, tb, ids, o));
  Output loss = ops::ReduceMean(s, ops::Add(s, ea, eb));
  ASSERT_TRUE(SparseMinimize(s, loss).ok());
  ASSERT_TRUE(s.ok()) << s.status();
  ValueOrDie(ModifyGraph(&g));
  auto session = ValueOrDie(Session::Create(g));
  auto stage = StartAscPipeline(*session, Batches(64), KeyStageOptions{});
  ASSERT_FALSE(stage.ok());
  EXPECT_NE(std::string(stage.status().message()).find("every table uses the host tier"),
            std::string::npos)
      << stage.status();
}

// A stage of tiered tables holds leases on their device rows and may be resolving ahead when
// its Session goes: closing the Session stops the stage first (returning the leases while the
// tables exist), and the stage then refuses work with a message instead of touching freed
// tables. Under ASan this also checks that nothing reads the freed tables.
TEST(KeyStageTiersTest, SessionDestroyedBeforeItsRunningStageIsSafe) {
  for (const bool close_first : {false, true}) {
    SCOPED_TRACE(close_first ? "Close, then destroy" : "destroyed without Close");
    Built b = BuildModel(Tiers{.device = 200, .host = 400, .ssd = 2000},
                         close_first ? "detach_close" : "detach");
    auto session = ValueOrDie(Session::Create(*b.graph));
    ASSERT_TRUE(session->Run({}, {}, {b.init}).ok());
    KeyStageOptions ko;
    ko.key_process_thread_num = 2;
    ko.prefetch_batches = 3;
    auto stage = ValueOrDie(StartAscPipeline(*session, Batches(), ko));
    FeedList feeds;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(ValueOrDie(stage->Next(&feeds)));
      ASSERT_TRUE(session->Run(feeds, {}, {b.train}).ok());
    }
    // The workers are resolving (or have resolved) the next batches ahead now.
    if (close_first) {
      ASSERT_TRUE(session->Close().ok());
    }
    session.reset();
    const StatusOr<bool> next = stage->Next(&feeds);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition) << next.status();
    EXPECT_NE(std::string(next.status().message()).find("Session was closed"), std::string::npos)
        << next.status();
    EvictHook hook(false, 0, 5);
    EXPECT_EQ(stage->AfterStep(hook, 4).status().code(), absl::StatusCode::kFailedPrecondition);
    stage->Stop();
    stage.reset();
  }
}

}  // namespace
}  // namespace recsdk
