// communicator.h: the collectives through which the ranks of a distributed job exchange data.
//
// A Communicator is the one door between recsdk's ranks: dense gradients are all-reduced through
// it, sharded tables send keys, rows and gradients to their owners with AllToAllV, the chief
// broadcasts initial variables. Two implementations: LocalCommunicator (local_communicator.h, a
// world of one process, what a plain single-process program gets: each collective is a copy) and
// MpiCommunicator (src/dist/mpi/, its own target recsdk::mpi, non-blocking Open MPI calls).
// CreateCommunicator (create_communicator.h) picks one from the launcher's environment.
//
// The rules, the same for every implementation (the non-virtual methods below check the
// arguments, once, before an implementation sees them, so a program whose calls pass on one
// process pass on N):
// - Every collective takes a Deadline (deadline.h) and returns a Status. When the deadline passes
//   the call fails with DeadlineExceeded naming the collective, its sequence number, the step and
//   label of its CallTag, and the ranks that had not joined, as far as this rank can know.
// - Bad arguments (a buffer too short, counts that do not add up, a root out of range) fail with
//   InvalidArgument naming the argument, its value and the rule; no data moves then. Under MPI a
//   rank whose arguments are refused still tells the others (collective_header.h), so every rank
//   fails the same call at once instead of waiting for its deadline.
// - Every rank issues the same collectives in the same order: call k of one rank meets call k of
//   every other. Each call takes the next sequence number of its communicator; before any data
//   moves, MPI compares (sequence number, kind, step, label, counts) across ranks and fails with
//   an error naming both ranks' collectives when they differ (collective_header.h). Different
//   orders, the classic MPI deadlock, are an error instead of a hang or a silent mix-up.
// - Counts and displacements are in elements of the typed call (bytes for uint8_t / std::byte).
//
// Threading: not thread-safe. One thread at a time per communicator, and collectives must be
// issued in one program order per rank (two threads issuing collectives on one communicator
// would race for the sequence numbers, which is the mismatch the rules above forbid). Different
// communicators may be used from different threads.
#ifndef RECSDK_DIST_COMMUNICATOR_H_
#define RECSDK_DIST_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "recsdk/dtype.h"
#include "src/dist/deadline.h"

namespace recsdk::dist {

// CollectiveKind: which collective a call is. The values travel between ranks (MPI headers):
// pinned.
enum class CollectiveKind : int32_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kAllGatherV = 4,
  kAllToAll = 5,
  kAllToAllV = 6,
  kBarrier = 7,
  kExchangeV = 8,
};

// CollectiveKindName: "AllReduce", "Broadcast", ...; "unknown(<n>)" for other values.
std::string CollectiveKindName(CollectiveKind kind);

// ReduceOp: how AllReduce combines the ranks' values. Pinned like CollectiveKind.
enum class ReduceOp : int32_t {
  kSum = 1,
  // kMean: the sum divided by size() (a division, not a multiplication by 1/size(), so that a
  // mean of equal values is exact).
  kMean = 2,
};

// ReduceOpName: "sum" or "mean"; "unknown(<n>)" for other values.
std::string ReduceOpName(ReduceOp op);

// CallTag: what a collective is for. It appears in the call's errors, and under MPI it must be
// the same on every rank: a different step or label on another rank is reported as a mismatch
// of the collectives' order.
struct CallTag {
  // step: the training step the call belongs to; -1 (the default) when none.
  int64_t step = -1;
  // label: a short name ("dense_grads", "user_table/keys"); any length (ranks compare a
  // fingerprint of it, and messages show its first 31 bytes). Must outlive the call.
  std::string_view label;
  // keep_alive: null (the default), or a later deadline that another thread moves on, as
  // nanoseconds since the steady clock's epoch (DeadlineClock::time_since_epoch): the call then
  // fails only once both its deadline and *keep_alive have passed. Not compared across ranks.
  // The ps's waits for the workers, which their heartbeat keeps alive (ps_heartbeat.h). Must
  // outlive the call.
  const std::atomic<int64_t>* keep_alive = nullptr;
};

