// nan_propagation_test.cc: a NaN reaches the output of every elementwise CPU kernel (issue 30),
// as TensorFlow's do: Relu(NaN) is NaN, Maximum and Minimum are NaN when either operand is, a
// reduction or a softmax row holding a NaN is NaN, and the gradient kernels keep a NaN input or
// a NaN upstream gradient. A kernel that turned NaN into a number left the loss finite while the
// weights went NaN, so NanTensorHook never fired. ±Inf are checked where the op has a limit.
//
// Each op runs on every path that can compute it: the float32 kernels of both implementation
// modes (high_performance, the default, and high_precision), the plain float32 kernel (the
// reference twin, reached through the kernel registry: a Session always picks a mode), the
// float64 kernel, and the ISA variants of the vectorised host kernels this CPU can run.
// Threading: single-threaded test code.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/device/cpu/fast_kernels.h"
#include "src/device/device.h"
#include "src/device/kernel.h"

namespace recsdk {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Path: how an op is computed.
enum class Path { kHighPerformance, kHighPrecision, kPlainKernel, kFloat64 };
constexpr Path kAllPaths[] = {Path::kHighPerformance, Path::kHighPrecision, Path::kPlainKernel,
                              Path::kFloat64};

const char* PathName(Path p) {
  switch (p) {
    case Path::kHighPerformance:
      return "float32 high_performance";
    case Path::kHighPrecision:
      return "float32 high_precision";
    case Path::kPlainKernel:
      return "float32 plain kernel";
    case Path::kFloat64:
      return "float64";
  }
  return "?";
}

// Input: values and their shape, converted to the path's dtype.
struct Input {
  Shape shape;
  std::vector<double> values;
};

Tensor ToTensor(const Input& in, DType dtype) {
  if (dtype == DType::kFloat64) return *Tensor::FromValues<double>(in.shape, in.values);
  std::vector<float> f(in.values.begin(), in.values.end());
  return *Tensor::FromValues<float>(in.shape, f);
}

std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::kFloat64) {
    for (double v : t.flat<double>()) out.push_back(v);
  } else {
    EXPECT_EQ(t.dtype(), DType::kFloat32);
    for (float v : t.flat<float>()) out.push_back(v);
  }
  return out;
}

using Build = std::function<Output(const Scope&, const std::vector<Output>&)>;

// RunOp: `build` over placeholders fed with `inputs` (in the path's dtype), output `index` of the
// node it returns. The plain-kernel path runs that node's default kernel directly.
std::vector<double> RunOp(Path path, const Build& build, const std::vector<Input>& inputs,
                          int index = 0, const SessionConfig& base = {}) {
  const DType dtype = path == Path::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Graph g;
  Scope root(&g);
  std::vector<Output> placeholders;
  std::vector<Tensor> tensors;
  FeedList feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    placeholders.push_back(ops::Placeholder(root.WithOpName(name), dtype, inputs[i].shape));
    tensors.push_back(ToTensor(inputs[i], dtype));
    feeds.push_back({name, tensors.back()});
  }
  const Output y = build(root, placeholders);
  EXPECT_TRUE(g.status().ok()) << g.status();
  if (!g.status().ok() || y.node == nullptr) return {};
  if (path == Path::kPlainKernel) {
    internal::RegisterCpuBackend();
    const Node& node = *y.node;
    const internal::KernelFactory* factory =
        internal::KernelRegistry::Global().Find(node.type(), "cpu", dtype, "");
    EXPECT_NE(factory, nullptr) << node.type();
    if (factory == nullptr) return {};
    auto kernel = (*factory)(node);
    auto device = internal::DeviceRegistry::Global().Create("cpu", SessionConfig{});
    EXPECT_TRUE(kernel.ok() && device.ok());
    std::vector<const Tensor*> in;
    for (const Tensor& t : tensors) in.push_back(&t);
    std::vector<Tensor> outputs(node.num_outputs());
    internal::OpKernelContext ctx(node, device->get(), nullptr, 0, 0, in, &outputs);
    const Status s = (*kernel)->Compute(ctx);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? ToDoubles(outputs[index]) : std::vector<double>{};
  }
  SessionConfig config = base;
  config.op_select_implmode = path == Path::kHighPrecision ? "high_precision" : "high_performance";
  auto session = Session::Create(g, config);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  auto out = (*session)->Run(feeds, {Output(y.node, index).name()});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? ToDoubles((*out)[0]) : std::vector<double>{};
}

