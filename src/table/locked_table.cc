// locked_table.cc: each call of a LockedTable under the locks locked_table.h gives it.
#include "src/table/locked_table.h"

#include <utility>

namespace recsdk::internal {

namespace {
using Exclusive = std::unique_lock<std::shared_mutex>;
using Shared = std::shared_lock<std::shared_mutex>;

// Both: the key index, then the rows, each exclusively (locked_table.h's order).
struct Both {
  explicit Both(std::shared_mutex& keys, std::shared_mutex& rows) : k(keys), r(rows) {}
  Exclusive k, r;
};
// ReadAll: the key index shared, then the rows exclusively (whole rows, no update half-way).
struct ReadAll {
  explicit ReadAll(std::shared_mutex& keys, std::shared_mutex& rows) : k(keys), r(rows) {}
  Shared k;
  Exclusive r;
};
}  // namespace

TableGuard LockedTable::LockKeys(LookupMode mode) {
  TableGuard g(inner());
  if (mode == LookupMode::kTrain) {
    g.keys_exclusive_ = Exclusive(keys_mu_);
  } else {
    g.keys_shared_ = Shared(keys_mu_);
  }
  return g;
}

TableGuard LockedTable::LockRows() {
  TableGuard g(inner());
  g.rows_shared_ = Shared(rows_mu_);
  return g;
}

TableGuard LockedTable::LockAll() {
  TableGuard g(inner());
  g.keys_exclusive_ = Exclusive(keys_mu_);
  g.rows_exclusive_ = Exclusive(rows_mu_);
  return g;
}

int64_t LockedTable::size() const {
  Shared lock(keys_mu_);
  return ForwardingTable::size();
}
int64_t LockedTable::MemoryBytes() const {
  Shared lock(keys_mu_);
  return ForwardingTable::MemoryBytes();
}
int64_t LockedTable::data_time() const {
  Shared lock(keys_mu_);
  return ForwardingTable::data_time();
}

Status LockedTable::Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                            absl::Span<const int64_t> timestamps, LookupMode mode,
                            absl::Span<uint32_t> rows) {
  TableGuard g = LockKeys(mode);
  return g->Resolve(keys, counts, timestamps, mode, rows);
}

Status LockedTable::Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const {
  Shared lock(rows_mu_);
  return ForwardingTable::Gather(rows, out);
}
Status LockedTable::GatherRestored(absl::Span<const uint32_t> unique_rows,
                                   absl::Span<const uint32_t> restore_index,
                                   absl::Span<float> out) const {
  Shared lock(rows_mu_);
  return ForwardingTable::GatherRestored(unique_rows, restore_index, out);
}
Status LockedTable::GatherPooled(absl::Span<const uint32_t> unique_rows,
                                 absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                                 Combiner combiner, absl::Span<float> out) const {
  Shared lock(rows_mu_);
  return ForwardingTable::GatherPooled(unique_rows, restore_index, batch, n, combiner, out);
}
Status LockedTable::GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                                        absl::Span<const uint32_t> restore_index, int64_t batch,
                                        int64_t n, Combiner combiner, int64_t out_stride,
                                        absl::Span<float> out) const {
  Shared lock(rows_mu_);
  return ForwardingTable::GatherPooledStrided(unique_rows, restore_index, batch, n, combiner,
                                              out_stride, out);
}
Status LockedTable::PaddingMask(absl::Span<const uint32_t> unique_rows,
                                absl::Span<const uint32_t> restore_index,
                                absl::Span<float> mask) const {
  Shared lock(rows_mu_);
  return ForwardingTable::PaddingMask(unique_rows, restore_index, mask);
}
Status LockedTable::ApplyGradients(absl::Span<const uint32_t> rows,
                                   absl::Span<const float> summed_grads, int64_t step) {
  Shared lock(rows_mu_);
  return ForwardingTable::ApplyGradients(rows, summed_grads, step);
}
Status LockedTable::RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) {
  Shared lock(rows_mu_);
  return ForwardingTable::RowAddresses(rows, addresses);
}
Status LockedTable::ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                            absl::Span<const float> summed_grads, int64_t step) {
  Shared lock(rows_mu_);
  return ForwardingTable::ApplyGradientsByAddress(addresses, summed_grads, step);
}

StatusOr<int64_t> LockedTable::EvictStale() {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::EvictStale();
}
StatusOr<int64_t> LockedTable::EvictLastAccessedAtOrBefore(int64_t cutoff) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::EvictLastAccessedAtOrBefore(cutoff);
}
Status LockedTable::SetAccessThreshold(int64_t access_threshold) {
  Exclusive lock(keys_mu_);
  return ForwardingTable::SetAccessThreshold(access_threshold);
}

uint32_t LockedTable::FindRow(int64_t key) const {
  Shared lock(keys_mu_);
  return ForwardingTable::FindRow(key);
}
StatusOr<std::vector<float>> LockedTable::ReadRow(int64_t key) const {
  ReadAll lock(keys_mu_, rows_mu_);
  return ForwardingTable::ReadRow(key);
}
float LockedTable::AdmissionCount(int64_t key) const {
  Shared lock(keys_mu_);
  return ForwardingTable::AdmissionCount(key);
}

Status LockedTable::ExportNpy(const std::string& keys_path, const std::string& values_path) const {
  ReadAll lock(keys_mu_, rows_mu_);
  return ForwardingTable::ExportNpy(keys_path, values_path);
}
Status LockedTable::ImportNpy(const std::string& keys_path, const std::string& values_path) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::ImportNpy(keys_path, values_path);
}

StatusOr<TableSnapshot> LockedTable::Snapshot(SnapshotKind kind) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::Snapshot(kind);
}
StatusOr<TableSnapshot> LockedTable::SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::SnapshotToSink(kind, sink);
}
Status LockedTable::LoadSnapshot(const TableSnapshot& snapshot) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::LoadSnapshot(snapshot);
}
Status LockedTable::AdoptSnapshot(TableSnapshot&& snapshot) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::AdoptSnapshot(std::move(snapshot));
}
Status LockedTable::CheckSnapshots(absl::Span<const TableSnapshot> chain) {
  Both lock(keys_mu_, rows_mu_);
  return ForwardingTable::CheckSnapshots(chain);
}

}  // namespace recsdk::internal
