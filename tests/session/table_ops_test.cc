// table_ops_test.cc: tests of the table ops in the graph (src/session/table_ops.cc): gradients
// against finite differences, repeated ids, eval mode, is_grad=false, send_count, several
// features and lookups of one table. Single-threaded.
#include <cmath>
#include <cstring>
#include <optional>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::KeyMode;
using testing::KeyModeName;
using testing::SmallTable;
using testing::ValueOrDie;

struct Model {
  Graph graph;
  SparseTable table;
  Output emb;
  Output loss;
  std::vector<SparseGrad> grads;
};

// loss = sum(emb * w) + sum(emb^2), w a fixed pattern: a gradient that differs per position.
// With `dim`, the lookup reads that prefix of the rows (SparseLookupOptions::dim).
void BuildQuadratic(Model* m, const Tensor& ids, std::optional<Combiner> combiner,
                    const SparseOptimizerConfig& opt = SparseOptimizerConfig::SGD(1.0f),
                    std::optional<int64_t> dim = std::nullopt) {
  Scope s(&m->graph);
  m->table = ValueOrDie(create_table(s, SmallTable("t", 3), opt));
  SparseLookupOptions o;
  o.combiner = combiner;
  o.dim = dim;
  m->emb = ValueOrDie(sparse_lookup(s, m->table, ops::Const(s, ids), o));
  const Shape& shape = m->emb.shape();
  std::vector<float> w(shape.num_elements());
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3f * static_cast<float>(i % 7) - 0.8f;
  Output wt = ops::Const(s, ValueOrDie(Tensor::FromValues<float>(shape, absl::MakeConstSpan(w))));
  m->loss = ops::Add(s, ops::ReduceSum(s, ops::Mul(s, m->emb, wt)),
                     ops::ReduceSum(s, ops::Square(s, m->emb)));
  m->grads = ValueOrDie(ComputeSparseGradients(s, m->loss));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
}

// Finite differences of the loss w.r.t. each element of each unique row, against the summed
// per-row gradient the graph computes. With a `dim` prefix, the columns past it must have a zero
// gradient both ways (the loss does not move when they do).
void CheckGradient(std::optional<Combiner> combiner, std::optional<int64_t> dim = std::nullopt) {
  Model m;
  // Repeated ids within and across samples.
  BuildQuadratic(&m, Ids(2, 3, {1, 2, 1, 3, 1, 5}), combiner, SparseOptimizerConfig::SGD(1.0f),
                 dim);
  if (dim.has_value()) {
    ASSERT_EQ(m.emb.shape().dims().back(), *dim);
  }
  auto session = ValueOrDie(Session::Create(m.graph));
  ASSERT_EQ(m.grads.size(), 1u);
  auto out = ValueOrDie(session->Run({}, {m.loss, m.grads[0].unique_rows, m.grads[0].summed}));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  ASSERT_EQ(table->size(), 4);
  const Tensor& rows = out[1];
  const Tensor& summed = out[2];
  ASSERT_EQ(rows.num_elements(), 4);
  const float eps = 1e-2f;
  for (int64_t u = 0; u < rows.num_elements(); ++u) {
    const uint32_t row = static_cast<uint32_t>(rows.data<int32_t>()[u]);
    for (int d = 0; d < 3; ++d) {
      // SGD with learning rate 1: applying gradient -delta adds delta to the element.
      auto nudge = [&](float delta) {
        float g[3] = {0, 0, 0};
        g[d] = -delta;
        EXPECT_TRUE(table->ApplyGradients(absl::MakeConstSpan(&row, 1), g, 1).ok());
      };
      nudge(eps);
      const double plus = ValueOrDie(session->Run({}, {m.loss}))[0].scalar<float>();
      nudge(-2 * eps);
      const double minus = ValueOrDie(session->Run({}, {m.loss}))[0].scalar<float>();
      nudge(eps);
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = summed.data<float>()[u * 3 + d];
      EXPECT_NEAR(numeric, analytic, 2e-3 * std::max(1.0, std::abs(analytic)))
          << "row " << u << " dim " << d;
    }
  }
}

