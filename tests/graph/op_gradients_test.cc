// op_gradients_test.cc: a finite-difference gradient check for every differentiable op.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "fmt/format.h"
#include "tests/graph/gradient_checker_util.h"

namespace recsdk {
namespace {

using testing::CheckGradients;
using testing::GradCheckOptions;
using V = const std::vector<Output>&;

#define EXPECT_GRAD_OK(...)   \
  do {                        \
    Status s = (__VA_ARGS__); \
    EXPECT_TRUE(s.ok()) << s; \
  } while (false)

TEST(OpGradientsTest, BinaryWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum"}) {
    SCOPED_TRACE(op);
    const std::string name = op;
    auto build = [name](const Scope& s, V x) -> Output {
      if (name == "Add") return ops::Add(s, x[0], x[1]);
      if (name == "Sub") return ops::Sub(s, x[0], x[1]);
      if (name == "Mul") return ops::Mul(s, x[0], x[1]);
      if (name == "Div")
        return ops::Div(s, x[0], ops::Add(s, ops::Square(s, x[1]), ops::Const(s, 1.0)));
      if (name == "Maximum") return ops::Maximum(s, x[0], x[1]);
      return ops::Minimum(s, x[0], x[1]);
    };
    EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}, Shape{3, 4}}, build));
    EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}, Shape{4}}, build));
    EXPECT_GRAD_OK(CheckGradients({Shape{3, 1}, Shape{1, 4}}, build));
    EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}, Shape{}}, build));
  }
}

TEST(OpGradientsTest, Pow) {
  GradCheckOptions o;
  o.low = 0.5;
  o.high = 2.0;
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{2, 3}, Shape{2, 3}}, [](const Scope& s, V x) { return ops::Pow(s, x[0], x[1]); }, o));
}

TEST(OpGradientsTest, Unary) {
  struct Case {
    const char* name;
    std::function<Output(const Scope&, Output)> f;
    double low, high;
  };
  const std::vector<Case> cases = {
      {"Neg", [](const Scope& s, Output x) { return ops::Neg(s, x); }, -2, 2},
      {"Square", [](const Scope& s, Output x) { return ops::Square(s, x); }, -2, 2},
      {"Sqrt", [](const Scope& s, Output x) { return ops::Sqrt(s, x); }, 0.5, 2},
      {"Rsqrt", [](const Scope& s, Output x) { return ops::Rsqrt(s, x); }, 0.5, 2},
      {"Exp", [](const Scope& s, Output x) { return ops::Exp(s, x); }, -2, 2},
      {"Log", [](const Scope& s, Output x) { return ops::Log(s, x); }, 0.5, 2},
      {"Abs", [](const Scope& s, Output x) { return ops::Abs(s, x); }, 0.1, 2},
      {"Relu", [](const Scope& s, Output x) { return ops::Relu(s, x); }, -2, 2},
      {"LeakyRelu", [](const Scope& s, Output x) { return ops::LeakyRelu(s, x, 0.1f); }, -2, 2},
      {"Sigmoid", [](const Scope& s, Output x) { return ops::Sigmoid(s, x); }, -3, 3},
      {"Tanh", [](const Scope& s, Output x) { return ops::Tanh(s, x); }, -2, 2},
      {"GeluExact", [](const Scope& s, Output x) { return ops::Gelu(s, x, false); }, -3, 3},
      {"GeluTanh", [](const Scope& s, Output x) { return ops::Gelu(s, x, true); }, -3, 3},
      {"Softmax", [](const Scope& s, Output x) { return ops::Softmax(s, x); }, -2, 2},
      {"SoftmaxAxis0", [](const Scope& s, Output x) { return ops::Softmax(s, x, 0); }, -2, 2},
      {"LogSoftmax", [](const Scope& s, Output x) { return ops::LogSoftmax(s, x); }, -2, 2},
      {"Identity", [](const Scope& s, Output x) { return ops::Identity(s, x); }, -2, 2},
      {"Cast",
       [](const Scope& s, Output x) {
         return ops::Cast(s, ops::Cast(s, x, DType::kFloat32), DType::kFloat64);
       },
       -2, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GradCheckOptions o;
    o.low = c.low;
    o.high = c.high;
    if (std::string(c.name) == "Cast")
      o.delta = 1e-2;  // float32 round trip: linear, needs a wide step
    EXPECT_GRAD_OK(CheckGradients(
        {Shape{3, 5}}, [&](const Scope& s, V x) { return c.f(s, x[0]); }, o));
  }
}

TEST(OpGradientsTest, LinearAlgebra) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(fmt::format("ta={} tb={}", ta, tb));
      EXPECT_GRAD_OK(
          CheckGradients({ta ? Shape{4, 3} : Shape{3, 4}, tb ? Shape{2, 4} : Shape{4, 2}},
                         [&](const Scope& s, V x) {
                           return ops::MatMul(s, x[0], x[1], {ta, tb});
                         }));
      EXPECT_GRAD_OK(CheckGradients(
          {ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, tb ? Shape{2, 5, 4} : Shape{2, 4, 5}},
          [&](const Scope& s, V x) {
            return ops::BatchMatMul(s, x[0], x[1], {ta, tb});
          }));
    }
  }
  EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}, Shape{4}},
                                [](const Scope& s, V x) { return ops::BiasAdd(s, x[0], x[1]); }));
  EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}, Shape{3, 4}, Shape{3, 4}}, [](const Scope& s, V x) {
    return ops::AddN(s, {x[0], x[1], x[2]});
  }));
}

