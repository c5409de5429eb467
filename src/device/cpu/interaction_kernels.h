// interaction_kernels.h: CPU kernels of DLRM's dot interaction (DotInteraction and its gradient)
// and of the CIN's batched outer product (BatchOuterProduct and its gradient), and their plain
// reference twins, which tests compare the fast kernels against.
//
// Threading: the kernels split the batch over the session's intra-op threads (ParallelFor);
// the reference functions are single-threaded. All are pure functions of their arguments.
#ifndef RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_
#define RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_

#include <cstdint>

#include "src/device/kernel.h"

namespace recsdk::internal {

// RegisterCpuInteractionKernels: DotInteraction, DotInteractionGrad, BatchOuterProduct and
// BatchOuterProductGrad, float32 and float64.
void RegisterCpuInteractionKernels(KernelRegistry& r);

// DotInteractionReference: out[b, p] = <x[b, i, :], x[b, j, :]> for the pairs p = (i, j), i > j,
// in the order (1,0), (2,0), (2,1), ... x is [batch, f, d] row-major, out [batch, f(f-1)/2].
template <typename T>
void DotInteractionReference(const T* x, int64_t batch, int64_t f, int64_t d, T* out);
// DotInteractionGradReference: dx[b, i, :] = sum over pairs p = (i, j) or (j, i) of
// dy[b, p] * x[b, other, :]. dx is [batch, f, d] and is overwritten.
template <typename T>
void DotInteractionGradReference(const T* x, const T* dy, int64_t batch, int64_t f, int64_t d,
                                 T* dx);

// DotInteractionFast / DotInteractionGradFast: the kernels the CPU backend runs (same contract),
// with the batch split over the calling arena's threads and d = 16 unrolled at compile time.
template <typename T>
void DotInteractionFast(const T* x, int64_t batch, int64_t f, int64_t d, T* out);
template <typename T>
void DotInteractionGradFast(const T* x, const T* dy, int64_t batch, int64_t f, int64_t d, T* dx);

// BatchOuterProductReference: z[n, i * f + j] = a[n, i] * b[n, j] for a [rows, h], b [rows, f].
template <typename T>
void BatchOuterProductReference(const T* a, const T* b, int64_t rows, int64_t h, int64_t f, T* z);
// BatchOuterProductGradReference: da[n, i] = sum_j dz[n, i * f + j] * b[n, j] and
// db[n, j] = sum_i dz[n, i * f + j] * a[n, i]; da and db are overwritten.
template <typename T>
void BatchOuterProductGradReference(const T* a, const T* b, const T* dz, int64_t rows, int64_t h,
                                    int64_t f, T* da, T* db);

// BatchOuterProductFast / BatchOuterProductGradFast: the kernels the CPU backend runs (same
// contract), rows split over the calling arena's threads. One pass over z (or dz) each: the
// forward writes it once, the gradient reads it once for both da and db.
template <typename T>
void BatchOuterProductFast(const T* a, const T* b, int64_t rows, int64_t h, int64_t f, T* z);
template <typename T>
void BatchOuterProductGradFast(const T* a, const T* b, const T* dz, int64_t rows, int64_t h,
                               int64_t f, T* da, T* db);

}  // namespace recsdk::internal

#endif  // RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_
