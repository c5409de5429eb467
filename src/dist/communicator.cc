// communicator.cc: the argument checks every Communicator shares, and the names in messages.
#include "src/dist/communicator.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::dist {
namespace {

// Where(comm, call): the prefix of every message about `call` on this rank.
std::string Where(const Communicator& comm, const CollectiveCall& call) {
  return fmt::format("{} on rank {} of {}", DescribeCall(call), comm.rank(), comm.size());
}

absl::Status Invalid(const Communicator& comm, const CollectiveCall& call,
                     absl::string_view problem) {
  return absl::InvalidArgumentError(fmt::format("{}: {}", Where(comm, call), problem));
}

// CheckLayout: fills `displs` with the layout's displacements (packed when layout.displs is
// empty) and checks that it has one count and displacement per rank, none negative, and that
// every block lies inside the `buffer_count` elements of `buffer`; with `disjoint`, that no two
// non-empty blocks overlap (a receive buffer: two ranks writing one element is a race in MPI).
// Cost: O(size log size) with `disjoint`, O(size) without.
absl::Status CheckLayout(std::string_view layout_name, std::string_view buffer, int size,
                         const BlockLayout& layout, size_t buffer_count, bool disjoint,
                         std::vector<int64_t>* displs, std::vector<int>* order) {
  const size_t n = static_cast<size_t>(size);
  if (layout.counts.size() != n) {
    return absl::InvalidArgumentError(
        fmt::format("{}.counts has {} entries; it needs one per rank ({}): pass a count for "
                    "every rank, 0 for ranks without a block",
                    layout_name, layout.counts.size(), size));
  }
  if (!layout.displs.empty() && layout.displs.size() != n) {
    return absl::InvalidArgumentError(fmt::format(
        "{}.displs has {} entries; it needs one per rank ({}), or none for blocks packed in "
        "rank order",
        layout_name, layout.displs.size(), size));
  }
  displs->resize(n);
  int64_t packed = 0;
  for (size_t r = 0; r < n; ++r) {
    const int64_t count = layout.counts[r];
    if (count < 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}.counts[{}] is {}; counts are element counts, >= 0", layout_name, r, count));
    }
    const int64_t displ = layout.displs.empty() ? packed : layout.displs[r];
    if (displ < 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}.displs[{}] is {}; displacements are element offsets, >= 0", layout_name, r, displ));
    }
    const uint64_t end_limit = buffer_count;
    if (static_cast<uint64_t>(displ) > end_limit ||
        static_cast<uint64_t>(count) > end_limit - static_cast<uint64_t>(displ)) {
      return absl::InvalidArgumentError(fmt::format(
          "rank {}'s block in {} ({}.displs {} + counts {}) ends past the {} elements of `{}`; "
          "make `{}` longer or the block smaller",
          r, buffer, layout_name, displ, count, buffer_count, buffer, buffer));
    }
    (*displs)[r] = displ;
    packed = displ + count;  // in bounds: at most buffer_count
  }
  if (!disjoint) return absl::OkStatus();
  order->resize(n);
  std::iota(order->begin(), order->end(), 0);
  std::sort(order->begin(), order->end(),
            [&](int a, int b) { return (*displs)[a] < (*displs)[b]; });
  int previous = -1;  // the last non-empty block in address order
  for (int r : *order) {
    if (layout.counts[r] == 0) continue;
    if (previous >= 0 && (*displs)[previous] + layout.counts[previous] > (*displs)[r]) {
      return absl::InvalidArgumentError(fmt::format(
          "the blocks of ranks {} and {} in `{}` overlap ({}: elements [{}, {}), {}: [{}, {})); "
          "each rank's block needs its own elements",
          previous, r, buffer, previous, (*displs)[previous],
          (*displs)[previous] + layout.counts[previous], r, (*displs)[r],
          (*displs)[r] + layout.counts[r]));
    }
    previous = r;
  }
  return absl::OkStatus();
}