TEST(TableOpsTest, GradientMatchesFiniteDifferencesUnpooled) { CheckGradient(std::nullopt); }
TEST(TableOpsTest, GradientMatchesFiniteDifferencesSum) { CheckGradient(Combiner::kSum); }
TEST(TableOpsTest, GradientMatchesFiniteDifferencesMean) { CheckGradient(Combiner::kMean); }
TEST(TableOpsTest, GradientMatchesFiniteDifferencesSqrtn) { CheckGradient(Combiner::kSqrtn); }
// sparse_lookup(..., dim=2) of a dim-3 table: a prefix of the rows, trained only in its columns.
TEST(TableOpsTest, DimPrefixGradientMatchesFiniteDifferencesUnpooled) {
  CheckGradient(std::nullopt, 2);
}
TEST(TableOpsTest, DimPrefixGradientMatchesFiniteDifferencesMean) {
  CheckGradient(Combiner::kMean, 1);
}
TEST(TableOpsTest, DimEqualToTheTablesIsTheWholeRow) { CheckGradient(Combiner::kSum, 3); }

TEST(TableOpsTest, DimPrefixReadsTheRowsFirstColumnsAndTrainsOnlyThem) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 3);
  c.padding_keys = {-1};
  c.padding_keys_mask = true;
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.5f)));
  Output ids = ops::Const(s, Ids(2, 2, {4, 6, -1, 4}));
  SparseLookupOptions whole;
  whole.is_train = false;
  whole.name = "whole";
  SparseLookupOptions prefix;
  prefix.dim = 2;
  Output full = ValueOrDie(sparse_lookup(s, t, ids, whole));
  Output emb = ValueOrDie(sparse_lookup(s, t, ids, prefix));
  EXPECT_EQ(emb.shape(), (Shape{2, 2, 2}));
  // PaddingMask sees through the prefix.
  Output mask = ValueOrDie(PaddingMask(emb));
  EXPECT_EQ(mask.shape(), (Shape{2, 2}));
  // A Slice that drops samples is not a lookup result: it has no mask of the gather's shape.
  EXPECT_EQ(PaddingMask(ops::Slice(s, emb, {1, 0, 0}, {-1, -1, -1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PaddingMask(ops::Slice(s, full, {1, 0, 0}, {-1, -1, -1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  Node* train = ValueOrDie(SparseMinimize(s, ops::ReduceSum(s, emb)));
  Node* init = GetOrCreateGlobalStep(s).initializer();
  ASSERT_TRUE(s.ok()) << s.status();
  auto session = ValueOrDie(Session::Create(g));
  ASSERT_TRUE(session->Run({}, {}, {init}).ok());
  // The first run inserts the rows (no update); then whole rows before and after one step.
  auto read = ValueOrDie(session->Run({}, {emb, mask}));
  const Tensor before = ValueOrDie(session->Run({}, {full}))[0];
  const Status trained = session->Run({}, {}, {train}, nullptr);
  ASSERT_TRUE(trained.ok()) << trained;
  const Tensor after = ValueOrDie(session->Run({}, {full}))[0];
  const std::vector<float> want_mask = {1, 1, 0, 1};
  EXPECT_EQ(std::vector<float>(read[1].data<float>(), read[1].data<float>() + 4), want_mask);
  // ids 4, 6, -1 (padding: zeros, no row), 4: columns 0-1 are the prefix and move by -0.5 per
  // occurrence of the key (4 twice); column 2 never moves.
  const float occurrences[4] = {2, 1, 0, 2};
  for (int i = 0; i < 4; ++i) {
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(read[0].data<float>()[i * 2 + d], before.data<float>()[i * 3 + d]) << i;
      EXPECT_FLOAT_EQ(after.data<float>()[i * 3 + d],
                      before.data<float>()[i * 3 + d] - 0.5f * occurrences[i])
          << "id " << i << " col " << d;
    }
    EXPECT_EQ(after.data<float>()[i * 3 + 2], before.data<float>()[i * 3 + 2]) << i;
  }
  EXPECT_NE(before.data<float>()[2], 0.0f);  // a real initialised value, not a padding zero
}

// A prefix lookup moved to the key stage (ModifyGraph) reads and trains as the in-graph one.
TEST(TableOpsTest, DimPrefixWorksInBothKeyModes) {
  std::vector<std::vector<Tensor>> results;
  for (KeyMode mode : {KeyMode::kInGraph, KeyMode::kKeyStage}) {
    SCOPED_TRACE(KeyModeName(mode));
    Graph g;
    Scope s(&g);
    SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 4), SparseOptimizerConfig::SGD(1)));
    Output ids = DatasetColumn(s, "ids", DType::kInt64, Shape{3, 2});
    SparseLookupOptions o;
    o.modify_graph = mode == KeyMode::kKeyStage;
    o.combiner = Combiner::kSum;
    o.dim = 3;
    Output emb = ValueOrDie(sparse_lookup(s, t, ids, o));
    Node* train = ValueOrDie(SparseMinimize(s, ops::ReduceSum(s, ops::Square(s, emb))));
    ASSERT_TRUE(s.ok()) << s.status();
    Batch batch = testing::MakeBatch({{"ids", Ids(3, 2, {5, 1, 5, 7, 2, 9})}});
    std::unique_ptr<Session> session;
    auto steps = testing::RunBatches(mode, &g, {batch, batch}, {emb}, {train}, &session,
                                     {GetOrCreateGlobalStep(s).initializer()});
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[1][0].shape(), (Shape{3, 3}));
    const std::vector<float> row = ValueOrDie(ValueOrDie(LookupTable(*session, "t"))->ReadRow(5));
    results.push_back({steps[0][0], steps[1][0],
                       ValueOrDie(Tensor::FromValues<float>(Shape{4}, absl::MakeConstSpan(row)))});
  }
  ASSERT_EQ(results.size(), 2u);
  for (size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_EQ(results[0][i].TotalBytes(), results[1][i].TotalBytes());
    EXPECT_EQ(
        std::memcmp(results[0][i].raw_data(), results[1][i].raw_data(), results[0][i].TotalBytes()),
        0)
        << i;
  }
}

TEST(TableOpsTest, DimOutsideOneToTheTablesDimIsRefusedNamingBoth) {
  for (int64_t dim : {int64_t{0}, int64_t{-1}, int64_t{4}}) {
    Graph g;
    Scope s(&g);
    SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 3), SparseOptimizerConfig::SGD(1)));
    SparseLookupOptions o;
    o.dim = dim;
    auto r = sparse_lookup(s, t, ops::Placeholder(s, DType::kInt64, Shape{2, 1}), o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << dim;
    EXPECT_NE(r.status().message().find("dim " + std::to_string(dim) + " is outside [1, 3]"),
              std::string_view::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("table \"t\""), std::string_view::npos) << r.status();
    // Nothing was added: the table still takes its full quota of lookups.
    int lookups = 0;
    for (const Node* n : g.nodes()) lookups += n->type() == "TableGather" ? 1 : 0;
    EXPECT_EQ(lookups, 0);
  }
}

