// interaction_layers_test.cc: layers::FmInteraction, layers::Cin and layers::MixtureOfExperts
// (src/graph/interaction_layers.cc): finite-difference gradients with respect to the inputs and
// every weight, each layer against a plain-loop reference twin on its variables' values, and the
// errors for bad arguments.
#include "src/graph/interaction_layers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/recsdk.h"
#include "tests/graph/gradient_checker_util.h"

namespace recsdk {
namespace {

using layers::Activation;
using layers::CinOptions;
using layers::FmInteractionOptions;
using layers::MixtureOfExpertsOptions;
using layers::internal::CinFromWeights;
using layers::internal::CinLayerWeights;
using layers::internal::FmFromFields;
using layers::internal::MixExperts;
using testing::CheckGradients;
using ::testing::HasSubstr;
using V = const std::vector<Output>&;

#define EXPECT_GRAD_OK(...)   \
  do {                        \
    Status s = (__VA_ARGS__); \
    EXPECT_TRUE(s.ok()) << s; \
  } while (false)

constexpr int64_t kBatch = 2, kFields = 3, kDim = 2;

TEST(InteractionGradientTest, BatchOuterProduct) {
  EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}, Shape{3, 2}}, [](const Scope& s, V in) {
    return layers::internal::BatchOuterProduct(s, in[0], in[1]);
  }));
  // The same tensor on both sides: both gradient paths meet in one input.
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}}, [](const Scope& s, V in) {
    return layers::internal::BatchOuterProduct(s, in[0], in[0]);
  }));
}

TEST(InteractionGradientTest, Fm) {
  EXPECT_GRAD_OK(CheckGradients({Shape{kBatch, kFields, kDim}},
                                [](const Scope& s, V in) { return FmFromFields(s, in[0]); }));
}

TEST(InteractionGradientTest, CinSplitHalfAndFull) {
  // Inputs: fields [B, F, D], then per layer kernel [H_prev * F, H] and bias [H]. With
  // split_half the first layer's 4 maps send 2 on, so the second kernel is [2 * F, 3].
  for (Activation act : {Activation::kNone, Activation::kTanh}) {
    EXPECT_GRAD_OK(CheckGradients({Shape{kBatch, kFields, kDim}, Shape{kFields * kFields, 4},
                                   Shape{4}, Shape{2 * kFields, 3}, Shape{3}},
                                  [act](const Scope& s, V in) {
                                    return CinFromWeights(s, in[0],
                                                          {{in[1], in[2]}, {in[3], in[4]}},
                                                          /*split_half=*/true, act);
                                  }));
  }
  // No split, no bias: every map goes on and out.
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{kBatch, kFields, kDim}, Shape{kFields * kFields, 2}, Shape{2 * kFields, 2}},
      [](const Scope& s, V in) {
        return CinFromWeights(s, in[0], {{in[1], Output()}, {in[2], Output()}},
                              /*split_half=*/false, Activation::kNone);
      }));
}

TEST(InteractionGradientTest, MixExperts) {
  // Inputs: x [B, 3], two experts' kernels [3, 2], two gates' kernels [3, 2]: the experts are
  // tanh(x W_i), each task's gate logits x G_t; both tasks' outputs are checked.
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{kBatch, 3}, Shape{3, 2}, Shape{3, 2}, Shape{3, 2}, Shape{3, 2}},
      [](const Scope& s, V in) {
        const std::vector<Output> experts = {ops::Tanh(s, ops::MatMul(s, in[0], in[1])),
                                             ops::Tanh(s, ops::MatMul(s, in[0], in[2]))};
        return ops::Concat(s,
                           {MixExperts(s, experts, ops::MatMul(s, in[0], in[3])),
                            MixExperts(s, experts, ops::MatMul(s, in[0], in[4]))},
                           1);
      }));
}

// --- Reference twins ----------------------------------------------------------------------

using Matrix = std::vector<double>;  // row-major

Matrix ToMatrix(const Tensor& t) {
  auto f = t.flat<double>();
  return Matrix(f.begin(), f.end());
}

