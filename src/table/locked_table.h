// locked_table.h: the table a Session owns, with the locks that table.h's threading contract asks
// of its callers built in, so that no caller can reach the table without them.
//
// table.h leaves the locking to the caller. A LockedTable takes two reader-writer locks, always in
// this order:
//   keys: the key index. Calls that change which keys the table holds (Resolve in training,
//     Evict*, ImportNpy, SetAccessThreshold, the snapshot calls) take it exclusively; calls that
//     read it (Resolve in evaluation, FindRow, ReadRow, AdmissionCount, ExportNpy, size,
//     data_time, MemoryBytes) take it shared.
//   rows: the row values. The row calls of a step (Gather*, PaddingMask, ApplyGradients*,
//     RowAddresses) take it shared: table.h lets them run beside each other and beside a Resolve
//     of a later batch, so they never wait for the key stage. Calls that read or write rows
//     outside a step (ReadRow, ExportNpy, Evict*, ImportNpy, the snapshot calls) take it
//     exclusively, so they never see a row half-way through an optimizer update.
// So the pointer a Session hands out (LookupTable, SessionTables, an EvictHook's tables) is safe
// beside the step's lookups and the key stage: an ExportNpy from a monitoring thread waits for
// the update in flight and sees whole rows.
//
// A caller that makes several calls under one lock (the key work of one batch: one lock per batch
// and table, never per key; a checkpoint's snapshot; the key stage's eviction) takes a guard and
// calls the table the guard gives: LockKeys for the key work (the key index only: exclusive in
// training, shared in evaluation), LockAll for the rest (both locks, exclusive). Calling this
// LockedTable's own calls while its guard is held on the same thread deadlocks.
//
// Threading: as described. Eviction must still not free a row that a batch in flight uses:
// that is an order (EvictHook between steps, the key stage's protection), not a lock.
#ifndef RECSDK_TABLE_LOCKED_TABLE_H_
#define RECSDK_TABLE_LOCKED_TABLE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "recsdk/table.h"
#include "src/table/forwarding_table.h"

namespace recsdk::internal {

// TableGuard: a table and the locks taken for it, held for the guard's life. Movable.
class TableGuard {
 public:
  EmbeddingTable* get() const { return table_; }
  EmbeddingTable* operator->() const { return table_; }
  EmbeddingTable& operator*() const { return *table_; }

 private:
  friend class LockedTable;
  explicit TableGuard(EmbeddingTable* table) : table_(table) {}
  std::unique_lock<std::shared_mutex> keys_exclusive_;
  std::shared_lock<std::shared_mutex> keys_shared_;
  std::unique_lock<std::shared_mutex> rows_exclusive_;
  std::shared_lock<std::shared_mutex> rows_shared_;
  EmbeddingTable* table_;
};

class LockedTable final : public ForwardingTable {
 public:
  explicit LockedTable(std::unique_ptr<EmbeddingTable> table)
      : ForwardingTable(table.get()), owned_(std::move(table)) {}

  // LockKeys: the key index, exclusively in kTrain and shared in kEval (one batch's key work).
  [[nodiscard]] TableGuard LockKeys(LookupMode mode);
  // LockRows: the rows, shared, as the step's row calls take them (a sharded table's rows brought
  // for a key stage's batch beside the stage's next Resolve).
  [[nodiscard]] TableGuard LockRows();
  // LockAll: the key index and the rows, exclusively (snapshots, restore, eviction).
  [[nodiscard]] TableGuard LockAll();

  // SelfSynchronised: the table for the tier calls of tier_lease.h that serialise their own state
  // (IsTiered, ReleaseLeases, DeviceTierBytes, GetTierStats, DropSsdCleanPages); never for a
  // call of table.h.
  EmbeddingTable& SelfSynchronised() const { return *inner(); }

  int64_t size() const override;
  int64_t MemoryBytes() const override;
  int64_t data_time() const override;
  Status Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override;
  Status Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const override;
  Status GatherRestored(absl::Span<const uint32_t> unique_rows,
                        absl::Span<const uint32_t> restore_index,
                        absl::Span<float> out) const override;
  Status GatherPooled(absl::Span<const uint32_t> unique_rows,
                      absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                      Combiner combiner, absl::Span<float> out) const override;
  Status GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                             Combiner combiner, int64_t out_stride,
                             absl::Span<float> out) const override;
  Status PaddingMask(absl::Span<const uint32_t> unique_rows,
                     absl::Span<const uint32_t> restore_index,
                     absl::Span<float> mask) const override;
  Status ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> summed_grads,
                        int64_t step) override;
  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override;
  Status ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                 absl::Span<const float> summed_grads, int64_t step) override;
  StatusOr<int64_t> EvictStale() override;
  StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) override;
  Status SetAccessThreshold(int64_t access_threshold) override;
  uint32_t FindRow(int64_t key) const override;
  StatusOr<std::vector<float>> ReadRow(int64_t key) const override;
  float AdmissionCount(int64_t key) const override;
  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override;
  Status ImportNpy(const std::string& keys_path, const std::string& values_path) override;
  StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) override;
  StatusOr<TableSnapshot> SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) override;
  Status LoadSnapshot(const TableSnapshot& snapshot) override;
  Status AdoptSnapshot(TableSnapshot&& snapshot) override;
  Status CheckSnapshots(absl::Span<const TableSnapshot> chain) override;

 private:
  std::unique_ptr<EmbeddingTable> owned_;
  mutable std::shared_mutex keys_mu_;
  mutable std::shared_mutex rows_mu_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_LOCKED_TABLE_H_