// Node: an op of type `op` over the inputs, with `attrs`.
Build Node1(const std::string& op, AttrMap attrs = {}) {
  return [op, attrs](const Scope& s, const std::vector<Output>& in) {
    return Output(s.WithOpName("y").AddNode(op, in, attrs), 0);
  };
}

// A vector of 37 elements: long enough for a full SIMD packet of every ISA plus a tail, with
// NaN at 0, 17 and 36 (first lane, mid-vector, tail), +Inf at 5 and -Inf at 6.
constexpr int kLength = 37;
constexpr int kNaNAt[] = {0, 17, 36};
constexpr int kInfAt = 5, kMinusInfAt = 6;

Input Values(double ordinary = 0.75) {
  Input in{Shape{kLength}, std::vector<double>(kLength)};
  for (int i = 0; i < kLength; ++i) in.values[i] = ordinary * (i % 2 ? 1 : -1) * (1 + i % 5);
  for (int i : kNaNAt) in.values[i] = kNaN;
  in.values[kInfAt] = kInf;
  in.values[kMinusInfAt] = -kInf;
  return in;
}

// ExpectLimit: an infinite limit exactly, a finite one within 1e-37.
void ExpectLimit(double got, double want) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_NEAR(got, want, 1e-37);
  }
}

struct UnaryCase {
  std::string op;
  AttrMap attrs;
  // The outputs at +Inf and -Inf; nullopt where the op has no meaningful limit there.
  std::optional<double> at_inf, at_minus_inf;
};

TEST(NanPropagationTest, UnaryOpsKeepNaNAndTheirLimitsAtInfinity) {
  const UnaryCase cases[] = {
      {"Relu", {}, kInf, 0.0},
      {"LeakyRelu", {{"alpha", 0.2}}, kInf, -kInf},
      {"Sigmoid", {}, 1.0, 0.0},
      {"Tanh", {}, 1.0, -1.0},
      {"Gelu", {{"approximate", false}}, kInf, std::nullopt},
      {"Gelu", {{"approximate", true}}, kInf, std::nullopt},
      {"Exp", {}, kInf, 0.0},
      {"Log", {}, kInf, std::nullopt},
      {"Sqrt", {}, kInf, std::nullopt},
      {"Rsqrt", {}, 0.0, std::nullopt},
      {"Neg", {}, -kInf, kInf},
      {"Square", {}, kInf, kInf},
      {"Abs", {}, kInf, kInf},
      {"Sign", {}, 1.0, -1.0},
  };
  for (const UnaryCase& c : cases) {
    for (Path path : kAllPaths) {
      SCOPED_TRACE(c.op + " " + PathName(path));
      const std::vector<double> y = RunOp(path, Node1(c.op, c.attrs), {Values()});
      ASSERT_EQ(y.size(), size_t{kLength});
      for (int i : kNaNAt) EXPECT_TRUE(std::isnan(y[i])) << "at " << i << ": " << y[i];
      // Finite limits within 1e-37: Eigen's vectorised exp (high_performance) clamps its
      // argument, so Exp(-Inf) there is a denormal of about 3e-39, not 0.
      if (c.at_inf) {
        ExpectLimit(y[kInfAt], *c.at_inf);
      }
      if (c.at_minus_inf) {
        ExpectLimit(y[kMinusInfAt], *c.at_minus_inf);
      }
      // Only the NaN inputs become NaN (Log, Sqrt and Rsqrt of a negative number are NaN too).
      const bool negative_is_nan = c.op == "Log" || c.op == "Sqrt" || c.op == "Rsqrt";
      for (int i = 0; i < kLength; ++i) {
        const bool nan_in = i == kNaNAt[0] || i == kNaNAt[1] || i == kNaNAt[2];
        if (!nan_in && i != kInfAt && i != kMinusInfAt && !negative_is_nan) {
          EXPECT_FALSE(std::isnan(y[i])) << "at " << i;
        }
      }
    }
  }
}