Tensor Input(const Shape& shape) {
  Tensor x(DType::kFloat64, shape);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.flat<double>()[i] = std::sin(1.3 * i + 0.7);
  return x;
}

// RefFm: per sample, sum over pairs i < j of <v_i, v_j>.
Matrix RefFm(const Matrix& v, int64_t batch, int64_t f, int64_t d) {
  Matrix out(batch, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < f; ++i)
      for (int64_t j = i + 1; j < f; ++j)
        for (int64_t k = 0; k < d; ++k) out[b] += v[(b * f + i) * d + k] * v[(b * f + j) * d + k];
  return out;
}

TEST(FmInteractionTest, MatchesPairwiseReferenceForBothInputForms) {
  constexpr int64_t kB = 4, kF = 5, kD = 3;
  for (bool flat : {false, true}) {
    SCOPED_TRACE(flat);
    Graph graph;
    Scope root(&graph);
    const Shape shape =
        flat ? Shape{Shape::kUnknownDim, kF * kD} : Shape{Shape::kUnknownDim, kF, kD};
    Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat64, shape);
    FmInteractionOptions o;
    if (flat) o.num_fields = kF;
    auto y = layers::FmInteraction(root, x, o);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), (Shape{Shape::kUnknownDim, 1}));
    auto session = Session::Create(graph);
    ASSERT_TRUE(session.ok()) << session.status();
    const Tensor v = Input(flat ? Shape{kB, kF * kD} : Shape{kB, kF, kD});
    auto out = (*session)->Run({{x, v}}, {*y});
    ASSERT_TRUE(out.ok()) << out.status();
    const Matrix want = RefFm(ToMatrix(v), kB, kF, kD);
    const Matrix got = ToMatrix((*out)[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << i;
  }
}

// RefCin: the paper's equations on [B, F, D] fields, layer by layer, with explicit index loops.
Matrix RefCin(const Matrix& x0, int64_t batch, int64_t f, int64_t d,
              const std::vector<Matrix>& kernels, const std::vector<Matrix>& biases,
              const std::vector<int64_t>& sizes, bool split_half) {
  const int64_t width_out = [&] {
    int64_t w = 0;
    for (size_t k = 0; k < sizes.size(); ++k)
      w += split_half && k + 1 < sizes.size() ? sizes[k] / 2 : sizes[k];
    return w;
  }();
  Matrix out(batch * width_out, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    // prev[h][dd]: the maps feeding the next layer.
    std::vector<Matrix> prev(f, Matrix(d));
    for (int64_t i = 0; i < f; ++i)
      for (int64_t k = 0; k < d; ++k) prev[i][k] = x0[(b * f + i) * d + k];
    int64_t col = 0;
    for (size_t l = 0; l < sizes.size(); ++l) {
      const int64_t hp = static_cast<int64_t>(prev.size()), h = sizes[l];
      std::vector<Matrix> maps(h, Matrix(d, 0.0));
      for (int64_t m = 0; m < h; ++m)
        for (int64_t k = 0; k < d; ++k) {
          double z = biases[l].empty() ? 0.0 : biases[l][m];
          for (int64_t i = 0; i < hp; ++i)
            for (int64_t j = 0; j < f; ++j)
              z += kernels[l][(i * f + j) * h + m] * prev[i][k] * x0[(b * f + j) * d + k];
          maps[m][k] = z;
        }
      const bool split = split_half && l + 1 < sizes.size();
      const int64_t first_out = split ? h / 2 : 0;
      for (int64_t m = first_out; m < h; ++m) {
        double pooled = 0;
        for (int64_t k = 0; k < d; ++k) pooled += maps[m][k];
        out[b * width_out + col++] = pooled;
      }
      prev.assign(maps.begin(), maps.begin() + (split ? h / 2 : h));
    }
  }
  return out;
}

