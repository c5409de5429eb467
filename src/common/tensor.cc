// tensor.cc
#include "recsdk/tensor.h"

#include <algorithm>
#include <new>
#include <optional>
#include <string>

#include "fmt/format.h"
#include "src/common/check.h"
#include "src/common/checked_math.h"
#include "src/common/host_buffer_pool.h"

namespace recsdk {
namespace {

// HostBuffer: `size` bytes of a pooled block of `capacity` bytes, given back to the pool.
class HostBuffer final : public TensorBuffer {
 public:
  HostBuffer(void* data, size_t size, size_t capacity)
      : TensorBuffer(data, size), capacity_(capacity) {}
  ~HostBuffer() override { internal::HostBufferPool::Global().Release(data(), capacity_); }

 private:
  size_t capacity_;
};

}  // namespace

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned_host";
    case MemoryKind::kDevice:
      return "device";
  }
  return "unknown";
}

std::shared_ptr<TensorBuffer> AllocateHostBuffer(size_t bytes) {
  // A failed allocation throws like operator new (Acquire), so the public boundary
  // (CatchExceptions, Session::Run) reports ResourceExhausted instead of the process aborting.
  size_t capacity = 0;
  void* p = internal::HostBufferPool::Global().Acquire(bytes, &capacity);
  // The bytes past the size up to the next 64 are zeroed too, as they always were; a pooled
  // block's tail beyond that is never reachable through size().
  const size_t zeroed = std::min(capacity, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  std::memset(p, 0, zeroed);
  try {
    return std::make_shared<HostBuffer>(p, bytes, capacity);
  } catch (...) {
    internal::HostBufferPool::Global().Release(p, capacity);
    throw;
  }
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  RECSDK_CHECK_MSG(shape_.IsFullyDefined(), "Tensor shape must be fully defined");
  // The byte count of a shape from a file or a caller must not wrap into a small allocation.
  std::optional<int64_t> elements = int64_t{1};
  for (int64_t d : shape_.dims()) {
    if (elements.has_value()) elements = internal::CheckedMul(*elements, d);
  }
  std::optional<uint64_t> bytes;
  if (elements.has_value()) {
    bytes = internal::CheckedMul<uint64_t>(static_cast<uint64_t>(*elements), DTypeSize(dtype_));
  }
  if (!bytes.has_value() || *bytes > (uint64_t{1} << 62)) throw std::bad_alloc();
  num_elements_ = *elements;
  buffer_ = AllocateHostBuffer(TotalBytes());
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<TensorBuffer> buffer, size_t offset)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), offset_(offset) {
  RECSDK_CHECK_MSG(shape_.IsFullyDefined(), "Tensor shape must be fully defined");
  num_elements_ = shape_.num_elements();
  RECSDK_CHECK_MSG(buffer_ != nullptr && offset_ + TotalBytes() <= buffer_->size(),
                   "Tensor buffer is smaller than its shape");
}

StatusOr<Tensor> Tensor::Create(DType dtype, const Shape& shape) {
  if (dtype == DType::kInvalid) {
    return absl::InvalidArgumentError("Tensor::Create: the dtype is invalid; pass a real dtype");
  }
  if (!shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(
        fmt::format("Tensor::Create: shape {} has unknown or negative dimensions; every dimension "
                    "must be a known size >= 0",
                    shape.ToString()));
  }
  try {
    return Tensor(dtype, shape);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "Tensor::Create: a {} tensor of shape {} does not fit in memory; use a smaller shape",
        DTypeName(dtype), shape.ToString()));
  }
}

