// host_buffer_pool.h: the free lists behind AllocateHostBuffer (include/recsdk/tensor.h).
// Thread-safe: each size class has its own mutex (no lock is shared by all sizes); the bytes held
// are one atomic counter.
//
// Why: every host Tensor used to be an aligned_alloc of its exact size, freed when the last
// reference went. The key stage's workers build each batch's tensors (SyntheticSource::GetNext,
// the key stage's outputs), and between those frees live other, variable-size allocations of the
// same thread arena, so the freed holes stopped fitting and the arena's heaps grew at their top:
// RSS rose 0.03-0.09 MB/s for as long as training ran with malloc's bytes in use flat (issue 29,
// docs/tiers.md "RSS"). Here a freed buffer goes to a free list of its size class and the next
// request of that class takes it back, so steady-state batches stop calling malloc at all.
//
// Size classes: multiples of 64 bytes up to 256, then four classes per power of two (320, 384,
// 448, 512, 640, ...), so a buffer is at most 25% larger than asked (and 64-byte aligned, as
// AllocateHostBuffer promises). Requests above kMaxPooledBytes go straight to aligned_alloc and
// back to free: glibc serves them with mmap and returns them to the system on free, so they do
// not fragment an arena.
//
// Bound: the free lists hold at most limit_bytes() (default kDefaultLimitBytes, 64 MiB); a buffer
// released when the lists are full is freed. That is the only memory this adds to a process, and
// it is inside the 512 MiB that docs/tiers.md states for batches in flight and the allocator.
#ifndef RECSDK_COMMON_HOST_BUFFER_POOL_H_
#define RECSDK_COMMON_HOST_BUFFER_POOL_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace recsdk::internal {

// HostBufferPoolStats: a snapshot of the pool's counters (each read under its class's lock, so
// the sums are not one atomic snapshot while other threads allocate).
struct HostBufferPoolStats {
  size_t bytes_held = 0;    // bytes in the free lists now
  size_t buffers_held = 0;  // buffers in the free lists now
  uint64_t reused = 0;      // Acquires served from a free list
  uint64_t allocated = 0;   // Acquires that called aligned_alloc
  uint64_t freed = 0;       // Releases that called free (too large, or the lists full)
};

class HostBufferPool {
 public:
  // kAlignment: every buffer's alignment. kMaxPooledBytes: the largest size class; larger
  // buffers are never held. kDefaultLimitBytes: the default bound on the bytes held.
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMaxPooledBytes = size_t{8} << 20;
  static constexpr size_t kDefaultLimitBytes = size_t{64} << 20;

  HostBufferPool() = default;
  // ~HostBufferPool frees the buffers held (Trim). Buffers still out must not be released after.
  ~HostBufferPool() { Trim(); }
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  // Global: the pool AllocateHostBuffer uses. Never destroyed (a Tensor in a static may be freed
  // after any other static's destructor); at exit it is trimmed and its bound set to 0, so the
  // buffers it held are freed (no leak under ASan/LSan) and those released later go to free.
  static HostBufferPool& Global();

  // CapacityFor: the bytes a buffer for a `bytes` request has (its size class, or `bytes`
  // rounded up to 64 above kMaxPooledBytes). 0 when the rounding would overflow.
  static size_t CapacityFor(size_t bytes);

  // Acquire: a kAlignment-aligned buffer of at least `bytes` bytes, its capacity in *capacity.
  // Not zeroed. Throws std::bad_alloc when the memory is not there (like operator new).
  void* Acquire(size_t bytes, size_t* capacity);
  // Release: gives back a buffer from Acquire with the capacity it reported. Held for reuse when
  // its class is pooled and the bound allows, else freed.
  void Release(void* p, size_t capacity);

  // Trim: frees every buffer held; returns the bytes freed. O(buffers held).
  size_t Trim();
  // set_limit_bytes: the bound on the bytes held (0 turns holding off). Lowering it does not
  // free what is held beyond it; call Trim for that.
  void set_limit_bytes(size_t bytes) { limit_bytes_.store(bytes, std::memory_order_relaxed); }
  size_t limit_bytes() const { return limit_bytes_.load(std::memory_order_relaxed); }

  HostBufferPoolStats stats() const;

 private:
  // 4 classes of 64..256 bytes, then 4 a power of two from (256, 512] to (4 MiB, 8 MiB].
  static constexpr int kNumClasses = 4 + 4 * 15;

  // ClassIndex: the class of a request of 1..kMaxPooledBytes bytes; ClassBytes: its capacity.
  static int ClassIndex(size_t bytes);
  static size_t ClassBytes(int index);

  // FreeList: one class's buffers, linked through their first 8 bytes. A cache line each, so
  // threads working on different sizes do not share one.
  struct alignas(64) FreeList {
    mutable std::mutex mu;
    void* head = nullptr;  // guarded by mu
    size_t count = 0;      // guarded by mu
    uint64_t reused = 0;   // guarded by mu
    uint64_t allocated = 0;
  };

  std::array<FreeList, kNumClasses> lists_;
  std::atomic<size_t> bytes_held_{0};
  std::atomic<size_t> limit_bytes_{kDefaultLimitBytes};
  std::atomic<uint64_t> freed_{0};
};

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_HOST_BUFFER_POOL_H_
