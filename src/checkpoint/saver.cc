// saver.cc: the Saver (recsdk/checkpoint.h): snapshots of the session's dense variables and
// tables, written as checkpoint directories with a manifest, an index naming the latest, delta
// chains and retention; and SaveTable / RestoreTable for one table.
//
// A save is two phases. Snapshot: with each table's locks held exclusively (LockedTable; the key
// stage may be resolving a later batch), copy every variable's bytes and every table's rows; this
// is the only part that must not overlap a step. Write: payloads into model_dir/.tmp-ckpt-<step>,
// each synced; manifest.json last; the directory synced and renamed to ckpt-<step>; model_dir
// synced; then the index rewritten atomically; then old checkpoints deleted. A crash before the
// index rename leaves the previous index (and so the previous checkpoint) the latest.
// Only async_write needs the tables' rows copied in the snapshot phase. A synchronous save copies
// the variables, then writes each table straight from the table under its locks
// (SnapshotAndWriteTable: a few MiB at a time), which is the same moment since no step runs
// until Save returns, and needs no second copy of the rows in memory.
//
// Threading: see recsdk/checkpoint.h (one thread, between Session::Run calls).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/checkpoint.h"
#include "recsdk/distributed.h"
#include "recsdk/embedding.h"
#include "recsdk/pipeline.h"
#include "recsdk/variables.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/checkpoint/session_state.h"
#include "src/checkpoint/sharded_checkpoint.h"
#include "src/checkpoint/sharded_write.h"
#include "src/common/json_parse.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/dist/parameter_server.h"
#include "src/dist/process_communicator.h"
#include "src/session/table_ops.h"

namespace recsdk {
namespace internal {
namespace {

constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kTmpPrefix[] = ".tmp-ckpt-";

std::string CheckpointName(int64_t step) { return fmt::format("{}{}", kCheckpointPrefix, step); }

struct IndexEntry {
  std::string name;
  std::vector<std::string> chain;
};

struct Index {
  std::vector<IndexEntry> checkpoints;  // oldest first; the last is the latest
};

StatusOr<Index> ReadIndex(Env* env, const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, kIndexFile);
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonDocument(env, path));
  Index index;
  try {
    for (const auto& e : doc.at("checkpoints")) {
      index.checkpoints.push_back(
          {e.at("name").get<std::string>(), e.at("chain").get<std::vector<std::string>>()});
    }
  } catch (const std::exception& ex) {
    return absl::DataLossError(
        fmt::format("checkpoint index \"{}\" is corrupt: {}; restore a checkpoint by its directory",
                    path, ex.what()));
  }
  // Names in the index are the names of checkpoint directories inside model_dir, nothing else:
  // "../other/ckpt-9" would restore from, and let retention delete, files outside model_dir.
  for (const IndexEntry& e : index.checkpoints) {
    std::vector<std::string> names = e.chain;
    names.push_back(e.name);
    for (const std::string& name : names) {
      if (!IsPlainFileName(name) || name.rfind(kCheckpointPrefix, 0) != 0) {
        return absl::DataLossError(fmt::format(
            "checkpoint index \"{}\" names {}, which is not a checkpoint directory of this "
            "model_dir (names there are plain \"{}<step>\" names, no '/' or \"..\"); the index was "
            "edited or is not ours: restore a checkpoint by its directory",
            path, QuoteBounded(name), kCheckpointPrefix));
      }
    }
  }
  return index;
}

// NoIndexError: DataLoss when model_dir holds checkpoint directories but no index (the index
// was lost, so which checkpoint is the latest is unknown); NotFound when it holds none.
Status NoIndexError(Env* env, const std::string& model_dir) {
  const std::string index_path = JoinPath(model_dir, kIndexFile);
  auto children = env->GetChildren(model_dir);
  if (children.ok()) {
    std::sort(children->begin(), children->end());
    for (const std::string& c : *children) {
      if (c.rfind(kCheckpointPrefix, 0) == 0) {
        return absl::DataLossError(fmt::format(
            "checkpoint index \"{}\" is missing but \"{}\" holds checkpoints (e.g. \"{}\"): "
            "restore one by name, or start fresh in an empty model_dir (move the ckpt-* "
            "directories away)",
            index_path, model_dir, c));
      }
    }
  }
  return absl::NotFoundError(
      fmt::format("no checkpoint in \"{}\" (it has no \"{}\" index file)", model_dir, kIndexFile));
}

Status WriteIndex(Env* env, const std::string& model_dir, const Index& index) {
  nlohmann::json list = nlohmann::json::array();
  for (const IndexEntry& e : index.checkpoints)
    list.push_back({{"name", e.name}, {"chain", e.chain}});
  nlohmann::json doc = {{"format_version", kCheckpointFormatVersion},
                        {"latest", index.checkpoints.empty() ? "" : index.checkpoints.back().name},
                        {"checkpoints", list}};
  return WriteJsonDocument(env, JoinPath(model_dir, kIndexFile), std::move(doc), /*atomic=*/true);
}

}  // namespace

}  // namespace internal

