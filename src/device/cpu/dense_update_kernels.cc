// dense_update_kernels.cc: the ISA variants of the dense update loops
// (dense_update_kernels_body.inc, compiled here once per instruction set), the run-time dispatch
// table over them and the scalar reference twins. One object, as src/table/table_kernels.cc,
// so tests call every variant directly.
#include "src/device/cpu/dense_update_kernels.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

// No fused multiply-add anywhere: the variants must round like the reference twins.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define RECSDK_DU_NS du_baseline
#define RECSDK_DU_WIDTH 4
#include "src/device/cpu/dense_update_kernels_body.inc"
#undef RECSDK_DU_NS
#undef RECSDK_DU_WIDTH

#ifndef RECSDK_NO_ISA_VARIANTS
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define RECSDK_DU_NS du_avx2
#define RECSDK_DU_WIDTH 8
#include "src/device/cpu/dense_update_kernels_body.inc"
#undef RECSDK_DU_NS
#undef RECSDK_DU_WIDTH
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(                                                    \
    __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c")
#endif
#define RECSDK_DU_NS du_avx512
#define RECSDK_DU_WIDTH 16
#include "src/device/cpu/dense_update_kernels_body.inc"
#undef RECSDK_DU_NS
#undef RECSDK_DU_WIDTH
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace recsdk::internal {

void DenseAdamReference(float* w, float* m, float* v, const float* g, int64_t n,
                        const AdamParams& p) {
  for (int64_t i = 0; i < n; ++i) {
    if (p.weight_decay) w[i] -= p.decay * w[i];
    m[i] = p.b1 * m[i] + p.c1 * g[i];
    v[i] = p.b2 * v[i] + p.c2 * g[i] * g[i];
    w[i] -= p.lr_t * m[i] / (std::sqrt(v[i]) + p.eps);
  }
}

void DenseAdagradReference(float* w, float* acc, const float* g, int64_t n, float lr, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    acc[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(acc[i]) + eps);
  }
}

const DenseUpdateKernels& DenseUpdateFastFor(Isa isa) {
  static const DenseUpdateKernels baseline{Isa::kBaseline, du_baseline::Adam, du_baseline::Adagrad};
#ifndef RECSDK_NO_ISA_VARIANTS
  static const DenseUpdateKernels avx2{Isa::kAvx2, du_avx2::Adam, du_avx2::Adagrad};
  static const DenseUpdateKernels avx512{Isa::kAvx512, du_avx512::Adam, du_avx512::Adagrad};
  if (isa == Isa::kAvx512) return avx512;
  if (isa == Isa::kAvx2) return avx2;
#else
  (void)isa;
#endif
  return baseline;
}

const DenseUpdateKernels& DenseUpdateFast() {
  static const DenseUpdateKernels& k = DenseUpdateFastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal
