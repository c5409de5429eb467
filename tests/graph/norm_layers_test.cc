// norm_layers_test.cc: layers::LayerNorm / BatchNorm (src/graph/norm_layers.cc): finite-
// difference gradients with respect to x, gamma and beta; both layers against plain-loop
// reference twins (BatchNorm's moving averages over steps and its inference mode too); errors.
#include "src/graph/norm_layers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "recsdk/recsdk.h"
#include "tests/graph/gradient_checker_util.h"

namespace recsdk {
namespace {

using layers::internal::Moments;
using layers::internal::Normalize;
using testing::CheckGradients;
using ::testing::HasSubstr;
using V = const std::vector<Output>&;

#define EXPECT_GRAD_OK(...)   \
  do {                        \
    Status s = (__VA_ARGS__); \
    EXPECT_TRUE(s.ok()) << s; \
  } while (false)

// LayerNorm's statistics over the last axis; BatchNorm's (training) over all the others.
TEST(NormGradientTest, LayerNormAndBatchNorm) {
  for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{-1}, {0}}) {
    EXPECT_GRAD_OK(CheckGradients({Shape{4, 5}, Shape{5}, Shape{5}}, [&](const Scope& s, V in) {
      Output mean, variance;
      Moments(s, in[0], axes, &mean, &variance);
      return Normalize(s, in[0], mean, variance, 1e-3, in[1], in[2]);
    }));
  }
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3, 4}}, [](const Scope& s, V in) {
    Output mean, variance;
    Moments(s, in[0], {0, 1}, &mean, &variance);
    return Normalize(s, in[0], mean, variance, 1e-3, Output(), Output());
  }));
}

Tensor Input(int64_t rows, int64_t cols, double phase) {
  Tensor x(DType::kFloat64, Shape{rows, cols});
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    x.flat<double>()[i] = 2.0 * std::sin(0.9 * i + phase) + 0.3 * (i % cols);
  }
  return x;
}

// RefNorm: (x - mean) / sqrt(var + eps) over rows (per_row) or over columns.
std::vector<double> RefNorm(const Tensor& xt, bool per_row, double eps,
                            std::vector<double>* col_mean = nullptr,
                            std::vector<double>* col_var = nullptr) {
  const int64_t r = xt.shape().dim(0), c = xt.shape().dim(1);
  auto x = xt.flat<double>();
  std::vector<double> y(r * c);
  const int64_t groups = per_row ? r : c, n = per_row ? c : r;
  for (int64_t g = 0; g < groups; ++g) {
    auto at = [&](int64_t k) { return per_row ? g * c + k : k * c + g; };
    double mean = 0, var = 0;
    for (int64_t k = 0; k < n; ++k) mean += x[at(k)];
    mean /= n;
    for (int64_t k = 0; k < n; ++k) var += (x[at(k)] - mean) * (x[at(k)] - mean);
    var /= n;
    for (int64_t k = 0; k < n; ++k) y[at(k)] = (x[at(k)] - mean) / std::sqrt(var + eps);
    if (col_mean != nullptr) col_mean->push_back(mean);
    if (col_var != nullptr) col_var->push_back(var);
  }
  return y;
}

TEST(LayerNormTest, MatchesReferenceTwin) {
  Graph graph;
  Scope root(&graph);
  Output x = ops::Placeholder(root, DType::kFloat64, Shape{3, 6});
  layers::LayerNormOptions o;
  o.epsilon = 1e-5;
  auto y = layers::LayerNorm(root, x, o);
  ASSERT_TRUE(y.ok()) << y.status();
  Node* init = GlobalVariablesInitializer(root);
  auto session = Session::Create(graph);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init->name()}).ok());
  const Tensor xv = Input(3, 6, 0.1);
  auto out = (*session)->Run({{x, xv}}, {*y});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> ref = RefNorm(xv, /*per_row=*/true, 1e-5);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR((*out)[0].flat<double>()[i], ref[i], 1e-10);
  EXPECT_TRUE(Variable::FromGraph(graph, "layer_norm/gamma").ok());
  EXPECT_TRUE(Variable::FromGraph(graph, "layer_norm/beta").ok());
}

