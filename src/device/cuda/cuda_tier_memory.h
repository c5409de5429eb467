// cuda_tier_memory.h: the device tier of a tiered table in GPU memory on the "cuda" device
// (DeviceTierMemory of src/device/tier_memory.h over a CudaRowStore). The cuda Device returns one
// from CreateTableTierMemory, so every tiered table a Session creates on "cuda" keeps its hot rows
// on the GPU; the table's gather and update run there (cuda_table_kernels.cc) and its host code
// moves rows only through Read/ReadAsync/Write (the swaps of ExecuteTiers, fresh rows, snapshots,
// export).
//
// Ordering: Read and Write run on the store's own swap stream after the compute work enqueued
// before them (a CUDA event: the swap stream waits on the GPU, the host does not block for it).
// Read returns when the rows are in host memory. ReadAsync (a swap-out) does not wait: it gathers
// the victims' rows on the GPU into device staging and copies them (cudaMemcpyAsync) into pinned
// staging that belongs to that swap-out alone, with an event after the copy; WaitRead waits for
// the event (bounded; counted in swap_out_host_waits only when it had to), copies the rows out of
// the pinned staging and only then lets a later swap-out reuse it. Write returns once the rows are
// packed into pinned staging and their copies enqueued, recording an event; ComputeAfterWrites
// (called by the table kernels before their gather or update) makes the compute stream wait for
// those events on the GPU, so the key stage's swap-ins overlap the step still running. ComputeFence
// is an event on the compute stream (lease releases wait for it).
//
// Threading: as DeviceTierMemory (Read/Write under the table's tier lock, one at a time).
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_TIER_MEMORY_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_TIER_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "src/device/cuda/cuda_runtime.h"
#include "src/device/device.h"
#include "src/device/tier_memory.h"

namespace recsdk::cuda {

// CreateCudaTierMemory: `rows` rows of `row_floats` floats in GPU memory for the device tier of
// `label` (a table), charged exactly to `device`'s variable pool while it lives (ResourceExhausted
// naming the table and variable_memory_max_size when it does not fit); `compute` is the native
// compute stream of `device`. InvalidArgument for rows outside (0, 2^32) or row_floats < 1;
// FailedPrecondition without a GPU; ResourceExhausted when GPU memory is short.
StatusOr<std::unique_ptr<internal::DeviceTierMemory>> CreateCudaTierMemory(
    internal::Device& device, Stream& compute, int64_t rows, int row_floats,
    const std::string& label);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_TIER_MEMORY_H_