using internal::Env;
using internal::JoinPath;

struct Saver::Impl {
  Session* session = nullptr;
  SaverOptions options;
  Env* env = nullptr;
  internal::SessionState state;
  KeyStage* key_stage = nullptr;
  int64_t restored_dataset_batches = -1;
  // The chain a delta would build on: empty until a save or restore, cleared by a failed save.
  // With async_write it already names a checkpoint being written; WaitPending clears it if that
  // write fails.
  mutable std::vector<std::string> chain;
  // chain_ids: the ids of `chain` (WriteCheckpointFiles). With async_write the last one is
  // filled in by WaitPending once the write has finished (pending_id).
  mutable std::vector<std::string> chain_ids;
  mutable std::shared_ptr<std::string> pending_id;
  // pending: the background write of the last Save (async_write), if any.
  mutable std::future<Status> pending;

  // rank, world: this process in its job (get_rank_id, get_rank_size). With several ranks, a
  // save and a restore are collectives: every rank calls them in the same order.
  int rank = 0;
  int world = 1;
  // layout: the roles of the job's ranks. With ps ranks (layout.ps > 0) rank and world are the
  // process's among every rank, workers and ps alike: a save and a restore are collectives of
  // all of them (the workers announce them to the ps loop, parameter_server.h). The ps ranks
  // write and read the sharded tables' shards, as shard p of P (the format of a checkpoint of P
  // all-worker ranks, so either restores as the other); the workers hold none of those rows,
  // and the chief writes the variables and the tables every worker holds whole.
  dist::JobLayout layout;
  bool with_ps() const { return layout.ps > 0; }
  // ShardWorld: the number of shards of this job's checkpoints.
  int ShardWorld() const { return with_ps() ? layout.owners() : world; }

  Status WaitPending() const;
  // Agree: whether every rank of the save or restore had `mine` OK (one AllReduce).
  StatusOr<bool> Agree(bool mine, std::string_view label) const;
  // RestoreResolved: Restore of the checkpoint `resolved` names (or why there is none).
  StatusOr<int64_t> RestoreResolved(const StatusOr<std::string>& resolved);
  // TmpDir: where this process writes the checkpoint of `step` before it is committed.
  std::string TmpDir(int64_t step) const;
  // ShardTmpDir: where rank `r` writes its shard of the checkpoint of `step`.
  std::string ShardTmpDir(int64_t step, int r) const;
  Status MakeCleanDir(const std::string& dir) const;
  // Write: the checkpoint of `job`; `id` receives its id (WriteCheckpointFiles).
  StatusOr<std::string> Write(const internal::SaveJob& job, std::string* id);
  // Commit: renames the written directory `tmp` to the checkpoint of `step`, then updates the
  // index and applies the retention.
  StatusOr<std::string> Commit(const std::string& tmp, int64_t step,
                               const std::vector<std::string>& job_chain);
  // WriteSharded: the checkpoint of `step` written by every rank (internal::RunShardedWrite);
  // `job` is this rank's snapshot or why it has none.
  StatusOr<std::string> WriteSharded(int64_t step, const StatusOr<internal::SaveJob>& job,
                                     std::string* id);
  // NameOtherCheckpoints: `error` of reading `dir`, naming the index's other checkpoints when
  // it is data loss (never fall back silently to an older one: the caller picks).
  Status NameOtherCheckpoints(const Status& error, const std::string& dir) const;
  // RestoreDistributed: Restore's read, check and commit with every rank agreeing between them.
  Status RestoreDistributed(internal::LoadedCheckpoint& ckpt,
                            const StatusOr<std::string>& resolved);
  StatusOr<std::string> WriteOrCleanUp(const internal::SaveJob& job, std::string* id);
  StatusOr<std::string> SaveImpl(int64_t step, bool delta);
  StatusOr<std::string> ResolveCheckpoint(std::string_view checkpoint) const;
};

Saver::Saver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Saver::~Saver() {
  dist::ClearPsCheckpointHandler(impl_.get());
  if (Status s = impl_->WaitPending(); !s.ok()) {
    internal::LogError("Saver: the last background save failed: {}", s.message());
  }
}

Status Saver::Impl::WaitPending() const {
  if (!pending.valid()) return absl::OkStatus();
  Status s = pending.get();
  if (!s.ok()) {
    chain.clear();
    chain_ids.clear();
  } else if (pending_id != nullptr && chain_ids.size() + 1 == chain.size()) {
    chain_ids.push_back(*pending_id);
  }
  pending_id.reset();
  return s;
}

Status Saver::WaitForWrites() { return impl_->WaitPending(); }

