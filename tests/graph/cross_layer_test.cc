// cross_layer_test.cc: layers::CrossLayer / CrossNetwork (src/graph/cross_layer.cc): finite-
// difference gradients with respect to the inputs and every weight, the layer against a plain-loop
// reference twin, and the errors for bad arguments.
#include "src/graph/cross_layer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/recsdk.h"
#include "tests/graph/gradient_checker_util.h"

namespace recsdk {
namespace {

using layers::CrossLayerOptions;
using layers::CrossNetworkOptions;
using layers::CrossStructure;
using layers::internal::CrossExpertWeights;
using layers::internal::CrossFromWeights;
using testing::CheckGradients;
using ::testing::HasSubstr;
using V = const std::vector<Output>&;

#define EXPECT_GRAD_OK(...)   \
  do {                        \
    Status s = (__VA_ARGS__); \
    EXPECT_TRUE(s.ok()) << s; \
  } while (false)

constexpr int64_t kBatch = 3, kD = 4, kRank = 2;

CrossExpertWeights Full(Output kernel, Output bias) {
  CrossExpertWeights w;
  w.kernel = kernel;
  w.bias = bias;
  return w;
}
CrossExpertWeights LowRank(Output v, Output u, Output bias = Output()) {
  CrossExpertWeights w;
  w.kernel_v = v;
  w.kernel_u = u;
  w.bias = bias;
  return w;
}

TEST(CrossLayerGradientTest, FullRank) {
  // Inputs: x0, xl, W [d,d], b [d].
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{kBatch, kD}, Shape{kBatch, kD}, Shape{kD, kD}, Shape{kD}}, [](const Scope& s, V in) {
        return CrossFromWeights(s, in[0], in[1], {Full(in[2], in[3])}, Output());
      }));
  // The first layer: xl is x0 itself (both paths of the gradient meet in one input).
  EXPECT_GRAD_OK(
      CheckGradients({Shape{kBatch, kD}, Shape{kD, kD}, Shape{kD}}, [](const Scope& s, V in) {
        return CrossFromWeights(s, in[0], in[0], {Full(in[1], in[2])}, Output());
      }));
}

TEST(CrossLayerGradientTest, LowRankWithAndWithoutBias) {
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{kBatch, kD}, Shape{kBatch, kD}, Shape{kD, kRank}, Shape{kRank, kD}, Shape{kD}},
      [](const Scope& s, V in) {
        return CrossFromWeights(s, in[0], in[1], {LowRank(in[2], in[3], in[4])}, Output());
      }));
  EXPECT_GRAD_OK(
      CheckGradients({Shape{kBatch, kD}, Shape{kBatch, kD}, Shape{kD, kRank}, Shape{kRank, kD}},
                     [](const Scope& s, V in) {
                       return CrossFromWeights(s, in[0], in[1], {LowRank(in[2], in[3])}, Output());
                     }));
}

TEST(CrossLayerGradientTest, MixtureOfLowRankExperts) {
  // Inputs: x0, xl, gate [d,2], then per expert V, U, b.
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{kBatch, kD}, Shape{kBatch, kD}, Shape{kD, 2}, Shape{kD, kRank}, Shape{kRank, kD},
       Shape{kD}, Shape{kD, kRank}, Shape{kRank, kD}, Shape{kD}},
      [](const Scope& s, V in) {
        return CrossFromWeights(
            s, in[0], in[1], {LowRank(in[3], in[4], in[5]), LowRank(in[6], in[7], in[8])}, in[2]);
      }));
}

// --- The reference twin -------------------------------------------------------------------

using Matrix = std::vector<double>;  // row-major

// RefMatMul: [m,k] x [k,n] in plain loops.
Matrix RefMatMul(const Matrix& a, const Matrix& b, int64_t m, int64_t k, int64_t n) {
  Matrix c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

struct RefExpert {
  Matrix kernel, kernel_v, kernel_u, bias;
};

// RefCross: x_{l+1} = sum_i g_i x0 * (xl W_i + b_i) + xl, g = softmax(xl gate) (g = 1 with one
// expert and no gate), for `batch` rows of width d.
Matrix RefCross(const Matrix& x0, const Matrix& xl, const std::vector<RefExpert>& experts,
                const Matrix& gate, int64_t batch, int64_t d, int64_t rank) {
  const int64_t k = static_cast<int64_t>(experts.size());
  Matrix g(batch * k, 1.0);
  if (!gate.empty()) {
    g = RefMatMul(xl, gate, batch, d, k);
    for (int64_t r = 0; r < batch; ++r) {
      double mx = g[r * k], sum = 0;
      for (int64_t i = 0; i < k; ++i) mx = std::max(mx, g[r * k + i]);
      for (int64_t i = 0; i < k; ++i) sum += (g[r * k + i] = std::exp(g[r * k + i] - mx));
      for (int64_t i = 0; i < k; ++i) g[r * k + i] /= sum;
    }
  }
  Matrix out = xl;
  for (int64_t i = 0; i < k; ++i) {
    const RefExpert& e = experts[i];
    const Matrix proj = e.kernel.empty() ? RefMatMul(RefMatMul(xl, e.kernel_v, batch, d, rank),
                                                     e.kernel_u, batch, rank, d)
                                         : RefMatMul(xl, e.kernel, batch, d, d);
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t j = 0; j < d; ++j) {
        const double b = e.bias.empty() ? 0.0 : e.bias[j];
        out[r * d + j] += g[r * k + i] * x0[r * d + j] * (proj[r * d + j] + b);
      }
    }
  }
  return out;
}

