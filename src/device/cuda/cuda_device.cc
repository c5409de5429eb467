// cuda_device.cc: the "cuda" Device (cuda_device.h): allocators over cudaMalloc and cudaHostAlloc,
// streams and events over cudaStream_t / cudaEvent_t, the DataTransfer over cudaMemcpyAsync on the
// copy stream, and the registration that runs when recsdk_cuda is linked.
#include "src/device/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/cuda/cuda_error.h"
#include "src/device/cuda/cuda_tier_memory.h"

namespace recsdk::cuda {
namespace {

// The longest a host wait for the GPU may take (a copy, a stream, the device at a step's end).
constexpr absl::Duration kCudaWaitDeadline = absl::Minutes(5);

class CudaDeviceMemory final : public internal::Allocator {
 public:
  explicit CudaDeviceMemory(std::shared_ptr<cuda::Stream> stream) : stream_(std::move(stream)) {}
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  void* Allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaSetDevice(stream_->ordinal()) != cudaSuccess ||
        cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is a null result (the pool names it), not sticky
      return nullptr;
    }
    return p;
  }
  void Free(void* p, size_t) override {
    if (p != nullptr) (void)cudaFree(p);
  }
  void Zero(void* p, size_t bytes) override {
    // Ordered on the compute stream, before the kernel that asked for the buffer writes it. The
    // interface has no Status: a failed memset leaves the error for the stream's next check.
    (void)Memset(*stream_, p, 0, static_cast<int64_t>(bytes));
  }

 private:
  std::shared_ptr<cuda::Stream> stream_;
};

class CudaPinnedMemory final : public internal::Allocator {
 public:
  MemoryKind kind() const override { return MemoryKind::kPinnedHost; }
  void* Allocate(size_t bytes) override {
    if (GpuCount() == 0) return nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void Free(void* p, size_t) override {
    if (p != nullptr) (void)cudaFreeHost(p);
  }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
};

// CudaEvent: a point in a CUDA stream (internal::Event over cuda::Event).
class CudaEvent final : public internal::Event {
 public:
  CudaEvent(std::unique_ptr<cuda::Event> event, std::string stream_name)
      : event_(std::move(event)), stream_name_(std::move(stream_name)) {}
  bool Done() const override { return event_->Synchronize(absl::ZeroDuration()).ok(); }
  Status Wait(absl::Duration timeout) const override {
    Status s = event_->Synchronize(timeout);
    if (s.ok()) return s;
    return Status(s.code(),
                  fmt::format("waiting for an event of stream {}: {}", stream_name_, s.message()));
  }
  const cuda::Event& native() const { return *event_; }

 private:
  std::unique_ptr<cuda::Event> event_;
  std::string stream_name_;
};

// CudaStream: internal::Stream over a cuda::Stream. Run calls the kernel's Compute, which only
// enqueues launches; a mutex keeps two executor threads from using the cuBLAS handle at once.
class CudaStream final : public internal::Stream {
 public:
  CudaStream(std::string name, std::shared_ptr<cuda::Stream> stream)
      : name_(std::move(name)), stream_(std::move(stream)) {}
  const std::string& name() const override { return name_; }
  Status Run(absl::FunctionRef<Status()> work) override {
    std::lock_guard<std::mutex> lock(mu_);
    return work();
  }
  StatusOr<std::shared_ptr<internal::Event>> Record() override {
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Event> event, cuda::Event::Create(*stream_));
    RECSDK_RETURN_IF_ERROR(event->Record(*stream_));
    return std::shared_ptr<internal::Event>(std::make_shared<CudaEvent>(std::move(event), name_));
  }
  Status WaitFor(const internal::Event& event) override {
    if (const auto* cuda_event = dynamic_cast<const CudaEvent*>(&event)) {
      return cuda_event->native().MakeWait(*stream_);  // on the GPU; the host does not block
    }
    // Another backend's event (the host's are complete when recorded): the host waits, bounded.
    if (Status s = event.Wait(kCudaWaitDeadline); !s.ok()) {
      return Status(s.code(),
                    fmt::format("stream {} waiting for an event: {}", name_, s.message()));
    }
    return absl::OkStatus();
  }
  Status Synchronize(absl::Duration timeout) override {
    Status s = stream_->Synchronize(timeout);
    if (s.ok()) return s;
    return Status(s.code(), fmt::format("synchronizing stream {}: {}", name_, s.message()));
  }
  cuda::Stream& native() { return *stream_; }