// Gradient kernels (x or y, dy) -> dx: NaN in either input is NaN in dx, on both sides of a
// kink (ReluGrad at a negative x with a NaN dy is NaN, as TensorFlow's dy * (x > 0) is).
TEST(NanPropagationTest, GradientKernelsKeepNaNFromEitherInput) {
  Input ref{Shape{kLength}, std::vector<double>(kLength, 0.5)};
  Input dy{Shape{kLength}, std::vector<double>(kLength, 1.0)};
  for (int i = 0; i < kLength; ++i) ref.values[i] = i % 2 ? 0.5 : -0.5;
  ref.values[0] = kNaN;   // NaN input, dy 1
  dy.values[17] = kNaN;   // a positive input (17 is odd), NaN dy
  dy.values[36] = kNaN;   // a negative input, NaN dy
  ref.values[20] = kNaN;  // both
  dy.values[20] = kNaN;
  for (const char* op : {"ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad",
                         "SqrtGrad", "RsqrtGrad"}) {
    for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
      SCOPED_TRACE(std::string(op) + " " + PathName(path));
      const std::vector<double> dx = RunOp(path, Node1(op), {ref, dy});
      ASSERT_EQ(dx.size(), size_t{kLength});
      for (int i : {0, 17, 20, 36}) EXPECT_TRUE(std::isnan(dx[i])) << "at " << i << ": " << dx[i];
      EXPECT_FALSE(std::isnan(dx[1]));
      EXPECT_FALSE(std::isnan(dx[2]));
    }
  }
}

// Binary ops: NaN in either operand, in every broadcasting form of the kernel (same shape,
// scalar on either side, general broadcast). Maximum and Minimum used `x > y ? x : y`, which
// kept a NaN only when it was the second operand.
TEST(NanPropagationTest, BinaryOpsKeepNaNFromEitherOperandInEveryBroadcastForm) {
  // Same shape: NaN first, NaN second, both, and NaN against ±Inf.
  Input x{Shape{kLength}, std::vector<double>(kLength, 2.0)};
  Input y{Shape{kLength}, std::vector<double>(kLength, 3.0)};
  const std::vector<std::pair<double, double>> pairs = {{kNaN, 3.0},  {2.0, kNaN},   {kNaN, kNaN},
                                                        {kInf, kNaN}, {kNaN, -kInf}, {-kInf, kNaN}};
  for (size_t i = 0; i < pairs.size(); ++i) {
    x.values[i * 6] = pairs[i].first;
    y.values[i * 6] = pairs[i].second;
  }
  const Input scalar_nan{Shape{}, {kNaN}};
  const Input row_nan{Shape{1, 3}, {1.5, kNaN, 2.0}};  // not 1: Pow(1, NaN) is 1 (IEEE)
  const Input column{Shape{2, 1}, {kNaN, 3.0}};
  for (const char* op :
       {"Maximum", "Minimum", "Add", "Sub", "Mul", "Div", "Pow", "FloorMod", "FloorDiv"}) {
    for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
      SCOPED_TRACE(std::string(op) + " " + PathName(path));
      const std::vector<double> same = RunOp(path, Node1(op), {x, y});
      ASSERT_EQ(same.size(), size_t{kLength});
      for (size_t i = 0; i < pairs.size(); ++i) {
        EXPECT_TRUE(std::isnan(same[i * 6]))
            << op << "(" << pairs[i].first << ", " << pairs[i].second << ") = " << same[i * 6];
      }
      EXPECT_FALSE(std::isnan(same[1]));
      // A NaN scalar on either side makes every element NaN.
      for (const std::vector<Input>& in :
           {std::vector<Input>{x, scalar_nan}, std::vector<Input>{scalar_nan, y}}) {
        for (double v : RunOp(path, Node1(op), in)) EXPECT_TRUE(std::isnan(v)) << v;
      }
      // [2,1] against [1,3]: row 0 of the result (column's NaN) and column 1 (the row's NaN).
      for (const std::vector<Input>& in :
           {std::vector<Input>{column, row_nan}, std::vector<Input>{row_nan, column}}) {
        const std::vector<double> b = RunOp(path, Node1(op), in);
        ASSERT_EQ(b.size(), 6u);
        for (int i : {0, 1, 2, 4}) EXPECT_TRUE(std::isnan(b[i])) << "at " << i << ": " << b[i];
        EXPECT_FALSE(std::isnan(b[3]));
        EXPECT_FALSE(std::isnan(b[5]));
      }
    }
  }
}