Matrix ToMatrix(const Tensor& t) {
  auto f = t.flat<double>();
  return Matrix(f.begin(), f.end());
}

// The layer, built with its variables, against RefCross on the variables' values: two stacked
// layers of each structure, float64, random biases so the bias path counts.
TEST(CrossLayerTest, MatchesReferenceTwin) {
  constexpr int64_t kB = 5, kDim = 6, kR = 2, kExperts = 3;
  for (CrossStructure structure :
       {CrossStructure::kFullRank, CrossStructure::kLowRank, CrossStructure::kMixtureOfLowRank}) {
    SCOPED_TRACE(static_cast<int>(structure));
    Graph graph;
    graph.set_random_seed(7);
    Scope root(&graph);
    Output x0 = ops::Placeholder(root.WithOpName("x0"), DType::kFloat64, Shape{kB, kDim});
    CrossNetworkOptions o;
    o.num_layers = 2;
    o.layer.structure = structure;
    if (structure != CrossStructure::kFullRank) o.layer.rank = kR;
    if (structure == CrossStructure::kMixtureOfLowRank) o.layer.num_experts = kExperts;
    o.layer.bias_initializer = Initializer::Uniform(-0.5, 0.5);
    auto y = layers::CrossNetwork(root, x0, o);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), (Shape{kB, kDim}));
    Node* init = GlobalVariablesInitializer(root);
    ASSERT_TRUE(root.ok()) << root.status();
    auto session = Session::Create(graph);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->Run({}, {}, {init->name()}).ok());

    Tensor x(DType::kFloat64, Shape{kB, kDim});
    for (int64_t i = 0; i < x.num_elements(); ++i) x.flat<double>()[i] = std::sin(1.7 * i + 0.3);
    // Fetch the output and every variable of the network, by the names the header documents.
    std::vector<std::string> names;
    const int experts = structure == CrossStructure::kMixtureOfLowRank ? kExperts : 1;
    for (const char* layer : {"cross", "cross_1"}) {
      const std::string base = fmt::format("cross_network/{}", layer);
      if (experts > 1) names.push_back(base + "/gate");
      for (int e = 0; e < experts; ++e) {
        const std::string p = experts > 1 ? fmt::format("{}/expert_{}", base, e) : base;
        if (structure == CrossStructure::kFullRank) {
          names.push_back(p + "/kernel");
        } else {
          names.push_back(p + "/kernel_v");
          names.push_back(p + "/kernel_u");
        }
        names.push_back(p + "/bias");
      }
    }
    std::vector<TensorName> fetches = {*y};
    for (const std::string& n : names) {
      auto v = Variable::FromGraph(graph, n);
      ASSERT_TRUE(v.ok()) << n << ": " << v.status();
      fetches.push_back(v->value());
    }
    auto out = (*session)->Run({{x0, x}}, fetches);
    ASSERT_TRUE(out.ok()) << out.status();
    size_t next = 1;
    Matrix xl = ToMatrix(x);
    const Matrix x0v = xl;
    for (int layer = 0; layer < 2; ++layer) {
      Matrix gate;
      if (experts > 1) gate = ToMatrix((*out)[next++]);
      std::vector<RefExpert> ref(experts);
      for (RefExpert& e : ref) {
        if (structure == CrossStructure::kFullRank) {
          e.kernel = ToMatrix((*out)[next++]);
        } else {
          e.kernel_v = ToMatrix((*out)[next++]);
          e.kernel_u = ToMatrix((*out)[next++]);
        }
        e.bias = ToMatrix((*out)[next++]);
      }
      xl = RefCross(x0v, xl, ref, gate, kB, kDim, kR);
    }
    const Matrix got = ToMatrix((*out)[0]);
    ASSERT_EQ(got.size(), xl.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], xl[i], 1e-10) << "element " << i;
  }
}

