// memory_store.h: a RowStore in memory, for the device tier on the CPU backend and for the host
// tier. Rows live in one mapping of capacity * row_bytes made at Create and never moved, so a
// row's address is stable from Allocate to Free (the by-address optimizers rely on it). The
// mapping is anonymous and committed page by page as rows are first written, so a large host
// tier costs memory only for the rows it holds.
//
// A tiered table's device tier is its own slab (table_impl.h), charged to the session's
// variable_memory_max_size by the Session (src/device/table_resource.cc); the table uses a
// MemoryStore for its host tier.
//
// Threading: as RowStore (row_store.h).
#ifndef RECSDK_TABLE_TIERS_MEMORY_STORE_H_
#define RECSDK_TABLE_TIERS_MEMORY_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/table/tiers/row_store.h"

namespace recsdk::internal {

struct MemoryStoreOptions {
  // tier: kDevice or kHost (kSsd is InvalidArgument).
  Tier tier = Tier::kHost;
  // row_floats: floats per row; > 0.
  int row_floats = 0;
  // capacity: rows; > 0 (the tier's vocabulary size).
  uint32_t capacity = 0;
  // label: what the store is for, in messages (e.g. `table "user_table"`); may be empty.
  std::string label;
};

class MemoryStore final : public RowStore {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryStore>> Create(const MemoryStoreOptions& options);
  ~MemoryStore() override;

  uint32_t size() const override { return size_; }
  absl::Status Allocate(size_t n, uint32_t* slots) override;
  absl::Status Free(absl::Span<const uint32_t> slots) override;
  absl::Status Read(absl::Span<const uint32_t> slots, float* out) const override;
  absl::Status Write(absl::Span<const uint32_t> slots, const float* in) override;
  absl::Status Pin(absl::Span<const uint32_t> slots) override;
  absl::Status Unpin(absl::Span<const uint32_t> slots) override;
  bool IsPinned(uint32_t slot) const override { return state_[slot] > kAllocated; }
  bool IsAllocated(uint32_t slot) const override { return state_[slot] != kFree; }
  float* RowAddress(uint32_t slot) override {
    return rows_ + static_cast<size_t>(slot) * row_floats();
  }
  // bytes: the size of the rows' mapping.
  uint64_t bytes() const { return bytes_; }

 private:
  // state_[slot]: kFree, kAllocated, or kAllocated + the number of pins.
  static constexpr uint16_t kFree = 0;
  static constexpr uint16_t kAllocated = 1;
  static constexpr uint16_t kMaxState = 0xFFFF;

  MemoryStore(const MemoryStoreOptions& options, float* rows, uint64_t bytes);
  std::string Label() const;

  float* rows_;
  uint64_t bytes_;
  std::string label_;
  std::vector<uint16_t> state_;
  std::vector<uint32_t> free_;  // freed slots, reused last-freed first
  uint32_t next_ = 0;           // slots >= next_ were never allocated
  uint32_t size_ = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_MEMORY_STORE_H_
