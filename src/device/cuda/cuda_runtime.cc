// cuda_runtime.cc: cuda_runtime.h over the CUDA runtime API and cuBLAS. Compiled by the host
// compiler (not nvcc); the only file with cudaMalloc/cudaStream calls.
#include "src/device/cuda/cuda_runtime.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "src/device/cuda/cuda_error.h"

namespace recsdk::cuda {
namespace {

struct GpuProbe {
  int count = 0;
  std::string reason;
};

// Probe: cudaGetDeviceCount once per process. On a machine without a GPU (or a driver) it fails
// (cudaErrorNoDevice, cudaErrorInsufficientDriver): that is "no GPU", not an error.
const GpuProbe& Probe() {
  static const GpuProbe probe = [] {
    GpuProbe p;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      p.reason = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(err),
                             cudaGetErrorName(err));
      (void)cudaGetLastError();  // not sticky; clear it so later calls do not report it
    } else if (count == 0) {
      p.reason = "cudaGetDeviceCount found 0 CUDA devices";
    } else {
      p.count = count;
    }
    return p;
  }();
  return probe;
}

Status NoGpu(std::string_view what) {
  return absl::FailedPreconditionError(
      fmt::format("{}: no GPU found ({}); run on a machine with an NVIDIA GPU and its driver", what,
                  Probe().reason));
}

Status CheckOrdinal(int ordinal, std::string_view what) {
  if (GpuCount() == 0) return NoGpu(what);
  if (ordinal < 0 || ordinal >= GpuCount()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: device ordinal {} is out of range; this machine has {} GPU(s), use 0..{}",
                    what, ordinal, GpuCount(), GpuCount() - 1));
  }
  return absl::OkStatus();
}

// WaitFor: polls `query` (cudaStreamQuery / cudaEventQuery) until it stops saying NotReady or
// `timeout` passes. Polling with short sleeps instead of a blocking synchronize is what gives the
// wait a deadline.
template <typename Query>
Status WaitFor(Query query, absl::Duration timeout, std::string_view what) {
  const absl::Time deadline = absl::Now() + timeout;
  int spins = 0;
  while (true) {
    const cudaError_t err = query();
    if (err != cudaErrorNotReady) return CudaStatus(err, what);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          fmt::format("{}: the GPU work did not finish within {}; the work goes on (a kernel "
                      "that never ends, or a longer job than this deadline allows)",
                      what, absl::FormatDuration(timeout)));
    }
    if (++spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

Status CudaStatus(int error, std::string_view what) {
  const auto err = static_cast<cudaError_t>(error);
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  const std::string message =
      fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  if (err == cudaErrorInvalidValue || err == cudaErrorInvalidConfiguration) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

Status CublasStatus(int status, std::string_view what) {
  const auto st = static_cast<cublasStatus_t>(status);
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = fmt::format("{}: cuBLAS error {} ({})", what, cublasGetStatusName(st),
                                          cublasGetStatusString(st));
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_NOT_SUPPORTED) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

int GpuCount() { return Probe().count; }
std::string NoGpuReason() { return Probe().reason; }

StatusOr<DeviceInfo> GetDeviceInfo(int ordinal) {
  RECSDK_RETURN_IF_ERROR(CheckOrdinal(ordinal, "GetDeviceInfo"));
  cudaDeviceProp prop{};
  RECSDK_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

StatusOr<std::unique_ptr<Stream>> Stream::Create(int ordinal) {
  RECSDK_RETURN_IF_ERROR(CheckOrdinal(ordinal, "cuda::Stream::Create"));
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  RECSDK_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  cublasHandle_t blas = nullptr;
  if (Status st = CublasStatus(cublasCreate(&blas), "cublasCreate"); !st.ok()) {
    cudaStreamDestroy(stream);
    return st;
  }
  // The handle's work goes on this stream; float32 GEMMs stay in float32 (no TF32), as the CPU.
  Status st = CublasStatus(cublasSetStream(blas, stream), "cublasSetStream");
  if (st.ok())
    st = CublasStatus(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  if (!st.ok()) {
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
    return st;
  }
  return std::unique_ptr<Stream>(new Stream(ordinal, stream, blas));
}

Stream::~Stream() {
  // Work still queued finishes first (cudaStreamDestroy returns at once and frees later).
  cublasDestroy(static_cast<cublasHandle_t>(blas_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status Stream::Synchronize(absl::Duration timeout) {
  auto* s = static_cast<cudaStream_t>(stream_);
  return WaitFor([s] { return cudaStreamQuery(s); }, timeout, "cuda::Stream::Synchronize");
}

StatusOr<std::unique_ptr<Event>> Event::Create(const Stream& stream) {
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(stream.ordinal()), "cudaSetDevice"));
  cudaEvent_t event = nullptr;
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&event), "cudaEventCreate"));
  return std::unique_ptr<Event>(new Event(event));
}

Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(event_)); }

