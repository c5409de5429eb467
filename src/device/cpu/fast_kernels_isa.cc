// fast_kernels_isa.cc: kernels compiled once per ISA. The build compiles this file three times:
// plainly (baseline, no RECSDK_ISA_SUFFIX) and with RECSDK_ISA_SUFFIX=avx2 / avx512 plus the
// matching -m flags, keeping only the suffixed entry points global (cmake/RecsdkOptions.cmake).
// Everything else here, Eigen's instantiations included, stays local to its variant.
#include <Eigen/Core>
#include <cmath>
#include <cstdint>

#define RECSDK_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_CAT3(a, b, c) RECSDK_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_FAST(name) RECSDK_CAT3(recsdk_fast_kernels_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_FAST(name) RECSDK_CAT3(recsdk_fast_kernels_isa_, baseline, _##name)
#endif

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;

}  // namespace

extern "C" {

void RECSDK_FAST(sgemm)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a,
                        const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc) {
  // A row-major [r, c] matrix with row stride ld is a column-major [c, r] one: transposes are free.
  Eigen::Map<RowMajor, 0, Stride> cm(c, m, n, Stride(ldc));
  if (!trans_a && !trans_b) {
    cm.noalias() = Eigen::Map<const RowMajor, 0, Stride>(a, m, k, Stride(lda)) *
                   Eigen::Map<const RowMajor, 0, Stride>(b, k, n, Stride(ldb));
  } else if (!trans_a && trans_b) {
    cm.noalias() = Eigen::Map<const RowMajor, 0, Stride>(a, m, k, Stride(lda)) *
                   Eigen::Map<const ColMajor, 0, Stride>(b, k, n, Stride(ldb));
  } else if (trans_a && !trans_b) {
    cm.noalias() = Eigen::Map<const ColMajor, 0, Stride>(a, m, k, Stride(lda)) *
                   Eigen::Map<const RowMajor, 0, Stride>(b, k, n, Stride(ldb));
  } else {
    cm.noalias() = Eigen::Map<const ColMajor, 0, Stride>(a, m, k, Stride(lda)) *
                   Eigen::Map<const ColMajor, 0, Stride>(b, k, n, Stride(ldb));
  }
}

void RECSDK_FAST(less_f32)(const float* x, const float* y, bool* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] < y[i];
}

void RECSDK_FAST(greater_f32)(const float* x, const float* y, bool* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > y[i];
}

void RECSDK_FAST(floormod_f32)(const float* x, const float* y, float* out, int64_t n) {
  // Python semantics (the result takes the divisor's sign), exactly as fmod-then-adjust gives it.
  // With q = floor(x / y) an integer below 2^24 in magnitude, the true x - q*y is representable,
  // so a fused multiply-add (or double arithmetic without FMA) yields it exactly; a q off by one
  // (x / y rounding onto an integer) leaves r one y outside [0, y), which the adjustments fold
  // back. Branch-free, so it vectorises; rare larger quotients are redone with fmod afterwards.
  int64_t large = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::floor(x[i] / y[i]);
#ifdef __FMA__
    float r = std::fma(-q, y[i], x[i]);
    const float yv = y[i];
#else
    double r = static_cast<double>(x[i]) - static_cast<double>(q) * static_cast<double>(y[i]);
    const double yv = y[i];
#endif
    // Non-short-circuit & and | keep the loop free of branches.
    const bool wrong_sign = (r != 0) & ((r < 0) != (yv < 0));
    r = wrong_sign ? r + yv : r;
    const bool too_far = ((yv > 0) & (r >= yv)) | ((yv < 0) & (r <= yv));
    r = too_far ? r - yv : r;
    out[i] = static_cast<float>(r);
    large += !(std::fabs(q) < 16777216.0f);
  }
  if (large == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(std::floor(x[i] / y[i])) < 16777216.0f) continue;
    const float r = std::fmod(x[i], y[i]);
    out[i] = (r != 0.0f && ((r < 0.0f) != (y[i] < 0.0f))) ? r + y[i] : r;
  }
}

void RECSDK_FAST(where_f32)(const bool* cond, const float* x, const float* y, float* out,
                            int64_t n) {
  // A bit blend instead of a branch so the loop vectorises.
  const auto* c = reinterpret_cast<const uint8_t*>(cond);
  const auto* xb = reinterpret_cast<const uint32_t*>(x);
  const auto* yb = reinterpret_cast<const uint32_t*>(y);
  auto* ob = reinterpret_cast<uint32_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t mask = 0u - static_cast<uint32_t>(c[i] != 0);
    ob[i] = (xb[i] & mask) | (yb[i] & ~mask);
  }
}

}  // extern "C"
