// cuda_device.h: the "cuda" Device, the CUDA backend behind the device seam (src/device/device.h).
//
// Memory kind kDevice: its pools allocate with cudaMalloc (and give back with cudaFree); the host
// never reads its bytes. Two streams: kernels are enqueued on the compute stream, host<->device
// copies run on the copy stream (cudaMemcpyAsync), ordered against the compute stream by CUDA
// events, never by synchronising the device. Every host wait (an event, a stream, the device) has
// a deadline and its DeadlineExceeded names what waited.
//
// Registration: the "cuda" device and its kernels (cuda_op_kernels.cc: the ops of the DLRM and
// little_demo samples that recsdk_cuda has CUDA kernels for) are registered when recsdk_cuda is
// linked into a program: a static initializer in cuda_device.cc, whose object file every program
// linking recsdk_cuda keeps (recsdk_cuda's CMakeLists forces it with --undefined). A program
// without recsdk_cuda has no "cuda" device, and Session::Create names the registered ones.
// Under mix_compile_mode the placement pass puts the ops without a CUDA kernel (the key stage,
// the key work of lookups, initialisers) and the row ops of untiered tables on the host, with
// copies. A tiered table's device tier lives in GPU memory (CreateTableTierMemory:
// cuda_tier_memory.h) and its gather and update run here (cuda_table_kernels.cc).
//
// Without a GPU (no device, no driver) creating the device fails with FailedPrecondition naming
// the missing GPU and the fix; nothing crashes. GPU ordinal 0 only.
// Threading: as any Device (one Session); launches on the compute stream are serialised by a mutex
// (cuBLAS handles are not safe for concurrent use).
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_DEVICE_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "src/device/allocator.h"
#include "src/device/cuda/cuda_runtime.h"
#include "src/device/device.h"
#include "src/device/kernel.h"

namespace recsdk::cuda {

// kCudaDeviceType: the registry name, SessionConfig::device = "cuda".
inline constexpr char kCudaDeviceType[] = "cuda";

// RegisterCudaBackend: registers the "cuda" device (memory kind kDevice) and its kernels.
// Idempotent; runs by itself when recsdk_cuda is linked (see above). Works without a GPU: only
// creating the device needs one.
void RegisterCudaBackend();

// CreateCudaDevice: the "cuda" device for `config` (pools of its limits in GPU memory).
// FailedPrecondition without a GPU: "device \"cuda\": no GPU found (...)" with the fix.
StatusOr<std::unique_ptr<internal::Device>> CreateCudaDevice(const SessionConfig& config);

// DeviceAllocator: GPU memory of device `stream.ordinal()` (cudaMalloc / cudaFree, kind kDevice);
// Zero is a cudaMemsetAsync on `stream` (the compute stream, so it is ordered before the kernel
// that allocated the buffer writes it).
std::shared_ptr<internal::Allocator> DeviceAllocator(std::shared_ptr<Stream> stream);
// PinnedHostAllocator: page-locked host memory (cudaHostAlloc / cudaFreeHost, kind kPinnedHost),
// which the copy engines read and write asynchronously.
std::shared_ptr<internal::Allocator> PinnedHostAllocator();

// ComputeStreamOf: the CUDA stream a kernel running on `device` enqueues its launches on; null
// when `device` is not a "cuda" device.
Stream* ComputeStreamOf(internal::Device* device);
// HostDeviceOf: the host ("cpu") device a "cuda" device stages the rare host-computed kernels on
// (cuda_op_kernels.cc: shapes or dtypes its CUDA kernels do not cover); null for other devices.
internal::Device* HostDeviceOf(internal::Device* device);

// CudaKernelOps: the op types registered for "cuda" (cuda_op_kernels.cc), for tests and messages.
const std::vector<std::string>& CudaKernelOps();
// RegisterCudaKernels: the kernels behind CudaKernelOps() under "cuda" (called by
// RegisterCudaBackend). Touches nothing but the registry: it runs during static initialisation.
void RegisterCudaKernels(internal::KernelRegistry& r);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_DEVICE_H_
