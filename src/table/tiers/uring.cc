// uring.cc: the raw io_uring ring. Threading: see uring.h.
#include "src/table/tiers/uring.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fmt/format.h"

namespace recsdk::internal {

static_assert(sizeof(io_uring_cqe) == 16, "the Cqe mirror below assumes 16-byte completions");

absl::StatusOr<std::unique_ptr<Uring>> Uring::Create(unsigned depth) {
  if (depth == 0 || depth > 4096 || (depth & (depth - 1)) != 0) {
    return absl::InvalidArgumentError(
        fmt::format("io_uring depth {} must be a power of two in [1, 4096]", depth));
  }
  io_uring_params params;
  std::memset(&params, 0, sizeof(params));
  const int fd = static_cast<int>(syscall(__NR_io_uring_setup, depth, &params));
  if (fd < 0) {
    return absl::UnavailableError(fmt::format("io_uring_setup: {}", std::strerror(errno)));
  }
  std::unique_ptr<Uring> ring(new Uring());
  ring->fd_ = fd;
  ring->depth_ = params.sq_entries;
  ring->sq_ring_bytes_ = params.sq_off.array + params.sq_entries * sizeof(unsigned);
  ring->cq_ring_bytes_ = params.cq_off.cqes + params.cq_entries * sizeof(io_uring_cqe);
  const bool single = (params.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single) {
    ring->sq_ring_bytes_ = ring->cq_ring_bytes_ =
        std::max(ring->sq_ring_bytes_, ring->cq_ring_bytes_);
  }
  void* sq = mmap(nullptr, ring->sq_ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                  fd, IORING_OFF_SQ_RING);
  if (sq == MAP_FAILED) return absl::UnavailableError("io_uring: cannot map the SQ ring");
  ring->sq_ring_ = sq;
  void* cq = sq;
  if (!single) {
    cq = mmap(nullptr, ring->cq_ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
              IORING_OFF_CQ_RING);
    if (cq == MAP_FAILED) return absl::UnavailableError("io_uring: cannot map the CQ ring");
    ring->cq_ring_ = cq;
  }
  ring->sqes_bytes_ = params.sq_entries * sizeof(io_uring_sqe);
  void* sqes = mmap(nullptr, ring->sqes_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                    fd, IORING_OFF_SQES);
  if (sqes == MAP_FAILED) return absl::UnavailableError("io_uring: cannot map the SQEs");
  ring->sqes_ = sqes;
  char* s = static_cast<char*>(sq);
  char* c = static_cast<char*>(cq);
  ring->sq_tail_ = reinterpret_cast<unsigned*>(s + params.sq_off.tail);
  ring->sq_mask_ = *reinterpret_cast<unsigned*>(s + params.sq_off.ring_mask);
  ring->sq_array_ = reinterpret_cast<unsigned*>(s + params.sq_off.array);
  ring->cq_head_ = reinterpret_cast<unsigned*>(c + params.cq_off.head);
  ring->cq_tail_ = reinterpret_cast<unsigned*>(c + params.cq_off.tail);
  ring->cq_mask_ = *reinterpret_cast<unsigned*>(c + params.cq_off.ring_mask);
  ring->cqes_ = reinterpret_cast<Cqe*>(c + params.cq_off.cqes);
  return ring;
}

Uring::~Uring() {
  if (sqes_ != nullptr) munmap(sqes_, sqes_bytes_);
  if (cq_ring_ != nullptr) munmap(cq_ring_, cq_ring_bytes_);
  if (sq_ring_ != nullptr) munmap(sq_ring_, sq_ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

bool Uring::QueueRead(int fd, void* buf, uint32_t len, uint64_t offset, uint64_t tag,
                      int rw_flags) {
  // The completion queue has 2x the entries; keeping in_flight_ <= depth_ never overflows it.
  if (in_flight_ >= depth_) return false;
  const unsigned tail = *sq_tail_;
  const unsigned index = tail & sq_mask_;
  io_uring_sqe* sqe = static_cast<io_uring_sqe*>(sqes_) + index;
  std::memset(sqe, 0, sizeof(*sqe));
  sqe->opcode = IORING_OP_READ;
  sqe->fd = fd;
  sqe->addr = reinterpret_cast<uint64_t>(buf);
  sqe->len = len;
  sqe->off = offset;
  sqe->rw_flags = rw_flags;
  sqe->user_data = tag;
  sq_array_[index] = index;
  __atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
  ++queued_;
  ++in_flight_;
  return true;
}

int Uring::SubmitAndWait(unsigned wait) {
  while (true) {
    const long r = syscall(__NR_io_uring_enter, fd_, queued_, wait,
                           wait > 0 ? IORING_ENTER_GETEVENTS : 0, nullptr, 0);
    if (r >= 0) {
      queued_ -= static_cast<unsigned>(r);
      if (queued_ == 0) return 0;
      continue;  // the kernel took part of the queue; hand it the rest
    }
    if (errno == EINTR) continue;
    return errno;
  }
}

}  // namespace recsdk::internal
