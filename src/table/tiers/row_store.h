// row_store.h: the storage a sparse table's rows live in, one store per tier (device, host memory,
// SSD), behind one interface. Issue 14, first slice: the stores exist and are tested and measured
// on their own; the table does not use them yet (docs/tiers.md says what the integration does).
//
// How the table and the key stage will use it:
// - A row is `row_floats` floats: the embedding and its optimizer slots together, so a row moves
//   between tiers as one record and a checkpoint reads a row and its slots from one place.
// - The key index maps key -> RowLocation {tier, slot}. Packed, a location is one uint32 in the
//   index: slots are numbered globally, the device tier's first, then the host tier's, then the
//   SSD tier's (TierBases), so the index keeps its 4-byte value and a key costs no more host
//   memory than today (see ssd_store.h for the bytes per SSD-resident row).
// - The key stage, ahead of compute, finds the batch's keys whose location is not on the device,
//   asks the eviction policy (eviction_policy.h) for device victims, moves victims down and the
//   missing rows up with MoveRows, and pins the device slots the batch uses. The step reads and
//   writes those rows (by address on the device tier), and the key stage unpins them once the
//   step that used them has finished.
//
// Location lifetime (DESIGN.md's invariant): a slot is valid from Allocate until Free. A pinned
// slot cannot be freed and its row cannot be moved out (Free and MoveRows refuse it). On a memory
// store, RowAddress(slot) is stable for the slot's whole life (the store never reallocates), so
// the addresses the key stage hands to a batch (the ID_OFFSET / by-address optimizers) stay
// valid on the device tier for as long as that batch keeps them pinned, and no longer.
//
// Errors: a full tier is ResourceExhausted naming the tier and what is full (the path, for SSD),
// returned before anything changed; the store stays usable. Misuse a caller can reach (a slot out
// of range or not allocated, freeing a pinned slot) is FailedPrecondition / InvalidArgument, and
// nothing changed either. Every bulk call is all-or-nothing with respect to allocation state.
//
// Threading: a store is not thread-safe; the key stage owns the allocation state (Allocate, Free,
// Pin, Unpin, MoveRows) and calls it from one thread. Read and Write of distinct slots may run
// concurrently with each other (the memory stores are plain memory; the SSD store does positioned
// I/O), but not with Allocate/Free/MoveRows.
#ifndef RECSDK_TABLE_TIERS_ROW_STORE_H_
#define RECSDK_TABLE_TIERS_ROW_STORE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace recsdk::internal {

// Tier: where a row lives. The values are pinned (they will reach checkpoint manifests).
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kSsd = 2 };
inline constexpr int kNumTiers = 3;
// TierName: "device", "host" or "ssd" (as in messages and docs).
const char* TierName(Tier tier);

// RowLocation: a row's place: its tier and its slot in that tier's store.
struct RowLocation {
  Tier tier = Tier::kDevice;
  uint32_t slot = 0;
  friend bool operator==(const RowLocation&, const RowLocation&) = default;
};

// TierBases: the global numbering of slots that packs a RowLocation into one uint32 (the key
// index's value): device slots are [0, device), host slots [device, device + host), SSD slots
// after those. Pack/Unpack are O(1) (two compares).
class TierBases {
 public:
  // Check: whether tiers of the given capacities (rows) can be packed; InvalidArgument when the
  // total does not fit in a uint32 below the index's empty marker (0xFFFFFFFF).
  static absl::Status Check(uint64_t device_rows, uint64_t host_rows, uint64_t ssd_rows);
  TierBases(uint32_t device_rows, uint32_t host_rows, uint32_t ssd_rows)
      : host_base_(device_rows), ssd_base_(device_rows + host_rows), end_(ssd_base_ + ssd_rows) {}

  uint32_t Pack(RowLocation loc) const {
    switch (loc.tier) {
      case Tier::kDevice:
        return loc.slot;
      case Tier::kHost:
        return host_base_ + loc.slot;
      case Tier::kSsd:
        break;
    }
    return ssd_base_ + loc.slot;
  }
  RowLocation Unpack(uint32_t packed) const {
    if (packed < host_base_) return {Tier::kDevice, packed};
    if (packed < ssd_base_) return {Tier::kHost, packed - host_base_};
    return {Tier::kSsd, packed - ssd_base_};
  }
  uint32_t end() const { return end_; }

