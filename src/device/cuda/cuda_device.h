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

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
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

// CounterChecks: the bad-index counters of the GPU table ops (cuda_table_kernels.cc), checked off
// the step's path. An op counts positions it could not use in a device int32 and, instead of
// reading it back at once (a host wait for all the work queued before it), hands it to Add: an
// asynchronous copy into a pinned slot and an event after it, on the compute stream. Poll reads
// the counts whose copies finished, oldest first (wait: every queued one, with a deadline): the
// first nonzero count fails the caller with its op's message. The table ops Poll at their start,
// the device's Synchronize (Session::Close, its destructor) waits for them all, so a bad batch
// fails a later table op of the session, or its end, naming the op that met it. Thread-safe.
class CounterChecks {
 public:
  // kSlots: how many counts may be in flight; the next Add first waits for the oldest.
  static constexpr int kSlots = 256;
  explicit CounterChecks(std::shared_ptr<Stream> stream) : stream_(std::move(stream)) {}
  // Add: the value of `device_counter` after the work queued so far on the stream is checked
  // later; `message(count)` is the error for a count above 0. Returns an earlier check's error.
  [[nodiscard]] Status Add(const int32_t* device_counter,
                           std::function<std::string(int32_t)> message);
  // Poll: the counts whose copies finished (every queued one when `wait`); the first error.
  [[nodiscard]] Status Poll(bool wait);
  // checked: how many counts were read so far (tests).
  int64_t checked() const;

 private:
  struct Pending {
    int slot = 0;
    std::unique_ptr<Event> copied;
    std::function<std::string(int32_t)> message;
  };
  // PollLocked: reads finished counts, waiting for the first `at_least` of them.
  Status PollLocked(size_t at_least);
  std::shared_ptr<Stream> stream_;
  mutable std::mutex mu_;
  PinnedBuffer slots_;
  std::vector<int> free_;
  std::deque<Pending> pending_;
  int64_t checked_ = 0;
};
// CounterChecksOf: the checks of a "cuda" device; null for other devices.
CounterChecks* CounterChecksOf(internal::Device* device);

// CudaKernelOps: the op types registered for "cuda" (cuda_op_kernels.cc), for tests and messages.
const std::vector<std::string>& CudaKernelOps();
// RegisterCudaKernels: the kernels behind CudaKernelOps() under "cuda" (called by
// RegisterCudaBackend). Touches nothing but the registry: it runs during static initialisation.
void RegisterCudaKernels(internal::KernelRegistry& r);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_DEVICE_H_
