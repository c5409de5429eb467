// sharded_write.cc: the protocol of a directory written by every rank (sharded_write.h).
#include "src/checkpoint/sharded_write.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/checkpoint/sharded_checkpoint.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dist/process_communicator.h"

namespace recsdk::internal {
namespace {

// ShardReport: one rank's outcome of writing its shard, as every rank learns it (AllGather).
struct ShardReport {
  int32_t ok = 0;
  char id[12] = {};  // the shard manifest's id, 8 hex digits
};

// CommitReport: rank 0's outcome of the commit, as every rank learns it (Broadcast): a status
// code and the start of its message, or the directory's id.
struct CommitReport {
  int32_t code = 0;
  char id[12] = {};
  char message[500] = {};
};

template <size_t N>
void CopyBounded(std::string_view text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// Collective: `fn` on the process communicator with its deadline; an error names the write and
// the phase.
template <typename Fn>
Status Collective(const ShardedWrite& w, const char* phase, Fn&& fn) {
  Status s =
      dist::WithProcessCommunicator([&](dist::Communicator& comm, const DistributedOptions& o) {
        return fn(comm, dist::DeadlineAfterSeconds(o.collective_timeout_s));
      });
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("{}, {}: {}", w.what, phase, s.message()));
}

}  // namespace

Status MoveShardsInto(Env* env, int world, const ShardedWrite& w, const std::string& dir) {
  for (int r = 0; r < world; ++r) {
    const std::string from = w.shard_tmp(r);
    if (!env->FileExists(from)) {
      return absl::FailedPreconditionError(fmt::format(
          "rank {} wrote its shard to \"{}\", which rank 0 cannot see: the directory must be one "
          "every rank sees (one host, or a file system shared by the hosts)",
          r, from));
    }
    RECSDK_RETURN_IF_ERROR(env->RenameFile(from, JoinPath(dir, ShardDirName(r, world))));
  }
  return absl::OkStatus();
}

StatusOr<std::string> RunShardedWrite(Env* env, int rank, int world, const Status& before,
                                      const ShardedWrite& w) {
  const std::string mine_dir = w.shard_tmp(rank);
  Status mine = before;
  ShardReport report;
  if (mine.ok()) {
    mine = [&]() -> Status {
      // Leftovers of an earlier crash go first, never followed (a planted link must not get its
      // target's files written); the directory is then made exclusively.
      RECSDK_RETURN_IF_ERROR(DeleteRecursively(env, mine_dir));
      RECSDK_RETURN_IF_ERROR(env->CreateDirExclusive(mine_dir));
      RECSDK_ASSIGN_OR_RETURN(const std::string id, w.write_shard(mine_dir));
      CopyBounded(id, report.id);
      return absl::OkStatus();
    }();
  }
  if (!mine.ok()) {
    LogError("rank {} of {} could not write its shard of {}: {}", rank, world, w.what,
             mine.message());
  }
  report.ok = mine.ok() ? 1 : 0;
  std::vector<ShardReport> reports(static_cast<size_t>(world));
  const Status gathered =
      Collective(w, "gathering the shards' outcomes", [&](auto& comm, dist::Deadline d) {
        return comm.template AllGather<ShardReport>(absl::MakeConstSpan(&report, 1),
                                                    absl::MakeSpan(reports), d,
                                                    {w.step, "sharded_write/shards"});
      });
  std::vector<int> failed;
  for (int r = 0; r < world && gathered.ok(); ++r) {
    if (reports[static_cast<size_t>(r)].ok == 0) failed.push_back(r);
  }
  if (!gathered.ok() || !failed.empty()) {
    DeleteRecursively(env, mine_dir).IgnoreError();
    if (!mine.ok()) return mine;
    if (!gathered.ok()) return gathered;
    return absl::AbortedError(fmt::format(
        "{} was not written: rank(s) {} of {} could not write their shards (each logged why)",
        w.what, fmt::join(failed, ", "), world));
  }
  CommitReport outcome;
  if (rank == 0) {
    std::vector<std::string> shard_ids;
    for (const ShardReport& r : reports) shard_ids.emplace_back(r.id);
    StatusOr<std::string> id = w.commit(shard_ids);
    if (!id.ok()) {
      for (int r = 0; r < world; ++r) DeleteRecursively(env, w.shard_tmp(r)).IgnoreError();
      const absl::string_view m = id.status().message();
      CopyBounded(std::string_view(m.data(), m.size()), outcome.message);
      outcome.code = static_cast<int32_t>(id.status().code());
      mine = id.status();
    } else {
      CopyBounded(*id, outcome.id);
    }
  }
  const Status told = Collective(w, "learning rank 0's commit", [&](auto& comm, dist::Deadline d) {
    return comm.template Broadcast<CommitReport>(absl::MakeSpan(&outcome, 1), 0, d,
                                                 {w.step, "sharded_write/commit"});
  });
  if (rank == 0) {
    RECSDK_RETURN_IF_ERROR(mine);
    if (!told.ok()) {
      // Committed, but the others may not know it: they fail, and so does rank 0, saying so.
      return Status(told.code(), fmt::format("{} (rank 0 had committed it)", told.message()));
    }
    return std::string(outcome.id);
  }
  RECSDK_RETURN_IF_ERROR(told);
  if (outcome.code != 0) {
    return Status(static_cast<absl::StatusCode>(outcome.code),
                  fmt::format("rank 0 could not commit {}: {}", w.what, outcome.message));
  }
  return std::string(outcome.id);
}

}  // namespace recsdk::internal
