// group_lookups_test.cc: the lookups of one table in a step share one dedup and one resolve,
// in the graph (src/session/group_lookups.cc, src/table/table_key_work.cc) and in the key stage
// (key_stage.cc): admission counts a key once over all of them and every lookup reads the same
// row; a lookup that depends on another stays separate; the 128-lookup limit spans calls.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::KeyMode;
using testing::KeyModeName;
using testing::MakeBatch;
using testing::RunBatches;
using testing::SmallTable;
using testing::ValueOrDie;

constexpr float kDefault = 0.5f;

// Two separate sparse_lookup calls of one table with access_threshold 2: key 7 occurs once in
// each lookup of the first batch, so the batch holds it twice and admits it; both lookups must
// read its row. Resolving the lookups one after the other would give the first the default.
TEST(GroupLookupsTest, SeparateLookupsOfATableAdmitAndReadKeysTogether) {
  for (KeyMode mode : {KeyMode::kInGraph, KeyMode::kKeyStage}) {
    SCOPED_TRACE(KeyModeName(mode));
    Graph g;
    Scope s(&g);
    TableConfig c = SmallTable("t", 2);
    c.access_threshold = 2;
    c.serving_default_value = kDefault;
    SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
    SparseLookupOptions oa, ob;
    oa.name = "a";
    ob.name = "b";
    oa.modify_graph = ob.modify_graph = mode == KeyMode::kKeyStage;
    Output a =
        ValueOrDie(sparse_lookup(s, t, DatasetColumn(s, "A", DType::kInt64, Shape{2, 1}), oa));
    Output b =
        ValueOrDie(sparse_lookup(s, t, DatasetColumn(s, "B", DType::kInt64, Shape{2, 1}), ob));
    std::vector<Batch> batches = {
        MakeBatch({{"A", Ids(2, 1, {7, 8})}, {"B", Ids(2, 1, {7, 9})}}),
        MakeBatch({{"A", Ids(2, 1, {8, 9})}, {"B", Ids(2, 1, {10, 10})}})};
    std::unique_ptr<Session> session;
    auto steps = RunBatches(mode, &g, batches, {a, b}, {}, &session);
    ASSERT_EQ(steps.size(), 2u);
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
    // Batch 1: 7 admitted (two occurrences over both lookups); 8 and 9 (one each) wait.
    const std::vector<float> row7 = ValueOrDie(table->ReadRow(7));
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(steps[0][0].data<float>()[d], row7[d]) << "lookup a, key 7";
      EXPECT_EQ(steps[0][1].data<float>()[d], row7[d]) << "lookup b, key 7";
      EXPECT_EQ(steps[0][0].data<float>()[2 + d], kDefault) << "lookup a, key 8";
      EXPECT_EQ(steps[0][1].data<float>()[2 + d], kDefault) << "lookup b, key 9";
    }
    // Batch 2: 8 and 9 reach 2 across batches, 10 twice in lookup b: all admitted and read.
    for (int64_t key : {8, 9, 10}) {
      EXPECT_NE(table->FindRow(key), EmbeddingTable::kDefaultRow) << key;
    }
    EXPECT_EQ(steps[1][0].data<float>()[0], ValueOrDie(table->ReadRow(8))[0]);
    EXPECT_EQ(steps[1][0].data<float>()[2], ValueOrDie(table->ReadRow(9))[0]);
    EXPECT_EQ(steps[1][1].data<float>()[0], ValueOrDie(table->ReadRow(10))[0]);
    EXPECT_EQ(table->size(), 4);
  }
}

TEST(GroupLookupsTest, InGraphLookupsOfATableBecomeOneGroupPerMode) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseTable u = ValueOrDie(create_table(s, SmallTable("u", 2), SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{2, 2});
  SparseLookupOptions eval;
  eval.is_train = false;
  eval.name = "eval";
  std::vector<SparseLookupOptions> train(3);
  for (int i = 0; i < 3; ++i) train[i].name = "train" + std::to_string(i);
  train[2].use_dynamic = false;
  train[2].send_count = 6;
  Output t0 = ValueOrDie(sparse_lookup(s, t, ids, train[0]));
  Output e = ValueOrDie(sparse_lookup(s, t, ids, eval));
  Output t1 = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 3, {5, 6, 5})), train[1]));
  Output t2 = ValueOrDie(sparse_lookup(s, t, ids, train[2]));
  Output other = ValueOrDie(sparse_lookup(s, u, ids));
  auto session = ValueOrDie(Session::Create(g));
  int groups = 0, forwards = 0;
  for (const Node* n : session->graph().nodes()) {
    groups += n->type() == "TableLookupGroup";
    forwards += n->type() == "TableLookupForward";
  }
  // One group for the three training lookups of t; the eval lookup and u's stay single.
  EXPECT_EQ(groups, 1);
  EXPECT_EQ(forwards, 3);
  const Node* keys2 = session->graph().FindNode("train2/keys");
  ASSERT_NE(keys2, nullptr);
  EXPECT_EQ(keys2->output_shape(0), (Shape{6}));
  // The user's graph is untouched, and the session's is still in topological id order.
  EXPECT_EQ(g.FindNode("train2/keys")->type(), "SparseLookup");
  for (const Node* n : session->graph().nodes()) {
    for (const Output& in : n->inputs()) EXPECT_LT(in.node->id(), n->id()) << n->name();
  }
  auto out = ValueOrDie(session->Run({{ids, Ids(2, 2, {1, 2, 2, 5})}},
                                     {t0, e, t1, t2, other, keys2->output(0), "train1/keys:0"}));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  EXPECT_EQ(table->size(), 4);  // 1, 2, 5, 6
  for (int64_t k : {1, 2, 5, 6}) EXPECT_NE(table->FindRow(k), EmbeddingTable::kDefaultRow) << k;
  // Each lookup keeps its own unique rows: train2 has 3 keys padded to send_count 6, train1 two.
  const Tensor& rows2 = out[5];
  ASSERT_EQ(rows2.num_elements(), 6);
  EXPECT_EQ(static_cast<uint32_t>(rows2.data<int32_t>()[0]), table->FindRow(1));
  EXPECT_EQ(static_cast<uint32_t>(rows2.data<int32_t>()[2]), table->FindRow(5));
  EXPECT_EQ(static_cast<uint32_t>(rows2.data<int32_t>()[3]), EmbeddingTable::kPaddingRow);
  EXPECT_EQ(out[6].num_elements(), 2);
  for (int i = 0; i < 4; ++i) {
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(out[0].data<float>()[i * 2 + d], out[3].data<float>()[i * 2 + d]);
    }
  }
  EXPECT_EQ(out[2].data<float>()[0], ValueOrDie(table->ReadRow(5))[0]);
  EXPECT_EQ(out[2].data<float>()[2], ValueOrDie(table->ReadRow(6))[0]);
}

