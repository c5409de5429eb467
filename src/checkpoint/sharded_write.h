// sharded_write.h: a directory that every rank of a job writes together: a checkpoint or an
// export bundle of tables sharded over the ranks (sharded_checkpoint.h describes the layout).
//
// The protocol, the same for both:
// 1. Each rank writes its shard into a temporary directory of its own beside the target.
// 2. Every rank learns every shard's outcome (one AllGather). If any failed, every rank removes
//    its shard and fails: a rank that failed with its own error, the others naming the ranks
//    that failed (each of which logged why).
// 3. Rank 0 moves the shards into its temporary directory of the target, writes the rest (the
//    manifest with the shards' ids, the variables, the serving files) and commits it, then
//    tells every rank the outcome (one Broadcast of the status and the id).
// Every rank returns the same outcome. The directory must be one every rank sees (one host, or
// a shared file system): rank 0 says so when a shard is not there. A rank with nothing to write
// (its snapshot failed) still takes part, so that no rank waits for it until the deadline;
// every wait has the process communicator's deadline (collective_timeout_s).
//
// Threading: the training thread of each rank, in the ranks' common order of collectives.
#ifndef RECSDK_CHECKPOINT_SHARDED_WRITE_H_
#define RECSDK_CHECKPOINT_SHARDED_WRITE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"

namespace recsdk::internal {

struct ShardedWrite {
  // what: the directory's name in messages ("the checkpoint of step 6").
  std::string what;
  // step: the training step, for the collectives' tags (-1: none).
  int64_t step = -1;
  // shard_tmp: rank r's temporary shard directory.
  std::function<std::string(int r)> shard_tmp;
  // write_shard: this rank's shard into `dir` (already made, empty); returns its id.
  std::function<StatusOr<std::string>(const std::string& dir)> write_shard;
  // commit: rank 0, once every shard is written: moves them in (MoveShardsInto), writes the
  // rest and commits; returns the directory's id. On an error it removes what it made.
  std::function<StatusOr<std::string>(const std::vector<std::string>& shard_ids)> commit;
};

// RunShardedWrite: the protocol above. `before`: this rank's error before writing (its
// snapshot), or OK. Returns the committed directory's id.
[[nodiscard]] StatusOr<std::string> RunShardedWrite(Env* env, int rank, int world,
                                                    const Status& before, const ShardedWrite& w);

// MoveShardsInto: rank 0's gathering of the shards: rank r's shard_tmp(r) becomes
// dir/ShardDirName(r, world). FailedPrecondition naming the rank when its shard is not visible.
[[nodiscard]] Status MoveShardsInto(Env* env, int world, const ShardedWrite& w,
                                    const std::string& dir);

}  // namespace recsdk::internal

namespace recsdk {
class Session;
}  // namespace recsdk

namespace recsdk::internal {

// ExportPsShard: a ps rank's part of the workers' ExportSavedModel (export.cc): `text` is the
// announced bundle directory, then one sharded table of the serving graph per line; the ps
// writes its shard of those tables' serving rows and joins the bundle's RunShardedWrite.
[[nodiscard]] Status ExportPsShard(Session& session, std::string_view text);

}  // namespace recsdk::internal

#endif  // RECSDK_CHECKPOINT_SHARDED_WRITE_H_