// CheckDisjoint: `send` and `recv` share no byte. MPI forbids it (a rank could receive into
// bytes it has not sent yet), and a world of one checks it too so that code is right on N.
absl::Status CheckDisjoint(const void* send, size_t send_count, const void* recv, size_t recv_count,
                           size_t elem_size) {
  if (send_count == 0 || recv_count == 0) return absl::OkStatus();
  const uintptr_t s = reinterpret_cast<uintptr_t>(send);
  const uintptr_t r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_count * elem_size && r < s + send_count * elem_size) {
    return absl::InvalidArgumentError(
        "`send` and `recv` overlap; a collective reads one while it writes the other: use "
        "separate buffers");
  }
  return absl::OkStatus();
}

}  // namespace

std::string CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "AllReduce";
    case CollectiveKind::kBroadcast:
      return "Broadcast";
    case CollectiveKind::kAllGather:
      return "AllGather";
    case CollectiveKind::kAllGatherV:
      return "AllGatherV";
    case CollectiveKind::kAllToAll:
      return "AllToAll";
    case CollectiveKind::kAllToAllV:
      return "AllToAllV";
    case CollectiveKind::kBarrier:
      return "Barrier";
    case CollectiveKind::kExchangeV:
      return "ExchangeV";
  }
  return fmt::format("unknown({})", static_cast<int32_t>(kind));
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
  }
  return fmt::format("unknown({})", static_cast<int32_t>(op));
}

std::string DescribeCall(CollectiveKind kind, uint64_t seq, const CallTag& tag) {
  std::string out = fmt::format("{} #{}", CollectiveKindName(kind), seq);
  if (tag.step >= 0 && !tag.label.empty()) {
    out += fmt::format(" (step {}, \"{}\")", tag.step,
                       fmt::string_view(tag.label.data(), tag.label.size()));
  } else if (tag.step >= 0) {
    out += fmt::format(" (step {})", tag.step);
  } else if (!tag.label.empty()) {
    out += fmt::format(" (\"{}\")", fmt::string_view(tag.label.data(), tag.label.size()));
  }
  return out;
}

CollectiveCall Communicator::NewCall(CollectiveKind kind, Deadline deadline, const CallTag& tag,
                                     size_t elem_size) {
  CollectiveCall call;
  call.kind = kind;
  call.seq = next_seq_++;
  call.deadline = deadline;
  call.tag = tag;
  // Element types are C++ types: their sizes are small. A size that does not fit would be a
  // programming error, not input; clamp it so that the check below reports it.
  call.elem_size = elem_size > static_cast<size_t>(std::numeric_limits<int32_t>::max())
                       ? std::numeric_limits<int32_t>::max()
                       : static_cast<int32_t>(elem_size);
  return call;
}

absl::Status Communicator::AllReduce(absl::Span<float> data, ReduceOp op, Deadline deadline,
                                     const CallTag& tag) {
  return AllReduceImpl(data.data(), data.size(), DType::kFloat32, sizeof(float), op, deadline, tag);
}

absl::Status Communicator::AllReduce(absl::Span<bfloat16> data, ReduceOp op, Deadline deadline,
                                     const CallTag& tag) {
  return AllReduceImpl(data.data(), data.size(), DType::kBFloat16, sizeof(bfloat16), op, deadline,
                       tag);
}

absl::Status Communicator::AllReduceImpl(void* data, size_t count, DType dtype, size_t elem_size,
                                         ReduceOp op, Deadline deadline, const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kAllReduce, deadline, tag, elem_size);
  call.dtype = dtype;
  call.op = op;
  call.count = static_cast<int64_t>(count);
  if (op != ReduceOp::kSum && op != ReduceOp::kMean) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("op {} is not a ReduceOp; use ReduceOp::kSum or "
                                              "ReduceOp::kMean",
                                              static_cast<int32_t>(op))));
  }
  bytes_sent_ += count * elem_size;
  return DoAllReduce(call, data);
}