StatusOr<std::unique_ptr<Saver>> Saver::Create(Session& session, const SaverOptions& options) {
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError(
        "SaverOptions.model_dir is empty; set it to the directory for checkpoints");
  }
  if (options.keep_checkpoint_max < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "SaverOptions.keep_checkpoint_max is {}; it must be >= 1, or 0 to keep all checkpoints",
        options.keep_checkpoint_max));
  }
  if (options.restore_model_version < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "SaverOptions.restore_model_version is {}; it must be a checkpoint's step, or -1 for the "
        "latest",
        options.restore_model_version));
  }
  dist::JobLayout job_layout;
  if (!dist::ProcessJob(&job_layout)) job_layout = dist::JobLayout{};
  int world = 1;
  int rank = 0;
  if (job_layout.ps > 0) {
    // Every rank, ps included, takes part in a save of a job with ps ranks.
    if (!dist::ProcessWorld(&rank, &world)) {
      return absl::InternalError("Saver: a job with ps ranks but no process communicator");
    }
  } else {
    RECSDK_ASSIGN_OR_RETURN(world, get_rank_size());
    RECSDK_ASSIGN_OR_RETURN(rank, get_rank_id());
  }
  if (world > 1 && options.async_write) {
    return absl::InvalidArgumentError(fmt::format(
        "SaverOptions.async_write with {} ranks: a save of several ranks ends with rank 0 "
        "gathering every rank's shard and telling them the outcome, collectives that must run "
        "in the ranks' common order, which a background write cannot keep; set async_write = "
        "false",
        world));
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world;
  impl->layout = job_layout;
  impl->session = &session;
  impl->options = options;
  impl->options.model_dir = internal::NormalizeDir(options.model_dir);
  impl->env = options.env != nullptr ? options.env : Env::Default();
  RECSDK_ASSIGN_OR_RETURN(impl->state,
                          internal::CollectSessionState(session, /*saved_tables_only=*/true));
  if (impl->with_ps()) {
    // A ps saves the sharded tables' rows it holds, nothing else (its variables are never
    // trained); a worker saves everything but those tables, whose rows it does not hold.
    std::erase_if(impl->state.tables, [&](const internal::TableRef& t) {
      return internal::IsSharded(t) != job_layout.is_ps;
    });
    if (job_layout.is_ps) impl->state.var_names.clear();
  }
  RECSDK_RETURN_IF_ERROR(impl->env->CreateDir(options.model_dir));
  std::unique_ptr<Saver> saver(new Saver(std::move(impl)));
  if (job_layout.is_ps) {
    // The ps loop (RunParameterServer) joins the workers' saves and restores through this Saver.
    Saver* self = saver.get();
    dist::SetPsCheckpointHandler(
        self->impl_.get(),
        [self](dist::PsCommand command, int64_t step, std::string_view text) -> Status {
          switch (command) {
            case dist::PsCommand::kSave:
              return self->Save(step).status();
            case dist::PsCommand::kSaveDelta:
              return self->SaveDelta(step).status();
            case dist::PsCommand::kRestore:
              return self->impl_
                  ->RestoreResolved(text.empty() ? StatusOr<std::string>(absl::NotFoundError(
                                                       "the chief found no checkpoint to restore "
                                                       "(its log says why)"))
                                                 : StatusOr<std::string>(std::string(text)))
                  .status();
            default:
              return absl::InternalError("not a checkpoint command");
          }
        });
  }
  return saver;
}

StatusOr<bool> Saver::Impl::Agree(bool mine, std::string_view label) const {
  if (!with_ps()) return AllRanksAgree(mine, label);
  float votes = mine ? 1.0f : 0.0f;
  const Status s = dist::WithProcessCommunicator(
      [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
        return comm.AllReduce(absl::MakeSpan(&votes, 1), dist::ReduceOp::kSum,
                              dist::DeadlineAfterSeconds(o.collective_timeout_s), {-1, label});
      });
  if (!s.ok()) return Status(s.code(), fmt::format("agreeing on \"{}\": {}", label, s.message()));
  return votes == static_cast<float>(world);
}

std::string Saver::Impl::TmpDir(int64_t step) const {
  return JoinPath(options.model_dir,
                  fmt::format("{}{}-{}", internal::kTmpPrefix, step, static_cast<int>(getpid())));
}

Status Saver::Impl::MakeCleanDir(const std::string& dir) const {
  // Leftovers of an earlier crash of this step: start clean. Whatever is at the temporary name is
  // removed without following a link (a link planted there must not get its target's files
  // deleted or written), and the directory is then made exclusively.
  RECSDK_RETURN_IF_ERROR(internal::DeleteRecursively(env, dir));
  return env->CreateDirExclusive(dir);
}

StatusOr<std::string> Saver::Impl::Write(const internal::SaveJob& job, std::string* id) {
  const std::string tmp = TmpDir(job.step);
  RECSDK_RETURN_IF_ERROR(MakeCleanDir(tmp));
  RECSDK_ASSIGN_OR_RETURN(*id, internal::WriteCheckpointFiles(env, tmp, job));
  return Commit(tmp, job.step, job.chain);
}

