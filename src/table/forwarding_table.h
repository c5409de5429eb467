// forwarding_table.h: an EmbeddingTable that passes every call to another table. The base of the
// wrappers that change a few calls and keep the rest: LockedTable (the lock of a Session's table,
// locked_table.h) and the key stage's eviction guard (key_stage.cc).
//
// config() is not virtual: a wrapper holds its own copy, taken from the inner table when it is
// built. The only field that changes after creation is access_threshold (SetAccessThreshold),
// so ForwardingTable's SetAccessThreshold copies the new value into its own config too.
//
// Threading: a ForwardingTable adds no locking of its own: each call has the threading of the
// inner table's call.
#ifndef RECSDK_TABLE_FORWARDING_TABLE_H_
#define RECSDK_TABLE_FORWARDING_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/table.h"

namespace recsdk::internal {

class ForwardingTable : public EmbeddingTable {
 public:
  int64_t size() const override { return inner_->size(); }
  int64_t capacity() const override { return inner_->capacity(); }
  int64_t MemoryBytes() const override { return inner_->MemoryBytes(); }
  int64_t data_time() const override { return inner_->data_time(); }
  Status Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override {
    return inner_->Resolve(keys, counts, timestamps, mode, rows);
  }
  Status Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const override {
    return inner_->Gather(rows, out);
  }
  Status GatherRestored(absl::Span<const uint32_t> unique_rows,
                        absl::Span<const uint32_t> restore_index,
                        absl::Span<float> out) const override {
    return inner_->GatherRestored(unique_rows, restore_index, out);
  }
  Status GatherPooled(absl::Span<const uint32_t> unique_rows,
                      absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                      Combiner combiner, absl::Span<float> out) const override {
    return inner_->GatherPooled(unique_rows, restore_index, batch, n, combiner, out);
  }
  Status GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                             Combiner combiner, int64_t out_stride,
                             absl::Span<float> out) const override {
    return inner_->GatherPooledStrided(unique_rows, restore_index, batch, n, combiner, out_stride,
                                       out);
  }
  Status PaddingMask(absl::Span<const uint32_t> unique_rows,
                     absl::Span<const uint32_t> restore_index,
                     absl::Span<float> mask) const override {
    return inner_->PaddingMask(unique_rows, restore_index, mask);
  }
  Status ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> summed_grads,
                        int64_t step) override {
    return inner_->ApplyGradients(rows, summed_grads, step);
  }
  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override {
    return inner_->RowAddresses(rows, addresses);
  }
  Status ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                 absl::Span<const float> summed_grads, int64_t step) override {
    return inner_->ApplyGradientsByAddress(addresses, summed_grads, step);
  }
  StatusOr<int64_t> EvictStale() override { return inner_->EvictStale(); }
  StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) override {
    return inner_->EvictLastAccessedAtOrBefore(cutoff);
  }
  Status SetAccessThreshold(int64_t access_threshold) override {
    Status s = inner_->SetAccessThreshold(access_threshold);
    if (s.ok()) config_.access_threshold = inner_->config().access_threshold;
    return s;
  }
  uint32_t FindRow(int64_t key) const override { return inner_->FindRow(key); }
  StatusOr<std::vector<float>> ReadRow(int64_t key) const override { return inner_->ReadRow(key); }
  float AdmissionCount(int64_t key) const override { return inner_->AdmissionCount(key); }
  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override {
    return inner_->ExportNpy(keys_path, values_path);
  }
  Status ImportNpy(const std::string& keys_path, const std::string& values_path) override {
    return inner_->ImportNpy(keys_path, values_path);
  }
  StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) override { return inner_->Snapshot(kind); }
  StatusOr<TableSnapshot> SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) override {
    return inner_->SnapshotToSink(kind, sink);
  }
  Status SettleSsdHold(bool committed) override { return inner_->SettleSsdHold(committed); }
  Status LoadSnapshot(const TableSnapshot& snapshot) override {
    return inner_->LoadSnapshot(snapshot);
  }
  Status AdoptSnapshot(TableSnapshot&& snapshot) override {
    return inner_->AdoptSnapshot(std::move(snapshot));
  }
  Status CheckSnapshots(absl::Span<const TableSnapshot> chain) override {
    return inner_->CheckSnapshots(chain);
  }

  // forwarded: the table this one passes its calls to, to learn what kind of table is behind a
  // wrapper (src/dist finds its sharded tables so); never for a call of table.h, which would
  // bypass what the wrapper adds (a LockedTable's locks).
  EmbeddingTable* forwarded() const { return inner_; }

 protected:
  // inner: not null; outlives this wrapper.
  explicit ForwardingTable(EmbeddingTable* inner)
      : EmbeddingTable(inner->config(), inner->optimizer()), inner_(inner) {}
  EmbeddingTable* inner() const { return inner_; }

 private:
  EmbeddingTable* inner_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_FORWARDING_TABLE_H_
