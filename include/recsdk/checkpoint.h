// recsdk/checkpoint.h: saving and restoring everything that determines training (the spec's
// tf.compat.v1.train.Saver, and the Estimator's checkpoints in model_dir).
//
// A checkpoint is a directory model_dir/ckpt-<step>/ holding manifest.json (format version, step,
// every payload with its size and CRC32C, and a CRC32C of the manifest itself) and .npy payloads:
// every dense variable (optimizer slots and global_step included) and, for every table with
// is_save, its keys, rows (embedding + optimizer slots), timestamps and pending admission counts.
// The manifest also holds the session's RNG state (its run count, Session::SetRunCount) and, with
// a key stage attached, the dataset position (batches consumed).
// A `checkpoint` index file in model_dir names the latest checkpoint and the kept ones. Files are
// written under a temporary name, synced, renamed, and only then the index is updated, so a crash
// at any point leaves the previous checkpoint as the latest. docs/checkpoint-format.md describes
// the files.
//
// In a job of several ranks (recsdk/distributed.h) Save, SaveDelta and Restore are collectives:
// every rank calls them at the same point. Each rank writes its shard of the sharded tables and
// rank 0 the rest and the commit; Restore re-shards a checkpoint written by another number of
// ranks (docs/checkpoint-format.md, "Checkpoints of several ranks"). model_dir must be visible
// to every rank.
//
// Threading: a Saver is used from the training thread, between Session::Run calls (a save takes
// the session's variables and tables at that moment). Not thread-safe.
#ifndef RECSDK_CHECKPOINT_H_
#define RECSDK_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "recsdk/session.h"
#include "recsdk/status.h"
#include "recsdk/table.h"

