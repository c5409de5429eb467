// collective_header.cc: building and comparing collective headers (see the header for why).
#include "src/dist/collective_header.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "fmt/format.h"
#include "src/common/hash.h"

namespace recsdk::dist {
namespace {

using internal::Fingerprint64;
using internal::Mix64;

// PairTerm: the fingerprint of "rank `from` sends `count` elements to rank `to`". Sums of these
// (mod 2^64) are order-independent, so each rank can add up its own terms.
uint64_t PairTerm(int from, int to, int64_t count) {
  const uint64_t pair =
      (static_cast<uint64_t>(static_cast<uint32_t>(from)) << 32) | static_cast<uint32_t>(to);
  return Mix64(Mix64(pair) ^ static_cast<uint64_t>(count));
}

uint64_t CountsFingerprint(absl::Span<const int64_t> counts) {
  uint64_t h = Mix64(counts.size());
  for (int64_t c : counts) h = Mix64(h ^ static_cast<uint64_t>(c));
  return h;
}

// Describe(header): the call a header describes, as DescribeCall names calls.
std::string Describe(const CollectiveHeader& h) {
  const size_t shown = std::min<size_t>(std::strlen(h.label), sizeof(h.label) - 1);
  std::string label(h.label, shown);
  if (h.label_size > static_cast<int64_t>(shown)) label += "...";
  CallTag tag;
  tag.step = h.step;
  tag.label = label;
  return DescribeCall(static_cast<CollectiveKind>(h.kind), h.seq, tag);
}

// CountNoun: what `count` means for a kind, in messages.
const char* CountNoun(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
      return "data.size()";
    case CollectiveKind::kAllGather:
      return "send.size()";
    case CollectiveKind::kAllToAll:
      return "elements per block";
    default:
      return "count";
  }
}

}  // namespace

CollectiveHeader MakeCollectiveHeader(const CollectiveCall& call, int sender, int receiver,
                                      int size, bool rejected) {
  CollectiveHeader h;
  h.magic = kCollectiveHeaderMagic;
  h.sender = sender;
  h.kind = static_cast<int32_t>(call.kind);
  h.rejected = rejected ? 1 : 0;
  h.seq = call.seq;
  h.step = call.tag.step;
  h.label_fingerprint = Fingerprint64(call.tag.label);
  h.label_size = static_cast<int64_t>(call.tag.label.size());
  // An empty label's data() may be null, which memcpy may not be given even for 0 bytes (UBSan).
  if (!call.tag.label.empty()) {
    std::memcpy(h.label, call.tag.label.data(),
                std::min(call.tag.label.size(), sizeof(h.label) - 1));
  }
  h.elem_size = call.elem_size;
  h.dtype = static_cast<int32_t>(call.dtype);
  h.op = static_cast<int32_t>(call.op);
  h.root = call.root;
  h.count = call.count;
  if (rejected) return h;
  const size_t n = static_cast<size_t>(size);
  if (call.kind == CollectiveKind::kAllGatherV) {
    h.counts_fingerprint = CountsFingerprint(call.recv_counts);
  }
  // ExchangeV: the count its receiver learns from this header (there is no counts round).
  if (call.kind == CollectiveKind::kExchangeV && call.send_counts.size() == n) {
    h.send_to_receiver = call.send_counts[receiver];
  }
  if (call.kind == CollectiveKind::kAllToAllV && call.send_counts.size() == n &&
      call.recv_counts.size() == n) {
    h.send_to_receiver = call.send_counts[receiver];
    h.expect_from_receiver = call.recv_counts[receiver];
    for (int r = 0; r < size; ++r) {
      h.sent_fingerprint += PairTerm(sender, r, call.send_counts[r]);
      h.expected_fingerprint += PairTerm(r, sender, call.recv_counts[r]);
    }
  }
  return h;
}