TEST(NanPropagationTest, ArithmeticOfManyInputsKeepsNaN) {
  const Input x{Shape{2, 3}, {1.0, kNaN, 2.0, 3.0, 4.0, 5.0}};
  const Input bias{Shape{3}, {0.5, 0.5, kNaN}};
  for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
    SCOPED_TRACE(PathName(path));
    const std::vector<double> add_n = RunOp(path, Node1("AddN"), {x, x, x});
    EXPECT_TRUE(std::isnan(add_n[1]));
    EXPECT_FALSE(std::isnan(add_n[0]));
    const std::vector<double> biased = RunOp(path, Node1("BiasAdd"), {x, bias});
    for (int i : {1, 2, 5}) EXPECT_TRUE(std::isnan(biased[i])) << "at " << i;
    EXPECT_FALSE(std::isnan(biased[3]));
    const std::vector<double> bias_grad = RunOp(path, Node1("BiasAddGrad"), {x});
    EXPECT_TRUE(std::isnan(bias_grad[1]));
    EXPECT_FALSE(std::isnan(bias_grad[0]));
    const std::vector<double> dropped =
        RunOp(path, Node1("Dropout", {{"rate", 0.5}, {"seed", int64_t{3}}}), {x});
    EXPECT_TRUE(std::isnan(dropped[1]));  // x * mask: NaN * 0 is NaN too
  }
}

// ReduceMax over the last axis (the contiguous path) and over the first (the strided path): a
// NaN makes its reduction NaN, and a row of -Inf reduces to -Inf (not the lowest finite float).
TEST(NanPropagationTest, ReduceMaxKeepsNaNAndMinusInfinity) {
  const Input x{Shape{3, 4},
                {1.0, kNaN, 3.0, 2.0,  // row 0: NaN after a smaller value
                 -kInf, -kInf, -kInf, -kInf, 5.0, 6.0, 7.0, kNaN}};
  for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
    SCOPED_TRACE(PathName(path));
    const std::vector<double> rows =
        RunOp(path, Node1("ReduceMax", {{"axes", std::vector<int64_t>{1}}}), {x});
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_TRUE(std::isnan(rows[0])) << rows[0];
    EXPECT_EQ(rows[1], -kInf);
    EXPECT_TRUE(std::isnan(rows[2])) << rows[2];
    const std::vector<double> columns =
        RunOp(path, Node1("ReduceMax", {{"axes", std::vector<int64_t>{0}}}), {x});
    ASSERT_EQ(columns.size(), 4u);
    EXPECT_TRUE(std::isnan(columns[1])) << columns[1];
    EXPECT_EQ(columns[2], 7.0);
    EXPECT_TRUE(std::isnan(columns[3])) << columns[3];
    const std::vector<double> all = RunOp(path, Node1("ReduceMax"), {x});
    EXPECT_TRUE(std::isnan(all[0])) << all[0];
    const Input minus_inf{Shape{2}, {-kInf, -kInf}};
    EXPECT_EQ(RunOp(path, Node1("ReduceMax"), {minus_inf})[0], -kInf);
    for (const char* op : {"ReduceSum", "ReduceMean"}) {
      const std::vector<double> r =
          RunOp(path, Node1(op, {{"axes", std::vector<int64_t>{1}}}), {x});
      ASSERT_EQ(r.size(), 3u);
      EXPECT_TRUE(std::isnan(r[0])) << op;
      EXPECT_EQ(r[1], -kInf) << op;
    }
    // The gradient of a NaN maximum is NaN over its row (TensorFlow: 0/0 ties); other rows keep
    // the gradient on their maximum.
    const std::vector<double> grad = RunOp(path,
                                           [](const Scope& s, const std::vector<Output>& in) {
                                             const Output m = ops::ReduceMax(s, in[0], {1});
                                             auto grads =
                                                 Gradients(s, {ops::ReduceSum(s, m)}, {in[0]});
                                             EXPECT_TRUE(grads.ok()) << grads.status();
                                             return grads.ok() ? (*grads)[0] : Output();
                                           },
                                           {Input{Shape{2, 3}, {1.0, kNaN, 3.0, 4.0, 6.0, 5.0}}});
    ASSERT_EQ(grad.size(), 6u);
    for (int i : {0, 1, 2}) EXPECT_TRUE(std::isnan(grad[i])) << "at " << i << ": " << grad[i];
    EXPECT_EQ(grad[3], 0.0);
    EXPECT_EQ(grad[4], 1.0);
    EXPECT_EQ(grad[5], 0.0);
  }
}

