// session_state.h: the state of a Session a checkpoint holds (dense variables and tables), taken
// as one snapshot and written as checkpoint files, or read, verified and put back. Shared by the
// Saver (saver.cc) and the export bundle (export.cc).
//
// Threading: snapshots and restores run on the training thread between Session::Run calls; they
// hold each table's locks exclusively (LockedTable) so the key stage does not insert meanwhile.
// WriteCheckpointFiles only reads its SaveJob and may run on another thread.
#ifndef RECSDK_CHECKPOINT_SESSION_STATE_H_
#define RECSDK_CHECKPOINT_SESSION_STATE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/session.h"
#include "recsdk/shape.h"
#include "recsdk/table.h"
#include "src/checkpoint/sharded_checkpoint.h"
#include "src/common/env.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {

struct VarSnapshot {
  std::string name;
  DType dtype = DType::kInvalid;
  Shape shape;
  std::string bytes;
};

struct TableRef {
  std::string name;
  TableResource* resource = nullptr;
};

// SessionState: what of a session a checkpoint holds: the variables (every VarHandle node of its
// graph) and the tables (with is_save, when saved_tables_only).
struct SessionState {
  std::vector<std::string> var_names;
  std::vector<TableRef> tables;
};
[[nodiscard]] StatusOr<SessionState> CollectSessionState(Session& session, bool saved_tables_only);

// SaveJob: one consistent snapshot, ready to be written.
struct SaveJob {
  int64_t step = 0;
  bool delta = false;
  std::vector<std::string> chain;      // the full checkpoint and deltas this one builds on
  std::vector<std::string> chain_ids;  // their ids (LoadedCheckpoint::id), in the same order
  // The session's RNG state (Session::SetRunCount) and the batches training consumed from its
  // dataset (KeyStage::batches_consumed; -1 when no key stage is attached).
  int64_t run_count = 0;
  int64_t dataset_batches = -1;
  // worker_dataset_batches: in a job with ps ranks, the chief's top manifest records each
  // worker's position (the workers write no shard manifest); empty elsewhere.
  std::vector<int64_t> worker_dataset_batches;
  std::vector<VarSnapshot> vars;
  std::vector<TableSnapshot> tables;
  // A synchronous save leaves `tables` empty and names the tables here instead: each is written
  // straight from the live table (SnapshotAndWriteTable, `table_kind`), under its locks,
  // so its rows are never copied whole. Only while the caller keeps every step out.
  std::vector<TableRef> streamed_tables;
  EmbeddingTable::SnapshotKind table_kind = EmbeddingTable::SnapshotKind::kFull;
  // link_ssd: a full save's streamed tables hard-link their SSD segment files instead of copying
  // the SSD rows (SnapshotAndWriteTable); the caller then settles the holds (SettleSsdHolds).
  bool link_ssd = false;
};
// SettleSsdHolds: EmbeddingTable::SettleSsdHold(committed) of every streamed table of a full
// save; the first error, after all were settled.
[[nodiscard]] Status SettleSsdHolds(const SaveJob& job, bool committed);
// SnapshotSession: copies every variable (FailedPrecondition naming one not initialised) and every
// table's rows (EmbeddingTable::Snapshot of `kind`); with `stream_tables`, only names the tables
// (SaveJob::streamed_tables) for WriteCheckpointFiles to snapshot as it writes them.
[[nodiscard]] StatusOr<SaveJob> SnapshotSession(Session& session, const SessionState& state,
                                                EmbeddingTable::SnapshotKind kind,
                                                bool stream_tables = false);
// ManifestParts: what of a SaveJob one manifest holds. A checkpoint of one process holds it all;
// one of several ranks is a manifest of the variables and the shards' ids (rank 0's) and, in
// each shard's directory, a manifest of that rank's tables (sharded_checkpoint.h).
struct ManifestParts {
  // TableSet: which of the job's tables: all, the sharded ones (a rank's shard) or the others
  // (the tables every rank holds whole, written once by rank 0).
  enum class TableSet { kAll, kSharded, kWhole };
  bool variables = true;
  TableSet tables = TableSet::kAll;
  // dataset: record the job's dataset position (it goes with the rank's tables).
  bool dataset = true;
  // shard_ids: non-empty: the tables are in the shards' directories, shard r's manifest has id
  // shard_ids[r] (recorded as "shards": {"world_size", "ids"}).
  std::vector<std::string> shard_ids;
};
// WriteCheckpointFiles: the payloads and manifest.json of `job` (the `parts` of it) into the
// existing directory `dir`, each synced, then the directory synced. Returns the checkpoint's id:
// the CRC32C of its manifest's text (which holds every payload's CRC32C) as 8 hex digits, recorded
// in the manifest as "id"; a delta records its chain's ids ("chain_ids"), which a restore checks
// link by link. Derived from the contents, so deterministic runs still write identical files.
[[nodiscard]] StatusOr<std::string> WriteCheckpointFiles(Env* env, const std::string& dir,
                                                         const SaveJob& job,
                                                         const ManifestParts& parts = {});

