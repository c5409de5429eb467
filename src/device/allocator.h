// allocator.h: device memory with a limit, accounting and a cache of freed buffers.
//
// An Allocator is raw memory of one kind (host, pinned host, device): the host's is
// HostAllocator(); a backend brings its own for its device memory. A LimitedAllocator hands out
// TensorBuffers and counts the bytes in use until each buffer is freed (when its last Tensor goes).
// Exceeding the limit is ResourceExhausted naming the pool, the request and the limit (the session
// config's graph_memory_max_size and variable_memory_max_size).
//
// Freed buffers are kept, by size class, and handed out again: a training step allocates the same
// shapes every step, and a fresh large allocation costs a page fault per 4 KiB page plus the
// kernel's zeroing of each page (measured on the DLRM step: memset + faults were ~40% of the step
// before this cache). Size classes are powers of two split in 8 (at most 12.5% waste) so outputs
// whose size drifts a little between steps (unique-key counts) still meet a cached buffer. The
// cache holds at most twice the peak bytes in use plus 4 MiB (a pool holds at most three times
// its peak);
// when full, it gives back the buffers of the size class least recently used. Its bytes count
// against the limit: an allocation that would cross the limit first empties the cache.
// Thread-safe.
#ifndef RECSDK_DEVICE_ALLOCATOR_H_
#define RECSDK_DEVICE_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/tensor.h"

namespace recsdk::internal {

class MemoryCharge;

// Allocator: raw memory of one MemoryKind. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual MemoryKind kind() const = 0;
  // Allocate: `bytes` (> 0) bytes aligned to 64, contents unspecified; null when the memory is
  // not there.
  virtual void* Allocate(size_t bytes) = 0;
  // Free: gives back what Allocate returned, with the same `bytes`.
  virtual void Free(void* p, size_t bytes) = 0;
  // Zero: sets `bytes` bytes at `p` (memory of this allocator) to zero, through the device when
  // the memory is not the host's.
  virtual void Zero(void* p, size_t bytes) = 0;
};

// HostAllocator: the process's host memory (aligned_alloc / free).
std::shared_ptr<Allocator> HostAllocator();

// Fill: what a fresh tensor holds. kUninitialized is for kernels that write every element.
enum class Fill { kZero, kUninitialized };

class LimitedAllocator {
 public:
  // `option_name` is what the message tells the user to raise; `memory` is where the bytes come
  // from (host memory unless a backend passes its device memory).
  LimitedAllocator(std::string option_name, int64_t limit_bytes,
                   std::shared_ptr<Allocator> memory = HostAllocator());

  // memory_kind: where this pool's buffers live.
  MemoryKind memory_kind() const { return state_->memory->kind(); }

  StatusOr<std::shared_ptr<TensorBuffer>> Allocate(size_t bytes);
  // AllocateTensor: a tensor counted against this pool, zero-filled unless `fill` says otherwise.
  StatusOr<Tensor> AllocateTensor(DType dtype, const Shape& shape, Fill fill = Fill::kZero);

  int64_t in_use() const { return state_->in_use.load(); }
  int64_t peak() const { return state_->peak.load(); }
  int64_t limit() const { return limit_; }
  // cached_bytes: bytes of freed buffers kept for reuse (not in in_use()).
  int64_t cached_bytes() const;
  // fresh_allocations: how many buffers came from the system rather than the cache, since the
  // start (tests and benchmarks check the steady state makes none).
  int64_t fresh_allocations() const { return state_->fresh.load(); }
  // ReleaseCache: frees every cached buffer.
  void ReleaseCache();
  // Charge: counts `bytes` of memory allocated elsewhere (a tiered table's device tier, which the
  // table maps itself) against the limit until the returned charge is destroyed.
  // ResourceExhausted naming `what`, the bytes, the bytes in use, the limit and the setting to
  // raise when it does not fit (then nothing is charged).
  StatusOr<std::unique_ptr<MemoryCharge>> Charge(int64_t bytes, std::string_view what);

  // SizeClass: the capacity a request of `bytes` gets (64-byte aligned, at most 12.5% larger).
  static size_t SizeClass(size_t bytes);

  struct State {
    explicit State(std::shared_ptr<Allocator> m) : memory(std::move(m)) {}
    ~State();
    // Take: a cached buffer of exactly `capacity` bytes, or nullptr.
    void* Take(size_t capacity);
    // Give: keeps `p` (of `capacity` bytes) if the cache has room, else frees it.
    void Give(void* p, size_t capacity);
    void Drop();

    const std::shared_ptr<Allocator> memory;
    std::atomic<int64_t> in_use{0};
    std::atomic<int64_t> peak{0};
    std::atomic<int64_t> fresh{0};
    struct Bucket {
      std::vector<void*> buffers;
      uint64_t last_used = 0;  // tick of the last Take or Give in this class
    };
    std::mutex mu;
    std::map<size_t, Bucket> free;  // by capacity; guarded by mu
    int64_t cached = 0;             // guarded by mu
    uint64_t tick = 0;              // guarded by mu
  };

 private:
  std::string option_name_;
  int64_t limit_;
  std::shared_ptr<State> state_;  // shared with live buffers, which may outlive the allocator
};

// MemoryCharge: bytes counted against a LimitedAllocator's limit (Charge) until destroyed. May
// outlive the allocator.
class MemoryCharge {
 public:
  MemoryCharge(std::shared_ptr<LimitedAllocator::State> state, int64_t bytes)
      : state_(std::move(state)), bytes_(bytes) {}
  ~MemoryCharge() { state_->in_use.fetch_sub(bytes_); }
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;
  int64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<LimitedAllocator::State> state_;
  int64_t bytes_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_ALLOCATOR_H_