Status Event::Record(Stream& stream) {
  return CudaStatus(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream.native())),
      "cudaEventRecord");
}

Status Event::MakeWait(Stream& stream) const {
  return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native()),
                                        static_cast<cudaEvent_t>(event_), 0),
                    "cudaStreamWaitEvent");
}

Status Event::Synchronize(absl::Duration timeout) const {
  auto* e = static_cast<cudaEvent_t>(event_);
  return WaitFor([e] { return cudaEventQuery(e); }, timeout, "cuda::Event::Synchronize");
}

StatusOr<float> Event::ElapsedMsSince(const Event& start) const {
  float ms = 0.0f;
  RECSDK_RETURN_IF_ERROR(
      CudaStatus(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_),
                                      static_cast<cudaEvent_t>(event_)),
                 "cudaEventElapsedTime"));
  return ms;
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(const Stream& stream, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        fmt::format("cuda::DeviceBuffer::Allocate: bytes is {}; pass a size >= 0", bytes));
  }
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(stream.ordinal()), "cudaSetDevice"));
  void* p = nullptr;
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, static_cast<size_t>(bytes)),
                                    fmt::format("cudaMalloc of {} bytes", bytes)));
  buffer.data_ = p;
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

StatusOr<PinnedBuffer> PinnedBuffer::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        fmt::format("cuda::PinnedBuffer::Allocate: bytes is {}; pass a size >= 0", bytes));
  }
  PinnedBuffer buffer;
  if (bytes == 0) return buffer;
  if (GpuCount() == 0) return NoGpu("cuda::PinnedBuffer::Allocate");
  void* p = nullptr;
  RECSDK_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&p, static_cast<size_t>(bytes)),
                                    fmt::format("cudaMallocHost of {} bytes", bytes)));
  buffer.data_ = p;
  buffer.bytes_ = bytes;
  return buffer;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

Status Copy(Stream& stream, void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind,
            std::string_view what) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr))) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {} bytes from {} to {}; pass a size >= 0 and non-null pointers", what,
                    bytes, src, dst));
  }
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind,
                                    static_cast<cudaStream_t>(stream.native())),
                    what);
}

}  // namespace

Status CopyHostToDevice(Stream& stream, void* device_dst, const void* host_src, int64_t bytes) {
  return Copy(stream, device_dst, host_src, bytes, cudaMemcpyHostToDevice, "CopyHostToDevice");
}
Status CopyDeviceToHost(Stream& stream, void* host_dst, const void* device_src, int64_t bytes) {
  return Copy(stream, host_dst, device_src, bytes, cudaMemcpyDeviceToHost, "CopyDeviceToHost");
}
Status CopyDeviceToDevice(Stream& stream, void* device_dst, const void* device_src, int64_t bytes) {
  return Copy(stream, device_dst, device_src, bytes, cudaMemcpyDeviceToDevice,
              "CopyDeviceToDevice");
}

Status Memset(Stream& stream, void* device_dst, int value, int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && device_dst == nullptr)) {
    return absl::InvalidArgumentError(
        fmt::format("cuda::Memset: {} bytes at {}; pass a size >= 0 and a non-null pointer", bytes,
                    device_dst));
  }
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemsetAsync(device_dst, value, static_cast<size_t>(bytes),
                                    static_cast<cudaStream_t>(stream.native())),
                    "cudaMemsetAsync");
}

}  // namespace recsdk::cuda
