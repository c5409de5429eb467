// fast_kernels.h: hot CPU kernels compiled once per instruction set (fast_kernels_isa.cc) and
// picked at run time by the CPU's features. Each has a plain reference twin in
// src/device/cpu/ref_kernels.h that tests compare against. Thread-safe (pure functions).
#ifndef RECSDK_DEVICE_CPU_FAST_KERNELS_H_
#define RECSDK_DEVICE_CPU_FAST_KERNELS_H_

#include <cstdint>

#include "src/common/cpu_features.h"

namespace recsdk::internal {

// Row-major single-precision GEMM: C[m,n] = op(A) op(B), op = transpose when the flag is set.
// lda/ldb/ldc are row strides of A, B and C as stored. Single-threaded; callers split rows.
using SgemmFn = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a,
                         const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc);
// Elementwise host operators over n contiguous float32 values.
using CompareF32Fn = void (*)(const float* x, const float* y, bool* out, int64_t n);
using BinaryF32Fn = void (*)(const float* x, const float* y, float* out, int64_t n);
using WhereF32Fn = void (*)(const bool* cond, const float* x, const float* y, float* out,
                            int64_t n);

struct FastKernels {
  Isa isa;
  SgemmFn sgemm;
  CompareF32Fn less_f32;
  CompareF32Fn greater_f32;
  BinaryF32Fn floormod_f32;
  WhereF32Fn where_f32;
};

// Fast: the table for the best ISA of this CPU (see BestIsa()).
const FastKernels& Fast();
// FastFor: the table for a given ISA (falls back to baseline if that variant was not built).
const FastKernels& FastFor(Isa isa);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_FAST_KERNELS_H_
