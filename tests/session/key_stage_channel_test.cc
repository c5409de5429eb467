// key_stage_channel_test.cc: the key stage's train and eval channels (KeyStageChannel, the spec's
// get_initializer(True/False)): one graph holds a training lookup and an evaluation lookup of the
// same table; a training stage does only training key work (admission, inserts), an evaluation
// stage only reads (unknown keys read serving_default_value; nothing inserted or counted), and
// set_threshold changes admission mid-training.
#include <gtest/gtest.h>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::MakeBatch;
using testing::ValueOrDie;

struct Model {
  Graph graph;
  Output train_emb, eval_emb;
};

// Build: table "t" (dim 2, admission after `threshold` occurrences, serving default 0.25); the
// ids column "ids" [2,1] is looked up once for training and once for evaluation.
void Build(Model* m, int64_t threshold) {
  Scope s(&m->graph);
  TableConfig c = testing::SmallTable("t", 2);
  c.access_threshold = threshold;
  c.serving_default_value = 0.25f;
  SparseTable table = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  Output ids = DatasetColumn(s, "ids", DType::kInt64, Shape{Shape::kUnknownDim, 1});
  SparseLookupOptions train;
  train.modify_graph = true;
  train.combiner = Combiner::kSum;
  train.name = "train_lookup";
  m->train_emb = ValueOrDie(sparse_lookup(s, table, ids, train));
  SparseLookupOptions eval = train;
  eval.is_train = false;
  eval.name = "eval_lookup";
  m->eval_emb = ValueOrDie(sparse_lookup(s, table, ids, eval));
  ASSERT_TRUE(ModifyGraph(&m->graph).ok());
}

std::unique_ptr<Dataset> Batches(std::vector<std::vector<int64_t>> steps) {
  std::vector<Batch> batches;
  for (const auto& ids : steps) {
    batches.push_back(MakeBatch({{"ids", Ids(static_cast<int64_t>(ids.size()), 1, ids)}}));
  }
  return ValueOrDie(InMemoryDatasetFromBatches(std::move(batches)));
}

TEST(KeyStageChannelTest, EvalStageOnlyReadsAndTrainStageOnlyTrains) {
  Model m;
  Build(&m, /*threshold=*/0);
  auto session = ValueOrDie(Session::Create(m.graph));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));

  // Evaluation first: keys 1 and 2 are unknown, read the default, and nothing is inserted.
  KeyStageOptions eval_options;
  eval_options.channel = KeyStageChannel::kEval;
  auto eval_stage = ValueOrDie(KeyStage::Start(*session, Batches({{1, 2}}), eval_options));
  FeedList feeds;
  ASSERT_TRUE(ValueOrDie(eval_stage->Next(&feeds)));
  for (const auto& [name, t] : feeds) {
    EXPECT_EQ(name.name.find("train_lookup"), std::string::npos) << "eval stage fed " << name.name;
  }
  auto out = ValueOrDie(session->Run(feeds, {m.eval_emb}));
  for (float v : out[0].flat<float>()) EXPECT_EQ(v, 0.25f);
  EXPECT_FALSE(session->Run(feeds, {m.train_emb}).ok()) << "train lookup needs the train channel";
  EXPECT_EQ(table->size(), 0);
  EvictHook evict(true, 0, 1);
  EXPECT_EQ(eval_stage->AfterStep(evict, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  eval_stage->Stop();

  // Training: the training stage inserts keys 1 and 2 and feeds only the training lookup.
  auto train_stage = ValueOrDie(KeyStage::Start(*session, Batches({{1, 2}})));
  ASSERT_TRUE(ValueOrDie(train_stage->Next(&feeds)));
  for (const auto& [name, t] : feeds) {
    EXPECT_EQ(name.name.find("eval_lookup"), std::string::npos) << "train stage fed " << name.name;
  }
  ASSERT_TRUE(session->Run(feeds, {m.train_emb}).ok());
  EXPECT_EQ(table->size(), 2);
  train_stage->Stop();

  // Evaluation now reads the trained rows of 1 and 2 and the default for 3, inserting nothing.
  eval_stage = ValueOrDie(KeyStage::Start(*session, Batches({{2, 3}}), eval_options));
  ASSERT_TRUE(ValueOrDie(eval_stage->Next(&feeds)));
  out = ValueOrDie(session->Run(feeds, {m.eval_emb}));
  const std::vector<float> row2 = ValueOrDie(table->ReadRow(2));
  EXPECT_EQ(out[0].flat<float>()[0], row2[0]);
  EXPECT_EQ(out[0].flat<float>()[2], 0.25f);
  EXPECT_EQ(table->size(), 2);
  EXPECT_EQ(table->FindRow(3), EmbeddingTable::kDefaultRow);
}

TEST(KeyStageChannelTest, EvalLookupsCountNoAdmission) {
  Model m;
  Build(&m, /*threshold=*/2);
  auto session = ValueOrDie(Session::Create(m.graph));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  KeyStageOptions eval_options;
  eval_options.channel = KeyStageChannel::kEval;
  auto eval_stage = ValueOrDie(KeyStage::Start(*session, Batches({{5, 5}, {5, 5}}), eval_options));
  FeedList feeds;
  while (ValueOrDie(eval_stage->Next(&feeds))) ASSERT_TRUE(session->Run(feeds, {m.eval_emb}).ok());
  EXPECT_EQ(table->AdmissionCount(5), 0.0f);
  EXPECT_EQ(table->size(), 0);
}

TEST(KeyStageChannelTest, SetThresholdChangesAdmissionBetweenSteps) {
  Model m;
  Build(&m, /*threshold=*/3);
  auto session = ValueOrDie(Session::Create(m.graph));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  auto stage = ValueOrDie(KeyStage::Start(*session, Batches({{7, 8}, {9, 10}}), {}));
  FeedList feeds;
  ASSERT_TRUE(ValueOrDie(stage->Next(&feeds)));
  ASSERT_TRUE(session->Run(feeds, {m.train_emb}).ok());
  EXPECT_EQ(table->size(), 0);  // seen once each: below 3
  // The stage may already have resolved the second batch under the old threshold; set_threshold
  // waits for its resolve lock, so the change is never half-applied.
  ASSERT_TRUE(set_threshold(*session, "t", 1).ok());
  EXPECT_EQ(table->config().access_threshold, 1);
  stage->Stop();
  auto next = ValueOrDie(KeyStage::Start(*session, Batches({{7, 11}}), {}));
  ASSERT_TRUE(ValueOrDie(next->Next(&feeds)));
  ASSERT_TRUE(session->Run(feeds, {m.train_emb}).ok());
  EXPECT_NE(table->FindRow(7), EmbeddingTable::kDefaultRow);
  EXPECT_NE(table->FindRow(11), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(set_threshold(*session, "t", -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(set_threshold(*session, "nope", 1).code(), absl::StatusCode::kNotFound);
}

TEST(KeyStageChannelTest, SetThresholdOnATableWithoutAdmissionIsAnError) {
  Model m;
  Build(&m, /*threshold=*/-1);
  auto session = ValueOrDie(Session::Create(m.graph));
  const Status s = set_threshold(*session, "t", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("\"t\""), std::string::npos) << s;
}

}  // namespace
}  // namespace recsdk