// Training mode normalises by the batch and moves the averages every step; an inference branch
// built under variable reuse shares them and normalises by them.
TEST(BatchNormTest, TrainingUpdatesMovingAveragesAndInferenceUsesThem) {
  constexpr double kMomentum = 0.9, kEps = 1e-3;
  Graph graph;
  Scope root = Scope(&graph).WithVariableReuse();
  Output x = ops::Placeholder(root, DType::kFloat64, Shape{8, 3});
  layers::BatchNormOptions o;
  o.momentum = kMomentum;
  o.epsilon = kEps;
  auto train = layers::BatchNorm(root, x, o);
  ASSERT_TRUE(train.ok()) << train.status();
  o.mode = layers::NormMode::kInference;
  auto infer = layers::BatchNorm(root, x, o);
  ASSERT_TRUE(infer.ok()) << infer.status();
  EXPECT_EQ(GlobalVariables(graph).size(), 4u);  // gamma, beta and the two averages, shared
  Node* init = GlobalVariablesInitializer(root);
  auto session = Session::Create(graph);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init->name()}).ok());

  std::vector<double> moving_mean(3, 0.0), moving_var(3, 1.0);
  for (int step = 0; step < 3; ++step) {
    const Tensor xv = Input(8, 3, step);
    auto out = (*session)->Run({{x, xv}}, {*train});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> mean, var;
    const std::vector<double> ref = RefNorm(xv, /*per_row=*/false, kEps, &mean, &var);
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR((*out)[0].flat<double>()[i], ref[i], 1e-10) << "step " << step;
    }
    for (int c = 0; c < 3; ++c) {
      moving_mean[c] = kMomentum * moving_mean[c] + (1 - kMomentum) * mean[c];
      moving_var[c] = kMomentum * moving_var[c] + (1 - kMomentum) * var[c];
    }
  }
  auto mm = Variable::FromGraph(graph, "batch_norm/moving_mean");
  auto mv = Variable::FromGraph(graph, "batch_norm/moving_variance");
  ASSERT_TRUE(mm.ok() && mv.ok());
  const Tensor xv = Input(8, 3, 7.0);
  auto out = (*session)->Run({{x, xv}}, {*infer, mm->value(), mv->value()});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR((*out)[1].flat<double>()[c], moving_mean[c], 1e-12);
    EXPECT_NEAR((*out)[2].flat<double>()[c], moving_var[c], 1e-12);
  }
  for (int64_t i = 0; i < xv.num_elements(); ++i) {
    const int64_t c = i % 3;
    const double want = (xv.flat<double>()[i] - moving_mean[c]) / std::sqrt(moving_var[c] + kEps);
    EXPECT_NEAR((*out)[0].flat<double>()[i], want, 1e-10);
  }
  // Inference alone leaves the averages where they were.
  ASSERT_TRUE((*session)->Run({{x, xv}}, {*infer}).ok());
  auto again = (*session)->Run({}, {mm->value()});
  ASSERT_TRUE(again.ok());
  EXPECT_NEAR((*again)[0].flat<double>()[0], moving_mean[0], 1e-12);
}

TEST(NormLayersTest, RefuseBadArguments) {
  auto build = [](const Shape& shape, DType dtype, auto&& layer) {
    Graph graph;
    Scope root(&graph);
    return layer(root, ops::Placeholder(root, dtype, shape)).status();
  };
  auto ln = [](layers::LayerNormOptions o) {
    return [o](const Scope& s, Output x) { return layers::LayerNorm(s, x, o); };
  };
  auto bn = [](layers::BatchNormOptions o) {
    return [o](const Scope& s, Output x) { return layers::BatchNorm(s, x, o); };
  };
  auto expect_invalid = [](const Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(what));
  };
  const Shape ok_shape{4, 3};
  EXPECT_TRUE(build(ok_shape, DType::kFloat32, ln({})).ok());
  EXPECT_TRUE(build(ok_shape, DType::kFloat32, bn({})).ok());
  expect_invalid(build(Shape{3}, DType::kFloat32, ln({})), "LayerNorm \"layer_norm\"");
  expect_invalid(build(Shape{3}, DType::kFloat32, bn({})), "rank >= 2");
  expect_invalid(build(Shape{4, Shape::kUnknownDim}, DType::kFloat32, ln({})),
                 "last dimension known");
  expect_invalid(build(ok_shape, DType::kInt32, bn({})), "int32");
  for (double eps : {0.0, -1.0, std::nan("")}) {
    layers::LayerNormOptions o;
    o.epsilon = eps;
    expect_invalid(build(ok_shape, DType::kFloat32, ln(o)), "epsilon");
  }
  for (double m : {1.0, -0.1, std::nan("")}) {
    layers::BatchNormOptions o;
    o.momentum = m;
    expect_invalid(build(ok_shape, DType::kFloat32, bn(o)), "momentum");
  }
  layers::BatchNormOptions o;
  o.mode = static_cast<layers::NormMode>(9);
  expect_invalid(build(ok_shape, DType::kFloat32, bn(o)), "unknown mode 9");
  Graph graph;
  Scope root(&graph);
  expect_invalid(layers::LayerNorm(root, Output()).status(), "invalid Output");
}

}  // namespace
}  // namespace recsdk
