// graph_test.cc: names and scopes, shape inference errors, JSON round trips.
#include <gtest/gtest.h>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

TEST(GraphTest, ScopedUniqueNames) {
  Graph g;
  Scope root(&g);
  Scope tower = root.NewSubScope("tower");
  Scope fc1 = tower.NewSubScope("fc1");
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 4});
  Output w = ops::Const(fc1, *Tensor::FromValues<float>(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  Output y = ops::MatMul(fc1, x, w);
  Output y2 = ops::MatMul(fc1, x, w);
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(y.node->name(), "tower/fc1/MatMul");
  EXPECT_EQ(y2.node->name(), "tower/fc1/MatMul_1");
  EXPECT_EQ(root.NewSubScope("tower").prefix(), "tower_1");
  EXPECT_EQ(y.shape().ToString(), "[?,2]");
  EXPECT_EQ(g.FindNode("x"), x.node);
  EXPECT_TRUE(g.FindOutput("tower/fc1/MatMul:0").ok());
  EXPECT_FALSE(g.FindOutput("tower/fc1/MatMul:3").ok());
}

TEST(GraphTest, ShapeMismatchNamesBothNodesAndShapes) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{8, 3});
  Output b = ops::Placeholder(root.WithOpName("b"), DType::kFloat32, Shape{4, 5});
  Output c = ops::MatMul(root.WithOpName("bad_matmul"), a, b);
  EXPECT_FALSE(c.valid());
  ASSERT_FALSE(g.status().ok());
  const std::string msg(g.status().message());
  EXPECT_NE(msg.find("bad_matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"a:0\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"b:0\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4,5]"), std::string::npos) << msg;
  // Later builders are no-ops and the first error stays.
  EXPECT_FALSE(ops::Relu(root, a).valid());
  EXPECT_NE(std::string(g.status().message()).find("bad_matmul"), std::string::npos);
}

TEST(GraphTest, BroadcastErrorsAndShapes) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root, DType::kFloat32, Shape{Shape::kUnknownDim, 1, 3});
  Output b = ops::Placeholder(root, DType::kFloat32, Shape{4, 1});
  EXPECT_EQ(ops::Add(root, a, b).shape().ToString(), "[?,4,3]");
  Output c = ops::Placeholder(root, DType::kFloat32, Shape{2, 5});
  EXPECT_FALSE(ops::Mul(root, b, c).valid());
  EXPECT_NE(std::string(g.status().message()).find("cannot be broadcast"), std::string::npos)
      << g.status();
}

TEST(GraphTest, JsonRoundTripIsIdentical) {
  Graph g;
  g.set_random_seed(42);
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  layers::DenseOptions dense;
  dense.units = 4;
  dense.activation = layers::Activation::kRelu;
  Output h = layers::Dense(root, x, dense);
  Output y = ops::ReduceMean(root, ops::Sigmoid(root, h), {1}, {true});
  Output c = ops::Const(root, *Tensor::FromValues<double>(Shape{2}, {0.1, -3.5e-300}));
  (void)c;
  (void)y;
  ASSERT_TRUE(g.status().ok()) << g.status();
  const std::string json = g.ToJson();
  auto loaded = Graph::FromJson(json);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->ToJson(), json);
  EXPECT_EQ((*loaded)->num_nodes(), g.num_nodes());
  EXPECT_EQ((*loaded)->random_seed(), 42);
  EXPECT_EQ((*loaded)->Collection(kTrainableVariables), g.Collection(kTrainableVariables));
  // A loaded graph runs.
  auto session = Session::Create(**loaded);
  EXPECT_TRUE(session.ok()) << session.status();
}

TEST(GraphTest, MalformedJsonIsAnError) {
  EXPECT_FALSE(Graph::FromJson("{not json").ok());
  EXPECT_FALSE(Graph::FromJson(R"({"format":"other"})").ok());
  EXPECT_FALSE(
      Graph::FromJson(
          R"({"format":"recsdk.graph","version":1,"collections":{},"nodes":[{"name":"a","op":"Identity","inputs":["missing"],"attrs":{},"outputs":[]}]})")
          .ok());
}

TEST(GraphTest, DenseLayerNamesVariables) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root, DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  layers::MlpOptions mlp;
  mlp.hidden_units = {8, 4};
  mlp.output_units = 1;
  layers::Mlp(root, x, mlp);
  std::vector<std::string> names;
  for (const Variable& v : TrainableVariables(g)) names.push_back(v.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"mlp/dense/kernel", "mlp/dense/bias", "mlp/dense_1/kernel",
                                      "mlp/dense_1/bias", "mlp/logits/kernel", "mlp/logits/bias"}));
}

TEST(GraphTest, ReplaceOpAndReorderRestoreTopologicalIds) {
  Graph g;
  Scope root(&g);
  Output x = ops::Const(root.WithOpName("x"), Tensor::Scalar<float>(1));
  Output y = ops::Identity(root.WithOpName("y"), x);
  Output z = ops::Const(root.WithOpName("z"), Tensor::Scalar<float>(2));
  Output w = ops::Identity(root.WithOpName("w"), y);
  ASSERT_TRUE(g.status().ok()) << g.status();
  // A pass makes y read z, which was added after it; the ids are no longer topological.
  y.node->ReplaceOp("Identity", {z}, y.node->attrs());
  EXPECT_EQ(y.node->input(0).node, z.node);
  // Orders that put a node before one of its inputs, miss a node or list one twice are refused
  // and change nothing.
  for (const std::vector<Node*>& bad :
       std::vector<std::vector<Node*>>{{x.node, y.node, z.node, w.node},
                                       {x.node, z.node, y.node},
                                       {x.node, z.node, z.node, w.node},
                                       {x.node, z.node, w.node, y.node}}) {
    const Status s = g.Reorder(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(y.node->id(), 1);
  }
  ASSERT_TRUE(g.Reorder({x.node, z.node, y.node, w.node}).ok());
  EXPECT_EQ(z.node->id(), 1);
  EXPECT_EQ(y.node->id(), 2);
  EXPECT_EQ(g.node(2), y.node);
  EXPECT_EQ(g.nodes(), (std::vector<Node*>{x.node, z.node, y.node, w.node}));
  EXPECT_EQ(g.FindNode("y"), y.node);
  // The reordered graph copies and round-trips like any other.
  auto copy = g.Copy();
  EXPECT_EQ(copy->FindNode("y")->input(0).node->name(), "z");
  auto loaded = Graph::FromJson(g.ToJson());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->ToJson(), g.ToJson());
}

TEST(GraphTest, UnknownOpTypeIsAnError) {
  Graph g;
  Scope root(&g);
  EXPECT_EQ(root.AddNode("NoSuchOp", {}), nullptr);
  EXPECT_NE(std::string(g.status().message()).find("NoSuchOp"), std::string::npos);
}

}  // namespace
}  // namespace recsdk
