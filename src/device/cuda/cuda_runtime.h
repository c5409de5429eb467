// cuda_runtime.h: the CUDA backend's runtime in plain C++ (no CUDA header here or in any header
// that includes this one): whether a GPU is present, streams with their cuBLAS handle, events,
// device and pinned host buffers that free themselves, and copies between them.
//
// Threading: a Stream is used by one thread at a time (work on it runs in the order enqueued);
// different Streams may be used from different threads. Buffers are plain memory: who writes
// them orders the accesses through streams and events. Every wait (Stream::Synchronize,
// Event::Synchronize) has a deadline and returns DeadlineExceeded when it passes.
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_RUNTIME_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "recsdk/status.h"

namespace recsdk::cuda {

// GpuCount: how many CUDA devices this process can use; 0 when the driver reports none or
// cannot be loaded (no GPU machine: the reason is in NoGpuReason()). Cheap after the first call.
int GpuCount();
// NoGpuReason: why GpuCount() is 0 (the CUDA runtime's error, e.g. "no CUDA-capable device is
// detected"), or "" when a GPU is present.
std::string NoGpuReason();

// DeviceInfo: what the benchmarks and the proof script print about a device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  int64_t total_memory_bytes = 0;
};
// GetDeviceInfo: the properties of device `ordinal`; InvalidArgument when there is no such device.
StatusOr<DeviceInfo> GetDeviceInfo(int ordinal);

// Stream: an in-order queue of device work (a non-blocking cudaStream_t) on one device, with the
// cuBLAS handle bound to it. Kernels of cuda_kernels.h and the async copies below are enqueued on
// a Stream and return before they run; errors of a launch are returned at once, errors while
// running at the next Synchronize.
class Stream {
 public:
  // Create: a stream on device `ordinal`. FailedPrecondition without a GPU (saying why).
  static StatusOr<std::unique_ptr<Stream>> Create(int ordinal = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Synchronize: waits until every piece of work enqueued so far finished, at most `timeout`
  // (DeadlineExceeded then; the work goes on). Returns the first error the work met.
  [[nodiscard]] Status Synchronize(absl::Duration timeout = absl::Seconds(60));
  // native: the cudaStream_t, as an opaque pointer (for code of this backend that includes CUDA).
  void* native() const { return stream_; }
  // blas: the cublasHandle_t bound to this stream, as an opaque pointer.
  void* blas() const { return blas_; }
  // ordinal: the device this stream runs on.
  int ordinal() const { return ordinal_; }

 private:
  Stream(int ordinal, void* stream, void* blas) : ordinal_(ordinal), stream_(stream), blas_(blas) {}
  int ordinal_;
  void* stream_;
  void* blas_;
};

// Event: a marker in a stream's work. Record it on one stream, let another stream Wait for it
// (ordering without blocking the host), or time the work between two events.
class Event {
 public:
  // Create: an event on the current device of `stream` (timing enabled).
  static StatusOr<std::unique_ptr<Event>> Create(const Stream& stream);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Record: marks the point after the work enqueued on `stream` so far.
  [[nodiscard]] Status Record(Stream& stream);
  // MakeWait: `stream`'s later work waits for this event (on the device; the host does not block).
  [[nodiscard]] Status MakeWait(Stream& stream) const;
  // Synchronize: waits for the recorded work, at most `timeout` (DeadlineExceeded then).
  [[nodiscard]] Status Synchronize(absl::Duration timeout = absl::Seconds(60)) const;
  // ElapsedMs: milliseconds between `start` and this event (both recorded and finished).
  StatusOr<float> ElapsedMsSince(const Event& start) const;

 private:
  explicit Event(void* event) : event_(event) {}
  void* event_;
};

// DeviceBuffer: bytes of device memory (cudaMalloc), freed on destruction. Move-only. The host
// cannot read it: copy it to host memory first (CopyToHost, or Download in tests).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocate: `bytes` of device memory on the stream's device (a 0-byte buffer holds no memory).
  // ResourceExhausted when the device is full, naming the size.
  static StatusOr<DeviceBuffer> Allocate(const Stream& stream, int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // data / as<T>: the device pointer (valid only in device code and in copies).
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // bytes: the size in bytes.
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// PinnedBuffer: page-locked host memory (cudaMallocHost), which the GPU's copy engines read and
// write directly, so copies from it run asynchronously at full link speed. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // Allocate: `bytes` of pinned host memory. ResourceExhausted when the system refuses.
  static StatusOr<PinnedBuffer> Allocate(int64_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // data / as<T>: the host pointer.
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // bytes: the size in bytes.
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// CopyHostToDevice / CopyDeviceToHost / CopyDeviceToDevice: `bytes` bytes, enqueued on `stream`.
// With pinned host memory the copy is asynchronous; with pageable memory CUDA stages it and the
// call returns when the host side is done. InvalidArgument for a negative size or a null pointer
// with bytes > 0.
[[nodiscard]] Status CopyHostToDevice(Stream& stream, void* device_dst, const void* host_src,
                                      int64_t bytes);
[[nodiscard]] Status CopyDeviceToHost(Stream& stream, void* host_dst, const void* device_src,
                                      int64_t bytes);
[[nodiscard]] Status CopyDeviceToDevice(Stream& stream, void* device_dst, const void* device_src,
                                        int64_t bytes);
// Memset: sets `bytes` bytes of device memory to `value` (enqueued on `stream`).
[[nodiscard]] Status Memset(Stream& stream, void* device_dst, int value, int64_t bytes);

// Upload: a new device buffer holding `values` (synchronous: the copy finished on return).
template <typename T>
StatusOr<DeviceBuffer> Upload(Stream& stream, const std::vector<T>& values) {
  const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(T));
  StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(stream, bytes);
  if (!buffer.ok()) return buffer.status();
  if (Status st = CopyHostToDevice(stream, buffer->data(), values.data(), bytes); !st.ok()) {
    return st;
  }
  if (Status st = stream.Synchronize(); !st.ok()) return st;
  return buffer;
}

// Download: the first `count` values of a device buffer, after the stream's work so far.
template <typename T>
StatusOr<std::vector<T>> Download(Stream& stream, const DeviceBuffer& buffer, int64_t count) {
  if (count < 0 || count * static_cast<int64_t>(sizeof(T)) > buffer.bytes()) {
    return absl::InvalidArgumentError("Download: count exceeds the buffer");
  }
  std::vector<T> out(static_cast<size_t>(count));
  if (Status st = CopyDeviceToHost(stream, out.data(), buffer.data(),
                                   count * static_cast<int64_t>(sizeof(T)));
      !st.ok()) {
    return st;
  }
  if (Status st = stream.Synchronize(); !st.ok()) return st;
  return out;
}

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_RUNTIME_H_
