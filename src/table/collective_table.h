// collective_table.h: the mark of a table whose Resolve and ApplyGradients are collectives over
// the ranks of a job (src/dist/sharded_table.h), and the rule that says which rank owns a key.
// Every rank must make those calls in the same order, so they run in the graph's order of a
// step, never from threads of their own: the key stage, which resolves batches ahead on its
// workers, refuses such tables. Checkpoints use ShardOwner to re-shard a table saved by one
// number of ranks for another (src/checkpoint/sharded_checkpoint.h). Internal.
#ifndef RECSDK_TABLE_COLLECTIVE_TABLE_H_
#define RECSDK_TABLE_COLLECTIVE_TABLE_H_

#include <array>
#include <cstdint>

#include "absl/types/span.h"
#include "recsdk/table.h"
#include "src/common/hash.h"
#include "src/table/tier_lease.h"

namespace recsdk::internal {

// ShardOwner: the rank that holds `key` among `world` ranks: Mix64(key) mod world (a mixing
// hash: real ids are skewed, so neither key mod N nor a mask of the low bits spreads them
// evenly). 0 for a world of one. Part of the checkpoint format: a checkpoint's shards were cut
// by it, and a restore at the same world size reads one shard on that assumption.
inline int ShardOwner(int64_t key, int world) {
  if (world <= 1) return 0;
  return static_cast<int>(Mix64(static_cast<uint64_t>(key)) % static_cast<uint64_t>(world));
}

// CollectiveTable: besides Resolve and ApplyGradients (the step's collectives, in the graph's
// order), the calls of a key stage (src/session/key_stage/key_stage.cc), which resolves batches
// ahead of the step on its own threads. Its exchanges run on a channel of their own per stage
// (`owner`), so they never meet the step's collectives, and in the order the stage makes them,
// which is batch order per table on every rank:
//   OpenChannel(owner, spec): a collective over the ranks' main threads (KeyStage::Start, at the
//     same point of every rank's program, tables in one order); CloseChannel(owner) when it stops.
//     `spec` says which of the stage's sharded tables this is and the stage's lookup mode, so
//     that ranks which make no stage of their own (the ps ranks of a job with separate parameter
//     servers, src/dist/parameter_server.h) can serve the stage's exchanges.
//   AgreeBatch(owner, batch, votes): before resolving `batch`, every rank's stage says whether it
//     has it and may read it (votes[0]: 1 when it has none, its input ended or it stops; votes[1]:
//     1 when a checkpoint holds it back); on return `votes` holds the sums over the ranks, so
//     every rank takes the same decision (resolve, end, or wait and ask again).
//   ResolveLeased(..., lease): the keys go to their owners, which admit and resolve them as
//     Resolve does, but the rows stay there: the batch's row ids name rows not read yet.
//   PullLeased(owner, batch, failed): at KeyStage::Next, on the training thread and in the
//     step's order of collectives: the owners send the batch's rows as they are now, after the
//     previous step's update, so a stage running ahead reads what a step-by-step run reads.
//     `failed`: this rank's batch failed; it takes part with nothing.
//   ReleaseLeased(owner, before_batch): the owner's batches before `before_batch` are done.
//   LeasedOldestTime(owner, batch): see below.
// ChannelSpec: a stage's channel as OpenChannel sees it: the lookup mode of the stage's
// resolves, and this table's place among the stage's collective tables (in the order the stage
// resolves them, the first one carrying the batch votes).
struct ChannelSpec {
  LookupMode mode = LookupMode::kTrain;
  int index = 0;  // 0 .. count - 1
  int count = 1;
};

class CollectiveTable {
 public:
  virtual ~CollectiveTable() = default;
  // world_size: the ranks the table's keys are spread over.
  virtual int world_size() const = 0;
  // rank: this process's rank among them; it holds the keys k with ShardOwner(k, world) == rank.
  virtual int rank() const = 0;

  [[nodiscard]] virtual Status OpenChannel(const void* owner, const ChannelSpec& spec) = 0;
  virtual void CloseChannel(const void* owner) = 0;
  [[nodiscard]] virtual Status AgreeBatch(const void* owner, int64_t batch,
                                          std::array<float, 2>* votes) = 0;
  [[nodiscard]] virtual Status ResolveLeased(absl::Span<const int64_t> unique_keys,
                                             absl::Span<const uint32_t> counts,
                                             absl::Span<const int64_t> timestamps, LookupMode mode,
                                             absl::Span<uint32_t> rows,
                                             const ResolveLease& lease) = 0;
  [[nodiscard]] virtual Status PullLeased(const void* owner, int64_t batch, bool failed) = 0;
  virtual void ReleaseLeased(const void* owner, int64_t before_batch) = 0;
  // LeasedOldestTime: the oldest access time of the keys this rank served as owner for the
  // batch (INT64_MAX when none): eviction keeps them until the batch is done, whichever rank
  // asked for them.
  virtual int64_t LeasedOldestTime(const void* owner, int64_t batch) const = 0;
  // OwnsKeys: whether this rank holds keys of the table (every rank without ps ranks; not a
  // worker of a job with ps ranks, whose evictions happen on the ps, under the ps's locks).
  virtual bool OwnsKeys() const = 0;
  // EvictStaleKeeping: EvictStale, keeping the keys last accessed at or after `in_flight_from`
  // (the oldest time of the key stage's batches in flight on this rank; kNothingInFlight of
  // eviction.h: none), by the rule of eviction.h. On the workers of a job with ps ranks a
  // collective of every rank: each ps evicts by the job's data time, below the oldest
  // in_flight_from of all workers and the oldest time of the batches it resolved ahead and has
  // not sent yet; every rank returns the job's count. Without ps ranks, this rank's shard alone.
  [[nodiscard]] virtual StatusOr<int64_t> EvictStaleKeeping(int64_t in_flight_from) = 0;
};

// ReplicatedCollectives: the mark of a table held whole on every rank whose Resolve and
// ApplyGradients are collectives too (src/dist/replicated_table.h, TableConfig::is_dp). It has
// no calls for a key stage, so KeyStage::Start refuses it: the stage's worker would issue its
// collectives on its own thread, beside the step's.
class ReplicatedCollectives {
 public:
  virtual ~ReplicatedCollectives() = default;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_COLLECTIVE_TABLE_H_
