// dense_example.h: train an MLP on generated data with a planted logistic signal.
//
// Features x ~ N(0, 1)^d; the planted logit is w·x + 0.8·x0·x1 (a known model with an
// interaction a linear model cannot capture); labels ~ Bernoulli(sigmoid(logit)). The planted
// model's own AUC on held-out data is the ceiling a learner can approach. Shared by the sample
// program and its test. Single-threaded caller; the Session parallelises inside.
#ifndef RECSDK_SAMPLES_DENSE_EXAMPLE_DENSE_EXAMPLE_H_
#define RECSDK_SAMPLES_DENSE_EXAMPLE_DENSE_EXAMPLE_H_

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk::samples {

struct DenseExampleOptions {
  int features = 16;
  int batch_size = 256;
  int steps = 1500;
  int eval_every = 250;
  int eval_rows = 8192;
  uint64_t seed = 7;
  bool verbose = true;
};

struct DenseExampleResult {
  double final_auc = 0;
  double planted_auc = 0;
  double first_loss = 0;
  double final_loss = 0;
};

struct PlantedData {
  std::vector<float> x;  // rows * features
  std::vector<float> y;
  std::vector<float> logit;
};

inline PlantedData MakePlantedData(int rows, int features, const std::vector<float>& w,
                                   std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<float> uniform(0, 1);
  PlantedData d;
  d.x.resize(static_cast<size_t>(rows) * features);
  for (float& v : d.x) v = normal(rng);
  for (int r = 0; r < rows; ++r) {
    const float* x = &d.x[static_cast<size_t>(r) * features];
    float logit = 0.8f * x[0] * x[1];
    for (int j = 0; j < features; ++j) logit += w[j] * x[j];
    d.logit.push_back(logit);
    d.y.push_back(uniform(rng) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f);
  }
  return d;
}

inline StatusOr<DenseExampleResult> RunDenseExample(const DenseExampleOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> w(o.features);
  for (float& v : w) v = 0.6f * normal(rng);

  Graph graph;
  graph.set_random_seed(static_cast<int64_t>(o.seed));
  Scope root(&graph);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32,
                              Shape{Shape::kUnknownDim, o.features});
  Output y = ops::Placeholder(root.WithOpName("y"), DType::kFloat32, Shape{Shape::kUnknownDim, 1});
  layers::MlpOptions mlp;
  mlp.hidden_units = {64, 32};
  mlp.output_units = 1;
  Output logits = layers::Mlp(root, x, mlp);
  Output prob = ops::Sigmoid(root.WithOpName("prob"), logits);
  Output loss =
      ops::ReduceMean(root.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(root, y, logits));
  AdamOptions adam;
  adam.learning_rate = 0.003;
  AdamOptimizer optimizer(adam);
  auto train = optimizer.Minimize(root, loss);
  if (!train.ok()) return train.status();
  Node* init = GlobalVariablesInitializer(root);
  if (!root.ok()) return root.status();

  auto session_or = Session::Create(graph);
  if (!session_or.ok()) return session_or.status();
  Session& session = **session_or;
  if (Status s = session.Run({}, {}, {init}).status(); !s.ok()) return s;

  const PlantedData eval = MakePlantedData(o.eval_rows, o.features, w, rng);
  DenseExampleResult result;
  auto planted = Auc(eval.logit, eval.y);
  if (!planted.ok()) return planted.status();
  result.planted_auc = *planted;
  Tensor eval_x =
      *Tensor::FromValues<float>(Shape{o.eval_rows, o.features}, absl::MakeConstSpan(eval.x));

  auto evaluate = [&]() -> StatusOr<double> {
    auto out = session.Run({{"x", eval_x}}, {prob});
    if (!out.ok()) return out.status();
    return Auc((*out)[0].flat<float>(), eval.y);
  };
  for (int step = 1; step <= o.steps; ++step) {
    const PlantedData batch = MakePlantedData(o.batch_size, o.features, w, rng);
    FeedList feeds = {
        {"x",
         *Tensor::FromValues<float>(Shape{o.batch_size, o.features}, absl::MakeConstSpan(batch.x))},
        {"y", *Tensor::FromValues<float>(Shape{o.batch_size, 1}, absl::MakeConstSpan(batch.y))}};
    auto out = session.Run(feeds, {loss}, {*train});
    if (!out.ok()) return out.status();
    const double l = (*out)[0].scalar<float>();
    if (step == 1) result.first_loss = l;
    result.final_loss = l;
    if (step % o.eval_every == 0 || step == o.steps) {
      auto auc = evaluate();
      if (!auc.ok()) return auc.status();
      result.final_auc = *auc;
      if (o.verbose) {
        std::printf("step %5d  loss %.4f  eval AUC %.4f  (planted model AUC %.4f)\n", step, l, *auc,
                    result.planted_auc);
      }
    }
  }
  return result;
}

}  // namespace recsdk::samples

#endif  // RECSDK_SAMPLES_DENSE_EXAMPLE_DENSE_EXAMPLE_H_
