// dense_update_isa.cc: the dense optimizers' update loops (ApplyAdam, ApplyAdagrad on float32
// variables), compiled once per instruction set like every *_isa.cc file: plainly (baseline SSE2,
// 4 floats a vector) and with RECSDK_ISA_SUFFIX=avx2 / avx512 and their -m flags (8 / 16 floats),
// keeping only the suffixed entry points global (cmake/RecsdkOptions.cmake);
// dense_update_kernels.cc holds the dispatch table and the scalar reference twins. The arithmetic
// follows DenseAdamReference / DenseAdagradReference operation by operation with no fused
// multiply-add (sqrt, divide, multiply and add are correctly rounded), so every variant is bitwise
// equal to them (tests/device/cpu/dense_update_kernels_test.cc).
#include <cstdint>

#include "src/common/simd_f32.h"
#include "src/device/cpu/dense_update_kernels.h"

// No fused multiply-add anywhere: the variants must round like the reference twins. This file is
// compiled alone (per-source options keep it out of unity batches), so the pragma stays here.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define RECSDK_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_CAT3(a, b, c) RECSDK_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_DENSE_UPDATE(name) RECSDK_CAT3(recsdk_dense_update_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_DENSE_UPDATE(name) RECSDK_CAT3(recsdk_dense_update_isa_, baseline, _##name)
#endif

namespace {

using namespace recsdk::internal::simd;  // NOLINT: the vector of this file's ISA

void AdamImpl(float* __restrict w, float* __restrict m, float* __restrict v,
              const float* __restrict g, int64_t n, const recsdk::internal::AdamParams& p) {
  const V vb1 = Set1(p.b1), vb2 = Set1(p.b2), vc1 = Set1(p.c1), vc2 = Set1(p.c2),
          veps = Set1(p.eps), vlr = Set1(p.lr_t), vdecay = Set1(p.decay);
  const bool decay = p.weight_decay;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V wi = Load(w + i);
    if (decay) wi = Sub(wi, Mul(vdecay, wi));
    const V gi = Load(g + i);
    const V mi = Add(Mul(vb1, Load(m + i)), Mul(vc1, gi));
    const V vi = Add(Mul(vb2, Load(v + i)), Mul(Mul(vc2, gi), gi));
    Store(m + i, mi);
    Store(v + i, vi);
    Store(w + i, Sub(wi, Div(Mul(vlr, mi), Add(Sqrt(vi), veps))));
  }
  for (; i < n; ++i) {
    float wi = w[i];
    if (decay) wi -= p.decay * wi;
    const float mi = p.b1 * m[i] + p.c1 * g[i];
    const float vi = p.b2 * v[i] + p.c2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - p.lr_t * mi / (SqrtS(vi) + p.eps);
  }
}

void AdagradImpl(float* __restrict w, float* __restrict acc, const float* __restrict g, int64_t n,
                 float lr, float eps) {
  const V vlr = Set1(lr), veps = Set1(eps);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const V gi = Load(g + i);
    const V a = Add(Load(acc + i), Mul(gi, gi));
    Store(acc + i, a);
    Store(w + i, Sub(Load(w + i), Div(Mul(vlr, gi), Add(Sqrt(a), veps))));
  }
  for (; i < n; ++i) {
    const float a = acc[i] + g[i] * g[i];
    acc[i] = a;
    w[i] -= lr * g[i] / (SqrtS(a) + eps);
  }
}

}  // namespace

extern "C" {

void RECSDK_DENSE_UPDATE(adam)(float* w, float* m, float* v, const float* g, int64_t n,
                               const recsdk::internal::AdamParams& p) {
  AdamImpl(w, m, v, g, n, p);
}

void RECSDK_DENSE_UPDATE(adagrad)(float* w, float* acc, const float* g, int64_t n, float lr,
                                  float eps) {
  AdagradImpl(w, acc, g, n, lr, eps);
}

}  // extern "C"