TEST(TableOpsTest, LookupShapesAndValues) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 4), SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{Shape::kUnknownDim, 2});
  Output flat = ValueOrDie(sparse_lookup(s, t, ids));
  SparseLookupOptions pooled;
  pooled.combiner = Combiner::kMean;
  pooled.name = "pooled";
  Output mean = ValueOrDie(sparse_lookup(s, t, ids, pooled));
  EXPECT_EQ(flat.shape(), (Shape{Shape::kUnknownDim, 2, 4}));
  EXPECT_EQ(mean.shape(), (Shape{Shape::kUnknownDim, 4}));
  auto session = ValueOrDie(Session::Create(g));
  auto out = ValueOrDie(session->Run({{ids, Ids(2, 2, {7, 8, 8, 8})}}, {flat, mean}));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  const std::vector<float> r7 = ValueOrDie(table->ReadRow(7));
  const std::vector<float> r8 = ValueOrDie(table->ReadRow(8));
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(out[0].data<float>()[d], r7[d]);
    EXPECT_EQ(out[0].data<float>()[4 + d], r8[d]);
    EXPECT_FLOAT_EQ(out[1].data<float>()[d], (r7[d] + r8[d]) / 2);
    EXPECT_FLOAT_EQ(out[1].data<float>()[4 + d], r8[d]);
  }
}