 private:
  uint32_t host_base_;
  uint32_t ssd_base_;
  uint32_t end_;
};

// RowStore: rows of one tier, addressed by slot in [0, capacity()).
class RowStore {
 public:
  virtual ~RowStore() = default;
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;

  Tier tier() const { return tier_; }
  // row_floats: floats per row (embedding + optimizer slots).
  int row_floats() const { return row_floats_; }
  size_t row_bytes() const { return static_cast<size_t>(row_floats_) * sizeof(float); }
  // capacity: the most rows this store holds (the tier's vocabulary size).
  uint32_t capacity() const { return capacity_; }
  // size: slots allocated now.
  virtual uint32_t size() const = 0;

  // Allocate: n free slots into slots[0, n) (their rows' contents are unspecified until
  // written). ResourceExhausted naming the tier (and the path, for SSD) when fewer than n can be
  // had; then nothing is allocated. O(n) on memory stores (last freed first); the SSD store
  // allocates by next fit, O(n) plus its scan for free slots (ssd_store.h), plus file creation
  // when the files grow.
  [[nodiscard]] virtual absl::Status Allocate(size_t n, uint32_t* slots) = 0;
  // Free: returns the slots for reuse. FailedPrecondition when a slot is not allocated, is
  // pinned, or appears twice; then nothing is freed. O(n).
  [[nodiscard]] virtual absl::Status Free(absl::Span<const uint32_t> slots) = 0;
  // Read: out[i * row_floats, (i + 1) * row_floats) = the row in slots[i]. Slots must be
  // allocated (FailedPrecondition otherwise, before any I/O).
  [[nodiscard]] virtual absl::Status Read(absl::Span<const uint32_t> slots, float* out) const = 0;
  // Write: the row in slots[i] = in[i * row_floats, ...). Slots must be allocated; a slot listed
  // twice gets the later row.
  [[nodiscard]] virtual absl::Status Write(absl::Span<const uint32_t> slots, const float* in) = 0;

  // Pin / Unpin: a pinned slot is in use by a batch in flight: it cannot be freed or moved out.
  // Pins nest (a slot pinned by two batches needs two Unpins). Pin needs allocated slots;
  // Unpin needs pinned ones (FailedPrecondition otherwise, and nothing changed).
  [[nodiscard]] virtual absl::Status Pin(absl::Span<const uint32_t> slots) = 0;
  [[nodiscard]] virtual absl::Status Unpin(absl::Span<const uint32_t> slots) = 0;
  virtual bool IsPinned(uint32_t slot) const = 0;
  virtual bool IsAllocated(uint32_t slot) const = 0;

  // RowAddress: the row's memory on a memory store (stable from Allocate to Free), nullptr on a
  // store whose rows are not addressable (SSD).
  virtual float* RowAddress(uint32_t /*slot*/) { return nullptr; }

 protected:
  RowStore(Tier tier, int row_floats, uint32_t capacity)
      : tier_(tier), row_floats_(row_floats), capacity_(capacity) {}
  // CheckAllocated: FailedPrecondition naming `what` and the first slot out of range or free.
  absl::Status CheckAllocated(absl::Span<const uint32_t> slots, const char* what) const;

 private:
  Tier tier_;
  int row_floats_;
  uint32_t capacity_;
};

// MoveRows: moves the rows in from_slots of `from` into newly allocated slots of `to`
// (to_slots[i] receives from_slots[i]'s row) and frees the source slots. All or nothing: the
// destination is allocated first (ResourceExhausted if it is full), the rows are read and written
// in bulk, and only then are the sources freed; on any error the destination slots are freed
// again and `from` is untouched. FailedPrecondition when a source slot is pinned or not allocated,
// or when the stores' row_floats differ. Uses one staging buffer of from_slots.size() rows.
[[nodiscard]] absl::Status MoveRows(RowStore& from, absl::Span<const uint32_t> from_slots,
                                    RowStore& to, uint32_t* to_slots);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_ROW_STORE_H_