// BlockLayout: where each rank's block lies in the buffer of a V collective, in elements.
struct BlockLayout {
  // counts[r]: the elements of rank r's block. One per rank, each >= 0.
  absl::Span<const int64_t> counts;
  // displs[r]: the element where rank r's block starts. One per rank, each >= 0; or empty for
  // blocks packed in rank order (displs[r] = counts[0] + ... + counts[r-1]).
  absl::Span<const int64_t> displs;
};

// CollectiveCall: one collective as the implementations see it, after the argument checks:
// its kind, sequence number, deadline, tag and the counts that must agree across ranks.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  // seq: this call's number on its communicator, from 0.
  uint64_t seq = 0;
  Deadline deadline;
  CallTag tag;
  // elem_size: bytes per element of the typed call (1 for Barrier).
  int32_t elem_size = 1;
  // dtype: AllReduce's element type (kFloat32 or kBFloat16); kInvalid for the others.
  DType dtype = DType::kInvalid;
  // op: AllReduce's operation; kSum for the others.
  ReduceOp op = ReduceOp::kSum;
  // root: Broadcast's root; -1 for the others.
  int root = -1;
  // count: AllReduce's and Broadcast's element count; AllGather's send count and AllToAll's
  // block, the elements sent to each rank; 0 for the others.
  int64_t count = 0;
  // send_counts: AllToAllV's send_layout.counts, ExchangeV's send_counts (empty for the others).
  absl::Span<const int64_t> send_counts;
  // recv_counts: AllGatherV's and AllToAllV's recv_layout.counts (empty for the others).
  absl::Span<const int64_t> recv_counts;
};