StatusOr<std::string> Saver::Impl::Commit(const std::string& tmp, int64_t step,
                                          const std::vector<std::string>& job_chain) {
  const std::string& model_dir = options.model_dir;
  const std::string name = internal::CheckpointName(step);
  const std::string final_dir = JoinPath(model_dir, name);
  // The index, read before anything is renamed: a corrupt index is rebuilt from this save on.
  internal::Index index;
  if (env->FileExists(JoinPath(model_dir, internal::kIndexFile))) {
    auto read = internal::ReadIndex(env, model_dir);
    if (read.ok()) {
      index = std::move(*read);
    } else {
      internal::LogWarning("Saver: ignoring the unreadable index: {}", read.status().message());
    }
  }
  // Replacing a checkpoint of the same step: move the old one aside first, delete it after.
  std::string aside;
  if (env->FileExists(final_dir)) {
    aside = tmp + ".old";
    RECSDK_RETURN_IF_ERROR(env->RenameFile(final_dir, aside));
  }
  RECSDK_RETURN_IF_ERROR(env->RenameFile(tmp, final_dir));
  RECSDK_RETURN_IF_ERROR(env->SyncDir(model_dir));

  std::vector<internal::IndexEntry>& list = index.checkpoints;
  list.erase(
      std::remove_if(list.begin(), list.end(), [&](const auto& e) { return e.name == name; }),
      list.end());
  list.push_back({name, job_chain});
  // Retention: the newest keep_checkpoint_max, and every checkpoint their chains build on.
  std::vector<std::string> doomed;
  const size_t keep = static_cast<size_t>(options.keep_checkpoint_max);
  if (keep > 0 && list.size() > keep) {
    std::set<std::string> needed;
    for (size_t i = list.size() - keep; i < list.size(); ++i) {
      needed.insert(list[i].name);
      needed.insert(list[i].chain.begin(), list[i].chain.end());
    }
    std::vector<internal::IndexEntry> kept;
    for (auto& e : list) {
      if (needed.contains(e.name)) {
        kept.push_back(std::move(e));
      } else {
        doomed.push_back(e.name);
      }
    }
    list = std::move(kept);
  }
  RECSDK_RETURN_IF_ERROR(internal::WriteIndex(env, model_dir, index));
  if (!aside.empty()) {
    if (Status s = internal::DeleteRecursively(env, aside); !s.ok()) {
      internal::LogWarning("Saver: could not delete the replaced checkpoint: {}", s.message());
    }
  }
  for (const std::string& d : doomed) {
    if (Status s = internal::DeleteRecursively(env, JoinPath(model_dir, d)); !s.ok()) {
      internal::LogWarning("Saver: could not delete old checkpoint \"{}\": {}", d, s.message());
    }
  }
  return final_dir;
}

StatusOr<std::string> Saver::Impl::WriteOrCleanUp(const internal::SaveJob& job, std::string* id) {
  auto dir = Write(job, id);
  // Remove this save's temporary directory; the previous checkpoint stays the latest.
  if (!dir.ok()) internal::DeleteRecursively(env, TmpDir(job.step)).IgnoreError();
  return dir;
}

