// memory_store.h: a RowStore in memory, for the device tier on the CPU backend and for the host
// tier. Rows live in one mapping of capacity * row_bytes made at Create and never moved, so a
// row's address is stable from Allocate to Free (the by-address optimizers rely on it). The
// mapping is anonymous and committed page by page as rows are first written, so a large host
// tier costs memory only for the rows it holds.
//
// The device tier is "a separate allocation counted against variable_memory_max_size": Create
// charges the whole mapping to a MemoryBudget shared by every variable of the session, and
// fails with ResourceExhausted when it does not fit; the charge is returned at destruction.
//
// Threading: as RowStore (row_store.h). MemoryBudget is thread-safe.
#ifndef RECSDK_TABLE_TIERS_MEMORY_STORE_H_
#define RECSDK_TABLE_TIERS_MEMORY_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/table/tiers/row_store.h"

namespace recsdk::internal {

// MemoryBudget: a byte limit that several allocations are charged against (the session's
// variable_memory_max_size on the CPU backend). Thread-safe.
class MemoryBudget {
 public:
  // `name` is the setting that sets the limit, for messages ("variable_memory_max_size").
  MemoryBudget(std::string name, uint64_t limit_bytes)
      : name_(std::move(name)), limit_(limit_bytes) {}
  // Charge: adds `bytes` for `what`; ResourceExhausted naming what, the bytes, the limit and the
  // setting when the total would pass the limit (then nothing is charged).
  [[nodiscard]] absl::Status Charge(uint64_t bytes, const std::string& what);
  void Release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

struct MemoryStoreOptions {
  // tier: kDevice or kHost (kSsd is InvalidArgument).
  Tier tier = Tier::kHost;
  // row_floats: floats per row; > 0.
  int row_floats = 0;
  // capacity: rows; > 0 (the tier's vocabulary size).
  uint32_t capacity = 0;
  // budget: charged capacity * row_bytes at Create when not null; must outlive the store.
  MemoryBudget* budget = nullptr;
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
  // bytes: the size of the rows' mapping (what was charged to the budget).
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
  MemoryBudget* budget_;
  std::string label_;
  std::vector<uint16_t> state_;
  std::vector<uint32_t> free_;  // freed slots, reused last-freed first
  uint32_t next_ = 0;           // slots >= next_ were never allocated
  uint32_t size_ = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_MEMORY_STORE_H_