// DescribeCall: `AllReduce #5 (step 3, "dense_grads")`, the name of a call in messages.
std::string DescribeCall(CollectiveKind kind, uint64_t seq, const CallTag& tag);
inline std::string DescribeCall(const CollectiveCall& call) {
  return DescribeCall(call.kind, call.seq, call.tag);
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // rank: this process's rank, 0 <= rank() < size().
  virtual int rank() const = 0;
  // size: the number of ranks (the world size), >= 1.
  virtual int size() const = 0;
  // name: "local" or "mpi", for messages.
  virtual std::string_view name() const = 0;
  // calls_issued: how many collectives this communicator has issued, which is the sequence
  // number of the next one.
  uint64_t calls_issued() const { return next_seq_; }
  // bytes_sent: the payload bytes this rank has handed to the other ranks in collectives whose
  // arguments passed the checks (what a link carries, headers aside): an AllToAll(V)'s blocks for
  // the others, an AllGather(V)'s block once per other rank, a Broadcast's data once per other
  // rank on its root, an AllReduce's data once. For the figures (benchmarks/dist_bench.cc).
  uint64_t bytes_sent() const { return bytes_sent_; }

  // AllReduce: replaces `data` on every rank by the element-wise sum (kSum) or mean (kMean) of
  // all ranks' `data`, which must have the same length everywhere. bfloat16 values are reduced
  // in float32 and rounded once at the end, so every rank gets the same, correctly rounded
  // result. Cost: one reduction of data.size() elements across the ranks.
  [[nodiscard]] absl::Status AllReduce(absl::Span<float> data, ReduceOp op, Deadline deadline,
                                       const CallTag& tag = {});
  [[nodiscard]] absl::Status AllReduce(absl::Span<bfloat16> data, ReduceOp op, Deadline deadline,
                                       const CallTag& tag = {});

  // Broadcast: copies rank `root`'s `data` into `data` on every other rank; the same length on
  // every rank.
  template <typename T>
  [[nodiscard]] absl::Status Broadcast(absl::Span<T> data, int root, Deadline deadline,
                                       const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return BroadcastImpl(data.data(), data.size(), sizeof(T), root, deadline, tag);
  }

  // AllGather: `recv` receives size() blocks of send.size() elements, rank r's `send` as block
  // r (at r * send.size()); send.size() is the same on every rank. `recv` must hold
  // size() * send.size() elements; elements past those are left alone.
  template <typename T>
  [[nodiscard]] absl::Status AllGather(absl::Span<const T> send, absl::Span<T> recv,
                                       Deadline deadline, const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return AllGatherImpl(send.data(), send.size(), recv.data(), recv.size(), sizeof(T), deadline,
                         tag);
  }

  // AllGatherV: rank r's `send`, recv_layout.counts[r] elements, lands in `recv` at
  // recv_layout.displs[r]. The counts are the same on every rank (displacements may differ),
  // counts[rank()] == send.size(), and the blocks lie inside `recv` without overlapping.
  template <typename T>
  [[nodiscard]] absl::Status AllGatherV(absl::Span<const T> send, absl::Span<T> recv,
                                        BlockLayout recv_layout, Deadline deadline,
                                        const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return AllGatherVImpl(send.data(), send.size(), recv.data(), recv.size(), recv_layout,
                          sizeof(T), deadline, tag);
  }

  // AllToAll: `send` holds size() equal blocks; block j goes to rank j, which stores it as block
  // rank() of its `recv`. send.size() is a multiple of size() and the same on every rank; `recv`
  // must hold send.size() elements.
  template <typename T>
  [[nodiscard]] absl::Status AllToAll(absl::Span<const T> send, absl::Span<T> recv,
                                      Deadline deadline, const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return AllToAllImpl(send.data(), send.size(), recv.data(), recv.size(), sizeof(T), deadline,
                        tag);
  }

  // AllToAllV: block j of `send` (send_layout) goes to rank j, which stores it as block rank()
  // of its `recv` (recv_layout). Pairwise agreement: send_layout.counts[j] on rank i equals
  // recv_layout.counts[i] on rank j (exchange the counts with AllToAll first). Send blocks may
  // overlap; receive blocks may not. Zero counts are fine.
  template <typename T>
  [[nodiscard]] absl::Status AllToAllV(absl::Span<const T> send, BlockLayout send_layout,
                                       absl::Span<T> recv, BlockLayout recv_layout,
                                       Deadline deadline, const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return AllToAllVImpl(send.data(), send.size(), send_layout, recv.data(), recv.size(),
                         recv_layout, sizeof(T), deadline, tag);
  }

  // ExchangeV: an AllToAllV whose receive counts the call learns, for exchanges where only the
  // sender knows what it sends (keys to their owners, gradients back): block j of `send` (packed
  // in rank order, send_counts[j] elements; one count per rank, summing to send.size()) goes to
  // rank j. On return `*recv` holds the blocks this rank received, packed in rank order, and
  // (*recv_counts)[r] the elements from rank r. The same as AllToAll of the counts then
  // AllToAllV, as one call: under MPI the counts travel in the header round (each rank's header
  // to rank j carries send_counts[j]), so the call is two rounds where the pair would be four,
  // and a block may hold at most (2^31 - 1) / size() bytes, so that no rank's receive
  // total can overflow an MPI count once the others have moved on (larger blocks are refused,
  // like any bad argument, on every rank).
  template <typename T>
  [[nodiscard]] absl::Status ExchangeV(absl::Span<const T> send,
                                       absl::Span<const int64_t> send_counts, std::vector<T>* recv,
                                       std::vector<int64_t>* recv_counts, Deadline deadline,
                                       const CallTag& tag = {}) {
    static_assert(std::is_trivially_copyable_v<T>, "collectives move raw bytes");
    return ExchangeVImpl(
        send.data(), send.size(), send_counts, recv_counts,
        [recv](int64_t elements) -> void* {
          recv->resize(static_cast<size_t>(elements));
          return recv->data();
        },
        sizeof(T), deadline, tag);
  }

  // Barrier: returns once every rank has entered the same Barrier.
  [[nodiscard]] absl::Status Barrier(Deadline deadline, const CallTag& tag = {});

  // SubRange: a communicator of ranks [first, first + count) of this one (rank first + i is its
  // rank i), for the workers of a job with ps ranks (distributed.h). Collective over every rank
  // of this one, in the same program order; the ranks outside the range get nullptr. It waits
  // for every rank within `deadline` (a Barrier, then the split, which every rank has reached).
  // InvalidArgument when the range is empty or not inside [0, size()).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> SubRange(int first, int count,
                                                                       Deadline deadline);

 protected:
  Communicator() = default;

  // The implementations. Each is called with arguments that passed the checks of this class,
  // with `call` numbered and described; `layout`s have their displacements filled in (never
  // empty) and lie inside their buffers.
  virtual absl::Status DoAllReduce(const CollectiveCall& call, void* data) = 0;
  virtual absl::Status DoBroadcast(const CollectiveCall& call, void* data) = 0;
  virtual absl::Status DoAllGather(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual absl::Status DoAllGatherV(const CollectiveCall& call, const void* send, void* recv,
                                    absl::Span<const int64_t> recv_displs) = 0;
  virtual absl::Status DoAllToAll(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual absl::Status DoAllToAllV(const CollectiveCall& call, const void* send,
                                   absl::Span<const int64_t> send_displs, void* recv,
                                   absl::Span<const int64_t> recv_displs) = 0;
  virtual absl::Status DoBarrier(const CollectiveCall& call) = 0;
  // DoExchangeV: `send_counts` (one per rank, summing to the elements of `send`) passed the
  // checks; fills `recv_counts` (one per rank) and the receive buffer `alloc(total elements)`
  // returns. The default refuses (Unimplemented): LocalCommunicator and MPI implement it.
  virtual absl::Status DoExchangeV(const CollectiveCall& call, const void* send,
                                   absl::Span<const int64_t> send_counts,
                                   absl::Span<int64_t> recv_counts,
                                   absl::FunctionRef<void*(int64_t)> alloc);
  // DoSubRange: SubRange once its range passed the checks.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSubRange(int first, int count,
                                                                   Deadline deadline) = 0;
  // Rejected: this rank's arguments to `call` failed the checks with `error`. The default
  // returns `error`; MPI first tells the other ranks, so that they fail the call too instead of
  // waiting for this rank until their deadline. `call` carries what could be filled in.
  virtual absl::Status Rejected(const CollectiveCall& /*call*/, absl::Status error) {
    return error;
  }

 private:
  absl::Status BroadcastImpl(void* data, size_t count, size_t elem_size, int root,
                             Deadline deadline, const CallTag& tag);
  absl::Status AllGatherImpl(const void* send, size_t send_count, void* recv, size_t recv_count,
                             size_t elem_size, Deadline deadline, const CallTag& tag);
  absl::Status AllGatherVImpl(const void* send, size_t send_count, void* recv, size_t recv_count,
                              BlockLayout recv_layout, size_t elem_size, Deadline deadline,
                              const CallTag& tag);
  absl::Status AllToAllImpl(const void* send, size_t send_count, void* recv, size_t recv_count,
                            size_t elem_size, Deadline deadline, const CallTag& tag);
  absl::Status AllToAllVImpl(const void* send, size_t send_count, BlockLayout send_layout,
                             void* recv, size_t recv_count, BlockLayout recv_layout,
                             size_t elem_size, Deadline deadline, const CallTag& tag);
  absl::Status AllReduceImpl(void* data, size_t count, DType dtype, size_t elem_size, ReduceOp op,
                             Deadline deadline, const CallTag& tag);
  absl::Status ExchangeVImpl(const void* send, size_t send_count,
                             absl::Span<const int64_t> send_counts,
                             std::vector<int64_t>* recv_counts,
                             absl::FunctionRef<void*(int64_t)> alloc, size_t elem_size,
                             Deadline deadline, const CallTag& tag);
  // NewCall: the next call of `kind` (takes its sequence number).
  CollectiveCall NewCall(CollectiveKind kind, Deadline deadline, const CallTag& tag,
                         size_t elem_size);

  uint64_t next_seq_ = 0;
  uint64_t bytes_sent_ = 0;
  // Scratch for the checks of the V collectives, kept to spare an allocation per call.
  std::vector<int64_t> send_displs_;
  std::vector<int64_t> recv_displs_;
  std::vector<int> order_;
};

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_COMMUNICATOR_H_
