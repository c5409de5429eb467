// implmode_kernels_test.cc: op_select_implmode's kernel variants (src/device/cpu/
// implmode_kernels.cc): high_precision is within half an ulp of a float64 reference, and
// high_performance is measurably less precise but within a few ulps; optypelist_for_implmode
// applies the mode only to the listed op types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kN = 20001;

// UlpDistance: |a - b| in float32 ulps at b.
double UlpDistance(float a, double b) {
  const float fb = static_cast<float>(b);
  const double ulp =
      std::nextafter(std::fabs(fb), std::numeric_limits<float>::infinity()) - std::fabs(fb);
  return std::fabs(static_cast<double>(a) - b) / ulp;
}

struct Case {
  const char* op;
  double lo, hi;
  double (*reference)(double);
};

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double Gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double Exp(double x) { return std::exp(x); }
double Log(double x) { return std::log(x); }
double Tanh(double x) { return std::tanh(x); }

std::vector<float> Inputs(double lo, double hi) {
  std::vector<float> x(kN);
  for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(lo + (hi - lo) * i / (kN - 1));
  return x;
}

// RunOp: op(x) through a Session in `mode` (optionally only for the types in `list`).
std::vector<float> RunOp(const std::string& op, const std::vector<float>& x,
                         const std::string& mode, const std::string& list = "") {
  Graph g;
  Scope root(&g);
  Output in = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{kN});
  root.WithOpName("y").AddNode(op, {in});
  EXPECT_TRUE(g.status().ok()) << g.status();
  SessionConfig c;
  c.op_select_implmode = mode;
  c.optypelist_for_implmode = list;
  auto session = Session::Create(g, c);
  EXPECT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{"x", *Tensor::FromValues<float>(Shape{kN}, x)}}, {"y"});
  EXPECT_TRUE(out.ok()) << out.status();
  const float* p = (*out)[0].data<float>();
  return std::vector<float>(p, p + kN);
}

struct Errors {
  double max_ulp = 0, mean_ulp = 0;
  double max_scaled = 0;  // max |y - ref| / max(1, |ref|): relative above 1, absolute below
};

Errors Measure(const Case& c, const std::vector<float>& x, const std::vector<float>& y) {
  Errors e;
  for (int i = 0; i < kN; ++i) {
    const double d = UlpDistance(y[i], c.reference(static_cast<double>(x[i])));
    e.max_ulp = std::max(e.max_ulp, d);
    e.mean_ulp += d / kN;
    const double ref = c.reference(static_cast<double>(x[i]));
    e.max_scaled = std::max(e.max_scaled, std::fabs(y[i] - ref) / std::max(1.0, std::fabs(ref)));
  }
  return e;
}

TEST(ImplModeKernelsTest, HighPrecisionIsHalfAnUlpAndHighPerformanceIsLessPrecise) {
  const Case cases[] = {{"Exp", -20, 20, Exp},
                        {"Log", 1e-3, 100, Log},
                        {"Sigmoid", -15, 15, Sigmoid},
                        {"Tanh", -5, 5, Tanh},
                        {"Gelu", -6, 6, Gelu}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    const std::vector<float> x = Inputs(c.lo, c.hi);
    const Errors precise = Measure(c, x, RunOp(c.op, x, "high_precision"));
    const Errors fast = Measure(c, x, RunOp(c.op, x, "high_performance"));
    std::printf(
        "%-8s high_precision max %.3f mean %.4f ulp; high_performance max %.3f mean %.4f "
        "ulp, max scaled error %.3g\n",
        c.op, precise.max_ulp, precise.mean_ulp, fast.max_ulp, fast.mean_ulp, fast.max_scaled);
    EXPECT_LE(precise.max_ulp, 0.5 + 1e-9);
    EXPECT_GT(fast.mean_ulp, precise.mean_ulp);
    EXPECT_LT(fast.max_scaled, 1e-6);  // still a float32-accurate kernel
  }
}

TEST(ImplModeKernelsTest, SoftmaxModes) {
  std::vector<float> x = Inputs(-30, 30);
  const auto precise = RunOp("Softmax", x, "high_precision");
  const auto fast = RunOp("Softmax", x, "high_performance");
  double m = -1e300, sum = 0;
  for (float v : x) m = std::max<double>(m, v);
  for (float v : x) sum += std::exp(v - m);
  double precise_err = 0, fast_err = 0;
  for (int i = 0; i < kN; ++i) {
    const double ref = std::exp(x[i] - m) / sum;
    if (ref < 1e-30) continue;
    precise_err = std::max(precise_err, UlpDistance(precise[i], ref));
    fast_err = std::max(fast_err, UlpDistance(fast[i], ref));
  }
  EXPECT_LE(precise_err, 0.5 + 1e-6);
  EXPECT_GT(fast_err, precise_err);
}

TEST(ImplModeKernelsTest, OptypelistAppliesTheModeOnlyToListedTypes) {
  const std::vector<float> x = Inputs(-5, 5);
  // Exp listed: high_precision, bit for bit the double computation rounded once.
  const auto exp = RunOp("Exp", x, "high_precision", "Exp,Softmax");
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(exp[i], static_cast<float>(std::exp(static_cast<double>(x[i])))) << x[i];
  }
  // Tanh not listed: high_performance, the same bits as that mode everywhere.
  const auto tanh_unlisted = RunOp("Tanh", x, "high_precision", "Exp,Softmax");
  const auto tanh_fast = RunOp("Tanh", x, "high_performance");
  const auto tanh_precise = RunOp("Tanh", x, "high_precision");
  EXPECT_EQ(std::memcmp(tanh_unlisted.data(), tanh_fast.data(), kN * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(tanh_unlisted.data(), tanh_precise.data(), kN * sizeof(float)), 0);
}

}  // namespace
}  // namespace recsdk
