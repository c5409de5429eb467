// embedding_model_test.cc: end to end: sparse_lookup -> MLP -> sigmoid cross-entropy on the
// synthetic dataset with a planted signal, trained through the key stage with a dense optimizer
// (Optimizer::Minimize) and a sparse one (SparseMinimize); checks the AUC it reaches against the
// planted logit's, eviction through EvictHook in the loop, and the .npy export.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::SmallTable;
using testing::ValueOrDie;

TEST(EmbeddingModelTest, LearnsPlantedSignalAndExports) {
  constexpr int kFeatures = 6;
  constexpr int64_t kBatch = 256;
  SyntheticOptions d;
  d.num_rows = 60000;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, 300);
  d.num_dense = 2;
  d.with_timestamps = true;
  d.seed = 5;

  Graph g;
  Scope s(&g);
  TableConfig tc = SmallTable("sparse_embeddings", 8, 1 << 14);
  tc.access_threshold = 0;
  tc.eviction_threshold = 1 << 30;  // enabled, but no key gets that old here
  tc.initializer = Initializer::TruncatedNormal(0, 0.05, 1);
  SparseTable table = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.1f, 0.1f)));
  std::vector<Output> ids;
  for (int f = 1; f <= kFeatures; ++f) {
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kBatch, 1}));
  }
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 2});
  SparseLookupOptions lo;
  lo.modify_graph = true;
  lo.combiner = Combiner::kSum;
  lo.timestamps = DatasetColumn(s, "timestamp", DType::kInt64, Shape{kBatch});
  std::vector<Output> emb = ValueOrDie(sparse_lookup(s, table, ids, lo));
  emb.push_back(dense);
  layers::MlpOptions mlp;
  mlp.hidden_units = {32};
  mlp.output_units = 1;
  Output logits = layers::Mlp(s, ops::Concat(s, emb, 1), mlp);
  Output prob = ops::Sigmoid(s, logits);
  Output loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptions ao;
  ao.learning_rate = 0.005;
  AdamOptimizer adam(ao);
  Node* dense_train = ValueOrDie(adam.Minimize(s, loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, loss));
  Node* train = ops::Group(s, {dense_train, sparse_train});
  Node* init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(ModifyGraph(&g).ok());

  auto session = ValueOrDie(Session::Create(g));
  ASSERT_TRUE(session->Run({}, {}, {init}).ok());
  auto data = ValueOrDie(BatchRows(ValueOrDie(SyntheticDataset(d)), kBatch,
                                   BatchOptions{.drop_remainder = true, .pad_remainder = false}));
  auto stage = ValueOrDie(StartAscPipeline(*session, std::move(data)));
  EvictHook hook(true, 0, 50);
  const int64_t train_steps = 50000 / kBatch;
  std::vector<float> scores, labels, true_scores;
  FeedList feeds;
  Batch batch;
  int64_t step = 0;
  while (ValueOrDie(stage->Next(&feeds, &batch))) {
    if (step < train_steps) {
      auto out = session->Run(feeds, {loss}, {train});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      ValueOrDie(stage->AfterStep(hook, ++step));
      continue;
    }
    // Held-out rows: predictions only (no train op).
    auto out = ValueOrDie(session->Run(feeds, {prob}));
    const Tensor* l = batch.column("label");
    const Tensor* dn = batch.column("dense");
    for (int64_t r = 0; r < kBatch; ++r) {
      scores.push_back(out[0].data<float>()[r]);
      labels.push_back(l->data<float>()[r]);
      std::vector<int64_t> row_ids;
      for (int f = 1; f <= kFeatures; ++f) {
        row_ids.push_back(batch.column("C" + std::to_string(f))->data<int64_t>()[r]);
      }
      true_scores.push_back(static_cast<float>(
          SyntheticTrueLogit(d, row_ids, absl::MakeConstSpan(dn->data<float>() + 2 * r, 2))));
    }
  }
  const double auc = ValueOrDie(Auc(scores, labels));
  const double best = ValueOrDie(Auc(true_scores, labels));
  EXPECT_GT(auc, 0.5 + 0.75 * (best - 0.5)) << "model AUC " << auc << ", planted " << best;
  std::printf("held-out AUC %.4f (planted logit %.4f)\n", auc, best);

  // Export: keys [n] int64 and values [n, 8] float32 as numpy files.
  EmbeddingTable* t = ValueOrDie(LookupTable(*session, "sparse_embeddings"));
  const std::string dir = testing::TempDir() + "/embedding_model_export";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(t->ExportNpy(dir + "/keys.npy", dir + "/values.npy").ok());
  std::ifstream in(dir + "/values.npy", std::ios::binary);
  std::string header(128, '\0');
  in.read(header.data(), 128);
  EXPECT_EQ(header.substr(1, 5), "NUMPY");
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("(" + std::to_string(t->size()) + ", 8)"), std::string::npos) << header;
  // The features share the table (like Criteo's merged sparse_feature), ids in [0, 300).
  EXPECT_GT(t->size(), 250);
}

TEST(EmbeddingModelTest, EvictHookInTrainingLoopEvictsStaleKeys) {
  // In-graph lookups, a step loop calling EvictHook each step: keys of old data are evicted and
  // their rows reused, so the table stays small while ids keep changing.
  Graph g;
  Scope s(&g);
  TableConfig tc = SmallTable("t", 2, 64);
  tc.access_threshold = 0;
  tc.eviction_threshold = 3;
  SparseTable table = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{4, 1});
  Output ts = ops::Placeholder(s, DType::kInt64, Shape{4});
  SparseLookupOptions lo;
  lo.timestamps = ts;
  Output emb = ValueOrDie(sparse_lookup(s, table, ids, lo));
  Node* train = ValueOrDie(
      SparseMinimize(s, ops::ReduceSum(s, emb), {},
                     SparseApplyOptions{.global_step = nullptr, .increment_global_step = true}));
  auto session = ValueOrDie(Session::Create(g));
  ASSERT_TRUE(session->Run({}, {}, {GetOrCreateGlobalStep(s).initializer()}).ok());
  std::vector<EmbeddingTable*> tables = ValueOrDie(SessionTables(*session));
  EvictHook hook(true, 0, 1);
  int64_t evicted = 0;
  for (int64_t step = 0; step < 100; ++step) {
    // 4 new ids per step, one step = one second: 64 rows would fill after 16 steps.
    std::vector<int64_t> v = {4 * step, 4 * step + 1, 4 * step + 2, 4 * step + 3};
    Tensor idt = ValueOrDie(Tensor::FromValues<int64_t>(Shape{4, 1}, absl::MakeConstSpan(v)));
    Tensor tst = Tensor::Vector<int64_t>({step, step, step, step});
    auto out = session->Run({{ids, idt}, {ts, tst}}, {}, {train});
    ASSERT_TRUE(out.ok()) << "step " << step << ": " << out.status().ToString();
    evicted += ValueOrDie(hook.AfterStep(step + 1, tables));
    EXPECT_LE(tables[0]->size(), 16);
  }
  EXPECT_GT(evicted, 300);
  EXPECT_EQ(tables[0]->FindRow(0), EmbeddingTable::kDefaultRow);
  EXPECT_NE(tables[0]->FindRow(4 * 99), EmbeddingTable::kDefaultRow);
}

}  // namespace
}  // namespace recsdk