TEST(TableOpsTest, RepeatedIdsUpdateOnceWithSummedGradient) {
  // Adagrad tells one update with the sum (acc += (3g)^2) from three updates (acc += 3 g^2).
  Graph g;
  Scope s(&g);
  SparseTable t =
      ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::Adagrad(0.1f, 0.5f)));
  Output emb = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 2, {4, 4, 4, 6}))));
  Output loss = ops::ReduceSum(s, emb);
  Node* train = ValueOrDie(SparseMinimize(s, loss));
  Node* init = GlobalVariablesInitializer(s);
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {init}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  auto before = ValueOrDie(session->Run({}, {emb}));
  const float w4 = before[0].data<float>()[0];
  RECSDK_ASSERT_OK(session->Run({}, {}, {train}).status());
  const std::vector<float> row4 = ValueOrDie(table->ReadRow(4));  // [w0, w1, acc0, acc1]
  EXPECT_FLOAT_EQ(row4[2], 0.5f + 9.0f);
  EXPECT_NEAR(row4[0], w4 - 0.1f * 3.0f / std::sqrt(9.5f), 1e-6);
  const std::vector<float> row6 = ValueOrDie(table->ReadRow(6));
  EXPECT_FLOAT_EQ(row6[2], 0.5f + 1.0f);
}

TEST(TableOpsTest, AdagradWithZeroAccumulatorAndEpsilonTrainsLikePyTorch) {
  // PyTorch's Adagrad: acc starts at 0, w -= lr g / (sqrt(acc) + 1e-10). The options travel
  // through the graph's table handle to the Session's table.
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(
      create_table(s, SmallTable("t", 2), SparseOptimizerConfig::Adagrad(0.1f, 0.0f, 1e-10f)));
  Output emb = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 2, {4, 4, 4, 6}))));
  Node* train = ValueOrDie(SparseMinimize(s, ops::ReduceSum(s, emb)));
  Node* init = GlobalVariablesInitializer(s);
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {init}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  auto before = ValueOrDie(session->Run({}, {emb}));
  const float w4 = before[0].data<float>()[0];
  RECSDK_ASSERT_OK(session->Run({}, {}, {train}).status());
  const std::vector<float> row4 = ValueOrDie(table->ReadRow(4));  // [w0, w1, acc0, acc1]
  EXPECT_FLOAT_EQ(row4[2], 9.0f);
  EXPECT_NEAR(row4[0], w4 - 0.1f * 3.0f / (3.0f + 1e-10f), 1e-6);
  EXPECT_TRUE(std::isfinite(row4[1]));
}

