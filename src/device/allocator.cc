// allocator.cc
#include "src/device/allocator.h"

#include <cstdlib>
#include <cstring>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {
namespace {

class CountedBuffer final : public TensorBuffer {
 public:
  CountedBuffer(void* data, size_t size, std::shared_ptr<LimitedAllocator::State> state)
      : TensorBuffer(data, size), state_(std::move(state)) {}
  ~CountedBuffer() override {
    state_->in_use.fetch_sub(static_cast<int64_t>(size()));
    std::free(data());
  }

 private:
  std::shared_ptr<LimitedAllocator::State> state_;
};

}  // namespace

LimitedAllocator::LimitedAllocator(std::string option_name, int64_t limit_bytes)
    : option_name_(std::move(option_name)),
      limit_(limit_bytes),
      state_(std::make_shared<State>()) {}

StatusOr<std::shared_ptr<TensorBuffer>> LimitedAllocator::Allocate(size_t bytes) {
  const int64_t n = static_cast<int64_t>(bytes);
  const int64_t now = state_->in_use.fetch_add(n) + n;
  if (now > limit_) {
    state_->in_use.fetch_sub(n);
    return absl::ResourceExhaustedError(fmt::format(
        "out of device memory: allocating {} bytes with {} of {} bytes in use; raise {}", bytes,
        now - n, limit_, option_name_));
  }
  int64_t peak = state_->peak.load();
  while (now > peak && !state_->peak.compare_exchange_weak(peak, now)) {
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) {
    state_->in_use.fetch_sub(n);
    return absl::ResourceExhaustedError(fmt::format("host allocation of {} bytes failed", bytes));
  }
  return std::shared_ptr<TensorBuffer>(std::make_shared<CountedBuffer>(p, bytes, state_));
}

StatusOr<Tensor> LimitedAllocator::AllocateTensor(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype);
  auto buf = Allocate(bytes);
  if (!buf.ok()) return buf.status();
  if (bytes > 0) std::memset((*buf)->data(), 0, bytes);
  return Tensor(dtype, shape, *std::move(buf));
}

}  // namespace recsdk::internal
