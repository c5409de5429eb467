// export_test.cc: ExportSavedModel and Predictor (src/checkpoint/export.cc): a trained model's
// bundle serves bitwise the predictions of the training session's evaluation graph, holds no
// training ops, reads unknown keys as the serving default without inserting them, and refuses
// bad signatures and corrupt bundles, and leaves nothing behind when a write fails.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int64_t kBatch = 16, kIds = 2;

struct Model {
  Graph graph;
  Output prob_eval;
  Node* train = nullptr;
  Node* init = nullptr;
  Output loss;
  std::unique_ptr<Session> session;
};

// A table (Adagrad, so rows carry slots) and an MLP trained on ids -> label; a second, evaluation
// lookup of the same table (is_train false) feeds the same MLP for serving.
std::unique_ptr<Model> Build() {
  auto m = std::make_unique<Model>();
  Scope s(&m->graph);
  TableConfig tc = testing::SmallTable("items", 4, 1024);
  tc.serving_default_value = 0.25f;
  SparseTable table = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.2f)));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, kIds});
  Output dense = ops::Placeholder(s.WithOpName("dense"), DType::kFloat32, Shape{kBatch, 2});
  Output label = ops::Placeholder(s.WithOpName("label"), DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions train_lo;
  train_lo.combiner = Combiner::kMean;
  SparseLookupOptions eval_lo = train_lo;
  eval_lo.is_train = false;
  eval_lo.name = "items_eval";
  Output emb = ValueOrDie(sparse_lookup(s, table, ids, train_lo));
  Output emb_eval = ValueOrDie(sparse_lookup(s, table, ids, eval_lo));
  // One MLP, shared by name: weights created once, applied to both inputs.
  Variable w1 =
      Variable::Make(s, "w1", Shape{6, 8}, {.initializer = Initializer::GlorotUniform(3)});
  Variable w2 =
      Variable::Make(s, "w2", Shape{8, 1}, {.initializer = Initializer::GlorotUniform(4)});
  auto logits_of = [&](Output e) {
    Output h = ops::Relu(s, ops::MatMul(s, ops::Concat(s, {e, dense}, 1), w1));
    return ops::MatMul(s, h, w2);
  };
  Output logits = logits_of(emb);
  m->prob_eval = ops::Sigmoid(s.WithOpName("prob_eval"), logits_of(emb_eval));
  m->loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam;
  Node* dense_train = ValueOrDie(adam.Minimize(s, m->loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, m->loss));
  m->train = ops::Group(s, {dense_train, sparse_train});
  m->init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  m->session = ValueOrDie(Session::Create(m->graph));
  return m;
}

FeedList Feeds(uint64_t seed, int64_t key_range, bool with_label) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(kBatch * kIds);
  std::vector<float> dense(kBatch * 2), label(kBatch);
  for (auto& k : ids) k = static_cast<int64_t>(rng() % static_cast<uint64_t>(key_range));
  for (auto& d : dense) d = static_cast<float>(rng() % 100) / 100.0f;
  for (int64_t b = 0; b < kBatch; ++b) label[b] = static_cast<float>(ids[b * kIds] % 2);
  FeedList f = {{"ids", ValueOrDie(Tensor::FromValues<int64_t>(Shape{kBatch, kIds}, ids))},
                {"dense", ValueOrDie(Tensor::FromValues<float>(Shape{kBatch, 2}, dense))}};
  if (with_label) {
    f.emplace_back("label", ValueOrDie(Tensor::FromValues<float>(Shape{kBatch, 1}, label)));
  }
  return f;
}

