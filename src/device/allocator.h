// allocator.h: device memory with a limit and accounting.
//
// A LimitedAllocator hands out TensorBuffers and counts the bytes in use until each buffer is
// freed (when its last Tensor goes). Exceeding the limit is ResourceExhausted naming the pool,
// the request and the limit (the session config's graph_memory_max_size and
// variable_memory_max_size). Thread-safe.
#ifndef RECSDK_DEVICE_ALLOCATOR_H_
#define RECSDK_DEVICE_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "recsdk/tensor.h"

namespace recsdk::internal {

class LimitedAllocator {
 public:
  // `option_name` is what the message tells the user to raise.
  LimitedAllocator(std::string option_name, int64_t limit_bytes);

  StatusOr<std::shared_ptr<TensorBuffer>> Allocate(size_t bytes);
  // AllocateTensor: a zero-filled tensor counted against this pool.
  StatusOr<Tensor> AllocateTensor(DType dtype, const Shape& shape);

  int64_t in_use() const { return state_->in_use.load(); }
  int64_t peak() const { return state_->peak.load(); }
  int64_t limit() const { return limit_; }

  struct State {
    std::atomic<int64_t> in_use{0};
    std::atomic<int64_t> peak{0};
  };

 private:
  std::string option_name_;
  int64_t limit_;
  std::shared_ptr<State> state_;  // shared with live buffers, which may outlive the allocator
};

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_ALLOCATOR_H_
