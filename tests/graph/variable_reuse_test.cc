// variable_reuse_test.cc: variable scopes with reuse (Scope::WithVariableReuse,
// Variable::GetOrCreate): a layer built twice under reuse shares one set of weights, and training
// through one branch changes what the other computes.
#include <gtest/gtest.h>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

layers::MlpOptions SmallMlp() {
  layers::MlpOptions mlp;
  mlp.hidden_units = {8, 4};
  mlp.output_units = 1;
  mlp.name = "tower";
  return mlp;
}

TEST(VariableReuseTest, MlpTwiceWithoutReuseBuildsTwoTowers) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  layers::Mlp(root, x, SmallMlp());
  const size_t one = TrainableVariables(g).size();
  layers::Mlp(root, x, SmallMlp());
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(one, 6u);
  EXPECT_EQ(TrainableVariables(g).size(), 2 * one);
}

TEST(VariableReuseTest, MlpTwiceUnderAutoReuseSharesOneTower) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  const Scope reuse = root.WithVariableReuse(VariableReuse::kAutoReuse);
  Output train_logits = layers::Mlp(reuse, x, SmallMlp());
  Output eval_logits = layers::Mlp(reuse.NewNameScope("eval"), x, SmallMlp());
  ASSERT_TRUE(g.status().ok()) << g.status();
  std::vector<std::string> names;
  for (const Variable& v : TrainableVariables(g)) names.push_back(v.name());
  EXPECT_EQ(names, (std::vector<std::string>{"tower/dense/kernel", "tower/dense/bias",
                                             "tower/dense_1/kernel", "tower/dense_1/bias",
                                             "tower/logits/kernel", "tower/logits/bias"}));
  EXPECT_NE(train_logits.node, eval_logits.node);
  EXPECT_EQ(eval_logits.node->name().rfind("eval/", 0), 0u) << eval_logits.node->name();

  // One set of weights: a training step through the first branch moves the second's output the
  // same way, and both always agree.
  Output y = ops::Placeholder(root.WithOpName("y"), DType::kFloat32, Shape{Shape::kUnknownDim, 1});
  Output loss = ops::ReduceMean(root, ops::SigmoidCrossEntropyWithLogits(root, y, train_logits));
  SgdOptimizer sgd(SgdOptions{0.5});
  auto train = sgd.Minimize(root, loss);
  ASSERT_TRUE(train.ok()) << train.status();
  Node* init = GlobalVariablesInitializer(root);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init}).ok());
  auto xs = *Tensor::FromValues<float>(Shape{2, 3}, {1, 2, 3, -1, 0.5f, 2});
  auto ys = *Tensor::FromValues<float>(Shape{2, 1}, {1, 0});
  auto before = (*session)->Run({{"x", xs}}, {train_logits, eval_logits});
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE((*session)->Run({{"x", xs}, {"y", ys}}, {}, {*train}).ok());
  auto after = (*session)->Run({{"x", xs}}, {train_logits, eval_logits});
  ASSERT_TRUE(after.ok()) << after.status();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*before)[0].data<float>()[i], (*before)[1].data<float>()[i]);
    EXPECT_EQ((*after)[0].data<float>()[i], (*after)[1].data<float>()[i]);
    EXPECT_NE((*before)[1].data<float>()[i], (*after)[1].data<float>()[i]);
  }
}

TEST(VariableReuseTest, ReuseOfADifferentShapeNamesTheVariable) {
  Graph g;
  Scope root(&g);
  const Scope reuse = root.WithVariableReuse();
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  layers::DenseOptions d;
  d.units = 4;
  layers::Dense(reuse, x, d);
  d.units = 5;  // same name "dense": under reuse it asks for the same kernel with another shape
  Output bad = layers::Dense(reuse, x, d);
  EXPECT_FALSE(bad.valid());
  ASSERT_FALSE(g.status().ok());
  const std::string msg(g.status().message());
  EXPECT_NE(msg.find("\"dense/kernel\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,4]"), std::string::npos) << msg;
}

TEST(VariableReuseTest, StrictReuseOfAMissingVariableIsAnError) {
  Graph g;
  Scope root(&g);
  Variable v =
      Variable::Make(root.WithVariableReuse(VariableReuse::kReuse).NewSubScope("a"), "w", Shape{2});
  EXPECT_FALSE(v.valid());
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(std::string(g.status().message()).find("\"a/w\""), std::string::npos) << g.status();
}

TEST(VariableReuseTest, GetOrCreateReturnsTheSameVariable) {
  Graph g;
  Scope root(&g);
  Variable a = Variable::GetOrCreate(root.NewSubScope("s"), "w", Shape{2, 2});
  Variable b = Variable::GetOrCreate(root.WithVariableReuse().NewSubScope("s"), "w", Shape{2, 2});
  ASSERT_TRUE(g.status().ok()) << g.status();
  ASSERT_TRUE(a.valid());
  EXPECT_EQ(a.name(), "s/w");
  EXPECT_EQ(a.handle().node, b.handle().node);
  EXPECT_EQ(GlobalVariables(g).size(), 1u);
}

}  // namespace
}  // namespace recsdk