absl::Status CheckCollectiveHeaders(const CollectiveCall& mine, int rank, int size,
                                    absl::Span<const CollectiveHeader> headers) {
  const std::string where = fmt::format("{} on rank {} of {}", DescribeCall(mine), rank, size);
  if (headers.size() != static_cast<size_t>(size)) {
    return absl::InternalError(
        fmt::format("{}: {} collective headers for {} ranks", where, headers.size(), size));
  }
  for (int r = 0; r < size; ++r) {
    if (headers[r].magic != kCollectiveHeaderMagic) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: rank {} sent a collective header of another recsdk build (magic {:#x}, this "
          "build's is {:#x}); every rank must run the same program build",
          where, r, headers[r].magic, kCollectiveHeaderMagic));
    }
  }
  const CollectiveHeader& own = headers[rank];
  // The order check. Every field compared here is the same on all ranks when the program is
  // right, so a rank that differs is seen by every rank.
  for (int r = 0; r < size; ++r) {
    const CollectiveHeader& h = headers[r];
    if (h.kind == own.kind && h.seq == own.seq && h.step == own.step &&
        h.label_fingerprint == own.label_fingerprint) {
      continue;
    }
    std::string hint;
    if (h.seq != own.seq) {
      hint = fmt::format(
          " (rank {} issued {} collectives on this communicator before this one, "
          "rank {} {})",
          r, h.seq, rank, own.seq);
    }
    return absl::FailedPreconditionError(fmt::format(
        "collectives out of order: rank {} is in {} but rank {} is in {}{}; every rank must "
        "issue the same collectives, with the same step and label, in the same order: look for "
        "a collective that only some ranks reach (a branch on rank-local data, an early return, "
        "an exception path)",
        rank, DescribeCall(mine), r, Describe(h), hint));
  }
  for (int r = 0; r < size; ++r) {
    if (headers[r].rejected != 0 && r != rank) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} refused its own arguments to this call (its error says which); no rank "
          "moved data",
          where, r));
    }
  }
  const CollectiveKind kind = mine.kind;
  for (int r = 0; r < size; ++r) {
    const CollectiveHeader& h = headers[r];
    if (h.elem_size != own.elem_size) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} passes elements of {} bytes but rank {} of {}; every rank must use the "
          "same element type",
          where, r, h.elem_size, rank, own.elem_size));
    }
    if (h.dtype != own.dtype) {
      return absl::InvalidArgumentError(
          fmt::format("{}: rank {} reduces {} but rank {} reduces {}; every rank must reduce the "
                      "same element type",
                      where, r, DTypeName(static_cast<DType>(h.dtype)), rank,
                      DTypeName(static_cast<DType>(own.dtype))));
    }
    if (h.op != own.op) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} reduces with {} but rank {} with {}; every rank must pass the same op",
          where, r, ReduceOpName(static_cast<ReduceOp>(h.op)), rank,
          ReduceOpName(static_cast<ReduceOp>(own.op))));
    }
    if (h.root != own.root) {
      return absl::InvalidArgumentError(
          fmt::format("{}: rank {} broadcasts from root {} but rank {} from root {}; every rank "
                      "must pass the same root",
                      where, r, h.root, rank, own.root));
    }
    if (kind != CollectiveKind::kAllGatherV && kind != CollectiveKind::kAllToAllV &&
        h.count != own.count) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} passes {} {} but rank {} passes {}; every rank must pass the same {}", where,
          r, CountNoun(kind), h.count, rank, own.count, CountNoun(kind)));
    }
    if (kind == CollectiveKind::kAllGatherV && h.counts_fingerprint != own.counts_fingerprint) {
      return absl::InvalidArgumentError(
          fmt::format("{}: rank {}'s recv_layout.counts differ from rank {}'s; every rank must "
                      "pass the same counts (rank r's entry is rank r's send.size())",
                      where, r, rank));
    }
  }
  if (kind != CollectiveKind::kAllToAllV) return absl::OkStatus();
  // AllToAllV: this rank's own pairs first, so that the two ranks of a pair that disagrees name
  // it; then the global sums, which every rank compares alike.
  for (int r = 0; r < size; ++r) {
    const CollectiveHeader& h = headers[r];
    const int64_t expected = mine.recv_counts[r];
    if (h.send_to_receiver != expected) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} sends {} elements to rank {} (its send_layout.counts[{}]) but rank {} "
          "expects {} (its recv_layout.counts[{}]); the counts must match pairwise: exchange "
          "them with AllToAll first",
          where, r, h.send_to_receiver, rank, rank, rank, expected, r));
    }
    if (h.expect_from_receiver != mine.send_counts[r]) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: rank {} sends {} elements to rank {} (its send_layout.counts[{}]) but rank {} "
          "expects {} (its recv_layout.counts[{}]); the counts must match pairwise: exchange "
          "them with AllToAll first",
          where, rank, mine.send_counts[r], r, r, r, h.expect_from_receiver, rank));
    }
  }
  uint64_t sent = 0;
  uint64_t expected = 0;
  for (const CollectiveHeader& h : headers) {
    sent += h.sent_fingerprint;
    expected += h.expected_fingerprint;
  }
  if (sent != expected) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the send and receive counts of other ranks disagree (some rank's "
        "send_layout.counts[j] differs from rank j's recv_layout.counts entry for it; the two "
        "ranks of that pair name it in their errors); no rank moved data",
        where));
  }
  return absl::OkStatus();
}

}  // namespace recsdk::dist