TEST(GroupLookupsTest, GroupedLookupsTrainEachRowOnceWithTheSummedGradient) {
  // Key 3 occurs in two separate lookups; Adagrad tells one update with the sum from two.
  Graph g;
  Scope s(&g);
  SparseTable t =
      ValueOrDie(create_table(s, SmallTable("t", 1), SparseOptimizerConfig::Adagrad(0.1f, 0.5f)));
  SparseLookupOptions second;
  second.name = "second";
  Output a = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 2, {3, 4}))));
  Output b = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {3})), second));
  Node* train =
      ValueOrDie(SparseMinimize(s, ops::Add(s, ops::ReduceSum(s, a), ops::ReduceSum(s, b))));
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {GetOrCreateGlobalStep(s).initializer()}).status());
  RECSDK_ASSERT_OK(session->Run({}, {}, {train}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  EXPECT_FLOAT_EQ(ValueOrDie(table->ReadRow(3))[1], 0.5f + 4.0f);
  EXPECT_FLOAT_EQ(ValueOrDie(table->ReadRow(4))[1], 0.5f + 1.0f);
}

TEST(GroupLookupsTest, ALookupWhoseIdsDependOnAnotherStaysSeparate) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 1);
  c.initializer = Initializer::Constant(0.0);  // ids derived from embeddings stay the given ones
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  Output first = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 1, {1, 2}))));
  // ids of the second lookup = the first lookup's embeddings (zeros) + {7, 8}: it must run after.
  Output derived = ops::Add(s, ops::Cast(s, ops::Reshape(s, first, {2, 1}), DType::kInt64),
                            ops::Const(s, Ids(2, 1, {7, 8})));
  SparseLookupOptions o;
  o.name = "second";
  Output second = ValueOrDie(sparse_lookup(s, t, derived, o));
  SparseLookupOptions third_o;
  third_o.name = "third";
  Output third = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {9})), third_o));
  ASSERT_TRUE(s.ok()) << s.status();
  auto session = ValueOrDie(Session::Create(g));
  // "first" and "third" are independent and form a group; "second" depends on "first".
  EXPECT_EQ(session->graph().FindNode("second/keys")->type(), "SparseLookup");
  EXPECT_EQ(session->graph().FindNode("third/keys")->type(), "TableLookupForward");
  auto out = ValueOrDie(session->Run({}, {first, second, third}));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  EXPECT_EQ(table->size(), 5);
  for (int64_t k : {1, 2, 7, 8, 9}) EXPECT_NE(table->FindRow(k), EmbeddingTable::kDefaultRow) << k;
}

TEST(GroupLookupsTest, AtMost128LookupsPerTableAcrossCalls) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{1, 1});
  // 100 features in one call, then 28 single-feature calls: 128 in all.
  ASSERT_TRUE(sparse_lookup(s, t, std::vector<Output>(100, ids)).ok());
  for (int i = 0; i < 28; ++i) {
    SparseLookupOptions o;
    o.name = "single" + std::to_string(i);
    ASSERT_TRUE(sparse_lookup(s, t, ids, o).ok()) << i;
  }
  SparseLookupOptions o;
  o.name = "one_too_many";
  auto r = sparse_lookup(s, t, ids, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("table \"t\" would be looked up 129 times"), std::string::npos) << msg;
  EXPECT_NE(msg.find("128 features in 29 earlier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 128"), std::string::npos) << msg;
  // Another table has its own budget, and one call of 129 features is refused outright.
  SparseTable u = ValueOrDie(create_table(s, SmallTable("u", 2), SparseOptimizerConfig::SGD(0.1f)));
  EXPECT_TRUE(sparse_lookup(s, u, ids).ok());
  EXPECT_FALSE(sparse_lookup(s, u, std::vector<Output>(129, ids)).ok());
}

}  // namespace
}  // namespace recsdk