TEST(CrossLayerTest, LowRankHasTwoDrWeights) {
  Graph graph;
  Scope root(&graph);
  Output x0 = ops::Placeholder(root, DType::kFloat32, Shape{Shape::kUnknownDim, 16});
  CrossLayerOptions o;
  o.structure = CrossStructure::kLowRank;
  o.rank = 4;
  ASSERT_TRUE(layers::CrossLayer(root, x0, x0, o).ok());
  int64_t weights = 0;
  for (const Variable& v : TrainableVariables(graph)) weights += v.shape().num_elements();
  EXPECT_EQ(weights, 2 * 16 * 4 + 16);
}

TEST(CrossLayerTest, SharesWeightsUnderVariableReuse) {
  Graph graph;
  Scope root = Scope(&graph).WithVariableReuse();
  Output x0 = ops::Placeholder(root, DType::kFloat32, Shape{8, 5});
  CrossNetworkOptions o;
  o.num_layers = 2;
  ASSERT_TRUE(layers::CrossNetwork(root, x0, o).ok());
  const size_t after_first = TrainableVariables(graph).size();
  ASSERT_TRUE(layers::CrossNetwork(root, x0, o).ok());
  EXPECT_EQ(after_first, 4u);
  EXPECT_EQ(TrainableVariables(graph).size(), after_first);
}

// --- Bad arguments: an error naming the layer and the fix, never a crash -----------------

Status BuildCross(const Shape& x0_shape, const Shape& xl_shape, const CrossLayerOptions& o,
                  DType dtype = DType::kFloat32) {
  Graph graph;
  Scope root(&graph);
  Output x0 = ops::Placeholder(root, dtype, x0_shape);
  Output xl = ops::Placeholder(root, dtype, xl_shape);
  return layers::CrossLayer(root, x0, xl, o).status();
}

TEST(CrossLayerTest, RefusesBadArguments) {
  CrossLayerOptions full;
  CrossLayerOptions low;
  low.structure = CrossStructure::kLowRank;
  low.rank = 2;
  CrossLayerOptions mix = low;
  mix.structure = CrossStructure::kMixtureOfLowRank;
  mix.num_experts = 2;
  auto expect_invalid = [](const Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(what));
    EXPECT_THAT(std::string(st.message()), HasSubstr("CrossLayer \"cross\""));
  };
  EXPECT_TRUE(BuildCross(Shape{4, 6}, Shape{4, 6}, full).ok());
  EXPECT_TRUE(BuildCross(Shape{4, 6}, Shape{4, 6}, low).ok());
  EXPECT_TRUE(BuildCross(Shape{4, 6}, Shape{4, 6}, mix).ok());
  // Input rank and width.
  expect_invalid(BuildCross(Shape{4, 6, 2}, Shape{4, 6}, full), "[batch, d]");
  expect_invalid(BuildCross(Shape{6}, Shape{6}, full), "[batch, d]");
  expect_invalid(BuildCross(Shape{4, Shape::kUnknownDim}, Shape{4, 6}, full), "d known");
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 5}, full), "differ");
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, full, DType::kInt64), "int64");
  // rank r <= 0 for the low-rank structures; options that do not fit the structure.
  for (int64_t r : {0, -3}) {
    CrossLayerOptions o = low;
    o.rank = r;
    expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), fmt::format("rank {} must be > 0", r));
    o = mix;
    o.rank = r;
    expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), "must be > 0");
  }
  CrossLayerOptions o = mix;
  o.num_experts = 0;
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), "num_experts 0 must be >= 1");
  o = low;
  o.num_experts = 3;
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), "kMixtureOfLowRank only");
  o = full;
  o.rank = 2;
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), "leave both 0");
  o = full;
  o.structure = static_cast<CrossStructure>(42);
  expect_invalid(BuildCross(Shape{4, 6}, Shape{4, 6}, o), "unknown structure 42");

  // An invalid Output (a failed builder upstream) and a scope whose graph holds an error.
  {
    Graph graph;
    Scope root(&graph);
    Output x0 = ops::Placeholder(root, DType::kFloat32, Shape{4, 6});
    expect_invalid(layers::CrossLayer(root, x0, Output(), full).status(), "invalid Output");
    (void)ops::Reshape(root, x0, {5, 5});  // records a graph error
    EXPECT_FALSE(root.ok());
    EXPECT_FALSE(layers::CrossLayer(root, x0, x0, full).ok());
  }
  {
    Graph graph;
    Scope root(&graph);
    Output x0 = ops::Placeholder(root, DType::kFloat32, Shape{4, 6});
    CrossNetworkOptions n;
    n.num_layers = 0;
    auto st = layers::CrossNetwork(root, x0, n).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr("num_layers 0 must be >= 1"));
    n.num_layers = 2;
    n.layer.structure = CrossStructure::kLowRank;  // rank left 0
    st = layers::CrossNetwork(root, x0, n).status();
    EXPECT_THAT(std::string(st.message()), HasSubstr("cross_network/cross"));
  }
}

}  // namespace
}  // namespace recsdk