 private:
  std::string name_;
  std::shared_ptr<cuda::Stream> stream_;
  std::mutex mu_;
};

// CudaTransfer: copies on the copy stream, after the compute stream's work so far (the destination
// may be a cached buffer a queued kernel still reads), and the compute stream's later work after
// the copy. A copy to the host is waited for (the caller reads it on return); a copy from pageable
// host memory returns once CUDA has staged the source; from pinned memory it is waited for, so the
// caller may free or reuse the source at once.
class CudaTransfer final : public internal::DataTransfer {
 public:
  CudaTransfer(CudaStream& compute, CudaStream& copies) : compute_(compute), copies_(copies) {}
  Status CopyHostToDevice(const Tensor& host, Tensor* device) override {
    RECSDK_RETURN_IF_ERROR(Check("CopyHostToDevice", host, device, /*to_device=*/true));
    if (host.TotalBytes() == 0) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<internal::Event> before, compute_.Record());
    RECSDK_RETURN_IF_ERROR(copies_.WaitFor(*before));
    RECSDK_RETURN_IF_ERROR(cuda::CopyHostToDevice(copies_.native(), device->raw_data(),
                                                  host.raw_data(),
                                                  static_cast<int64_t>(host.TotalBytes())));
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<internal::Event> done, copies_.Record());
    RECSDK_RETURN_IF_ERROR(compute_.WaitFor(*done));
    if (host.memory_kind() == MemoryKind::kPinnedHost) return done->Wait(kCudaWaitDeadline);
    return absl::OkStatus();
  }
  Status CopyDeviceToHost(const Tensor& device, Tensor* host) override {
    RECSDK_RETURN_IF_ERROR(Check("CopyDeviceToHost", device, host, /*to_device=*/false));
    if (device.TotalBytes() == 0) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<internal::Event> before, compute_.Record());
    RECSDK_RETURN_IF_ERROR(copies_.WaitFor(*before));
    RECSDK_RETURN_IF_ERROR(cuda::CopyDeviceToHost(copies_.native(), host->raw_data(),
                                                  device.raw_data(),
                                                  static_cast<int64_t>(device.TotalBytes())));
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<internal::Event> done, copies_.Record());
    return done->Wait(kCudaWaitDeadline);
  }

 private:
  static Status Check(const char* what, const Tensor& src, const Tensor* dst, bool to_device) {
    if (dst == nullptr || src.dtype() != dst->dtype() || src.shape() != dst->shape()) {
      return absl::InvalidArgumentError(fmt::format(
          "cuda {}: source {} {} and destination {} differ; allocate the destination with the "
          "source's dtype and shape",
          what, DTypeName(src.dtype()), src.shape().ToString(),
          dst == nullptr ? std::string("(null)")
                         : fmt::format("{} {}", DTypeName(dst->dtype()), dst->shape().ToString())));
    }
    if (src.TotalBytes() == 0) return absl::OkStatus();
    const Tensor& device = to_device ? *dst : src;
    const Tensor& host = to_device ? src : *dst;
    if (device.on_host() || !host.on_host()) {
      return absl::InvalidArgumentError(fmt::format(
          "cuda {}: the device side must be in device memory and the host side in host memory "
          "(source in {} memory, destination in {} memory)",
          what, MemoryKindName(src.memory_kind()), MemoryKindName(dst->memory_kind())));
    }
    return absl::OkStatus();
  }

  CudaStream& compute_;
  CudaStream& copies_;
};