TEST(TableOpsTest, SeveralFeaturesAndLookupsOfOneTableUpdateEachRowOnce) {
  Graph g;
  Scope s(&g);
  SparseTable t =
      ValueOrDie(create_table(s, SmallTable("t", 1), SparseOptimizerConfig::Adagrad(0.1f, 0.5f)));
  // One lookup of two features (one dedup pass), and a second lookup of the same table.
  std::vector<Output> two = ValueOrDie(sparse_lookup(
      s, t, std::vector<Output>{ops::Const(s, Ids(1, 2, {1, 2})), ops::Const(s, Ids(1, 1, {1}))}));
  SparseLookupOptions other;
  other.name = "other";
  Output third = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {1})), other));
  Output loss = ops::Add(s, ops::Add(s, ops::ReduceSum(s, two[0]), ops::ReduceSum(s, two[1])),
                         ops::ReduceSum(s, third));
  Node* train = ValueOrDie(SparseMinimize(s, loss));
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {GetOrCreateGlobalStep(s).initializer()}).status());
  RECSDK_ASSERT_OK(session->Run({}, {}, {train}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  // Key 1 appears three times over both lookups: one update with gradient 3.
  EXPECT_FLOAT_EQ(ValueOrDie(table->ReadRow(1))[1], 0.5f + 9.0f);
  EXPECT_FLOAT_EQ(ValueOrDie(table->ReadRow(2))[1], 0.5f + 1.0f);
}

TEST(TableOpsTest, EvalModeNeitherInsertsNorCounts) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 2);
  c.access_threshold = 2;
  c.serving_default_value = 0.25f;
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{1, 2});
  SparseLookupOptions eval;
  eval.is_train = false;
  eval.name = "eval";
  Output e = ValueOrDie(sparse_lookup(s, t, ids, eval));
  SparseLookupOptions train;
  train.name = "train";
  Output tr = ValueOrDie(sparse_lookup(s, t, ids, train));
  auto session = ValueOrDie(Session::Create(g));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  for (int i = 0; i < 3; ++i) {
    auto out = ValueOrDie(session->Run({{ids, Ids(1, 2, {10, 11})}}, {e}));
    EXPECT_EQ(out[0].data<float>()[0], 0.25f);
  }
  EXPECT_EQ(table->size(), 0);
  EXPECT_EQ(table->AdmissionCount(10), 0.0f);
  // Training lookups count: 10 occurs twice in one batch and is admitted (threshold 2).
  RECSDK_ASSERT_OK(session->Run({{ids, Ids(1, 2, {10, 10})}}, {tr}).status());
  EXPECT_EQ(table->size(), 1);
  EXPECT_NE(table->FindRow(10), EmbeddingTable::kDefaultRow);
  // An eval lookup now reads the trained row, and still does not insert 11.
  auto out = ValueOrDie(session->Run({{ids, Ids(1, 2, {10, 11})}}, {e}));
  EXPECT_EQ(out[0].data<float>()[0], ValueOrDie(table->ReadRow(10))[0]);
  EXPECT_EQ(out[0].data<float>()[2], 0.25f);
  EXPECT_EQ(table->size(), 1);
}

TEST(TableOpsTest, IsGradFalseLookupDoesNotTrain) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.5f)));
  Output a = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {1}))));
  SparseLookupOptions frozen;
  frozen.is_grad = false;
  frozen.name = "frozen";
  Output b = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {2})), frozen));
  Output loss = ops::Add(s, ops::ReduceSum(s, a), ops::ReduceSum(s, b));
  std::vector<SparseGrad> grads = ValueOrDie(ComputeSparseGradients(s, loss));
  ASSERT_EQ(grads.size(), 1u);
  Node* train = ValueOrDie(ApplySparseGradients(s, grads));
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {GetOrCreateGlobalStep(s).initializer()}).status());
  auto before = ValueOrDie(session->Run({}, {a, b}));
  RECSDK_ASSERT_OK(session->Run({}, {}, {train}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  EXPECT_FLOAT_EQ(ValueOrDie(table->ReadRow(1))[0], before[0].data<float>()[0] - 0.5f);
  EXPECT_EQ(ValueOrDie(table->ReadRow(2))[0], before[1].data<float>()[0]);
}

// The sparse_lookups collection belongs to the graph (a loaded one too): a name in it that is not
// a lookup result is an error naming it, not a node whose inputs are indexed as a lookup's.
TEST(TableOpsTest, SparseGradientsRefuseACollectionEntryThatIsNoLookup) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.5f)));
  Output a = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {1}))));
  Output loss = ops::ReduceSum(s.WithOpName("loss"), a);
  g.AddToCollection(kSparseLookups, "loss");
  const auto grads = ComputeSparseGradients(s, loss);
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(grads.status().message())
                .find("collection \"sparse_lookups\" names node \"loss\" (ReduceSum)"),
            std::string::npos)
      << grads.status();
}