// LoadedCheckpoint: a checkpoint read and verified, with its chain.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::string dir;
  std::vector<std::string> chain;
  std::string id;                      // "" for checkpoints written before ids were recorded
  std::vector<std::string> chain_ids;  // empty likewise
  int64_t run_count = -1;        // -1: the checkpoint holds none (written before it was saved)
  int64_t dataset_batches = -1;  // -1: none recorded
  // worker_dataset_batches: the workers' positions a ps job's checkpoint records (SaveJob's).
  std::vector<int64_t> worker_dataset_batches;
  std::map<std::string, VarSnapshot> vars;  // from the checkpoint itself (deltas hold all vars)
  // Per table: the full snapshot, then the deltas in order.
  std::map<std::string, std::vector<TableSnapshot>> tables;
  std::map<std::string, nlohmann::json> table_entries;  // of the full checkpoint
  std::string manifest_path;
  int world_size = 1;  // the ranks that wrote the checkpoint
};
// LoadCheckpoint: reads and verifies `dir` and (for a delta) its chain, siblings of `dir`. Of
// each table, the keys its placement holds (sharded_checkpoint.h): the default, rank 0 of 1,
// holds every key, of a checkpoint written by any number of ranks. DataLoss naming the shard
// when one is missing or is not the one the checkpoint recorded. `dataset_batches` is the
// rank's own when the checkpoint was written by as many ranks as `placements.others` names,
// else -1 (the input's sharding changed with the world size).
// With `stream_rows`, a full table written in storage order (a tiered table's) whose every key
// this process holds is not read into memory: its rows file is verified in pieces and the
// snapshot's row_source reads it again as the table loads (a streamed restore, bounded memory).
[[nodiscard]] StatusOr<LoadedCheckpoint> LoadCheckpoint(Env* env, const std::string& dir,
                                                        const TablePlacements& placements = {},
                                                        bool stream_rows = false);
// ApplyCheckpoint: all or nothing: checks every variable and table of `state` against `ckpt`
// (NotFound when one is missing, FailedPrecondition naming it and both values when they differ)
// and every table's snapshots against the table (EmbeddingTable::CheckSnapshots: sizes, keys,
// room, the SSD tier's files), and only then replaces them, the tables first. After the checks
// only an I/O error of a table's host or SSD tier can still fail (named, with that table
// unchanged only up to the failed write). The tables' snapshots are moved out of `ckpt`.
[[nodiscard]] Status ApplyCheckpoint(Session& session, const SessionState& state,
                                     LoadedCheckpoint& ckpt);
// CheckCheckpoint and CommitCheckpoint: ApplyCheckpoint's two phases, for a caller that must
// agree with other ranks between them (every rank checked before any changes).
[[nodiscard]] Status CheckCheckpoint(Session& session, const SessionState& state,
                                     LoadedCheckpoint& ckpt);
[[nodiscard]] Status CommitCheckpoint(Session& session, const SessionState& state,
                                      LoadedCheckpoint& ckpt);
// PlacementsOf: which keys of each of `state`'s tables this process holds: a sharded table its
// rank's (rank r of its world), a plain one every key. `others` is `process` (this process's
// rank and world), for tables of a checkpoint the session lacks and for the dataset position.
TablePlacements PlacementsOf(const SessionState& state, TablePlacement process);
// IsSharded: whether the table is sharded over the ranks of a job (a CollectiveTable).
bool IsSharded(const TableRef& table);

}  // namespace recsdk::internal

#endif  // RECSDK_CHECKPOINT_SESSION_STATE_H_
