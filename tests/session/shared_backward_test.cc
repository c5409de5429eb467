// shared_backward_test.cc: one backward pass per loss (src/graph/gradients.cc's gradient cache).
// The user's path, Minimize(loss) for the dense variables plus SparseMinimize(loss) for the
// tables, must build each gradient node once, whichever comes first, and train exactly as one
// Gradients call over variables and lookups together would. Single-threaded.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::SmallTable;
using testing::ValueOrDie;

int CountOps(const Graph& g, const std::string& type) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->type() == type;
  return n;
}

// A DLRM in miniature: a bottom MLP (2 layers) on dense features, two table lookups, their
// concatenation through a top MLP (2 layers) to a loss. 4 forward MatMuls; each has 2 in the
// backward pass, so 12 in all when the backward pass is shared.
struct Mini {
  Graph graph;
  Output loss;
  std::vector<Output> lookups;
};

void BuildMini(Mini* m) {
  Scope s(&m->graph);
  m->graph.set_random_seed(3);
  const Tensor dense =
      ValueOrDie(Tensor::FromValues<float>(Shape{2, 3}, {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f}));
  layers::MlpOptions bottom;
  bottom.name = "bottom";
  bottom.hidden_units = {8, 4};
  std::vector<Output> parts = {layers::Mlp(s, ops::Const(s, dense), bottom)};
  for (int t = 0; t < 2; ++t) {
    SparseTable table = ValueOrDie(
        create_table(s, SmallTable("t" + std::to_string(t), 4), SparseOptimizerConfig::SGD(0.5f)));
    SparseLookupOptions o;
    o.combiner = Combiner::kSum;
    Output e = ValueOrDie(sparse_lookup(s, table, ops::Const(s, Ids(2, 1, {7 + t, 9})), o));
    m->lookups.push_back(e);
    parts.push_back(e);
  }
  layers::MlpOptions top;
  top.name = "top";
  top.hidden_units = {8};
  top.output_units = 1;
  m->loss = ops::ReduceMean(s, ops::Square(s, layers::Mlp(s, ops::Concat(s, parts, 1), top)));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
}

TEST(SharedBackwardTest, MinimizeThenSparseMinimizeBuildsOneBackwardPass) {
  Mini m;
  BuildMini(&m);
  Scope s(&m.graph);
  SgdOptimizer sgd(SgdOptions{0.5});
  ValueOrDie(sgd.Minimize(s, m.loss));
  EXPECT_EQ(CountOps(m.graph, "MatMul"), 12);
  const int nodes = m.graph.num_nodes();
  ValueOrDie(SparseMinimize(s, m.loss));
  EXPECT_EQ(CountOps(m.graph, "MatMul"), 12);  // two separate passes made 16
  // The sparse side adds only its aggregation and apply ops, no gradient of a forward op.
  EXPECT_LT(m.graph.num_nodes() - nodes, 12);
}

TEST(SharedBackwardTest, SparseMinimizeThenMinimizeBuildsOneBackwardPass) {
  Mini m;
  BuildMini(&m);
  Scope s(&m.graph);
  ValueOrDie(SparseMinimize(s, m.loss));
  SgdOptimizer sgd(SgdOptions{0.5});
  ValueOrDie(sgd.Minimize(s, m.loss));
  EXPECT_EQ(CountOps(m.graph, "MatMul"), 12);
}

