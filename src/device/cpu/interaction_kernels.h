// interaction_kernels.h: CPU kernels of DLRM's dot interaction (DotInteraction and its gradient)
// and their plain reference twins, which tests compare the fast kernels against.
//
// Threading: the kernels split the batch over the session's intra-op threads (ParallelFor);
// the reference functions are single-threaded. All are pure functions of their arguments.
#ifndef RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_
#define RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_

#include <cstdint>

#include "src/device/kernel.h"

namespace recsdk::internal {

// RegisterCpuInteractionKernels: DotInteraction and DotInteractionGrad, float32 and float64.
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

}  // namespace recsdk::internal

#endif  // RECSDK_SRC_DEVICE_CPU_INTERACTION_KERNELS_H_
