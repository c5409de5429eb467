// collective_header.h: what a rank tells every other rank about a collective before any of its
// data moves, and the checks that compare what they told each other.
//
// Why: MPI matches collectives by their order alone. When rank 0 calls AllReduce while rank 1
// calls Broadcast, or both call AllReduce with different lengths, MPI hangs, truncates, or mixes
// the two calls' data without a word; the program fails far from the cause, or never. So before
// call k moves data, each rank sends each other rank a CollectiveHeader of 144 bytes: the call's
// sequence number, kind, step and label, and the counts that must agree. The exchange is the same
// point-to-point pattern whatever the call, so it matches even when the calls do not, and it is
// where the mismatch is caught.
//
// Every rank then runs CheckCollectiveHeaders over all headers and reaches the same verdict, so
// either every rank moves the data or none does, with no second round trip: each field it
// compares must be equal on all ranks (if two ranks differ, every rank sees a rank that differs
// from itself), except AllToAllV's pairwise counts, which only the pair's two ranks can compare;
// for those every header also carries two sums of per-pair fingerprints, and the totals over all
// ranks, which every rank computes alike, differ exactly when some pair disagrees (with
// probability 2^-64 of missing it). The ranks of that pair name it; the others say that some
// pair disagreed.
//
// The headers also say who has entered a call: at a deadline, the ranks whose headers have not
// arrived are the ones that never joined, which DeadlineExceeded names.
//
// Cost: size() - 1 small messages sent and received per rank per collective (one latency of a
// small message on top of the data), and O(size()) work. At thousands of ranks this wants a tree;
// recsdk's rank counts today are far below that.
//
// Threading: pure functions.
#ifndef RECSDK_DIST_COLLECTIVE_HEADER_H_
#define RECSDK_DIST_COLLECTIVE_HEADER_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/dist/communicator.h"

namespace recsdk::dist {

// kCollectiveHeaderMagic: "RCH" and the layout's version (1). A rank that receives a header
// with another value runs another recsdk build, which is reported, not trusted.
inline constexpr uint32_t kCollectiveHeaderMagic = 0x52434801u;

// CollectiveHeader: one rank's description of one call, as sent to one receiver. Raw bytes on
// the wire: every rank of a job runs the same build on the same kind of machine (the magic and
// the static_assert below keep the layout honest).
struct CollectiveHeader {
  uint32_t magic = 0;
  int32_t sender = -1;
  int32_t kind = 0;
  // rejected: 1 when the sender's own checks refused its arguments; it moves no data.
  int32_t rejected = 0;
  uint64_t seq = 0;
  int64_t step = -1;
  uint64_t label_fingerprint = 0;
  int64_t label_size = 0;
  int32_t elem_size = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  int32_t root = -1;
  int64_t count = 0;
  // counts_fingerprint: AllGatherV's recv counts (equal on every rank).
  uint64_t counts_fingerprint = 0;
  // send_to_receiver, expect_from_receiver: AllToAllV's counts between sender and receiver;
  // ExchangeV's send_to_receiver is the block its receiver gets (its only word of the counts).
  int64_t send_to_receiver = 0;
  int64_t expect_from_receiver = 0;
  // sent_fingerprint, expected_fingerprint: AllToAllV's sums of PairTerm over the sender's sends
  // and over the receives it expects (see above).
  uint64_t sent_fingerprint = 0;
  uint64_t expected_fingerprint = 0;
  // label: the first 31 bytes of the label, for messages; NUL-terminated.
  char label[32] = {};
};
static_assert(std::is_trivially_copyable_v<CollectiveHeader>);
static_assert(sizeof(CollectiveHeader) == 144, "the header travels as raw bytes: keep it packed");

// MakeCollectiveHeader: the header `sender` sends `receiver` for `call` in a world of `size`
// ranks; `rejected` when the sender's checks refused the arguments (the counts are then left
// out: they may not have one entry per rank).
CollectiveHeader MakeCollectiveHeader(const CollectiveCall& call, int sender, int receiver,
                                      int size, bool rejected);

// CheckCollectiveHeaders: compares `headers` (one per rank, indexed by sender, including the one
// this rank addressed to itself) for call `mine` on rank `rank`. Returns OK when every rank
// issued the same call with arguments that fit together; else
// - FailedPrecondition when a header comes from another build, or when the ranks are in
//   different collectives (kind, sequence number, step or label differ): the message names this
//   rank's call and the first other rank's;
// - InvalidArgument when a rank refused its own arguments, or the counts, element types, op or
//   root disagree: the message names the ranks, both values and the rule.
// Every rank reaches the same verdict (OK or not) from the same headers.
absl::Status CheckCollectiveHeaders(const CollectiveCall& mine, int rank, int size,
                                    absl::Span<const CollectiveHeader> headers);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_COLLECTIVE_HEADER_H_