StatusOr<std::string> Saver::Impl::SaveImpl(int64_t step, bool delta) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        fmt::format("Saver: global_step {} is negative; pass the training step (>= 0)", step));
  }
  if (Status previous = WaitPending(); !previous.ok()) {
    if (delta) {
      return absl::FailedPreconditionError(fmt::format(
          "Saver::SaveDelta: the previous background save failed ({}), so there is no checkpoint "
          "to build on; call Save",
          previous.message()));
    }
    internal::LogWarning("Saver: the previous background save failed: {}", previous.message());
  }
  if (delta && chain.empty()) {
    return absl::FailedPreconditionError(
        "Saver::SaveDelta: there is no full checkpoint to build on (none saved or restored by this "
        "Saver, or the previous save failed); call Save first");
  }
  // Snapshot: this rank's part of the checkpoint, or why there is none. With several ranks a
  // rank that has none still takes part in the save's collectives, so that no rank waits for it.
  auto snapshot = [&]() -> StatusOr<internal::SaveJob> {
    if (key_stage != nullptr && key_stage->channel() == KeyStageChannel::kTrain &&
        !key_stage->Quiescent()) {
      return absl::FailedPreconditionError(fmt::format(
          "Saver: the key stage has changed the tables for batches the training loop has not "
          "run yet, so step {} is not one consistent moment; call KeyStage::Quiesce(), keep "
          "training until KeyStage::Quiescent(), then save (CheckpointSaverHook does this)",
          step));
    }
    // Whatever happens from here, a failure breaks the delta chain: the tables' change tracking
    // restarts at the snapshot, so a later delta would miss this one's rows.
    std::vector<std::string> previous = std::move(chain);
    std::vector<std::string> previous_ids = std::move(chain_ids);
    chain.clear();
    chain_ids.clear();
    RECSDK_ASSIGN_OR_RETURN(internal::SaveJob job,
                            internal::SnapshotSession(*session, state,
                                                      delta ? EmbeddingTable::SnapshotKind::kDelta
                                                            : EmbeddingTable::SnapshotKind::kFull,
                                                      /*stream_tables=*/!options.async_write));
    job.step = step;
    if (key_stage != nullptr) job.dataset_batches = key_stage->batches_consumed();
    if (delta) {
      if (previous_ids.size() != previous.size()) {
        return absl::FailedPreconditionError(
            "Saver::SaveDelta: the checkpoint to build on has no id (it was written before "
            "checkpoints recorded one); call Save first");
      }
      job.chain = std::move(previous);
      job.chain_ids = std::move(previous_ids);
    }
    return job;
  };
  StatusOr<internal::SaveJob> job = snapshot();
  std::string id;
  if (with_ps() && !layout.is_ps) {
    // The workers write no shard manifest: the chief records each worker's input position in
    // the top one (a collective of the workers, before the save's own).
    int64_t mine = job.ok() ? job->dataset_batches : -1;
    std::vector<int64_t> all(static_cast<size_t>(layout.workers), -1);
    const Status gathered = dist::WithWorkerCommunicator(
        [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
          if (comm.size() == 1) {
            all[0] = mine;
            return absl::OkStatus();
          }
          return comm.AllGather<int64_t>(absl::MakeConstSpan(&mine, 1), absl::MakeSpan(all),
                                         dist::DeadlineAfterSeconds(o.collective_timeout_s),
                                         {step, "ckpt/input positions"});
        });
    if (!gathered.ok()) {
      return Status(gathered.code(),
                    fmt::format("Saver: rank {}: gathering the workers' input positions for the "
                                "checkpoint of step {}: {}",
                                rank, step, gathered.message()));
    }
    if (job.ok() && rank == 0 &&
        std::any_of(all.begin(), all.end(), [](int64_t b) { return b >= 0; })) {
      job->worker_dataset_batches = std::move(all);
    }
  }
  if (world > 1) {
    // Every rank ends the save the same way: the chain breaks everywhere if any rank failed.
    std::vector<std::string> base = job.ok() ? job->chain : std::vector<std::string>{};
    std::vector<std::string> base_ids = job.ok() ? job->chain_ids : std::vector<std::string>{};
    StatusOr<std::string> dir = WriteSharded(step, job, &id);
    chain.clear();
    chain_ids.clear();
    if (!dir.ok()) return dir.status();
    chain = std::move(base);
    chain_ids = std::move(base_ids);
    chain.push_back(internal::CheckpointName(step));
    chain_ids.push_back(id);
    return dir;
  }
  if (!job.ok()) return job.status();
  std::vector<std::string> next = job->chain;
  std::vector<std::string> next_ids = job->chain_ids;
  next.push_back(internal::CheckpointName(step));
  if (options.async_write) {
    chain = std::move(next);
    chain_ids = std::move(next_ids);
    auto shared = std::make_shared<internal::SaveJob>(std::move(*job));
    auto pending_write_id = std::make_shared<std::string>();
    pending_id = pending_write_id;
    pending = std::async(std::launch::async, [this, shared, pending_write_id]() -> Status {
      return WriteOrCleanUp(*shared, pending_write_id.get()).status();
    });
    return JoinPath(options.model_dir, internal::CheckpointName(step));
  }
  // A full save links the SSD tiers' segment files unless asked to copy (SaverOptions); the holds
  // the tables took are settled whatever the outcome.
  job->link_ssd = !delta && !options.copy_ssd_rows;
  StatusOr<std::string> written = WriteOrCleanUp(*job, &id);
  const Status settled = internal::SettleSsdHolds(*job, written.ok());
  RECSDK_ASSIGN_OR_RETURN(std::string dir, std::move(written));
  RECSDK_RETURN_IF_ERROR(settled);
  chain = std::move(next);
  chain_ids = std::move(next_ids);
  chain_ids.push_back(id);
  return dir;
}

std::string Saver::Impl::ShardTmpDir(int64_t step, int r) const {
  return JoinPath(options.model_dir, fmt::format("{}{}-{}", internal::kTmpPrefix, step,
                                                 internal::ShardDirName(r, world)));
}