std::string FreshDir(const std::string& leaf) {
  const std::string dir = testing::TempDir() + "/export_test_" + leaf;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ExportTest, PredictorServesBitwiseTheTrainingSessionsPredictions) {
  auto m = Build();
  ASSERT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  for (uint64_t step = 0; step < 30; ++step) {
    ASSERT_TRUE(m->session->Run(Feeds(step, 200, true), {m->loss}, {m->train}).ok());
  }
  const std::string dir = FreshDir("bundle");
  const Status exported = ExportSavedModel(*m->session, dir, {{"ids", "dense"}, {"prob_eval"}});
  ASSERT_TRUE(exported.ok()) << exported;
  // Self-contained: no gradient, optimizer or update op in the served graph.
  std::ifstream in(dir + "/graph.json");
  const std::string graph_json((std::istreambuf_iterator<char>(in)), {});
  for (const char* op : {"TableApply", "ApplyAdam", "Assign", "Grad", "label"}) {
    EXPECT_EQ(graph_json.find(op), std::string::npos) << op;
  }

  auto predictor = ValueOrDie(Predictor::Load(dir));
  EmbeddingTable* table = ValueOrDie(LookupTable(*m->session, "items"));
  const int64_t size_before = table->size();
  // Rows with known keys and with keys never seen (>= 200): both equal bitwise.
  for (uint64_t seed : {1000u, 1001u, 1002u}) {
    for (int64_t range : {int64_t{200}, int64_t{400}}) {
      const FeedList feeds = Feeds(seed, range, false);
      const Tensor want = ValueOrDie(m->session->Run(feeds, {m->prob_eval}))[0];
      const Tensor got = ValueOrDie(predictor->Predict(feeds))[0];
      ASSERT_EQ(got.TotalBytes(), want.TotalBytes());
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.TotalBytes()), 0)
          << "seed " << seed << " range " << range;
    }
  }
  EXPECT_EQ(table->size(), size_before);
  // Serving never inserts: the predictor's table still holds only the trained keys.
  EXPECT_EQ(predictor->signature().outputs, std::vector<std::string>{"prob_eval"});

  // Bad feeds name the input.
  FeedList missing = Feeds(1, 200, false);
  missing.pop_back();
  const Status s = predictor->Predict(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("\"dense\" is not fed"), std::string::npos) << s;
}

