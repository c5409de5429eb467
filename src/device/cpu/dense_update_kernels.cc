// dense_update_kernels.cc: the run-time dispatch table over the ISA variants of the dense update
// loops (dense_update_isa.cc) and the scalar reference twins.
#include "src/device/cpu/dense_update_kernels.h"

#include <cmath>
#include <cstdint>

#include "src/common/isa_dispatch.h"

#define RECSDK_DENSE_UPDATE_DECLARE(isa)                                                     \
  extern "C" {                                                                               \
  void recsdk_dense_update_isa_##isa##_adam(float*, float*, float*, const float*, int64_t,   \
                                            const recsdk::internal::AdamParams&);            \
  void recsdk_dense_update_isa_##isa##_adagrad(float*, float*, const float*, int64_t, float, \
                                               float);                                       \
  }
#define RECSDK_DENSE_UPDATE_TABLE(isa_enum, isa)                                            \
  DenseUpdateKernels {                                                                      \
    isa_enum, recsdk_dense_update_isa_##isa##_adam, recsdk_dense_update_isa_##isa##_adagrad \
  }

RECSDK_ISA_DECLARE_VARIANTS(RECSDK_DENSE_UPDATE_DECLARE)

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
  static const IsaVariants<DenseUpdateKernels> variants(
      RECSDK_ISA_VARIANT_TABLES(RECSDK_DENSE_UPDATE_TABLE));
  return variants.For(isa);
}

const DenseUpdateKernels& DenseUpdateFast() {
  static const DenseUpdateKernels& k = DenseUpdateFastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal

// The macros end here: in a unity build the next file of the batch may use the same names.
#undef RECSDK_DENSE_UPDATE_DECLARE
#undef RECSDK_DENSE_UPDATE_TABLE