StatusOr<Tensor> Tensor::FromBuffer(DType dtype, const Shape& shape,
                                    std::shared_ptr<TensorBuffer> buffer, size_t offset) {
  if (dtype == DType::kInvalid || !shape.IsFullyDefined()) {
    return absl::InvalidArgumentError(
        fmt::format("Tensor::FromBuffer: needs a valid dtype and a fully defined shape, got {}",
                    shape.ToString()));
  }
  std::optional<int64_t> elements = int64_t{1};
  for (int64_t d : shape.dims()) {
    if (elements.has_value()) elements = internal::CheckedMul(*elements, d);
  }
  std::optional<uint64_t> end;
  if (elements.has_value()) {
    end = internal::CheckedMul<uint64_t>(static_cast<uint64_t>(*elements), DTypeSize(dtype));
  }
  if (end.has_value()) end = internal::CheckedAdd<uint64_t>(*end, offset);
  if (buffer == nullptr || !end.has_value() || *end > buffer->size()) {
    return absl::InvalidArgumentError(fmt::format(
        "Tensor::FromBuffer: a {} tensor of shape {} at offset {} needs a buffer of at least that "
        "many bytes; the buffer has {}",
        DTypeName(dtype), shape.ToString(), offset, buffer == nullptr ? 0 : buffer->size()));
  }
  return Tensor(dtype, shape, std::move(buffer), offset);
}

StatusOr<Tensor> Tensor::SliceRows(int64_t begin, int64_t end) const {
  if (rank() < 1 || begin < 0 || begin > end || end > dim(0)) {
    return absl::InvalidArgumentError(fmt::format(
        "Tensor::SliceRows: rows [{}, {}) are not inside dimension 0 of a tensor of shape {}; "
        "pass 0 <= begin <= end <= dim(0)",
        begin, end, shape_.ToString()));
  }
  Shape s = shape_;
  s.set_dim(0, end - begin);
  const int64_t row = dim(0) == 0 ? 0 : num_elements_ / dim(0);
  return Tensor(dtype_, s, buffer_, offset_ + static_cast<size_t>(begin * row) * DTypeSize(dtype_));
}

StatusOr<Tensor> Tensor::Reshape(const Shape& shape) const {
  if (!shape.IsFullyDefined() || shape.num_elements() != num_elements_) {
    return absl::InvalidArgumentError(fmt::format(
        "cannot reshape a tensor of shape {} ({} elements) to {}; the element count must match",
        shape_.ToString(), num_elements_, shape.ToString()));
  }
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Copy() const {
  if (!IsInitialized()) return Tensor();
  RECSDK_CHECK_MSG(on_host(), "Tensor::Copy of a device tensor; copy it through its device");
  Tensor t(dtype_, shape_);
  if (TotalBytes() > 0) std::memcpy(t.raw_data(), raw_data(), TotalBytes());
  return t;
}

void Tensor::CheckType(DType expected) const {
  if (expected != dtype_) {
    internal::CheckFailed(__FILE__, __LINE__, "dtype() == DTypeOf<T>::value",
                          fmt::format("tensor has dtype {} but was accessed as {}",
                                      DTypeName(dtype_), DTypeName(expected)));
  }
}

std::string Tensor::DebugString(int max_entries) const {
  if (!IsInitialized()) return "Tensor<uninitialized>";
  if (!on_host()) {
    return fmt::format("Tensor<{}, {}>: in device memory", DTypeName(dtype_), shape_.ToString());
  }
  std::string s = fmt::format("Tensor<{}, {}>: [", DTypeName(dtype_), shape_.ToString());
  const int64_t n = std::min<int64_t>(num_elements_, max_entries);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) s += ", ";
    switch (dtype_) {
      case DType::kFloat32:
        s += fmt::format("{}", data<float>()[i]);
        break;
      case DType::kFloat64:
        s += fmt::format("{}", data<double>()[i]);
        break;
      case DType::kInt32:
        s += fmt::format("{}", data<int32_t>()[i]);
        break;
      case DType::kInt64:
        s += fmt::format("{}", data<int64_t>()[i]);
        break;
      case DType::kBool:
        s += data<bool>()[i] ? "true" : "false";
        break;
      case DType::kUInt8:
        s += fmt::format("{}", data<uint8_t>()[i]);
        break;
      case DType::kFloat16:
        s += fmt::format("{}", data<float16>()[i].ToFloat());
        break;
      case DType::kBFloat16:
        s += fmt::format("{}", data<bfloat16>()[i].ToFloat());
        break;
      default:
        s += "?";
        break;
    }
  }
  if (n < num_elements_) s += ", ...";
  s += "]";
  return s;
}

}  // namespace recsdk