TEST(CinTest, MatchesReferenceTwin) {
  constexpr int64_t kB = 3, kF = 4, kD = 3;
  const std::vector<int64_t> sizes = {6, 4, 3};
  for (bool split_half : {true, false}) {
    SCOPED_TRACE(split_half);
    Graph graph;
    graph.set_random_seed(11);
    Scope root(&graph);
    Output x =
        ops::Placeholder(root.WithOpName("x"), DType::kFloat64, Shape{Shape::kUnknownDim, kF * kD});
    CinOptions o;
    o.layer_sizes = sizes;
    o.split_half = split_half;
    o.num_fields = kF;
    o.bias_initializer = Initializer::Uniform(-0.5, 0.5);
    auto y = layers::Cin(root, x, o);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape().dim(1), split_half ? 3 + 2 + 3 : 6 + 4 + 3);
    Node* init = GlobalVariablesInitializer(root);
    ASSERT_TRUE(root.ok()) << root.status();
    auto session = Session::Create(graph);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->Run({}, {}, {init->name()}).ok());
    std::vector<TensorName> fetches = {*y};
    for (size_t l = 0; l < sizes.size(); ++l) {
      for (const char* w : {"kernel", "bias"}) {
        auto v = Variable::FromGraph(graph, fmt::format("cin/layer_{}/{}", l, w));
        ASSERT_TRUE(v.ok()) << v.status();
        fetches.push_back(v->value());
      }
    }
    const Tensor v = Input(Shape{kB, kF * kD});
    auto out = (*session)->Run({{x, v}}, fetches);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<Matrix> kernels, biases;
    for (size_t l = 0; l < sizes.size(); ++l) {
      kernels.push_back(ToMatrix((*out)[1 + 2 * l]));
      biases.push_back(ToMatrix((*out)[2 + 2 * l]));
    }
    const Matrix want = RefCin(ToMatrix(v), kB, kF, kD, kernels, biases, sizes, split_half);
    const Matrix got = ToMatrix((*out)[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << i;
  }
}

TEST(MixtureOfExpertsTest, MatchesReferenceTwin) {
  constexpr int64_t kB = 4, kIn = 5, kHidden = 3, kExperts = 3, kTasks = 2;
  Graph graph;
  graph.set_random_seed(5);
  Scope root(&graph);
  Output x =
      ops::Placeholder(root.WithOpName("x"), DType::kFloat64, Shape{Shape::kUnknownDim, kIn});
  MixtureOfExpertsOptions o;
  o.num_experts = kExperts;
  o.num_tasks = kTasks;
  o.expert.hidden_units = {kHidden};
  o.expert.bias_initializer = Initializer::Uniform(-0.5, 0.5);
  auto y = layers::MixtureOfExperts(root, x, o);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->size(), static_cast<size_t>(kTasks));
  Node* init = GlobalVariablesInitializer(root);
  ASSERT_TRUE(root.ok()) << root.status();
  auto session = Session::Create(graph);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init->name()}).ok());
  std::vector<TensorName> fetches = {(*y)[0], (*y)[1]};
  std::vector<std::string> names;
  for (int e = 0; e < kExperts; ++e) {
    names.push_back(fmt::format("mmoe/expert_{}/dense/kernel", e));
    names.push_back(fmt::format("mmoe/expert_{}/dense/bias", e));
  }
  for (int t = 0; t < kTasks; ++t) {
    names.push_back(fmt::format("mmoe/gate_{}/kernel", t));
    names.push_back(fmt::format("mmoe/gate_{}/bias", t));
  }
  for (const std::string& n : names) {
    auto v = Variable::FromGraph(graph, n);
    ASSERT_TRUE(v.ok()) << n << ": " << v.status();
    fetches.push_back(v->value());
  }
  const Tensor v = Input(Shape{kB, kIn});
  auto out = (*session)->Run({{x, v}}, fetches);
  ASSERT_TRUE(out.ok()) << out.status();
  const Matrix xv = ToMatrix(v);
  // Experts: relu(x W + b), [B, H] each.
  std::vector<Matrix> experts(kExperts, Matrix(kB * kHidden, 0.0));
  for (int e = 0; e < kExperts; ++e) {
    const Matrix w = ToMatrix((*out)[2 + 2 * e]), b = ToMatrix((*out)[3 + 2 * e]);
    for (int64_t r = 0; r < kB; ++r)
      for (int64_t j = 0; j < kHidden; ++j) {
        double z = b[j];
        for (int64_t i = 0; i < kIn; ++i) z += xv[r * kIn + i] * w[i * kHidden + j];
        experts[e][r * kHidden + j] = std::max(0.0, z);
      }
  }
  for (int t = 0; t < kTasks; ++t) {
    const Matrix g = ToMatrix((*out)[2 + 2 * kExperts + 2 * t]);
    const Matrix gb = ToMatrix((*out)[3 + 2 * kExperts + 2 * t]);
    const Matrix got = ToMatrix((*out)[t]);
    ASSERT_EQ(got.size(), static_cast<size_t>(kB * kHidden));
    for (int64_t r = 0; r < kB; ++r) {
      double logits[kExperts], mx = -1e300, sum = 0;
      for (int e = 0; e < kExperts; ++e) {
        logits[e] = gb[e];
        for (int64_t i = 0; i < kIn; ++i) logits[e] += xv[r * kIn + i] * g[i * kExperts + e];
        mx = std::max(mx, logits[e]);
      }
      for (double& l : logits) sum += (l = std::exp(l - mx));
      for (int64_t j = 0; j < kHidden; ++j) {
        double want = 0;
        for (int e = 0; e < kExperts; ++e) want += logits[e] / sum * experts[e][r * kHidden + j];
        EXPECT_NEAR(got[r * kHidden + j], want, 1e-10) << "task " << t << " row " << r;
      }
    }
  }
}

