// tiered_rows.h: one table's rows over the device, host and SSD stores, with the per-batch swap
// the key stage will run ahead of compute. It puts row_store.h, the stores and the eviction
// policy together exactly as the integration will, so that the sequence is built and tested
// before the table and the key stage move onto it (docs/tiers.md, "Next").
//
// Tiers are exclusive: a key's row lives in exactly one tier (the key index maps it to one packed
// RowLocation), so the table holds device + host + ssd rows in all. PrepareBatch(keys), for the
// unique keys of batch t:
//   1. unpins the device slots of batch t - 2 (batch t - 1 may still be in flight);
//   2. finds each key's tier; touches the device hits (device policy) and the host rows the batch
//      needs (host policy, so they are not demoted under it);
//   3. plans without changing anything: reads the batch's host and SSD rows into memory (the
//      slots they leave count as room below), chooses device victims (never rows of batch t or
//      t - 1, nor pinned ones), and, when the host cannot take them, the host's coldest rows to
//      demote to SSD; every full tier is found here (ResourceExhausted naming the table and the
//      tier; FailedPrecondition naming device_vocabulary_size and the rows needed when the device
//      cannot hold two batches), before a row moves, and the object stays usable;
//   4. frees the slots the batch's rows leave, moves the cold host rows to SSD and the victims to
//      the host (bulk MoveRows), writes the batch's rows into device slots and initialises new
//      keys' rows with the caller's function;
//   5. pins the batch's device slots and returns them.
// After step 3 only an I/O error can fail (DataLoss); the batch's staged host/SSD rows would then
// be lost with it, as they would be with any disk error.
//
// Threading: not thread-safe; the key stage calls it from one thread. DeviceRow addresses are
// valid while their batch is pinned (until PrepareBatch of batch t + 2).
#ifndef RECSDK_TABLE_TIERS_TIERED_ROWS_H_
#define RECSDK_TABLE_TIERS_TIERED_ROWS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/table/key_index.h"
#include "src/table/tiers/eviction_policy.h"
#include "src/table/tiers/memory_store.h"
#include "src/table/tiers/ssd_store.h"

namespace recsdk::internal {

struct TieredRowsOptions {
  // table: the table's name, for messages and the SSD file names.
  std::string table;
  // row_floats: floats per row (embedding + optimizer slots); > 0.
  int row_floats = 0;
  // device_rows / host_rows / ssd_rows: the spec's device_vocabulary_size,
  // host_vocabulary_size, ssd_vocabulary_size. device_rows > 0; ssd_rows > 0 needs host_rows > 0
  // and ssd_folders.
  uint32_t device_rows = 0;
  uint32_t host_rows = 0;
  uint32_t ssd_rows = 0;
  // ssd_folders: ssd_data_path.
  std::vector<std::string> ssd_folders;
  // device_budget: variable_memory_max_size's budget, charged for the device tier; may be null.
  MemoryBudget* device_budget = nullptr;
  // policy: the device tier's eviction policy (kind, half-life); the host tier uses the same
  // kind to pick the rows it demotes to SSD. capacity is set from the tier sizes.
  EvictionPolicyOptions policy;
  // ssd_read_path: see SsdStoreOptions.
  SsdReadPath ssd_read_path = SsdReadPath::kAuto;
};

class TieredRows {
 public:
  // Create: InvalidArgument naming the option when the sizes break the spec's rules.
  static absl::StatusOr<std::unique_ptr<TieredRows>> Create(const TieredRowsOptions& options);

  // RowInit: fills a new key's row (row_floats floats).
  using RowInit = std::function<void(int64_t key, float* row)>;

  // PrepareBatch: makes the unique `keys` of the next batch resident and pinned on the device
  // (see the top of this file); device_slots[i] receives keys[i]'s slot. FailedPrecondition
  // naming the table, the number of rows needed and device_vocabulary_size when the device tier
  // cannot hold this batch's keys besides the previous batch's; ResourceExhausted naming the tier
  // when the rows pushed down do not fit. Keys must be unique (InvalidArgument otherwise).
  [[nodiscard]] absl::Status PrepareBatch(absl::Span<const int64_t> keys, const RowInit& init,
                                          uint32_t* device_slots);
  // DeviceRow: the address of a device slot's row (valid while its batch is pinned).
  float* DeviceRow(uint32_t slot) { return device_->RowAddress(slot); }
  // ReadRows: the rows of `keys` wherever they live (for export and checkpoints); NotFound
  // naming the first absent key.
  [[nodiscard]] absl::Status ReadRows(absl::Span<const int64_t> keys, float* out) const;
  // Locate: where `key` lives, or NotFound.
  absl::StatusOr<RowLocation> Locate(int64_t key) const;

  uint64_t size() const { return index_.size(); }
  uint32_t rows_on(Tier tier) const;
  // swaps: rows moved between tiers so far, by destination tier.
  uint64_t moved_to(Tier tier) const { return moved_[static_cast<int>(tier)]; }

 private:
  struct History {
    uint32_t uses = 0;
    int64_t last_batch = -1;
  };
  explicit TieredRows(const TieredRowsOptions& options);
  RowStore* Store(Tier tier) const;
  // Move: MoveRows of the rows of `keys` (in tier `from`, at `from_slots`) to tier `to`, then the
  // index, the reverse maps and the counters.
  absl::Status Move(const std::vector<int64_t>& keys, Tier from,
                    const std::vector<uint32_t>& from_slots, Tier to,
                    std::vector<uint32_t>* to_slots);
  int64_t& KeyAt(Tier tier, uint32_t slot) {
    return tier == Tier::kDevice ? device_keys_[slot] : host_keys_[slot];
  }

  TieredRowsOptions options_;
  TierBases bases_;
  std::unique_ptr<MemoryStore> device_;
  std::unique_ptr<MemoryStore> host_;
  std::unique_ptr<SsdStore> ssd_;
  std::unique_ptr<EvictionPolicy> device_policy_;
  std::unique_ptr<EvictionPolicy> host_policy_;
  KeyIndex index_;
  std::vector<int64_t> device_keys_;  // device slot -> key
  std::vector<int64_t> host_keys_;    // host slot -> key
  absl::flat_hash_map<int64_t, History> history_;
  std::deque<std::vector<uint32_t>> pinned_;  // device slots pinned by the last two batches
  int64_t batch_ = -1;
  uint64_t moved_[kNumTiers] = {0, 0, 0};
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_TIERED_ROWS_H_