// The user's names: a bundle exported with input_names / output_names is fed and answers under
// them (the spec's {"prob": ...}), with the bits the training session computes; a bundle in the
// format written before names existed (outputs as tensor strings, inputs without "node") still
// loads and serves under its tensor names.
TEST(ExportTest, PredictorServesUnderTheUsersNamesAndLoadsOldBundles) {
  auto m = Build();
  ASSERT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  for (uint64_t step = 0; step < 10; ++step) {
    ASSERT_TRUE(m->session->Run(Feeds(step, 200, true), {m->loss}, {m->train}).ok());
  }
  const std::string dir = FreshDir("named");
  ServingSignature sig;
  sig.inputs = {"ids", "dense"};
  sig.input_names = {"item_ids", "features"};
  sig.outputs = {"prob_eval:0"};
  sig.output_names = {"prob"};
  const Status exported = ExportSavedModel(*m->session, dir, sig);
  ASSERT_TRUE(exported.ok()) << exported;
  auto predictor = ValueOrDie(Predictor::Load(dir));
  EXPECT_EQ(predictor->signature().output_names, std::vector<std::string>{"prob"});
  EXPECT_EQ(predictor->signature().input_names, sig.input_names);
  EXPECT_EQ(predictor->signature().outputs, sig.outputs);

  const FeedList feeds = Feeds(7, 300, false);
  const Tensor want = ValueOrDie(m->session->Run(feeds, {m->prob_eval}))[0];
  const FeedList by_user_name = {{"item_ids", feeds[0].second}, {"features", feeds[1].second}};
  auto named = ValueOrDie(predictor->PredictNamed(by_user_name));
  ASSERT_EQ(named.size(), 1u);
  ASSERT_TRUE(named.contains("prob"));
  ASSERT_EQ(named.at("prob").TotalBytes(), want.TotalBytes());
  EXPECT_EQ(std::memcmp(named.at("prob").raw_data(), want.raw_data(), want.TotalBytes()), 0);
  // Fed under the node name instead of the user's: refused, naming the user's names.
  Status s = predictor->Predict(feeds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("item_ids, features"), std::string::npos) << s;

  // Rewrite serving.json as the format before names (a plain array of tensor names; inputs named
  // by node), keeping its checksummed fields: the bundle loads and serves under tensor names.
  nlohmann::json serving;
  {
    std::ifstream in(dir + "/serving.json");
    in >> serving;
  }
  serving["outputs"] = nlohmann::json::array({"prob_eval:0"});
  serving["inputs"][0].erase("node");
  serving["inputs"][0]["name"] = "ids";
  serving["inputs"][1].erase("node");
  serving["inputs"][1]["name"] = "dense";
  serving.erase("crc32c");  // re-sealed as WriteJsonDocument seals it
  serving["crc32c"] = internal::Crc32c(serving.dump());
  {
    std::ofstream out(dir + "/serving.json", std::ios::trunc);
    out << serving.dump(1);
  }
  auto old = Predictor::Load(dir);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ((*old)->signature().output_names, std::vector<std::string>{"prob_eval:0"});
  const Tensor got = ValueOrDie((*old)->Predict(feeds))[0];
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.TotalBytes()), 0);

  // Names of another length, empty or repeated are refused, naming the field.
  const std::string bad = FreshDir("named_bad");
  ServingSignature wrong = sig;
  wrong.output_names = {"prob", "p2"};
  s = ExportSavedModel(*m->session, bad, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("output_names has 2 names for 1 outputs"),
            std::string::npos)
      << s;
  wrong = sig;
  wrong.input_names = {"x", "x"};
  s = ExportSavedModel(*m->session, bad, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("input_names[1]"), std::string::npos) << s;
  wrong = sig;
  wrong.output_names = {""};
  EXPECT_EQ(ExportSavedModel(*m->session, bad, wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(bad));
}

// Two in-graph evaluation lookups of one table (the Estimator's eval and predict branches are
// two): the Session merges them into one TableLookupGroup node, which the export copies like a
// lookup, read-only. It has no "moved_to_key_stage" attribute: setting it there made the export
// fail with "unknown attribute".
TEST(ExportTest, MergedInGraphLookupsExport) {
  Graph graph;
  Scope s(&graph);
  SparseTable table = ValueOrDie(
      create_table(s, testing::SmallTable("items", 4, 64), SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, kIds});
  SparseLookupOptions lo;
  lo.is_train = false;
  lo.combiner = Combiner::kSum;
  lo.name = "eval_a";
  Output a = ValueOrDie(sparse_lookup(s, table, ids, lo));
  lo.name = "eval_b";
  Output b = ValueOrDie(sparse_lookup(s, table, ids, lo));
  ops::Add(s.WithOpName("out"), a, b);
  auto session = ValueOrDie(Session::Create(graph));
  const FeedList feeds = {
      {"ids", testing::Ids(kBatch, kIds, std::vector<int64_t>(kBatch * kIds, 3))}};
  const Tensor want = ValueOrDie(session->Run(feeds, {"out"}))[0];
  const std::string dir = FreshDir("merged_lookups");
  const Status exported = ExportSavedModel(*session, dir, {{"ids"}, {"out"}});
  ASSERT_TRUE(exported.ok()) << exported;
  const Tensor got = ValueOrDie(ValueOrDie(Predictor::Load(dir))->Predict(feeds))[0];
  ASSERT_EQ(got.TotalBytes(), want.TotalBytes());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.TotalBytes()), 0);
}

