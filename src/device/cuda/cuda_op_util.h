// cuda_op_util.h: what the "cuda" device's op kernel files share (cuda_op_kernels.cc, the dense
// ops; cuda_table_kernels.cc, the table ops). Internal to the CUDA backend. Threading: as kernel.h.
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_OP_UTIL_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_OP_UTIL_H_

#include <vector>

#include "recsdk/tensor.h"
#include "src/device/cuda/cuda_runtime.h"
#include "src/device/kernel.h"

namespace recsdk::cuda {

// StreamOf: the compute stream of the cuda device a kernel runs on (Internal when it runs on
// another device).
StatusOr<Stream*> StreamOf(internal::OpKernelContext& ctx);
// OnHost: `t` readable by the host (a copy through the device, waited for, when it is in device
// memory; `t` itself otherwise).
StatusOr<Tensor> OnHost(internal::OpKernelContext& ctx, const Tensor& t);
// RunOnHost: the node's CPU kernel on host copies of its inputs, its outputs copied back to the
// device. Only for ops whose resources (if any) keep their data in host memory.
Status RunOnHost(internal::OpKernelContext& ctx);
// RegisterCudaOp: registers `fn` for `op` on "cuda" and lists the op in CudaKernelOps().
void RegisterCudaOp(internal::KernelRegistry& r, const char* op, std::vector<DType> dtypes,
                    internal::LambdaKernel::Fn fn);
// RegisterCudaTableKernels: TableGather, TableGatherConcat and TableApply on "cuda"
// (cuda_table_kernels.cc).
void RegisterCudaTableKernels(internal::KernelRegistry& r);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_OP_UTIL_H_