absl::Status Communicator::BroadcastImpl(void* data, size_t count, size_t elem_size, int root,
                                         Deadline deadline, const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kBroadcast, deadline, tag, elem_size);
  call.root = root;
  call.count = static_cast<int64_t>(count);
  if (root < 0 || root >= size()) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("root {} is not a rank of this world of {}; the "
                                              "root must be in [0, {}]",
                                              root, size(), size() - 1)));
  }
  if (root == rank()) bytes_sent_ += count * elem_size * static_cast<size_t>(size() - 1);
  return DoBroadcast(call, data);
}

absl::Status Communicator::AllGatherImpl(const void* send, size_t send_count, void* recv,
                                         size_t recv_count, size_t elem_size, Deadline deadline,
                                         const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kAllGather, deadline, tag, elem_size);
  call.count = static_cast<int64_t>(send_count);
  const uint64_t ranks = static_cast<uint64_t>(size());
  absl::Status disjoint = CheckDisjoint(send, send_count, recv, recv_count, elem_size);
  if (!disjoint.ok()) return Rejected(call, Invalid(*this, call, disjoint.message()));
  if (send_count != 0 && recv_count / send_count < ranks) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("`recv` holds {} elements; it needs {} ranks x {} "
                                              "elements of `send`; make `recv` longer",
                                              recv_count, size(), send_count)));
  }
  bytes_sent_ += send_count * elem_size * (ranks - 1);
  return DoAllGather(call, send, recv);
}

absl::Status Communicator::AllGatherVImpl(const void* send, size_t send_count, void* recv,
                                          size_t recv_count, BlockLayout recv_layout,
                                          size_t elem_size, Deadline deadline, const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kAllGatherV, deadline, tag, elem_size);
  call.count = static_cast<int64_t>(send_count);
  call.recv_counts = recv_layout.counts;
  absl::Status layout = CheckDisjoint(send, send_count, recv, recv_count, elem_size);
  if (layout.ok()) {
    layout = CheckLayout("recv_layout", "recv", size(), recv_layout, recv_count,
                         /*disjoint=*/true, &recv_displs_, &order_);
  }
  if (!layout.ok()) {
    call.recv_counts = {};  // of the wrong length maybe: the cross-rank checks index it by rank
    return Rejected(call, Invalid(*this, call, layout.message()));
  }
  if (recv_layout.counts[rank()] != static_cast<int64_t>(send_count)) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("recv_layout.counts[{}] is {} but this rank sends "
                                              "{} elements; this rank's count must be "
                                              "send.size()",
                                              rank(), recv_layout.counts[rank()], send_count)));
  }
  bytes_sent_ += send_count * elem_size * static_cast<size_t>(size() - 1);
  return DoAllGatherV(call, send, recv, recv_displs_);
}

absl::Status Communicator::AllToAllImpl(const void* send, size_t send_count, void* recv,
                                        size_t recv_count, size_t elem_size, Deadline deadline,
                                        const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kAllToAll, deadline, tag, elem_size);
  const size_t ranks = static_cast<size_t>(size());
  call.count = static_cast<int64_t>(send_count / ranks);
  absl::Status disjoint = CheckDisjoint(send, send_count, recv, recv_count, elem_size);
  if (!disjoint.ok()) return Rejected(call, Invalid(*this, call, disjoint.message()));
  if (send_count % ranks != 0) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("`send` holds {} elements, not a multiple of the "
                                              "{} ranks; AllToAll sends equal blocks (use "
                                              "AllToAllV for blocks of different sizes)",
                                              send_count, size())));
  }
  if (recv_count < send_count) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("`recv` holds {} elements; it needs {} ({} ranks x "
                                              "{}); make `recv` as long as `send`",
                                              recv_count, send_count, size(), call.count)));
  }
  bytes_sent_ += (send_count / ranks) * (ranks - 1) * elem_size;
  return DoAllToAll(call, send, recv);
}

