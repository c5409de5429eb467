// sharded_checkpoint.h: the tables of a checkpoint written by several ranks, and their re-sharding
// when a checkpoint is restored by another number of ranks.
//
// A checkpoint of a job of N > 1 ranks holds each rank's shard of every table in a directory of
// its own, shard-<r>-of-<N>/ (a manifest and payloads in the checkpoint layout, tables only),
// written by that rank; the checkpoint's own manifest, written by rank 0 after every shard is
// in, holds the dense variables and lists the shards with their ids (the CRC32C of each shard's
// manifest, which covers its payloads). A shard that is missing or whose id differs makes the
// checkpoint incomplete, refused naming the shard.
//
// Restoring, each process holds the keys of a table that ShardOwner assigns to it (its
// TablePlacement: rank r of M; a plain table is rank 0 of 1 and holds every key). When M == N a
// rank reads its own shard only; otherwise it reads every shard, keeps the keys it owns under M
// and merges them (FilterSnapshot, MergeShardSnapshots), one shard at a time. The same holds for
// a delta: its rows and removed keys are keyed, so each link of a chain re-shards on its own.
// A checkpoint of one process (no shards) re-shards the same way, as one shard of a world of 1.
//
// Threading: pure functions.
#ifndef RECSDK_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define RECSDK_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include "recsdk/status.h"
#include "recsdk/table.h"

namespace recsdk::internal {

// TablePlacement: the keys of a table this process holds: those with ShardOwner(key, world)
// == rank. Rank kNone holds no key: a worker of a job with ps ranks, which reads no shard.
struct TablePlacement {
  static constexpr int kNone = -1;
  int rank = 0;
  int world = 1;
};

// TablePlacements: the placement of each table by name; `others` for tables not listed.
struct TablePlacements {
  std::map<std::string, TablePlacement> tables;
  TablePlacement others;
  const TablePlacement& Of(const std::string& table) const {
    auto it = tables.find(table);
    return it == tables.end() ? others : it->second;
  }
};

// ShardDirName: "shard-<rank>-of-<world>", the directory of a rank's shard in a checkpoint.
std::string ShardDirName(int rank, int world);

// FilterSnapshot: the part of `snapshot` whose keys (rows, removed keys and pending keys alike)
// `placement` holds; everything else about the snapshot is kept. A placement of world 1 keeps
// every key (and then the snapshot is moved, not copied).
TableSnapshot FilterSnapshot(TableSnapshot&& snapshot, const TablePlacement& placement);

// MergeShardSnapshots: one snapshot of the table from the parts of its shards, keys in order.
// The parts must describe the same table the same way (name, dim, slots, optimizer, key dtype,
// full or delta) and hold disjoint keys; DataLoss naming `where` and the part otherwise. The
// data time is the latest of the parts', the admission threshold the highest. Consumes `parts`.
[[nodiscard]] StatusOr<TableSnapshot> MergeShardSnapshots(std::vector<TableSnapshot>& parts,
                                                          const std::string& where);

}  // namespace recsdk::internal

#endif  // RECSDK_CHECKPOINT_SHARDED_CHECKPOINT_H_