TEST(TableOpsTest, SendCountExceededNamesTableCountAndLimit) {
  Graph g;
  Scope s(&g);
  SparseTable t =
      ValueOrDie(create_table(s, SmallTable("user_table", 2), SparseOptimizerConfig::SGD(0.1f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{2, 2});
  SparseLookupOptions o;
  o.use_dynamic = false;
  o.send_count = 3;
  Output e = ValueOrDie(sparse_lookup(s, t, ids, o));
  EXPECT_EQ(e.node->input(1).shape(), (Shape{3}));
  auto session = ValueOrDie(Session::Create(g));
  // Three unique keys fit (padded to send_count), four do not.
  auto ok = ValueOrDie(session->Run({{ids, Ids(2, 2, {1, 2, 3, 1})}}, {e.node->input(1)}));
  EXPECT_EQ(ok[0].num_elements(), 3);
  auto bad = session->Run({{ids, Ids(2, 2, {1, 2, 3, 4})}}, {e});
  ASSERT_FALSE(bad.ok());
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find("user_table"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 unique keys"), std::string::npos) << msg;
  EXPECT_NE(msg.find("send_count is 3"), std::string::npos) << msg;
  // Static shape without send_count is refused when building.
  SparseLookupOptions none;
  none.use_dynamic = false;
  EXPECT_FALSE(sparse_lookup(s, t, ids, none).ok());
}

TEST(TableOpsTest, MaskedRowsReadZerosAndCountNoAdmission) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 2);
  c.access_threshold = 1;
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions o;
  o.mask = ops::Const(s, Tensor::Vector<float>({1.0f, 0.0f}));
  o.combiner = Combiner::kMean;
  Output e = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 1, {5, 99})), o));
  auto session = ValueOrDie(Session::Create(g));
  auto out = ValueOrDie(session->Run({}, {e}));
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
  EXPECT_EQ(table->FindRow(99), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(table->AdmissionCount(99), 0.0f);
  EXPECT_NE(table->FindRow(5), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(out[0].data<float>()[2], 0.0f);
  EXPECT_EQ(out[0].data<float>()[3], 0.0f);
}

TEST(TableOpsTest, EvalLookupIsSafeBesideATrainingLookupThatGrowsTheIndex) {
  // Two independent lookups of one dynamically expanding table run at once (DNN_V100:2): the
  // evaluation one reads 400k known keys while the training one inserts a few new keys, just
  // enough to make the key index rehash (the index then fills a new slot array and frees the old
  // one). Unless the eval read excludes the training resolve, it sees empty or freed slots:
  // known keys read the default value, or the process crashes. Each round is a fresh session, so
  // every round rehashes.
  constexpr int64_t kKnown = 400000, kFresh = 1000, kRounds = 16;
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 4, 8);
  c.use_dynamic_expansion = true;
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGDByAddr(0.1f)));
  Output known = ops::Placeholder(s, DType::kInt64, Shape{1, kKnown});
  Output fresh = ops::Placeholder(s, DType::kInt64, Shape{1, Shape::kUnknownDim});
  SparseLookupOptions eval;
  eval.is_train = false;
  eval.name = "eval";
  Output read = ValueOrDie(sparse_lookup(s, t, known, eval));
  SparseLookupOptions train;
  train.name = "train";
  Output insert = ValueOrDie(sparse_lookup(s, t, fresh, train));
  SessionConfig config;
  config.stream_max_parallel_num = "DNN_V100:2";
  std::vector<int64_t> keys(kKnown), next(kFresh);
  for (int64_t i = 0; i < kKnown; ++i) keys[i] = i * 7919;
  for (int64_t i = 0; i < kFresh; ++i) next[i] = -(i + 1);
  for (int64_t round = 0; round < kRounds; ++round) {
    auto session = ValueOrDie(Session::Create(g, config));
    RECSDK_ASSERT_OK(session->Run({{fresh, Ids(1, kKnown, keys)}}, {insert}).status());
    const Tensor want = ValueOrDie(session->Run({{known, Ids(1, kKnown, keys)}}, {read}))[0];
    auto out = ValueOrDie(session->Run(
        {{known, Ids(1, kKnown, keys)}, {fresh, Ids(1, kFresh, next)}}, {read, insert}));
    ASSERT_EQ(std::memcmp(out[0].data<float>(), want.data<float>(), kKnown * 4 * sizeof(float)), 0)
        << "round " << round;
    EXPECT_EQ(ValueOrDie(LookupTable(*session, "t"))->size(), kKnown + kFresh);
  }
}

