// A tiny consumer of the installed recsdk: builds a graph, trains one SGD step, checks the value.
#include <cstdio>

#include "recsdk/recsdk.h"

int main() {
  using namespace recsdk;
  Graph g;
  Scope root(&g);
  VariableOptions o;
  o.initializer = Initializer::Constant(1.0);
  Variable w = Variable::Make(root, "w", Shape{1}, o);
  Output loss = ops::ReduceSum(root, ops::Square(root, w));
  SgdOptimizer sgd(SgdOptions{0.25});
  auto train = sgd.Minimize(root, loss);
  Node* init = GlobalVariablesInitializer(root);
  if (!train.ok()) return 1;
  auto session = Session::Create(g);
  if (!session.ok() || !(*session)->Run({}, {}, {init}).ok() ||
      !(*session)->Run({}, {}, {*train}).ok())
    return 1;
  auto out = (*session)->Run({}, {w.value()});
  if (!out.ok()) return 1;
  const float v = (*out)[0].data<float>()[0];  // 1 - 0.25 * 2 = 0.5
  std::printf("recsdk %s consumer: w = %.2f (expected 0.50)\n", RECSDK_VERSION_STRING, v);
  return v == 0.5f ? 0 : 1;
}
