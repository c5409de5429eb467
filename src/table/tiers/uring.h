// uring.h: a minimal io_uring (Linux >= 5.6) for the SSD store's reads: a ring of `depth`
// submission entries over the raw system calls, so the library needs no liburing. Only what the
// store uses: queue reads, submit, wait for completions.
//
// Threading: not thread-safe; one owner (the SSD store guards it with a mutex).
#ifndef RECSDK_TABLE_TIERS_URING_H_
#define RECSDK_TABLE_TIERS_URING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace recsdk::internal {

class Uring {
 public:
  // Create: a ring of `depth` entries (a power of two, <= 4096). Unavailable when the kernel
  // has no io_uring or refuses it (seccomp, io_uring_disabled); the caller falls back.
  static absl::StatusOr<std::unique_ptr<Uring>> Create(unsigned depth);
  ~Uring();
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;

  unsigned depth() const { return depth_; }
  // QueueRead: queues a read of `len` bytes at `offset` of `fd` into `buf`, with preadv2's
  // `rw_flags` (e.g. RWF_NOWAIT); false when the submission queue is full (Submit and reap
  // first).
  bool QueueRead(int fd, void* buf, uint32_t len, uint64_t offset, uint64_t tag, int rw_flags = 0);
  // SubmitAndWait: hands the queued reads to the kernel and waits for at least `wait` of the
  // reads in flight to complete. Returns an errno (0 on success).
  int SubmitAndWait(unsigned wait);
  // Reap: calls f(tag, result) for each completed read (result: bytes read, or -errno), returns
  // how many.
  template <typename F>
  unsigned Reap(F&& f) {
    unsigned head = *cq_head_;
    const unsigned tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
    unsigned n = 0;
    for (; head != tail; ++head, ++n) {
      const Cqe& cqe = cqes_[head & cq_mask_];
      f(cqe.user_data, cqe.res);
    }
    __atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
    in_flight_ -= n;
    return n;
  }
  unsigned in_flight() const { return in_flight_; }

 private:
  struct Cqe {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
  };
  Uring() = default;

  int fd_ = -1;
  unsigned depth_ = 0;
  unsigned queued_ = 0;     // queued, not yet submitted
  unsigned in_flight_ = 0;  // submitted (or queued), not yet reaped
  void* sq_ring_ = nullptr;
  size_t sq_ring_bytes_ = 0;
  void* cq_ring_ = nullptr;
  size_t cq_ring_bytes_ = 0;
  void* sqes_ = nullptr;
  size_t sqes_bytes_ = 0;
  unsigned* sq_tail_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* sq_array_ = nullptr;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  Cqe* cqes_ = nullptr;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_URING_H_
