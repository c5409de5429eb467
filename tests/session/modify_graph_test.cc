// modify_graph_test.cc: the spec's entry points of automatic graph modification
// (src/session/modify_graph.cc): modify_graph_and_start_emb_cache and get_initializer train
// exactly as ModifyGraph + the init op + StartAscPipeline do, dump the graph when asked, and
// name dump_path when it cannot be written.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int64_t kBatch = 32;

std::unique_ptr<Dataset> Batches() {
  SyntheticOptions d;
  d.num_rows = 640;
  d.vocabulary_sizes = {300, 300};
  d.ids_per_feature = 2;
  d.num_dense = 3;
  d.seed = 5;
  return ValueOrDie(BatchRows(ValueOrDie(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
}

struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

// One table looked up by C1 and C2 with modify_graph = true, an MLP on top.
Built BuildModel() {
  Built b;
  Scope s(b.graph.get());
  b.graph->set_random_seed(3);
  SparseTable t = ValueOrDie(
      create_table(s, testing::SmallTable("emb", 4, 4096), SparseOptimizerConfig::LazyAdam(0.01f)));
  Output c1 = DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 2});
  Output c2 = DatasetColumn(s, "C2", DType::kInt64, Shape{kBatch, 2});
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 3});
  SparseLookupOptions o;
  o.modify_graph = true;
  o.combiner = Combiner::kSum;
  std::vector<Output> parts = ValueOrDie(sparse_lookup(s, t, {c1, c2}, o));
  parts.push_back(dense);
  Output logits =
      layers::Mlp(s, ops::Concat(s, parts, 1), {.hidden_units = {8}, .output_units = 1});
  b.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  b.train =
      ops::Group(s, {ValueOrDie(adam.Minimize(s, b.loss)), ValueOrDie(SparseMinimize(s, b.loss))});
  b.init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  return b;
}

std::vector<float> Train(Session& session, KeyStage& stage, const Built& b) {
  std::vector<float> losses;
  FeedList feeds;
  while (ValueOrDie(stage.Next(&feeds))) {
    auto out = ValueOrDie(session.Run(feeds, {b.loss}, {b.train}));
    losses.push_back(out[0].data<float>()[0]);
  }
  return losses;
}

TEST(ModifyGraphTest, SpecEntryPointsTrainAsModifyGraphAndStartAscPipeline) {
  // The old way: ModifyGraph, the init op, StartAscPipeline.
  Built old_way = BuildModel();
  ASSERT_EQ(ValueOrDie(ModifyGraph(old_way.graph.get())).moved_lookups.size(), 1u);
  auto old_session = ValueOrDie(Session::Create(*old_way.graph));
  ASSERT_TRUE(old_session->Run({}, {}, {old_way.init}).ok());
  auto old_stage = ValueOrDie(StartAscPipeline(*old_session, Batches()));
  const std::vector<float> expected = Train(*old_session, *old_stage, old_way);
  ASSERT_EQ(expected.size(), 20u);

  // The guide's way: modify_graph_and_start_emb_cache(dump_graph=True), get_initializer(True)
  // instead of global_variables_initializer.
  Built spec_way = BuildModel();
  const std::string dump = testing::TempDir() + "/modify_graph_test_dump.json";
  std::filesystem::remove(dump);
  ModifyGraphResult r =
      ValueOrDie(modify_graph_and_start_emb_cache(spec_way.graph.get(), true, dump));
  ASSERT_EQ(r.moved_lookups.size(), 1u);
  std::ifstream in(dump);
  std::stringstream text;
  text << in.rdbuf();
  auto loaded = Graph::FromJson(text.str());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->ToJson(), spec_way.graph->ToJson());
  auto session = ValueOrDie(Session::Create(*spec_way.graph));
  auto stage = ValueOrDie(get_initializer(*session, Batches(), true));
  EXPECT_EQ(stage->channel(), KeyStageChannel::kTrain);
  EXPECT_EQ(Train(*session, *stage, spec_way), expected);

  // get_initializer(False): the evaluation channel, and the trained variables stay.
  std::vector<Variable> vars = TrainableVariables(*spec_way.graph);
  ASSERT_FALSE(vars.empty());
  const Tensor before = ValueOrDie(session->Run({}, {vars[0].value()}))[0];
  KeyStageOptions asked;
  asked.channel = KeyStageChannel::kTrain;  // overridden by is_training
  auto eval = ValueOrDie(get_initializer(*session, Batches(), false, asked));
  EXPECT_EQ(eval->channel(), KeyStageChannel::kEval);
  const Tensor after = ValueOrDie(session->Run({}, {vars[0].value()}))[0];
  ASSERT_EQ(before.num_elements(), after.num_elements());
  for (int64_t i = 0; i < before.num_elements(); ++i) {
    EXPECT_EQ(before.data<float>()[i], after.data<float>()[i]);
  }
}

TEST(ModifyGraphTest, UnwritableDumpPathIsNamed) {
  Built b = BuildModel();
  const std::string bad = testing::TempDir() + "/no_such_dir/for/the/dump.json";
  auto r = modify_graph_and_start_emb_cache(b.graph.get(), true, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find(bad), std::string::npos) << r.status();
  // Without dump_graph nothing is written and the modification is done.
  EXPECT_EQ(ValueOrDie(modify_graph_and_start_emb_cache(b.graph.get())).moved_lookups.size(), 1u);
}

}  // namespace
}  // namespace recsdk
