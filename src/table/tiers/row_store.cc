// row_store.cc: tier names, location packing checks and the bulk move between stores.
// Threading: see row_store.h (MoveRows needs exclusive access to both stores' allocation state).
#include "src/table/tiers/row_store.h"

#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kSsd:
      return "ssd";
  }
  return "unknown";
}

absl::Status TierBases::Check(uint64_t device_rows, uint64_t host_rows, uint64_t ssd_rows) {
  // 0xFFFFFFFF is the key index's empty marker, so the last usable packed location is one less.
  constexpr uint64_t kMaxRows = 0xFFFFFFFFull;
  if (device_rows > kMaxRows || host_rows > kMaxRows || ssd_rows > kMaxRows ||
      device_rows + host_rows + ssd_rows > kMaxRows) {
    return absl::InvalidArgumentError(fmt::format(
        "tier sizes device {} + host {} + ssd {} rows = {} exceed the {} rows one table can "
        "address (row locations are 32-bit); split the table or lower the vocabulary sizes",
        device_rows, host_rows, ssd_rows, device_rows + host_rows + ssd_rows, kMaxRows));
  }
  return absl::OkStatus();
}

absl::Status RowStore::CheckAllocated(absl::Span<const uint32_t> slots, const char* what) const {
  for (uint32_t slot : slots) {
    if (slot >= capacity_ || !IsAllocated(slot)) {
      return absl::FailedPreconditionError(fmt::format(
          "{} tier: {} of slot {}, which is {} (capacity {} rows, {} allocated)", TierName(tier_),
          what, slot, slot >= capacity_ ? "out of range" : "not allocated", capacity_, size()));
    }
  }
  return absl::OkStatus();
}

absl::Status MoveRows(RowStore& from, absl::Span<const uint32_t> from_slots, RowStore& to,
                      uint32_t* to_slots) {
  if (from.row_floats() != to.row_floats()) {
    return absl::FailedPreconditionError(fmt::format(
        "moving rows from the {} tier ({} floats a row) to the {} tier ({} floats a "
        "row): the stores of one table must have the same row size",
        TierName(from.tier()), from.row_floats(), TierName(to.tier()), to.row_floats()));
  }
  if (from_slots.empty()) return absl::OkStatus();
  for (uint32_t slot : from_slots) {
    if (slot < from.capacity() && from.IsPinned(slot)) {
      return absl::FailedPreconditionError(
          fmt::format("moving slot {} out of the {} tier: it is pinned by a batch in flight; "
                      "victims must not be rows the current or the previous batch uses",
                      slot, TierName(from.tier())));
    }
  }
  // Reading first also checks that every source slot is allocated, before `to` changes.
  std::vector<float> staging(from_slots.size() * static_cast<size_t>(from.row_floats()));
  RECSDK_RETURN_IF_ERROR(from.Read(from_slots, staging.data()));
  RECSDK_RETURN_IF_ERROR(to.Allocate(from_slots.size(), to_slots));
  const absl::Span<const uint32_t> dst(to_slots, from_slots.size());
  absl::Status status = to.Write(dst, staging.data());
  if (status.ok()) status = from.Free(from_slots);
  if (!status.ok()) {
    // Undo the destination; the source still holds every row.
    const absl::Status undo = to.Free(dst);
    (void)undo;  // the slots were just allocated and are unpinned: freeing them cannot fail
    return status;
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