TEST(SharedBackwardTest, SharedPassTrainsLikeOneGradientsCall) {
  // Graph a: the user's path. Graph b: one Gradients call over the variables and the lookups.
  Mini a, b;
  BuildMini(&a);
  BuildMini(&b);
  Scope sa(&a.graph);
  SgdOptimizer sgd(SgdOptions{0.5});
  Node* dense_a = ValueOrDie(sgd.Minimize(sa, a.loss));
  Node* sparse_a = ValueOrDie(SparseMinimize(sa, a.loss));
  Node* train_a = ops::Group(sa, {dense_a, sparse_a});
  Node* init_a = GlobalVariablesInitializer(sa);

  Scope sb(&b.graph);
  std::vector<Variable> vars = TrainableVariables(b.graph);
  std::vector<Output> xs;
  for (const Variable& v : vars) xs.push_back(v.value());
  xs.insert(xs.end(), b.lookups.begin(), b.lookups.end());
  std::vector<Output> grads = ValueOrDie(Gradients(sb, {b.loss}, xs));
  GradsAndVars gv;
  for (size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
  Variable step = GetOrCreateGlobalStep(sb);
  Node* dense_b = ValueOrDie(sgd.ApplyGradients(sb, gv, &step));
  std::vector<SparseGrad> sparse;
  for (size_t t = 0; t < b.lookups.size(); ++t)
    sparse.push_back(ValueOrDie(SparseGradForLocalEmb(sb, b.lookups[t], grads[vars.size() + t])));
  Node* sparse_b = ValueOrDie(ApplySparseGradients(sb, sparse));
  Node* train_b = ops::Group(sb, {dense_b, sparse_b});
  Node* init_b = GlobalVariablesInitializer(sb);

  auto session_a = ValueOrDie(Session::Create(a.graph));
  auto session_b = ValueOrDie(Session::Create(b.graph));
  RECSDK_ASSERT_OK(session_a->Run({}, {}, {init_a}).status());
  RECSDK_ASSERT_OK(session_b->Run({}, {}, {init_b}).status());
  float first = 0;
  for (int step_i = 0; step_i < 3; ++step_i) {
    auto la = ValueOrDie(session_a->Run({}, {a.loss}, {train_a}));
    auto lb = ValueOrDie(session_b->Run({}, {b.loss}, {train_b}));
    EXPECT_FLOAT_EQ(la[0].scalar<float>(), lb[0].scalar<float>()) << "step " << step_i;
    if (step_i == 0) first = la[0].scalar<float>();
  }
  auto last = ValueOrDie(session_a->Run({}, {a.loss}));
  EXPECT_LT(last[0].scalar<float>(), first);  // it trains
  for (const char* table : {"t0", "t1"}) {
    EmbeddingTable* ta = ValueOrDie(LookupTable(*session_a, table));
    EmbeddingTable* tb = ValueOrDie(LookupTable(*session_b, table));
    for (int64_t key : {7, 8, 9}) {
      auto ra = ta->ReadRow(key);
      auto rb = tb->ReadRow(key);
      ASSERT_EQ(ra.ok(), rb.ok());
      if (ra.ok()) {
        EXPECT_EQ(*ra, *rb) << table << " key " << key;
      }
    }
  }
}

TEST(SharedBackwardTest, RewiredLossGetsFreshGradients) {
  // A pass that rewires an ancestor of the loss after a first Gradients call must not get the
  // cached (now wrong) gradients back.
  Graph g;
  Scope s(&g);
  Output x = ops::Const(s, Tensor::Vector<float>({1.0f, 2.0f}));
  Output a = ops::Const(s, Tensor::Vector<float>({3.0f, 4.0f}));
  Output b = ops::Const(s, Tensor::Vector<float>({5.0f, 6.0f}));
  Output prod = ops::Mul(s, x, a);
  Output loss = ops::ReduceSum(s, prod);
  Output first = ValueOrDie(Gradients(s, {loss}, {x}))[0];
  EXPECT_EQ(ValueOrDie(Gradients(s, {loss}, {x}))[0], first);  // reused, not rebuilt
  prod.node->set_input(1, b);
  Output second = ValueOrDie(Gradients(s, {loss}, {x}))[0];
  auto session = ValueOrDie(Session::Create(g));
  auto out = ValueOrDie(session->Run({}, {second}));
  EXPECT_EQ(out[0].data<float>()[0], 5.0f);
  EXPECT_EQ(out[0].data<float>()[1], 6.0f);
}

}  // namespace
}  // namespace recsdk
