// test_models.h: small graphs shared by the session option tests (passes, observers, profiling).
#ifndef RECSDK_TESTS_SESSION_TEST_MODELS_H_
#define RECSDK_TESTS_SESSION_TEST_MODELS_H_

#include <string>

#include "recsdk/recsdk.h"

namespace recsdk::testing {

// LinearModel: logits = x @ w (w [2,1]), loss = mean sigmoid cross-entropy, trained by SGD.
struct LinearModel {
  Graph graph;
  Node* init = nullptr;
  Node* train = nullptr;
  std::string matmul;     // the forward MatMul's name (fp_point)
  std::string last_grad;  // the gradient ApplyGradientDescent reads (bp_point)
  std::string loss;
};

inline void BuildLinearModel(LinearModel* m) {
  Scope root(&m->graph);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{4, 2});
  Output y = ops::Placeholder(root.WithOpName("y"), DType::kFloat32, Shape{4, 1});
  Variable w = Variable::Make(root, "w", Shape{2, 1}, VariableOptions{});
  Output logits = ops::MatMul(root.WithOpName("fc/MatMul"), x, w.value());
  Output loss =
      ops::ReduceMean(root.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(root, y, logits));
  SgdOptimizer sgd(SgdOptions{0.1});
  auto train = sgd.Minimize(root.WithOpName("train"), loss);
  m->train = train.ok() ? *train : nullptr;
  m->init = GlobalVariablesInitializer(root);
  m->matmul = "fc/MatMul";
  m->loss = loss.name();
  for (const Node* n : m->graph.nodes()) {
    if (n->type() == "ApplyGradientDescent") m->last_grad = n->input(1).node->name();
  }
}

inline FeedList LinearFeeds(float scale) {
  return {{"x", *Tensor::FromValues<float>(Shape{4, 2}, {1, 0, 0, 1, scale, 1, 1, scale})},
          {"y", *Tensor::FromValues<float>(Shape{4, 1}, {1, 0, 1, 0})}};
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_SESSION_TEST_MODELS_H_