// WriteSharded: a checkpoint of N ranks (internal::RunShardedWrite): each rank writes its shard
// of the sharded tables; rank 0 moves them into the checkpoint, writes its manifest (variables,
// the tables every rank holds whole, the shards' ids) and commits it as a save of one process
// does (rename, index, retention).
StatusOr<std::string> Saver::Impl::WriteSharded(int64_t step,
                                                const StatusOr<internal::SaveJob>& job,
                                                std::string* id) {
  internal::ShardedWrite w;
  w.what = fmt::format("Saver: the checkpoint of step {}", step);
  w.step = step;
  w.shard_tmp = [&](int r) { return ShardTmpDir(step, r); };
  w.write_shard = [&](const std::string& dir) -> StatusOr<std::string> {
    if (with_ps() && !layout.is_ps) return std::string();  // a worker holds no shard's rows
    internal::ManifestParts parts;
    parts.variables = false;
    parts.tables = internal::ManifestParts::TableSet::kSharded;
    return internal::WriteCheckpointFiles(env, dir, *job, parts);
  };
  w.commit = [&](const std::vector<std::string>& shard_ids) -> StatusOr<std::string> {
    const std::string tmp = TmpDir(step);
    auto commit = [&]() -> StatusOr<std::string> {
      RECSDK_RETURN_IF_ERROR(MakeCleanDir(tmp));
      std::vector<std::string> ids = shard_ids;
      if (with_ps()) {
        // The workers' shard directories are empty; ps rank owner_first + p's is shard p of P.
        const int first = layout.owner_first();
        for (int r = 0; r < first; ++r) {
          RECSDK_RETURN_IF_ERROR(internal::DeleteRecursively(env, w.shard_tmp(r)));
        }
        for (int p = 0; p < layout.owners(); ++p) {
          const std::string from = w.shard_tmp(first + p);
          if (!env->FileExists(from)) {
            return absl::FailedPreconditionError(fmt::format(
                "ps rank {} wrote its shard to \"{}\", which the chief cannot see: the "
                "directory must be one every rank sees (one host, or a file system shared by "
                "the hosts)",
                first + p, from));
          }
          RECSDK_RETURN_IF_ERROR(
              env->RenameFile(from, JoinPath(tmp, internal::ShardDirName(p, layout.owners()))));
        }
        ids.assign(shard_ids.begin() + first, shard_ids.end());
      } else {
        RECSDK_RETURN_IF_ERROR(internal::MoveShardsInto(env, world, w, tmp));
      }
      internal::ManifestParts parts;
      parts.tables = internal::ManifestParts::TableSet::kWhole;
      parts.dataset = false;
      parts.shard_ids = std::move(ids);
      RECSDK_ASSIGN_OR_RETURN(std::string top,
                              internal::WriteCheckpointFiles(env, tmp, *job, parts));
      RECSDK_RETURN_IF_ERROR(Commit(tmp, step, job->chain).status());
      return top;
    };
    StatusOr<std::string> top = commit();
    if (!top.ok()) internal::DeleteRecursively(env, tmp).IgnoreError();
    return top;
  };
  RECSDK_ASSIGN_OR_RETURN(*id, internal::RunShardedWrite(env, rank, world, job.status(), w));
  return JoinPath(options.model_dir, internal::CheckpointName(step));
}

StatusOr<std::string> Saver::Save(int64_t global_step) {
  // A worker of a job with ps ranks has the ps loop join (nothing without ps ranks, or on a ps).
  RECSDK_RETURN_IF_ERROR(dist::AnnounceCommand(dist::PsCommand::kSave, global_step, ""));
  try {
    return impl_->SaveImpl(global_step, /*delta=*/false);
  } catch (const std::bad_alloc&) {
    impl_->chain.clear();
    impl_->chain_ids.clear();
    return absl::ResourceExhaustedError(
        fmt::format("Saver: out of memory taking the snapshot of step {}", global_step));
  }
}

StatusOr<std::string> Saver::SaveDelta(int64_t global_step) {
  if (!impl_->options.is_incremental_checkpoint) {
    return absl::FailedPreconditionError(
        "Saver::SaveDelta needs SaverOptions.is_incremental_checkpoint = true");
  }
  RECSDK_RETURN_IF_ERROR(dist::AnnounceCommand(dist::PsCommand::kSaveDelta, global_step, ""));
  try {
    return impl_->SaveImpl(global_step, /*delta=*/true);
  } catch (const std::bad_alloc&) {
    impl_->chain.clear();
    impl_->chain_ids.clear();
    return absl::ResourceExhaustedError(
        fmt::format("Saver: out of memory taking the delta snapshot of step {}", global_step));
  }
}

StatusOr<std::string> Saver::LatestCheckpoint() const {
  RECSDK_RETURN_IF_ERROR(impl_->WaitPending());
  const std::string& model_dir = impl_->options.model_dir;
  if (!impl_->env->FileExists(JoinPath(model_dir, internal::kIndexFile))) {
    return internal::NoIndexError(impl_->env, model_dir);
  }
  RECSDK_ASSIGN_OR_RETURN(internal::Index index, internal::ReadIndex(impl_->env, model_dir));
  if (index.checkpoints.empty()) {
    return absl::NotFoundError(fmt::format("the checkpoint index of \"{}\" is empty", model_dir));
  }
  return JoinPath(model_dir, index.checkpoints.back().name);
}

StatusOr<std::string> Saver::Impl::ResolveCheckpoint(std::string_view checkpoint) const {
  const std::string& model_dir = options.model_dir;
  if (checkpoint.empty()) {
    if (options.restore_model_version >= 0) {
      const std::string dir =
          JoinPath(model_dir, internal::CheckpointName(options.restore_model_version));
      if (!env->FileExists(dir)) {
        return absl::NotFoundError(fmt::format(
            "restore_model_version {}: there is no checkpoint \"{}\"; pick a step that was saved",
            options.restore_model_version, dir));
      }
      return dir;
    }
    const std::string index_path = JoinPath(model_dir, internal::kIndexFile);
    if (!env->FileExists(index_path)) return internal::NoIndexError(env, model_dir);
    RECSDK_ASSIGN_OR_RETURN(internal::Index index, internal::ReadIndex(env, model_dir));
    if (index.checkpoints.empty()) {
      return absl::NotFoundError(fmt::format("the checkpoint index \"{}\" is empty", index_path));
    }
    return JoinPath(model_dir, index.checkpoints.back().name);
  }
  std::string dir = internal::NormalizeDir(checkpoint);
  if (dir.find('/') == std::string::npos) dir = JoinPath(model_dir, dir);
  if (!env->FileExists(dir)) {
    return absl::NotFoundError(fmt::format("checkpoint \"{}\" does not exist", dir));
  }
  return dir;
}

