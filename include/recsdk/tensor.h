// recsdk/tensor.h: n-dimensional arrays.
//
// A Tensor is a dtype, a fully defined shape and a reference-counted buffer of row-major
// elements. Copying a Tensor is cheap and shares the buffer; Copy() makes a deep copy. Buffers
// come from a device allocator (host memory unless a backend says otherwise).
// Thread-compatible: concurrent reads are fine, writes to a shared buffer need outside ordering.
#ifndef RECSDK_TENSOR_H_
#define RECSDK_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "recsdk/dtype.h"
#include "recsdk/shape.h"
#include "recsdk/status.h"

namespace recsdk {

// MemoryKind: where a buffer's bytes live. kHost and kPinnedHost memory is the CPU's to read and
// write (pinned host memory is also reachable by a device's copy engine); kDevice memory belongs to
// an accelerator (or the separate-memory test device) and is reached from the host only through
// that device's data transfer: the Session copies feeds in and fetches out.
enum class MemoryKind { kHost, kPinnedHost, kDevice };

// MemoryKindName: "host", "pinned_host" or "device".
const char* MemoryKindName(MemoryKind kind);

// TensorBuffer: a block of memory owned by an allocator. Subclasses free it in their destructor.
class TensorBuffer {
 public:
  virtual ~TensorBuffer() = default;
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;

  // data, size: the memory and its size in bytes.
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // memory_kind: where the bytes live (host unless the allocator says otherwise).
  virtual MemoryKind memory_kind() const { return MemoryKind::kHost; }
  // on_host: whether the CPU may read and write data() directly.
  bool on_host() const { return memory_kind() != MemoryKind::kDevice; }

 protected:
  // TensorBuffer: `size` bytes at `data`, which the subclass owns.
  TensorBuffer(void* data, size_t size) : data_(data), size_(size) {}

 private:
  void* data_;
  size_t size_;
};

// AllocateHostBuffer returns a 64-byte aligned, zero-filled host buffer of `bytes` bytes that is
// not counted against any device limit (used for tensors users build and feed).
std::shared_ptr<TensorBuffer> AllocateHostBuffer(size_t bytes);

// Tensor: a dtype, a fully defined shape and a shared buffer (see the file comment).
class Tensor {
 public:
  // An uninitialised tensor: dtype kInvalid, no buffer.
  Tensor() = default;
  // A zero-filled host tensor. `shape` must be fully defined (asserted); a shape from a file or
  // an untrusted caller goes through Create, which returns the mistake as a Status.
  Tensor(DType dtype, Shape shape);
  // A tensor over an existing buffer that holds at least the shape's bytes (asserted; FromBuffer
  // is the checked form).
  Tensor(DType dtype, Shape shape, std::shared_ptr<TensorBuffer> buffer, size_t offset = 0);

  // Create: the checked form of Tensor(dtype, shape). InvalidArgument for an invalid dtype or a
  // shape with unknown or negative dimensions; ResourceExhausted when the byte count overflows or
  // the memory is not there.
  static StatusOr<Tensor> Create(DType dtype, const Shape& shape);
  // FromBuffer: the checked form of the buffer constructor: InvalidArgument when the buffer is
  // null or smaller than offset + the shape's bytes.
  static StatusOr<Tensor> FromBuffer(DType dtype, const Shape& shape,
                                     std::shared_ptr<TensorBuffer> buffer, size_t offset = 0);

  // FromValues builds a host tensor; InvalidArgument when the value count differs from the shape.
  template <typename T>
  static StatusOr<Tensor> FromValues(const Shape& shape, absl::Span<const T> values);
  template <typename T>
  static StatusOr<Tensor> FromValues(const Shape& shape, std::initializer_list<T> values) {
    return FromValues<T>(shape, absl::Span<const T>(values.begin(), values.size()));
  }
  // Scalar: a 0-D host tensor holding `value`.
  template <typename T>
  static Tensor Scalar(T value);
  // Vector: a 1-D tensor holding `values`.
  template <typename T>
  static Tensor Vector(absl::Span<const T> values);
  template <typename T>
  static Tensor Vector(std::initializer_list<T> values) {
    return Vector<T>(absl::Span<const T>(values.begin(), values.size()));
  }