TEST(OpGradientsTest, ShapeOps) {
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}, Shape{2, 2}}, [](const Scope& s, V x) {
    return ops::Concat(s, {x[0], x[1]}, 1);
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{4, 3}}, [](const Scope& s, V x) {
    auto parts = ops::Split(s, x[0], 2, 0);
    return ops::Mul(s, parts[0], parts[1]);
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{4, 3}}, [](const Scope& s, V x) {
    return ops::SplitV(s, x[0], {1, -1}, 1)[1];
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{4, 5}}, [](const Scope& s, V x) {
    return ops::Slice(s, x[0], {1, 2}, {2, -1});
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 6}}, [](const Scope& s, V x) {
    return ops::Reshape(s, x[0], {3, -1});
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3, 4}}, [](const Scope& s, V x) {
    return ops::Transpose(s, x[0], {2, 0, 1});
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}},
                                [](const Scope& s, V x) { return ops::ExpandDims(s, x[0], 1); }));
  EXPECT_GRAD_OK(
      CheckGradients({Shape{2, 1, 3}}, [](const Scope& s, V x) { return ops::Squeeze(s, x[0]); }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}}, [](const Scope& s, V x) {
    return ops::Tile(s, x[0], {2, 3});
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{5, 3}}, [](const Scope& s, V x) {
    return ops::Gather(s, x[0],
                       ops::Const(s, *Tensor::FromValues<int64_t>(Shape{4}, {4, 0, 4, 2})));
  }));
  // Gather on a middle and on the last axis, with repeated indices.
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 5, 3}}, [](const Scope& s, V x) {
    return ops::Gather(s, x[0],
                       ops::Const(s, *Tensor::FromValues<int32_t>(Shape{2, 2}, {4, 0, 4, 2})), 1);
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{3, 4}}, [](const Scope& s, V x) {
    return ops::Gather(s, x[0], ops::Const(s, *Tensor::FromValues<int64_t>(Shape{3}, {3, 3, 1})),
                       -1);
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}, Shape{2, 3}}, [](const Scope& s, V x) {
    return ops::Where(s, ops::Greater(s, x[0], x[1]), ops::Square(s, x[0]), x[1]);
  }));
  EXPECT_GRAD_OK(CheckGradients({Shape{2, 3}}, [](const Scope& s, V x) {
    return ops::FloorMod(s, x[0], ops::Const(s, 0.7));
  }));
}

TEST(OpGradientsTest, Reductions) {
  for (bool keep : {false, true}) {
    for (std::vector<int64_t> axes :
         std::vector<std::vector<int64_t>>{{}, {0}, {1}, {-1}, {0, 2}}) {
      SCOPED_TRACE(fmt::format("keep={} axes={}", keep, fmt::join(axes, ",")));
      EXPECT_GRAD_OK(CheckGradients({Shape{2, 3, 4}}, [&](const Scope& s, V x) {
        return ops::ReduceSum(s, x[0], axes, {keep});
      }));
      EXPECT_GRAD_OK(CheckGradients({Shape{2, 3, 4}}, [&](const Scope& s, V x) {
        return ops::ReduceMean(s, x[0], axes, {keep});
      }));
      EXPECT_GRAD_OK(CheckGradients({Shape{2, 3, 4}}, [&](const Scope& s, V x) {
        return ops::ReduceMax(s, x[0], axes, {keep});
      }));
    }
  }
}

TEST(OpGradientsTest, Losses) {
  GradCheckOptions o;
  o.low = 0.05;
  o.high = 0.95;
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{4, 3}, Shape{4, 3}},
      [](const Scope& s, V x) {
        return ops::SigmoidCrossEntropyWithLogits(s, x[0], ops::Mul(s, x[1], ops::Const(s, 4.0)));
      },
      o));
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{4, 3}, Shape{4, 3}},
      [](const Scope& s, V x) {
        return ops::SoftmaxCrossEntropyWithLogits(s, ops::Softmax(s, x[0]),
                                                  ops::Mul(s, x[1], ops::Const(s, 3.0)));
      },
      o));
}