StatusOr<int64_t> Saver::Restore(std::string_view checkpoint) {
  Impl& im = *impl_;
  if (Status s = im.WaitPending(); !s.ok()) {
    internal::LogWarning("Saver: the last background save failed: {}", s.message());
  }
  StatusOr<std::string> resolved = im.ResolveCheckpoint(checkpoint);
  // The ps ranks restore the directory the chief resolved ("" when it found none).
  RECSDK_RETURN_IF_ERROR(dist::AnnounceCommand(dist::PsCommand::kRestore, -1,
                                               resolved.ok() ? *resolved : std::string()));
  return im.RestoreResolved(resolved);
}

StatusOr<int64_t> Saver::Impl::RestoreResolved(const StatusOr<std::string>& resolved) {
  Impl& im = *this;
  internal::LoadedCheckpoint ckpt;
  if (im.world > 1) {
    // Every rank reads and checks, then all agree, then all commit: a rank that cannot restore
    // (its shard missing, a table of another dim) leaves every rank unchanged.
    RECSDK_RETURN_IF_ERROR(im.RestoreDistributed(ckpt, resolved));
  } else {
    RECSDK_RETURN_IF_ERROR(resolved.status());
    const std::string& dir = *resolved;
    try {
      auto loaded = internal::LoadCheckpoint(im.env, dir, {}, /*stream_rows=*/true);
      if (!loaded.ok()) return im.NameOtherCheckpoints(loaded.status(), dir);
      ckpt = std::move(*loaded);
      RECSDK_RETURN_IF_ERROR(internal::ApplyCheckpoint(*im.session, im.state, ckpt));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          fmt::format("Saver: out of memory reading checkpoint \"{}\"", dir));
    }
  }
  const std::string& dir = ckpt.dir;
  if (ckpt.run_count >= 0) im.session->SetRunCount(ckpt.run_count);
  im.restored_dataset_batches = ckpt.dataset_batches;
  if (im.with_ps()) {
    // A worker takes its own position from the chief's record, when the checkpoint was written
    // by as many workers (each reads its shard of the input, Shard(dataset, workers, rank)).
    im.restored_dataset_batches = -1;
    const auto& positions = ckpt.worker_dataset_batches;
    if (!im.layout.is_ps && positions.size() == static_cast<size_t>(im.layout.workers)) {
      im.restored_dataset_batches = positions[static_cast<size_t>(im.rank)];
    } else if (!im.layout.is_ps && !positions.empty()) {
      internal::LogInfo(
          "Saver: checkpoint \"{}\" was written by {} worker(s) and is restored by {}: the input "
          "position is not restored (each worker's shard of the input changed)",
          ckpt.dir, positions.size(), im.layout.workers);
    }
  }
  im.chain = ckpt.chain;
  im.chain.push_back(dir.substr(dir.find_last_of('/') + 1));
  im.chain_ids = ckpt.chain_ids;
  im.chain_ids.push_back(ckpt.id);
  if (ckpt.id.empty() || im.chain_ids.size() != im.chain.size()) im.chain_ids.clear();
  if (ckpt.world_size != im.ShardWorld()) {
    internal::LogInfo(
        "Saver: checkpoint \"{}\" was written by {} rank(s) and is restored by {}: its tables "
        "were re-sharded; the input position is not restored (each rank's shard of the input "
        "changed)",
        dir, ckpt.world_size, im.ShardWorld());
  }
  internal::LogInfo("Saver: restored checkpoint \"{}\" (step {})", dir, ckpt.step);
  return ckpt.step;
}

Status Saver::Impl::NameOtherCheckpoints(const Status& error, const std::string& dir) const {
  // Never fall back silently to an older checkpoint: name the others, so the caller picks.
  std::vector<std::string> others;
  if (auto index = internal::ReadIndex(env, options.model_dir); index.ok()) {
    for (const auto& e : index->checkpoints) {
      if (JoinPath(options.model_dir, e.name) != dir) others.push_back(e.name);
    }
  }
  if (!absl::IsDataLoss(error) || others.empty()) return error;
  return absl::DataLossError(
      fmt::format("{} (other checkpoints in \"{}\": {}; pass one to Restore)", error.message(),
                  options.model_dir, fmt::join(others, ", ")));
}