  // IsInitialized: dtype() is not kInvalid. dtype, shape, rank, dim, num_elements: the type and
  // the shape. TotalBytes: num_elements() * DTypeSize(dtype()).
  bool IsInitialized() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t num_elements() const { return num_elements_; }
  size_t TotalBytes() const { return static_cast<size_t>(num_elements_) * DTypeSize(dtype_); }

  // memory_kind: the buffer's memory kind; kHost without a buffer. on_host: not in device memory.
  MemoryKind memory_kind() const { return buffer_ ? buffer_->memory_kind() : MemoryKind::kHost; }
  bool on_host() const { return memory_kind() != MemoryKind::kDevice; }

  // raw_data: the first element's address (in device memory for a device tensor: pass it to the
  // device, never dereference it on the host); null without a buffer.
  void* raw_data() const {
    return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr;
  }
  // data<T>: the elements; T must match dtype() (checked by CheckType in debug and release).
  template <typename T>
  T* data() const {
    CheckType(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }
  // flat<T>: the elements as one span; T as for data<T>.
  template <typename T>
  absl::Span<T> flat() const {
    return absl::Span<T>(data<T>(), static_cast<size_t>(num_elements_));
  }
  // scalar<T>: the single element of a tensor with one element.
  template <typename T>
  T scalar() const {
    return *data<T>();
  }

  // Reshape shares the buffer under a new shape with the same element count.
  StatusOr<Tensor> Reshape(const Shape& shape) const;
  // SliceRows shares rows [begin, end) of dimension 0 (zero-copy); InvalidArgument naming the
  // range and dimension 0 when the tensor is a scalar or the range is not inside [0, dim(0)].
  StatusOr<Tensor> SliceRows(int64_t begin, int64_t end) const;
  // Copy makes a deep host copy of a tensor in host memory (a device tensor is copied out through
  // its device's data transfer instead).
  Tensor Copy() const;

  // buffer, buffer_offset: the buffer viewed and the byte offset of the first element in it.
  const std::shared_ptr<TensorBuffer>& buffer() const { return buffer_; }
  size_t buffer_offset() const { return offset_; }
  // SharesBufferWith: true when both tensors view the same buffer.
  bool SharesBufferWith(const Tensor& other) const { return buffer_ && buffer_ == other.buffer_; }
  // BufferRefCount: how many Tensors (and other owners) hold this buffer; 0 without a buffer.
  long BufferRefCount() const { return buffer_.use_count(); }

  // DebugString renders dtype, shape and up to `max_entries` values.
  std::string DebugString(int max_entries = 8) const;

 private:
  void CheckType(DType expected) const;

  DType dtype_ = DType::kInvalid;
  Shape shape_;
  int64_t num_elements_ = 0;
  std::shared_ptr<TensorBuffer> buffer_;
  size_t offset_ = 0;
};

template <typename T>
StatusOr<Tensor> Tensor::FromValues(const Shape& shape, absl::Span<const T> values) {
  if (!shape.IsFullyDefined() || shape.num_elements() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError("Tensor::FromValues: shape " + shape.ToString() + " holds " +
                                      std::to_string(shape.num_elements()) + " elements but " +
                                      std::to_string(values.size()) +
                                      " values were given; pass one value per element");
  }
  Tensor t(DTypeOf<T>::value, shape);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
Tensor Tensor::Scalar(T value) {
  Tensor t(DTypeOf<T>::value, Shape{});
  *t.data<T>() = value;
  return t;
}

template <typename T>
Tensor Tensor::Vector(absl::Span<const T> values) {
  Tensor t(DTypeOf<T>::value, Shape{static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace recsdk

#endif  // RECSDK_TENSOR_H_