TEST(TableOpsTest, PaddingMaskMarksPaddingKeysInBothModes) {
  for (KeyMode mode : {KeyMode::kInGraph, KeyMode::kKeyStage}) {
    SCOPED_TRACE(KeyModeName(mode));
    Graph g;
    Scope s(&g);
    TableConfig c = SmallTable("t", 2);
    c.padding_keys = {-1, 0};
    c.padding_keys_mask = true;
    SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.5f)));
    Output ids = DatasetColumn(s, "ids", DType::kInt64, Shape{3, 2});
    SparseLookupOptions o;
    o.modify_graph = mode == KeyMode::kKeyStage;
    o.mask = DatasetColumn(s, "mask", DType::kFloat32, Shape{3});
    Output emb = ValueOrDie(sparse_lookup(s, t, ids, o));
    SparseLookupOptions pooled = o;
    pooled.name = "pooled";
    pooled.combiner = Combiner::kMean;
    Output mean = ValueOrDie(sparse_lookup(s, t, ids, pooled));
    Output mask = ValueOrDie(PaddingMask(emb));
    Output pooled_mask = ValueOrDie(PaddingMask(mean));
    EXPECT_EQ(mask.shape(), (Shape{3, 2}));
    EXPECT_EQ(mask.dtype(), DType::kFloat32);
    // The mask takes part in the model (it has no gradient) while the embeddings train.
    Output loss = ops::Add(s, ops::ReduceSum(s, emb), ops::ReduceSum(s, ops::Mul(s, mean, mean)));
    loss = ops::Add(s, loss, ops::ReduceSum(s, mask));
    Node* train = ValueOrDie(SparseMinimize(s, loss));
    ASSERT_TRUE(s.ok()) << s.status();
    // Sample 2 is masked out: its ids read zeros and its mask is 0 whatever the keys.
    Batch batch = testing::MakeBatch(
        {{"ids", Ids(3, 2, {5, -1, 0, 7, 7, 9})}, {"mask", Tensor::Vector<float>({1, 1, 0})}});
    std::unique_ptr<Session> session;
    auto steps = testing::RunBatches(mode, &g, {batch}, {mask, pooled_mask, emb, loss}, {train},
                                     &session, {GetOrCreateGlobalStep(s).initializer()});
    ASSERT_EQ(steps.size(), 1u);
    const std::vector<float> want = {1, 0, 0, 1, 0, 0};
    for (int i : {0, 1}) {
      ASSERT_EQ(steps[0][i].num_elements(), 6);
      EXPECT_EQ(std::vector<float>(steps[0][i].data<float>(), steps[0][i].data<float>() + 6), want)
          << (i == 0 ? "unpooled" : "pooled");
    }
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "t"));
    EXPECT_EQ(table->size(), 2);  // 5 and 7; padding keys and the masked sample get no row
    EXPECT_EQ(table->FindRow(9), EmbeddingTable::kDefaultRow);
    EXPECT_EQ(steps[0][2].data<float>()[2], 0.0f);  // padding key -1 reads zeros
  }
}

TEST(TableOpsTest, PaddingMaskNeedsPaddingKeysMaskAndALookupResult) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("no_mask", 2);
  c.padding_keys = {-1};
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.5f)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{1, 2});
  Output emb = ValueOrDie(sparse_lookup(s, t, ids));
  EXPECT_EQ(emb.node->num_outputs(), 1);  // no mask output unless asked for
  auto no_mask = PaddingMask(emb);
  EXPECT_EQ(no_mask.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_mask.status().message().find("padding_keys_mask"), std::string_view::npos)
      << no_mask.status();
  EXPECT_NE(no_mask.status().message().find("no_mask"), std::string_view::npos);
  EXPECT_EQ(PaddingMask(ids).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PaddingMask(Output()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TableOpsTest, CreateTableErrors) {
  Graph g;
  Scope s(&g);
  TableConfig c = SmallTable("t", 0);
  EXPECT_FALSE(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)).ok());
  ASSERT_TRUE(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)).ok());
  auto dup = create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(std::string(dup.status().message()).find("already has a table"), std::string::npos);
  auto session = ValueOrDie(Session::Create(g));
  auto missing = LookupTable(*session, "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace recsdk