class CudaDevice final : public internal::Device {
 public:
  CudaDevice(const SessionConfig& config, std::shared_ptr<cuda::Stream> compute,
             std::shared_ptr<cuda::Stream> copies, std::unique_ptr<internal::Device> host)
      : Device(kCudaDeviceType, 0, config, DeviceAllocator(compute)),
        compute_(name() + "/compute", compute),
        copies_(name() + "/copy", std::move(copies)),
        transfer_(compute_, copies_),
        host_(std::move(host)),
        checks_(compute),
        threads_(config.intra_op_parallelism > 0
                     ? config.intra_op_parallelism
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}
  ~CudaDevice() override {
    // Queued work may still read or write buffers and streams about to go.
    (void)Synchronize();
  }
  internal::DataTransfer& data_transfer() override { return transfer_; }
  internal::Stream& compute_stream() override { return compute_; }
  internal::Stream& copy_stream() override { return copies_; }
  Status Synchronize() override {
    RECSDK_RETURN_IF_ERROR(copies_.Synchronize(kCudaWaitDeadline));
    RECSDK_RETURN_IF_ERROR(compute_.Synchronize(kCudaWaitDeadline));
    return checks_.Poll(/*wait=*/true);
  }
  int IntraOpThreads() const override { return threads_; }
  // A tiered table's device tier lives in GPU memory: its gather and update run here
  // (cuda_table_kernels.cc), its swaps through the store's own stream (cuda_tier_memory.h).
  StatusOr<std::unique_ptr<internal::DeviceTierMemory>> CreateTableTierMemory(
      int64_t rows, int row_floats, const std::string& label) override {
    return CreateCudaTierMemory(*this, compute_.native(), rows, row_floats, label);
  }

  cuda::Stream& native_compute() { return compute_.native(); }
  internal::Device* host() { return host_.get(); }
  CounterChecks& checks() { return checks_; }

 private:
  CudaStream compute_;
  CudaStream copies_;
  CudaTransfer transfer_;
  std::unique_ptr<internal::Device> host_;
  CounterChecks checks_;
  int threads_;
};

}  // namespace

std::shared_ptr<internal::Allocator> DeviceAllocator(std::shared_ptr<cuda::Stream> stream) {
  return std::make_shared<CudaDeviceMemory>(std::move(stream));
}

std::shared_ptr<internal::Allocator> PinnedHostAllocator() {
  return std::make_shared<CudaPinnedMemory>();
}

StatusOr<std::unique_ptr<internal::Device>> CreateCudaDevice(const SessionConfig& config) {
  if (GpuCount() == 0) {
    return absl::FailedPreconditionError(fmt::format(
        "device \"cuda\": no GPU found ({}); run on a machine with an NVIDIA GPU and its driver, "
        "or set SessionConfig::device to \"cpu\"",
        NoGpuReason()));
  }
  StatusOr<std::unique_ptr<cuda::Stream>> compute = cuda::Stream::Create(0);
  if (!compute.ok()) {
    return Status(compute.status().code(),
                  fmt::format("device \"cuda\": {}", compute.status().message()));
  }
  StatusOr<std::unique_ptr<cuda::Stream>> copies = cuda::Stream::Create(0);
  if (!copies.ok()) {
    return Status(copies.status().code(),
                  fmt::format("device \"cuda\": {}", copies.status().message()));
  }
  // The host device the rare staged kernels run on (and whose pools hold their host tensors).
  internal::RegisterCpuBackend();
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<internal::Device> host,
                          internal::DeviceRegistry::Global().Create("cpu", config));
  return std::unique_ptr<internal::Device>(std::make_unique<CudaDevice>(
      config, std::shared_ptr<cuda::Stream>(*std::move(compute)),
      std::shared_ptr<cuda::Stream>(*std::move(copies)), std::move(host)));
}