absl::Status Communicator::AllToAllVImpl(const void* send, size_t send_count,
                                         BlockLayout send_layout, void* recv, size_t recv_count,
                                         BlockLayout recv_layout, size_t elem_size,
                                         Deadline deadline, const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kAllToAllV, deadline, tag, elem_size);
  call.send_counts = send_layout.counts;
  call.recv_counts = recv_layout.counts;
  absl::Status layout = CheckDisjoint(send, send_count, recv, recv_count, elem_size);
  if (layout.ok()) {
    layout = CheckLayout("send_layout", "send", size(), send_layout, send_count,
                         /*disjoint=*/false, &send_displs_, &order_);
  }
  if (layout.ok()) {
    layout = CheckLayout("recv_layout", "recv", size(), recv_layout, recv_count,
                         /*disjoint=*/true, &recv_displs_, &order_);
  }
  if (!layout.ok()) {
    // Counts of the wrong length must not reach the cross-rank checks, which index them by rank.
    call.send_counts = {};
    call.recv_counts = {};
    return Rejected(call, Invalid(*this, call, layout.message()));
  }
  for (int r = 0; r < size(); ++r) {
    if (r != rank()) bytes_sent_ += static_cast<uint64_t>(send_layout.counts[r]) * elem_size;
  }
  return DoAllToAllV(call, send, send_displs_, recv, recv_displs_);
}

absl::Status Communicator::ExchangeVImpl(const void* send, size_t send_count,
                                         absl::Span<const int64_t> send_counts,
                                         std::vector<int64_t>* recv_counts,
                                         absl::FunctionRef<void*(int64_t)> alloc, size_t elem_size,
                                         Deadline deadline, const CallTag& tag) {
  CollectiveCall call = NewCall(CollectiveKind::kExchangeV, deadline, tag, elem_size);
  const size_t n = static_cast<size_t>(size());
  if (send_counts.size() != n) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("send_counts has {} entries; it needs one per rank "
                                              "({}), 0 for ranks without a block",
                                              send_counts.size(), size())));
  }
  uint64_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    if (send_counts[r] < 0) {
      return Rejected(call, Invalid(*this, call,
                                    fmt::format("send_counts[{}] is {}; counts are element "
                                                "counts, >= 0",
                                                r, send_counts[r])));
    }
    total += static_cast<uint64_t>(send_counts[r]);
  }
  if (total != send_count) {
    return Rejected(call, Invalid(*this, call,
                                  fmt::format("send_counts add up to {} elements but `send` holds "
                                              "{}; the blocks are packed in rank order and fill "
                                              "`send`",
                                              total, send_count)));
  }
  if (recv_counts == nullptr) {
    return Rejected(call, Invalid(*this, call, "recv_counts is null; pass a vector to fill"));
  }
  recv_counts->assign(n, 0);
  call.send_counts = send_counts;            // its headers carry them (MakeCollectiveHeader)
  bytes_sent_ += sizeof(int64_t) * (n - 1);  // the counts, one per other rank
  for (size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) != rank()) {
      bytes_sent_ += static_cast<uint64_t>(send_counts[r]) * elem_size;
    }
  }
  return DoExchangeV(call, send, send_counts, absl::MakeSpan(*recv_counts), alloc);
}

absl::Status Communicator::DoExchangeV(const CollectiveCall& call, const void*,
                                       absl::Span<const int64_t>, absl::Span<int64_t>,
                                       absl::FunctionRef<void*(int64_t)>) {
  return absl::UnimplementedError(fmt::format(
      "{}: this communicator ({}) has no ExchangeV; use AllToAll of the counts, then AllToAllV",
      Where(*this, call), name()));
}

absl::Status Communicator::Barrier(Deadline deadline, const CallTag& tag) {
  return DoBarrier(NewCall(CollectiveKind::kBarrier, deadline, tag, 1));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::SubRange(int first, int count,
                                                                     Deadline deadline) {
  if (count < 1 || first < 0 || first > size() - count) {
    return absl::InvalidArgumentError(fmt::format(
        "SubRange: ranks [{}, {}) are not a non-empty range of this communicator's {} ranks", first,
        int64_t{first} + count, size()));
  }
  return DoSubRange(first, count, deadline);
}

}  // namespace recsdk::dist
