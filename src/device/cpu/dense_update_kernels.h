// dense_update_kernels.h: the dense optimizers' elementwise update loops (ApplyAdam,
// ApplyAdagrad on float32 variables), compiled once per instruction set in dense_update_isa.cc
// (the *_isa.cc mechanism) and picked at run time by the CPU's features (dense_update_kernels.cc). The arithmetic is the
// scalar loop's in state_kernels.cc operation by operation, with no fused multiply-add (sqrt,
// divide, multiply and add are correctly rounded), so every variant is bitwise equal to it
// (tests/device/cpu/dense_update_kernels_test.cc). Thread-safe (each call touches only the
// ranges it is given).
#ifndef RECSDK_DEVICE_CPU_DENSE_UPDATE_KERNELS_H_
#define RECSDK_DEVICE_CPU_DENSE_UPDATE_KERNELS_H_

#include <cstdint>

#include "src/common/cpu_features.h"

namespace recsdk::internal {

// AdamParams: ApplyAdam's constants, each already rounded to float as the scalar loop does
// (c1 = float(1 - b1), c2 = float(1 - b2) computed in double; decay = float(lr * wd), applied
// when weight_decay is on, i.e. wd != 0).
struct AdamParams {
  float b1, b2, c1, c2, eps, lr_t, decay;
  bool weight_decay;
};

// Adam over n elements: if weight_decay, w -= decay * w (decoupled, AdamW); m = b1 m + c1 g;
// v = b2 v + (c2 g) g; w -= (lr_t m) / (sqrt(v) + eps).
using DenseAdamFn = void (*)(float* w, float* m, float* v, const float* g, int64_t n,
                             const AdamParams& p);
// Adagrad over n elements: acc += g g; w -= (lr g) / (sqrt(acc) + eps).
using DenseAdagradFn = void (*)(float* w, float* acc, const float* g, int64_t n, float lr,
                                float eps);

struct DenseUpdateKernels {
  Isa isa;
  DenseAdamFn adam;
  DenseAdagradFn adagrad;
};

// DenseUpdateFast: the variant for the best ISA of this CPU (see BestIsa()).
const DenseUpdateKernels& DenseUpdateFast();
// DenseUpdateFastFor: the variant for `isa` (baseline when that variant was not built).
const DenseUpdateKernels& DenseUpdateFastFor(Isa isa);

// The scalar reference twins (the loops state_kernels.cc ran before the variants).
void DenseAdamReference(float* w, float* m, float* v, const float* g, int64_t n,
                        const AdamParams& p);
void DenseAdagradReference(float* w, float* acc, const float* g, int64_t n, float lr, float eps);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_DENSE_UPDATE_KERNELS_H_