cuda::Stream* ComputeStreamOf(internal::Device* device) {
  auto* cuda = dynamic_cast<CudaDevice*>(device);
  return cuda == nullptr ? nullptr : &cuda->native_compute();
}

Status CounterChecks::Add(const int32_t* device_counter,
                          std::function<std::string(int32_t)> message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_.data() == nullptr) {
    RECSDK_ASSIGN_OR_RETURN(slots_, PinnedBuffer::Allocate(kSlots * sizeof(int32_t)));
    for (int i = kSlots - 1; i >= 0; --i) free_.push_back(i);
  }
  // The ring is full: the oldest count is read first (a host wait, once per kSlots ops at most).
  if (free_.empty()) RECSDK_RETURN_IF_ERROR(PollLocked(/*at_least=*/1));
  const int slot = free_.back();
  RECSDK_RETURN_IF_ERROR(
      CopyDeviceToHost(*stream_, slots_.as<int32_t>() + slot, device_counter, sizeof(int32_t)));
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Event> copied, Event::Create(*stream_));
  RECSDK_RETURN_IF_ERROR(copied->Record(*stream_));
  free_.pop_back();
  pending_.push_back(Pending{slot, std::move(copied), std::move(message)});
  return absl::OkStatus();
}

Status CounterChecks::Poll(bool wait) {
  std::lock_guard<std::mutex> lock(mu_);
  return PollLocked(wait ? pending_.size() : 0);
}

int64_t CounterChecks::checked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checked_;
}

Status CounterChecks::PollLocked(size_t at_least) {
  Status first = absl::OkStatus();
  for (size_t read = 0; !pending_.empty(); ++read) {
    Pending& p = pending_.front();
    if (read >= at_least && !p.copied->Synchronize(absl::ZeroDuration()).ok()) break;
    if (read < at_least) {
      if (Status s = p.copied->Synchronize(kCudaWaitDeadline); !s.ok()) {
        return Status(s.code(), fmt::format("reading a GPU table op's count of bad indices ({} "
                                            "in flight): {}",
                                            pending_.size(), s.message()));
      }
    }
    const int32_t count = slots_.as<int32_t>()[p.slot];
    if (count != 0 && first.ok()) first = absl::InvalidArgumentError(p.message(count));
    free_.push_back(p.slot);
    pending_.pop_front();
    ++checked_;
  }
  return first;
}

CounterChecks* CounterChecksOf(internal::Device* device) {
  auto* cuda = dynamic_cast<CudaDevice*>(device);
  return cuda == nullptr ? nullptr : &cuda->checks();
}

internal::Device* HostDeviceOf(internal::Device* device) {
  auto* cuda = dynamic_cast<CudaDevice*>(device);
  return cuda == nullptr ? nullptr : cuda->host();
}

void RegisterCudaBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Only the registries (function-local statics) are touched: this runs during static
    // initialisation, before other files' globals may exist. The CPU backend registers itself
    // when a Session starts (InitializeRuntime) and is created by CreateCudaDevice.
    internal::DeviceRegistry::Global().Register(kCudaDeviceType, CreateCudaDevice,
                                                MemoryKind::kDevice);
    internal::KernelRegistry& r = internal::KernelRegistry::Global();
    internal::RegisterCopyKernels(r, kCudaDeviceType);
    RegisterCudaKernels(r);
  });
}

}  // namespace recsdk::cuda

// recsdk_cuda_backend_anchor: the symbol recsdk_cuda's link interface asks the linker for
// (--undefined), so this object file, and the registration below, is in every program that links
// recsdk_cuda. Static-library objects nothing refers to are otherwise left out.
extern "C" {
int recsdk_cuda_backend_anchor = 0;
}

namespace {
// Runs at program start in every program linking recsdk_cuda. The registries are function-local
// statics, so the order of static initialisation across files does not matter.
[[maybe_unused]] const bool kCudaBackendRegistered = [] {
  recsdk::cuda::RegisterCudaBackend();
  return true;
}();
}  // namespace