// The same model with both lookups moved to the key stage (ModifyGraph): trained through a
// training KeyStage; the training session predicts through an evaluation KeyStage. The bundle
// holds in-graph read-only lookups instead, and the Predictor, fed the raw dataset columns, returns
// the same bits.
TEST(ExportTest, KeyStageModelsExportWithInGraphReadOnlyLookups) {
  Graph graph;
  Scope s(&graph);
  TableConfig tc = testing::SmallTable("items", 4, 1024);
  tc.serving_default_value = 0.25f;
  tc.access_threshold = 1;
  SparseTable table = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.2f)));
  Output ids = DatasetColumn(s, "ids", DType::kInt64, Shape{kBatch, kIds});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 2});
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions train_lo;
  train_lo.combiner = Combiner::kMean;
  train_lo.modify_graph = true;
  SparseLookupOptions eval_lo = train_lo;
  eval_lo.is_train = false;
  eval_lo.name = "items_eval";
  Output emb = ValueOrDie(sparse_lookup(s, table, ids, train_lo));
  Variable w1 =
      Variable::Make(s, "w1", Shape{6, 8}, {.initializer = Initializer::GlorotUniform(3)});
  Variable w2 =
      Variable::Make(s, "w2", Shape{8, 1}, {.initializer = Initializer::GlorotUniform(4)});
  auto logits_of = [&](Output e) {
    Output h = ops::Relu(s, ops::MatMul(s, ops::Concat(s, {e, dense}, 1), w1));
    return ops::MatMul(s, h, w2);
  };
  Output logits = logits_of(emb);
  Output loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam;
  Node* train =
      ops::Group(s, {ValueOrDie(adam.Minimize(s, loss)), ValueOrDie(SparseMinimize(s, loss))});
  // The evaluation lookup after the training ops, so training steps do not need its feeds.
  Output emb_eval = ValueOrDie(sparse_lookup(s, table, ids, eval_lo));
  Output prob_eval = ops::Sigmoid(s.WithOpName("prob_eval"), logits_of(emb_eval));
  Node* init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(ValueOrDie(ModifyGraph(&graph)).moved_lookups.size(), 2u);
  auto session = ValueOrDie(Session::Create(graph));
  ASSERT_TRUE(session->Run({}, {}, {init}).ok());

  // Batches of Feeds(seed, range) as a dataset.
  auto data = [](uint64_t first_seed, int n, int64_t range) {
    std::vector<Batch> batches;
    for (int i = 0; i < n; ++i) {
      Batch b;
      for (auto& [name, t] : Feeds(first_seed + i, range, true)) {
        EXPECT_TRUE(b.AddColumn(name.name, t).ok());
      }
      batches.push_back(std::move(b));
    }
    return ValueOrDie(InMemoryDatasetFromBatches(std::move(batches)));
  };
  {
    auto stage = ValueOrDie(StartAscPipeline(*session, data(0, 30, 200)));
    FeedList feeds;
    while (ValueOrDie(stage->Next(&feeds))) {
      const auto ran = session->Run(feeds, {loss}, {train});
      ASSERT_TRUE(ran.ok()) << ran.status();
    }
  }
  const std::string dir = FreshDir("key_stage_bundle");
  const Status exported = ExportSavedModel(*session, dir, {{"ids", "dense"}, {"prob_eval"}});
  ASSERT_TRUE(exported.ok()) << exported;
  auto predictor = ValueOrDie(Predictor::Load(dir));
  EmbeddingTable* t = ValueOrDie(LookupTable(*session, "items"));
  const int64_t size_before = t->size();
  // Known keys (< 200) and unknown ones (up to 400, the serving default).
  KeyStageOptions eval;
  eval.channel = KeyStageChannel::kEval;
  auto stage = ValueOrDie(StartAscPipeline(*session, data(1000, 6, 400), eval));
  FeedList feeds;
  Batch batch;
  int compared = 0;
  while (ValueOrDie(stage->Next(&feeds, &batch))) {
    const Tensor want = ValueOrDie(session->Run(feeds, {prob_eval}))[0];
    FeedList raw = {{"ids", *batch.column("ids")}, {"dense", *batch.column("dense")}};
    const Tensor got = ValueOrDie(predictor->Predict(raw))[0];
    ASSERT_EQ(got.TotalBytes(), want.TotalBytes());
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.TotalBytes()), 0)
        << "batch " << compared;
    ++compared;
  }
  EXPECT_EQ(compared, 6);
  EXPECT_EQ(t->size(), size_before);
  // The served lookups run in the graph, read-only.
  std::ifstream in(dir + "/graph.json");
  const std::string graph_json((std::istreambuf_iterator<char>(in)), {});
  int lookups = 0;
  const nlohmann::json doc = nlohmann::json::parse(graph_json);
  for (const auto& node : doc.at("nodes")) {
    const auto& attrs = node.at("attrs");
    if (!attrs.contains("moved_to_key_stage")) continue;
    ++lookups;
    EXPECT_FALSE(attrs.at("moved_to_key_stage").at("value").get<bool>()) << node.at("name");
    EXPECT_FALSE(attrs.at("is_train").at("value").get<bool>()) << node.at("name");
  }
  EXPECT_EQ(lookups, 1) << "only the evaluation lookup serves prob_eval";
}