// Softmax rows: a NaN anywhere in a row makes the whole row NaN; other rows are unaffected.
// Along the last axis (contiguous) and along the first (strided), in every mode.
TEST(NanPropagationTest, SoftmaxAndLossesKeepNaN) {
  Input x{Shape{2, 20}, std::vector<double>(40)};
  for (int i = 0; i < 40; ++i) x.values[i] = 0.1 * (i % 7);
  x.values[13] = kNaN;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (Path path : kAllPaths) {
      SCOPED_TRACE(std::string(op) + " " + PathName(path));
      const std::vector<double> last = RunOp(path, Node1(op, {{"axis", int64_t{-1}}}), {x});
      ASSERT_EQ(last.size(), 40u);
      for (int i = 0; i < 20; ++i) EXPECT_TRUE(std::isnan(last[i])) << "at " << i;
      for (int i = 20; i < 40; ++i) EXPECT_FALSE(std::isnan(last[i])) << "at " << i;
      const std::vector<double> first = RunOp(path, Node1(op, {{"axis", int64_t{0}}}), {x});
      ASSERT_EQ(first.size(), 40u);
      EXPECT_TRUE(std::isnan(first[13]));
      EXPECT_TRUE(std::isnan(first[33]));
      EXPECT_FALSE(std::isnan(first[12]));
    }
  }
  Input labels{Shape{2, 20}, std::vector<double>(40, 0.0)};
  labels.values[3] = labels.values[25] = 1.0;
  for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
    SCOPED_TRACE(PathName(path));
    const std::vector<double> loss =
        RunOp(path, Node1("SoftmaxCrossEntropyWithLogits"), {labels, x});
    ASSERT_EQ(loss.size(), 2u);
    EXPECT_TRUE(std::isnan(loss[0]));
    EXPECT_FALSE(std::isnan(loss[1]));
    const std::vector<double> back =
        RunOp(path, Node1("SoftmaxCrossEntropyWithLogits"), {labels, x}, 1);
    EXPECT_TRUE(std::isnan(back[3]));
    EXPECT_FALSE(std::isnan(back[23]));
    const std::vector<double> sigmoid_ce =
        RunOp(path, Node1("SigmoidCrossEntropyWithLogits"), {labels, x});
    EXPECT_TRUE(std::isnan(sigmoid_ce[13]));
    EXPECT_FALSE(std::isnan(sigmoid_ce[12]));
  }
}

// FusedDense's bias + ReLU epilogue (float32 through the GEMM epilogue, float64, bfloat16
// operands), and MatMul -> BiasAdd -> Relu fused by the fuse_dense pass: a NaN input row, a NaN
// bias column, stay NaN after the ReLU.
TEST(NanPropagationTest, FusedDenseReluEpilogueKeepsNaN) {
  const Input a{Shape{3, 4}, {1, kNaN, 1, 1, -1, -1, -1, -1, 0.5, 0.5, 0.5, 0.5}};
  const Input w{Shape{4, 2}, {1, 1, 1, 1, 1, 1, 1, 1}};
  const Input b{Shape{2}, {0.0, kNaN}};
  auto check = [](const std::vector<double>& y) {
    ASSERT_EQ(y.size(), 6u);
    for (int i : {0, 1, 3, 5}) EXPECT_TRUE(std::isnan(y[i])) << "at " << i << ": " << y[i];
    EXPECT_EQ(y[2], 0.0);  // row 1 is negative: the ReLU zeroes it
    EXPECT_EQ(y[4], 2.0);
  };
  for (Path path : {Path::kHighPerformance, Path::kFloat64}) {
    SCOPED_TRACE(PathName(path));
    check(RunOp(path, Node1("FusedDense", {{"activation", std::string("relu")}}), {a, w, b}));
    SessionConfig fused;
    fused.enable_scope_fusion_passes = "fuse_dense";
    check(RunOp(
        path,
        [](const Scope& s, const std::vector<Output>& in) {
          return ops::Relu(s, ops::BiasAdd(s, ops::MatMul(s, in[0], in[1]), in[2]));
        },
        {a, w, b}, 0, fused));
  }
  SCOPED_TRACE("bfloat16 operands");
  check(RunOp(Path::kHighPerformance,
              [](const Scope& s, const std::vector<Output>& in) {
                return Output(
                    s.WithOpName("y").AddNode("FusedDense",
                                              {ops::Cast(s, in[0], DType::kBFloat16),
                                               ops::Cast(s, in[1], DType::kBFloat16), in[2]},
                                              {{"activation", std::string("relu")}}),
                    0);
              },
              {a, w, b}));
}