TEST(OpGradientsTest, DropoutGradientIsItsMask) {
  // Masks change every step, so finite differences across Runs do not apply; within one Run the
  // gradient of sum(dropout(x)) must equal the mask (0 or 1/(1-rate)).
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s, DType::kFloat64, Shape{4, 64});
  Output y = ops::Dropout(s, x, 0.25f, 7);
  auto grads = Gradients(s, {ops::ReduceSum(s, y)}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  Tensor xv(DType::kFloat64, Shape{4, 64});
  for (double& v : xv.flat<double>()) v = 1.0;
  auto out = (*session)->Run({{x, xv}}, {y, Output(y.node, 1), (*grads)[0]});
  ASSERT_TRUE(out.ok()) << out.status();
  int dropped = 0;
  for (int i = 0; i < 256; ++i) {
    const double m = (*out)[1].data<double>()[i];
    EXPECT_TRUE(m == 0.0 || std::abs(m - 1 / 0.75) < 1e-12);
    dropped += m == 0.0;
    EXPECT_DOUBLE_EQ((*out)[2].data<double>()[i], m);
    EXPECT_DOUBLE_EQ((*out)[0].data<double>()[i], m);
  }
  EXPECT_GT(dropped, 30);
  EXPECT_LT(dropped, 100);
}

TEST(OpGradientsTest, StopGradientBlocks) {
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s, DType::kFloat64, Shape{2});
  Output y = ops::ReduceSum(s, ops::Mul(s, ops::StopGradient(s, x), x));
  auto grads = Gradients(s, {y}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{x, Tensor::Vector<double>({3.0, 5.0})}}, {(*grads)[0]});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ((*out)[0].data<double>()[0], 3.0);
  EXPECT_DOUBLE_EQ((*out)[0].data<double>()[1], 5.0);
}

TEST(OpGradientsTest, DotInteraction) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 6, 16}, Shape{1, 2, 1}}) {
    EXPECT_GRAD_OK(CheckGradients(
        {shape}, [](const Scope& s, V in) { return ops::DotInteraction(s, in[0]); }));
  }
}

TEST(OpGradientsTest, DcnCross) {
  // (x0, xl, y, bias) -> x0 * (y + bias) + xl; one row and several, d with and without a tail.
  for (const auto& [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4}, {5, 7}}) {
    EXPECT_GRAD_OK(CheckGradients({Shape{rows, d}, Shape{rows, d}, Shape{rows, d}, Shape{d}},
                                  [](const Scope& s, V in) {
                                    Node* n = s.AddNode("DcnCross", {in[0], in[1], in[2], in[3]});
                                    return n == nullptr ? Output() : Output(n, 0);
                                  }));
  }
}

TEST(OpGradientsTest, FusedDense) {
  for (const char* act : {"none", "relu"}) {
    EXPECT_GRAD_OK(
        CheckGradients({Shape{5, 4}, Shape{4, 3}, Shape{3}}, [act](const Scope& s, V in) {
          return Output(s.AddNode("FusedDense", {in[0], in[1], in[2]},
                                  {{"activation", AttrValue(std::string(act))}}),
                        0);
        }));
  }
}

// AllReduceMean (recsdk/distributed.h) is the identity in a world of one rank, and so is its
// gradient. It averages float32 only, so the check runs through casts, with a step and a
// tolerance that float32 rounding allows; the two outputs of one node get their gradients from
// one backward node. The multi-rank gradient (the mean of the ranks' gradients) is exercised by
// tests/dist/mpi_data_parallel_test.cc.
TEST(OpGradientsTest, AllReduceMeanOnOneRank) {
  GradCheckOptions o;
  o.delta = 1e-2;
  o.tolerance = 1e-4;
  EXPECT_GRAD_OK(CheckGradients(
      {Shape{3, 4}, Shape{5}},
      [](const Scope& s, V in) {
        const std::vector<Output> r = AllReduceMean(
            s, {ops::Cast(s, in[0], DType::kFloat32), ops::Cast(s, in[1], DType::kFloat32)});
        // Both outputs reach y: 2 * a + sum(b) broadcast over a.
        Output a = ops::Cast(s, r[0], DType::kFloat64);
        Output b = ops::Cast(s, r[1], DType::kFloat64);
        return ops::Add(s, ops::Mul(s, a, ops::Const(s, 2.0)), ops::ReduceSum(s, b));
      },
      o));
}

}  // namespace
}  // namespace recsdk