// A table with host and SSD tiers serves from one tier: the bundle's table holds every row on
// the device. Before, the bundle kept the tiered config, so the Predictor's in-graph lookup was
// refused (tiered tables need the key stage) and its table took over the training table's SSD
// folder.
TEST(ExportTest, TieredTablesServeFromOneTier) {
  Graph graph;
  Scope s(&graph);
  const std::string ssd = FreshDir("tiered_ssd");
  std::filesystem::create_directories(ssd);
  TableConfig tc = testing::SmallTable("items", 4, 64);
  tc.host_vocabulary_size = 64;
  tc.ssd_vocabulary_size = 64;
  tc.ssd_data_path = {ssd};
  tc.serving_default_value = 0.5f;
  SparseTable table = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.2f)));
  Output ids = DatasetColumn(s, "ids", DType::kInt64, Shape{kBatch, kIds});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kMean;
  lo.modify_graph = true;
  lo.is_train = false;
  Output emb = ValueOrDie(sparse_lookup(s, table, ids, lo));
  ops::Identity(s.WithOpName("emb_out"), emb);
  Node* init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(ValueOrDie(ModifyGraph(&graph)).moved_lookups.size(), 1u);
  auto session = ValueOrDie(Session::Create(graph));
  ASSERT_TRUE(session->Run({}, {}, {init}).ok());
  auto ssd_files = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(ssd)) {
      names.push_back(e.path().filename());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> files_before = ssd_files();

  const std::string dir = FreshDir("tiered_bundle");
  const Status exported = ExportSavedModel(*session, dir, {{"ids"}, {"emb_out"}});
  ASSERT_TRUE(exported.ok()) << exported;
  auto predictor = Predictor::Load(dir);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  std::vector<int64_t> keys(kBatch * kIds);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i);
  const Tensor id_tensor =
      ValueOrDie(Tensor::FromValues<int64_t>(Shape{kBatch, kIds}, absl::MakeConstSpan(keys)));
  auto got = (*predictor)->Predict({{"ids", id_tensor}});
  ASSERT_TRUE(got.ok()) << got.status();
  // Unknown keys: the serving default in every element.
  const Tensor& e = (*got)[0];
  for (int64_t i = 0; i < e.num_elements(); ++i) EXPECT_EQ(e.data<float>()[i], 0.5f) << i;
  EXPECT_EQ(ssd_files(), files_before) << "the training table's SSD files are its own";
}