namespace recsdk {

class KeyStage;

class Env;  // recsdk/env.h

// SaverOptions: what a Saver saves where. Validated by Saver::Create.
struct SaverOptions {
  // model_dir: the directory of the checkpoints (created if missing). Required.
  std::string model_dir;
  // keep_checkpoint_max: how many checkpoints (full and delta) to keep; older ones are deleted
  // after each save, except full checkpoints a kept delta builds on. Default 5 (the spec's);
  // 0 keeps all (as TensorFlow's max_to_keep=None); negative is an error.
  int keep_checkpoint_max = 5;
  // is_incremental_checkpoint: the spec's switch for delta checkpoints. When false, SaveDelta is
  // FailedPrecondition. Default false.
  bool is_incremental_checkpoint = false;
  // restore_model_version: the step of the checkpoint Restore("") restores (full or delta; a
  // delta restores its full checkpoint and the deltas up to it). -1 (default): the latest.
  int64_t restore_model_version = -1;
  // async_write (one process only; InvalidArgument with several ranks, whose commit is a
  // collective): Save and SaveDelta return once the snapshot is taken (the only part that must
  // not overlap a step: a copy of the variables and of the saved rows) and write the files on a
  // background thread, one save at a time. The next Save, SaveDelta, Restore, LatestCheckpoint
  // or WaitForWrites waits for that write first; WaitForWrites and LatestCheckpoint return its
  // error, Save logs it and SaveDelta fails with it (the chain is broken). Default false.
  bool async_write = false;
  // copy_ssd_rows: how a full checkpoint holds the rows of a table's SSD tier. false (default):
  // it hard-links the tier's segment files into the checkpoint and records each row's slot, so
  // it needs no second copy of the tier on disk and reads none of it; the slots it refers to
  // stay untouched (training writes fresh ones) until the next full checkpoint is committed,
  // which releases them, so only the latest full checkpoint (and the deltas built on it) of a
  // run stays restorable this way; an older one is refused at restore with FailedPrecondition.
  // Where the checkpoint cannot link (another file system, a non-default env) the rows are
  // copied. true: every row is copied into the checkpoint (each kept checkpoint restorable on
  // its own, as before). Deltas and async_write saves always copy. docs/checkpoint-format.md.
  bool copy_ssd_rows = false;
  // env: the file system the checkpoints go through (recsdk/env.h; tests inject faults with
  // it). Null: Env::Default(), the process's POSIX one. Not owned; must outlive the Saver.
  Env* env = nullptr;
};

// Saver: saves and restores the session's dense variables and tables.
class Saver {
 public:
  // Create: validates the options and collects the session's dense variables (GlobalVariables of
  // its graph) and tables (every table with is_save). InvalidArgument for bad options.
  [[nodiscard]] static StatusOr<std::unique_ptr<Saver>> Create(Session& session,
                                                               const SaverOptions& options);
  ~Saver();
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // Save: a full checkpoint model_dir/ckpt-<global_step>; returns its directory (with
  // async_write, the directory it is being written to). Every variable
  // must be initialised (FailedPrecondition naming it otherwise). A checkpoint of the same step
  // is replaced. Errors of the file system come back as they are (PermissionDenied,
  // ResourceExhausted for a full disk, ...), and leave the previous checkpoint the latest.
  [[nodiscard]] StatusOr<std::string> Save(int64_t global_step);
  // SaveDelta: an incremental checkpoint: the dense variables, and of each table only the rows
  // changed since the previous save (full or delta) and the keys evicted since. Needs
  // is_incremental_checkpoint and a previous save (or restore) by this Saver; FailedPrecondition
  // otherwise, or after a failed save (call Save then).
  [[nodiscard]] StatusOr<std::string> SaveDelta(int64_t global_step);
  // Restore: replaces the variables and tables (with is_save) by those of `checkpoint` (a
  // directory path, or a name "ckpt-<step>" in model_dir); "" takes restore_model_version, or
  // else the latest in the index, and sets the session's RNG state (Session::SetRunCount) to
  // the saved one. Logs which one it restored; returns its step. Everything is
  // read and verified before anything changes. NotFound when model_dir has no checkpoint;
  // DataLoss naming the file for a truncated, corrupt or missing manifest, payload or index;
  // FailedPrecondition naming the table or variable and both values when dims, key dtype,
  // optimizer or shapes differ from the session's.
  [[nodiscard]] StatusOr<int64_t> Restore(std::string_view checkpoint = "");
  // LatestCheckpoint: the directory of the latest checkpoint in the index; NotFound when none.
  // Waits for a background write first and returns its error.
  [[nodiscard]] StatusOr<std::string> LatestCheckpoint() const;
  // WaitForWrites: waits for the background write of the last save (async_write) and returns
  // its status; OK when there is none. The destructor waits too (and logs an error).
  [[nodiscard]] Status WaitForWrites();

  // AttachKeyStage: the training key stage feeding the session (null detaches). A training
  // stage changes the tables for the batches it prepares ahead of the step, so while one is
  // attached, Save and SaveDelta are FailedPrecondition unless stage->Quiescent() (call
  // KeyStage::Quiesce, keep training until Quiescent(), then save; CheckpointSaverHook does
  // this), and each checkpoint records stage->batches_consumed(), the dataset position a resumed
  // run starts from (KeyStageOptions::start_batch). The stage must outlive the attachment.
  void AttachKeyStage(KeyStage* stage);
  // restored_dataset_batches: the batches_consumed recorded by the checkpoint the last Restore
  // read; -1 when it recorded none (no key stage was attached) or nothing was restored.
  int64_t restored_dataset_batches() const;

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit Saver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// SaveTable / RestoreTable: one table alone to or from `dir` (created if missing), in the same
// layout as a checkpoint's table payloads (manifest.json + .npy files with CRC32C). These replace
// EmbeddingTable::Save / Restore. RestoreTable checks everything before changing the table:
// DataLoss for missing, truncated or corrupt files; FailedPrecondition when dim, key dtype or
// optimizer differ. Exclusive access to the table.
[[nodiscard]] Status SaveTable(EmbeddingTable& table, const std::string& dir);
[[nodiscard]] Status RestoreTable(EmbeddingTable& table, const std::string& dir);

}  // namespace recsdk

#endif  // RECSDK_CHECKPOINT_H_
