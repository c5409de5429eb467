// collective_table.h: the mark of a table whose Resolve and ApplyGradients are collectives over
// the ranks of a job (src/dist/sharded_table.h), and the rule that says which rank owns a key.
// Every rank must make those calls in the same order, so they run in the graph's order of a
// step, never from threads of their own: the key stage, which resolves batches ahead on its
// workers, refuses such tables. Checkpoints use ShardOwner to re-shard a table saved by one
// number of ranks for another (src/checkpoint/sharded_checkpoint.h). Internal.
#ifndef RECSDK_TABLE_COLLECTIVE_TABLE_H_
#define RECSDK_TABLE_COLLECTIVE_TABLE_H_

#include <cstdint>

#include "src/common/hash.h"

namespace recsdk::internal {

// ShardOwner: the rank that holds `key` among `world` ranks: Mix64(key) mod world (a mixing
// hash: real ids are skewed, so neither key mod N nor a mask of the low bits spreads them
// evenly). 0 for a world of one. Part of the checkpoint format: a checkpoint's shards were cut
// by it, and a restore at the same world size reads one shard on that assumption.
inline int ShardOwner(int64_t key, int world) {
  if (world <= 1) return 0;
  return static_cast<int>(Mix64(static_cast<uint64_t>(key)) % static_cast<uint64_t>(world));
}

class CollectiveTable {
 public:
  virtual ~CollectiveTable() = default;
  // world_size: the ranks the table's keys are spread over.
  virtual int world_size() const = 0;
  // rank: this process's rank among them; it holds the keys k with ShardOwner(k, world) == rank.
  virtual int rank() const = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_COLLECTIVE_TABLE_H_