TEST(MixtureOfExpertsTest, SharesWeightsUnderVariableReuse) {
  Graph graph;
  Scope root = Scope(&graph).WithVariableReuse();
  Output x = ops::Placeholder(root, DType::kFloat32, Shape{8, 5});
  MixtureOfExpertsOptions o;
  o.num_experts = 2;
  o.num_tasks = 2;
  ASSERT_TRUE(layers::MixtureOfExperts(root, x, o).ok());
  const size_t after_first = TrainableVariables(graph).size();
  ASSERT_TRUE(layers::MixtureOfExperts(root, x, o).ok());
  EXPECT_EQ(after_first, 2u * 2 + 2u * 2);  // two experts' and two gates' kernel and bias
  EXPECT_EQ(TrainableVariables(graph).size(), after_first);
}

TEST(BatchOuterProductTest, ShapesAndRowMismatch) {
  Graph graph;
  Scope root(&graph);
  Output a = ops::Placeholder(root, DType::kFloat32, Shape{Shape::kUnknownDim, 4});
  Output b = ops::Placeholder(root, DType::kFloat32, Shape{Shape::kUnknownDim, 3});
  Output z = layers::internal::BatchOuterProduct(root, a, b);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(z.shape(), (Shape{Shape::kUnknownDim, 12}));
  Output c = ops::Placeholder(root, DType::kFloat32, Shape{5, 3});
  Output d = ops::Placeholder(root, DType::kFloat32, Shape{6, 3});
  (void)layers::internal::BatchOuterProduct(root, c, d);
  EXPECT_THAT(std::string(root.status().message()), HasSubstr("same number of rows"));
}

// --- Bad arguments: an error naming the layer and the fix, never a crash -----------------

void ExpectInvalid(const Status& st, const std::string& layer, const std::string& what) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(layer));
  EXPECT_THAT(std::string(st.message()), HasSubstr(what));
}

Status BuildFm(const Shape& shape, int64_t num_fields, DType dtype = DType::kFloat32) {
  Graph graph;
  Scope root(&graph);
  FmInteractionOptions o;
  o.num_fields = num_fields;
  return layers::FmInteraction(root, ops::Placeholder(root, dtype, shape), o).status();
}

Status BuildCin(const Shape& shape, const CinOptions& o) {
  Graph graph;
  Scope root(&graph);
  return layers::Cin(root, ops::Placeholder(root, DType::kFloat32, shape), o).status();
}

