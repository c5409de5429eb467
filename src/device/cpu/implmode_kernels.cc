// implmode_kernels.cc: the two implementation modes of op_select_implmode for the float32
// transcendental ops Exp, Log, Sigmoid, Tanh, Gelu and Softmax (LogSoftmax too).
//
//   high_precision    computes each element in double and rounds once: error at most half an
//                     ulp of the float32 result (the libm float functions of the plain kernels in
//                     math_kernels.cc / nn_kernels.cc are within about one ulp).
//   high_performance  Eigen's vectorised float32 approximations (polynomial and rational forms;
//                     4-wide SSE2 in the baseline build, not yet one of the *_isa.cc AVX-512
//                     variants): a few ulps, faster (benchmarks/implmode_bench.cc). Exact Gelu
//                     in float32 keeps 0.5·x·(1 + erf(x/√2)) like the plain kernel, so far in the
//                     negative tail (|gelu| < 1e-3) its error is absolute (~1e-7), not relative.
//
// The plain kernels, registered without a mode, are the reference twins and serve every other
// dtype (the registry falls back to them). The Session picks a node's mode from
// op_select_implmode, or high_performance for op types not in optypelist_for_implmode.
//
// Threading: kernels are stateless; their parallel loops run in the session's arena.
#include <cmath>

#include "Eigen/Core"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace recsdk::internal {
namespace {

constexpr char kPrecision[] = "high_precision";
constexpr char kPerformance[] = "high_performance";
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// Elementwise kernel over float32: `chunk(in, out, n)` computes n elements.
template <typename Chunk>
void RegisterElementwise(KernelRegistry& r, const char* op, const char* mode, Chunk chunk) {
  r.RegisterFn(
      op, kCpu, {DType::kFloat32},
      [chunk](OpKernelContext& ctx) -> Status {
        const Tensor& x = ctx.input(0);
        RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.shape()));
        const float* in = x.data<float>();
        float* o = out->data<float>();
        const bool approximate = ctx.node().BoolAttr("approximate");
        ParallelFor(x.num_elements(), kElementwiseGrain,
                    [&](int64_t s, int64_t e) { chunk(in + s, o + s, e - s, approximate); });
        return absl::OkStatus();
      },
      mode);
}

// Per-element double computation, rounded once.
template <typename F>
auto InDouble(F f) {
  return [f](const float* in, float* o, int64_t n, bool approximate) {
    for (int64_t i = 0; i < n; ++i) {
      o[i] = static_cast<float>(f(static_cast<double>(in[i]), approximate));
    }
  };
}

double GeluDouble(double x, bool approximate) {
  if (approximate) {
    return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  }
  return 0.5 * x * (1 + std::erf(x * kInvSqrt2));
}

double SigmoidDouble(double x) {
  return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
}

void GeluFast(const float* in, float* o, int64_t n, bool approximate) {
  ConstArrayMap x(in, n);
  ArrayMap y(o, n);
  if (approximate) {
    y = 0.5f * x * (1.0f + (static_cast<float>(kSqrt2OverPi) * (x + 0.044715f * x.cube())).tanh());
  } else {
    y = 0.5f * x * (1.0f + (x * static_cast<float>(kInvSqrt2)).erf());
  }
}

// Softmax / LogSoftmax over the last axis (the common case); another axis uses the plain kernel's
// strided loop in this mode's arithmetic.
template <bool kPrecise>
Status Softmax(OpKernelContext& ctx, bool log) {
  const Tensor& x = ctx.input(0);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.shape()));
  const Shape& s = x.shape();
  const int64_t axis_attr = NodeAttrs(ctx.node()).Int("axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
  int64_t outer = 1, n = 1, inner = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < axis) outer *= s.dim(i);
    if (i == axis) n = s.dim(i);
    if (i > axis) inner *= s.dim(i);
  }
  const float* in = x.data<float>();
  float* o = out->data<float>();
  ParallelFor(outer * inner, GrainPerItem(n, 4096), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = (r / inner) * n * inner + r % inner;
      if constexpr (kPrecise) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) m = std::max<double>(m, in[base + j * inner]);
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(in[base + j * inner] - m);
        const double lse = m + std::log(sum);
        for (int64_t j = 0; j < n; ++j) {
          const double lv = in[base + j * inner] - lse;
          o[base + j * inner] = static_cast<float>(log ? lv : std::exp(lv));
        }
      } else if (inner == 1) {
        ConstArrayMap row(in + base, n);
        ArrayMap y(o + base, n);
        const float m = row.maxCoeff();
        y = (row - m).exp();
        const float sum = y.sum();
        if (log) {
          y = row - (m + std::log(sum));
        } else {
          y *= 1.0f / sum;
        }
      } else {
        float m = std::numeric_limits<float>::lowest();
        for (int64_t j = 0; j < n; ++j) m = std::max(m, in[base + j * inner]);
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(in[base + j * inner] - m);
        const float lse = m + std::log(sum);
        for (int64_t j = 0; j < n; ++j) {
          const float lv = in[base + j * inner] - lse;
          o[base + j * inner] = log ? lv : std::exp(lv);
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuImplModeKernels(KernelRegistry& r) {
  // high_precision: double arithmetic, one rounding.
  RegisterElementwise(r, "Exp", kPrecision, InDouble([](double x, bool) { return std::exp(x); }));
  RegisterElementwise(r, "Log", kPrecision, InDouble([](double x, bool) { return std::log(x); }));
  RegisterElementwise(r, "Sigmoid", kPrecision,
                      InDouble([](double x, bool) { return SigmoidDouble(x); }));
  RegisterElementwise(r, "Tanh", kPrecision, InDouble([](double x, bool) { return std::tanh(x); }));
  RegisterElementwise(r, "Gelu", kPrecision, InDouble(GeluDouble));
  // high_performance: Eigen's vectorised float32 forms.
  RegisterElementwise(r, "Exp", kPerformance, [](const float* in, float* o, int64_t n, bool) {
    ArrayMap(o, n) = ConstArrayMap(in, n).exp();
  });
  RegisterElementwise(r, "Log", kPerformance, [](const float* in, float* o, int64_t n, bool) {
    ArrayMap(o, n) = ConstArrayMap(in, n).log();
  });
  RegisterElementwise(r, "Sigmoid", kPerformance, [](const float* in, float* o, int64_t n, bool) {
    // Not Eigen's logistic(): its float form loses relative precision in the negative tail.
    ArrayMap(o, n) = 1.0f / (1.0f + (-ConstArrayMap(in, n)).exp());
  });
  RegisterElementwise(r, "Tanh", kPerformance, [](const float* in, float* o, int64_t n, bool) {
    ArrayMap(o, n) = ConstArrayMap(in, n).tanh();
  });
  RegisterElementwise(r, "Gelu", kPerformance, GeluFast);
  for (const char* mode : {kPrecision, kPerformance}) {
    const bool precise = std::string_view(mode) == kPrecision;
    r.RegisterFn(
        "Softmax", kCpu, {DType::kFloat32},
        [precise](OpKernelContext& ctx) {
          return precise ? Softmax<true>(ctx, false) : Softmax<false>(ctx, false);
        },
        mode);
    r.RegisterFn(
        "LogSoftmax", kCpu, {DType::kFloat32},
        [precise](OpKernelContext& ctx) {
          return precise ? Softmax<true>(ctx, true) : Softmax<false>(ctx, true);
        },
        mode);
  }
}

}  // namespace recsdk::internal