Status Saver::Impl::RestoreDistributed(internal::LoadedCheckpoint& ckpt,
                                       const StatusOr<std::string>& resolved) {
  const std::string dir = resolved.ok() ? *resolved : std::string();
  auto agree = [&](const Status& mine, const char* phase) -> Status {
    StatusOr<bool> all = Agree(mine.ok(), "checkpoint restore");
    if (!all.ok()) {
      return Status(all.status().code(), fmt::format("Saver: restoring \"{}\", {}: {}", dir, phase,
                                                     all.status().message()));
    }
    if (!mine.ok()) return mine;
    if (!*all) {
      return absl::AbortedError(fmt::format(
          "Saver: restoring \"{}\": another rank failed {} (its log says why); {}", dir, phase,
          std::string_view(phase) == "reading and checking" ? "nothing was changed"
                                                            : "the tables may be partly restored"));
    }
    return absl::OkStatus();
  };
  Status checked = [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(resolved.status());
    try {
      internal::TablePlacements placements =
          internal::PlacementsOf(state, internal::TablePlacement{rank, world});
      if (with_ps()) {
        // A ps holds the keys of shard p of P; a worker none (its state has no sharded table).
        const internal::TablePlacement mine =
            layout.is_ps
                ? internal::TablePlacement{rank - layout.owner_first(), layout.owners()}
                : internal::TablePlacement{internal::TablePlacement::kNone, layout.owners()};
        placements.others = mine;
        if (layout.is_ps) {
          for (auto& [name, p] : placements.tables) p = mine;
        }
      }
      auto loaded = internal::LoadCheckpoint(env, dir, placements);
      if (!loaded.ok()) return NameOtherCheckpoints(loaded.status(), dir);
      ckpt = std::move(*loaded);
      return internal::CheckCheckpoint(*session, state, ckpt);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          fmt::format("Saver: out of memory reading checkpoint \"{}\"", dir));
    }
  }();
  if (!checked.ok()) {
    internal::LogError("Saver: rank {} of {} cannot restore \"{}\": {}", rank, world, dir,
                       checked.message());
  }
  RECSDK_RETURN_IF_ERROR(agree(checked, "reading and checking"));
  Status committed = internal::CommitCheckpoint(*session, state, ckpt);
  if (!committed.ok()) {
    internal::LogError("Saver: rank {} of {} could not apply \"{}\": {}", rank, world, dir,
                       committed.message());
  }
  return agree(committed, "applying");
}

void Saver::AttachKeyStage(KeyStage* stage) { impl_->key_stage = stage; }

int64_t Saver::restored_dataset_batches() const { return impl_->restored_dataset_batches; }

Status SaveTable(EmbeddingTable& table, const std::string& table_dir) {
  Env* env = Env::Default();
  const std::string dir = internal::NormalizeDir(table_dir);
  RECSDK_RETURN_IF_ERROR(env->CreateDir(dir));
  // Synchronous: the rows stream from the table to their file, never copied whole.
  RECSDK_ASSIGN_OR_RETURN(
      nlohmann::json entry,
      internal::SnapshotAndWriteTable(env, dir, "", table, EmbeddingTable::SnapshotKind::kFull));
  nlohmann::json manifest = {{"format_version", internal::kCheckpointFormatVersion},
                             {"table", entry}};
  return internal::WriteJsonDocument(env, JoinPath(dir, internal::kManifestFile),
                                     std::move(manifest), /*atomic=*/true);
}

namespace {

Status RestoreTableImpl(EmbeddingTable& table, const std::string& dir) {
  Env* env = Env::Default();
  const std::string path = JoinPath(dir, internal::kManifestFile);
  auto manifest = internal::ReadJsonDocument(env, path);
  if (!manifest.ok()) {
    if (absl::IsNotFound(manifest.status())) {
      return absl::DataLossError(
          fmt::format("table \"{}\": cannot restore from \"{}\": its manifest \"{}\" is missing",
                      table.name(), dir, path));
    }
    return manifest.status();
  }
  if (!manifest->contains("table")) {
    return absl::DataLossError(fmt::format("table manifest \"{}\" has no table entry", path));
  }
  const nlohmann::json& version = (*manifest)["format_version"];
  if (!version.is_number_integer() ||
      version.get<int64_t>() < internal::kOldestReadableFormatVersion ||
      version.get<int64_t>() > internal::kNewestReadableFormatVersion) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\": \"{}\" has format version {} but this recsdk reads versions {} to {}; "
        "restore it with the recsdk that wrote it",
        table.name(), path, version.dump(), internal::kOldestReadableFormatVersion,
        internal::kNewestReadableFormatVersion));
  }
  RECSDK_RETURN_IF_ERROR(internal::CheckTableCompatible((*manifest)["table"], table, path));
  RECSDK_ASSIGN_OR_RETURN(TableSnapshot s,
                          internal::ReadTablePayloads(env, dir, (*manifest)["table"],
                                                      /*stream_rows=*/true));
  return table.AdoptSnapshot(std::move(s));  // the rows' pages become the table's
}

}  // namespace

Status RestoreTable(EmbeddingTable& table, const std::string& dir) {
  try {
    return RestoreTableImpl(table, internal::NormalizeDir(dir));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\": out of memory restoring from \"{}\" (the table is unchanged); raise the "
        "process's memory limit",
        table.name(), dir));
  }
}

}  // namespace recsdk