TEST(InteractionLayersTest, RefuseBadArguments) {
  const std::string fm = "FmInteraction \"fm\"";
  EXPECT_TRUE(BuildFm(Shape{4, 3, 2}, 0).ok());
  EXPECT_TRUE(BuildFm(Shape{4, 3, 2}, 3).ok());
  EXPECT_TRUE(BuildFm(Shape{4, 6}, 3).ok());
  ExpectInvalid(BuildFm(Shape{4, 6}, 0), fm, "needs num_fields (F) > 0 dividing its width 6");
  ExpectInvalid(BuildFm(Shape{4, 6}, 4), fm, "got 4");
  ExpectInvalid(BuildFm(Shape{4, 3, 2}, 2), fm, "num_fields 2 differs from the 3 fields");
  ExpectInvalid(BuildFm(Shape{4, Shape::kUnknownDim, 2}, 0), fm, "must be known");
  ExpectInvalid(BuildFm(Shape{4, Shape::kUnknownDim}, 2), fm, "must be known");
  ExpectInvalid(BuildFm(Shape{6}, 0), fm, "[batch, F, D]");
  ExpectInvalid(BuildFm(Shape{4, 3, 2}, 0, DType::kInt64), fm, "int64");

  const std::string cin = "Cin \"cin\"";
  CinOptions o;
  EXPECT_TRUE(BuildCin(Shape{4, 3, 2}, o).ok());
  o.layer_sizes = {};
  ExpectInvalid(BuildCin(Shape{4, 3, 2}, o), cin, "layer_sizes is empty");
  o.layer_sizes = {4, 0};
  ExpectInvalid(BuildCin(Shape{4, 3, 2}, o), cin, "layer_sizes[1] = 0 must be > 0");
  o.layer_sizes = {5, 3};
  ExpectInvalid(BuildCin(Shape{4, 3, 2}, o), cin, "layer_sizes[0] = 5 is odd");
  o.split_half = false;
  EXPECT_TRUE(BuildCin(Shape{4, 3, 2}, o).ok());
  ExpectInvalid(BuildCin(Shape{4, 6}, o), cin, "needs num_fields");

  const std::string moe = "MixtureOfExperts \"mmoe\"";
  auto build_moe = [](const Shape& shape, const MixtureOfExpertsOptions& m) {
    Graph graph;
    Scope root(&graph);
    return layers::MixtureOfExperts(root, ops::Placeholder(root, DType::kFloat32, shape), m)
        .status();
  };
  MixtureOfExpertsOptions m;
  EXPECT_TRUE(build_moe(Shape{4, 6}, m).ok());
  ExpectInvalid(build_moe(Shape{4, 3, 2}, m), moe, "[batch, d] with d known");
  ExpectInvalid(build_moe(Shape{4, Shape::kUnknownDim}, m), moe, "[batch, d] with d known");
  m.num_experts = 0;
  ExpectInvalid(build_moe(Shape{4, 6}, m), moe, "num_experts 0 and num_tasks 2 must each be >= 1");
  m = {};
  m.num_tasks = 0;
  ExpectInvalid(build_moe(Shape{4, 6}, m), moe, "num_tasks 0");
  m = {};
  m.expert.hidden_units = {};
  ExpectInvalid(build_moe(Shape{4, 6}, m), moe, "must list at least one layer");
  m.expert.hidden_units = {8, -1};
  ExpectInvalid(build_moe(Shape{4, 6}, m), moe, "expert.hidden_units [8, -1]");

  // An invalid Output (a failed builder upstream) and a scope whose graph holds an error.
  Graph graph;
  Scope root(&graph);
  ExpectInvalid(layers::FmInteraction(root, Output()).status(), fm, "invalid Output");
  ExpectInvalid(layers::Cin(root, Output()).status(), cin, "invalid Output");
  ExpectInvalid(layers::MixtureOfExperts(root, Output()).status(), moe, "invalid Output");
  Output x = ops::Placeholder(root, DType::kFloat32, Shape{4, 6});
  (void)ops::Reshape(root, x, {5, 5});  // records a graph error
  EXPECT_FALSE(layers::FmInteraction(root, x, {.num_fields = 3}).ok());
  EXPECT_FALSE(layers::Cin(root, x).ok());
  EXPECT_FALSE(layers::MixtureOfExperts(root, x).ok());
}

}  // namespace
}  // namespace recsdk