// DotInteraction: the 16-wide ISA kernel (d = 16) and the generic template (d = 5), forward and
// gradient. A NaN feature vector makes every pair it is in NaN.
TEST(NanPropagationTest, DotInteractionKeepsNaN) {
  for (int64_t d : {16, 5}) {
    SCOPED_TRACE(d);
    Input x{Shape{2, 3, d}, std::vector<double>(2 * 3 * d, 0.25)};
    x.values[1 * d + 2] = kNaN;  // sample 0, feature 1
    const std::vector<double> y = RunOp(Path::kHighPerformance, Node1("DotInteraction"), {x});
    ASSERT_EQ(y.size(), 6u);  // pairs (1,0), (2,0), (2,1) per sample
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_FALSE(std::isnan(y[1]));
    EXPECT_TRUE(std::isnan(y[2]));
    for (int i = 3; i < 6; ++i) EXPECT_FALSE(std::isnan(y[i]));
    const Input dy{Shape{2, 3}, {1, 1, 1, 1, 1, 1}};
    const std::vector<double> dx =
        RunOp(Path::kHighPerformance, Node1("DotInteractionGrad"), {x, dy});
    ASSERT_EQ(dx.size(), static_cast<size_t>(2 * 3 * d));
    // dx of feature 0 is dy(1,0) x_1 + dy(2,0) x_2: NaN in element 2 only.
    EXPECT_TRUE(std::isnan(dx[2]));
    EXPECT_FALSE(std::isnan(dx[0]));
    EXPECT_FALSE(std::isnan(dx[3 * d + 2]));  // sample 1
  }
}

// The vectorised host kernels of every ISA variant this CPU runs, called directly: FloorMod and
// Where pass NaN through; comparisons with NaN are false (IEEE), never a crash or a NaN bool.
TEST(NanPropagationTest, IsaVariantsOfHostKernelsKeepNaN) {
  std::vector<internal::Isa> isas = {internal::Isa::kBaseline};
  if (static_cast<int>(internal::BestIsa()) >= 1) isas.push_back(internal::Isa::kAvx2);
  if (static_cast<int>(internal::BestIsa()) >= 2) isas.push_back(internal::Isa::kAvx512);
  std::vector<float> x(kLength, 7.0f), y(kLength, 3.0f), out(kLength);
  x[0] = y[17] = x[36] = y[36] = std::numeric_limits<float>::quiet_NaN();
  x[5] = std::numeric_limits<float>::infinity();
  bool cmp[kLength];
  std::vector<char> cond(kLength);
  for (int i = 0; i < kLength; ++i) cond[i] = i % 2;
  cond[0] = 1;  // picks x[0], a NaN; cond[36] = 0 picks y[36], a NaN
  for (internal::Isa isa : isas) {
    SCOPED_TRACE(std::string(internal::IsaName(isa)));
    const internal::FastKernels& k = internal::FastFor(isa);
    k.floormod_f32(x.data(), y.data(), out.data(), kLength);
    for (int i : {0, 5, 17, 36}) EXPECT_TRUE(std::isnan(out[i])) << "at " << i << ": " << out[i];
    EXPECT_EQ(out[1], 1.0f);
    k.less_f32(x.data(), y.data(), cmp, kLength);
    for (int i : {0, 17, 36}) EXPECT_FALSE(cmp[i]);
    k.greater_f32(x.data(), y.data(), cmp, kLength);
    for (int i : {0, 17, 36}) EXPECT_FALSE(cmp[i]);
    k.where_f32(reinterpret_cast<const bool*>(cond.data()), x.data(), y.data(), out.data(),
                kLength);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::isnan(out[36]));
    EXPECT_EQ(out[17], 7.0f);
  }
}

}  // namespace
}  // namespace recsdk