TEST(ExportTest, BadSignaturesAndCorruptBundlesAreRefused) {
  auto m = Build();
  ASSERT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  ASSERT_TRUE(m->session->Run(Feeds(0, 50, true), {m->loss}, {m->train}).ok());
  const std::string dir = FreshDir("bad");
  Status s = ExportSavedModel(*m->session, dir, {{"ids"}, {"prob_eval"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("placeholder \"dense\""), std::string::npos) << s;
  s = ExportSavedModel(*m->session, dir, {{"ids", "dense"}, {"nope"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = ExportSavedModel(*m->session, dir, {{"ids", "prob_eval"}, {"prob_eval"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(std::filesystem::exists(dir));

  ASSERT_TRUE(ExportSavedModel(*m->session, dir, {{"ids", "dense"}, {"prob_eval"}}).ok());
  EXPECT_EQ(ExportSavedModel(*m->session, dir, {{"ids", "dense"}, {"prob_eval"}}).code(),
            absl::StatusCode::kFailedPrecondition);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string file = e.path();
    const std::string backup = file + ".bak";
    std::filesystem::copy_file(file, backup);
    std::filesystem::resize_file(file, std::filesystem::file_size(file) - 1);
    auto p = Predictor::Load(dir);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss) << file << ": " << p.status();
    EXPECT_NE(std::string(p.status().message()).find(file), std::string::npos) << p.status();
    std::filesystem::rename(backup, file);
  }
  EXPECT_TRUE(Predictor::Load(dir).ok());
  EXPECT_EQ(Predictor::Load(dir + "_missing").status().code(), absl::StatusCode::kNotFound);
}

// Issue 28 item 4: the bundle is written through the Env. A full disk, a short write, a failed
// fsync or rename each return an error naming the bundle, leave nothing at export_dir and no
// temporary beside it, and keep a bundle exported before (a sibling) loadable; the export then
// succeeds once the fault is gone.
TEST(ExportTest, AFailedWriteLeavesNothingBehind) {
  using internal::FaultInjectionEnv;
  auto m = Build();
  ASSERT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  ASSERT_TRUE(m->session->Run(Feeds(0, 50, true), {m->loss}, {m->train}).ok());
  const std::string base = FreshDir("faults");
  const ServingSignature sig = {{"ids", "dense"}, {"prob_eval"}};
  ASSERT_TRUE(ExportSavedModel(*m->session, base + "/1", sig).ok());
  struct Fault {
    std::string name;
    std::function<void(FaultInjectionEnv&)> arm;
    absl::StatusCode code;
  };
  const std::vector<Fault> faults = {
      {"disk full", [](FaultInjectionEnv& e) { e.disk_full_after_bytes = 1000; },
       absl::StatusCode::kResourceExhausted},
      {"short write", [](FaultInjectionEnv& e) { e.short_write_after_bytes = 1000; },
       absl::StatusCode::kResourceExhausted},
      {"fsync failure", [](FaultInjectionEnv& e) { e.fail_sync = true; },
       absl::StatusCode::kInternal},
      {"failed rename", [](FaultInjectionEnv& e) { e.fail_rename = true; },
       absl::StatusCode::kInternal},
  };
  const std::string dir = base + "/2";
  for (const Fault& fault : faults) {
    FaultInjectionEnv env(internal::Env::Default());
    fault.arm(env);
    const Status s = ExportSavedModel(*m->session, dir, sig, &env);
    ASSERT_FALSE(s.ok()) << fault.name;
    EXPECT_EQ(s.code(), fault.code) << fault.name << ": " << s;
    EXPECT_NE(std::string(s.message()).find("\"" + dir + "\""), std::string::npos) << s;
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(base)) {
      left.push_back(e.path().filename());
    }
    EXPECT_EQ(left, std::vector<std::string>{"1"}) << fault.name;
    EXPECT_TRUE(Predictor::Load(base + "/1").ok()) << fault.name;
  }
  FaultInjectionEnv env(internal::Env::Default());
  ASSERT_TRUE(ExportSavedModel(*m->session, dir, sig, &env).ok());
  EXPECT_EQ(env.renames.load(), 1);  // the bundle directory, once
  EXPECT_TRUE(Predictor::Load(dir).ok());
}

}  // namespace
}  // namespace recsdk
