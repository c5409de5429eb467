// memory_store.cc: the memory RowStore (device tier on the CPU backend, host tier).
// Threading: see memory_store.h.
#include "src/table/tiers/memory_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Create(
    const MemoryStoreOptions& options) {
  const std::string label = options.label.empty() ? "" : options.label + ": ";
  if (options.tier == Tier::kSsd) {
    return absl::InvalidArgumentError(
        label + "a memory store holds the device or host tier; the ssd tier is an SsdStore");
  }
  if (options.row_floats <= 0 || options.capacity == 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}{} tier: row_floats {} and capacity {} rows must both be > 0", label,
                    TierName(options.tier), options.row_floats, options.capacity));
  }
  const uint64_t bytes =
      uint64_t{options.capacity} * static_cast<uint64_t>(options.row_floats) * sizeof(float);
  const std::string what =
      fmt::format("{}{} tier of {} rows x {} bytes", label, TierName(options.tier),
                  options.capacity, options.row_floats * sizeof(float));
  void* rows = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (rows == MAP_FAILED) {
    const int err = errno;
    return absl::ResourceExhaustedError(
        fmt::format("{}: cannot map {} bytes: {}", what, bytes, std::strerror(err)));
  }
  return std::unique_ptr<MemoryStore>(new MemoryStore(options, static_cast<float*>(rows), bytes));
}

MemoryStore::MemoryStore(const MemoryStoreOptions& options, float* rows, uint64_t bytes)
    : RowStore(options.tier, options.row_floats, options.capacity),
      rows_(rows),
      bytes_(bytes),
      label_(options.label),
      state_(options.capacity, kFree) {}

MemoryStore::~MemoryStore() { munmap(rows_, bytes_); }

std::string MemoryStore::Label() const {
  return label_.empty() ? std::string(TierName(tier())) + " tier"
                        : label_ + ": " + TierName(tier()) + " tier";
}

absl::Status MemoryStore::Allocate(size_t n, uint32_t* slots) {
  const uint64_t available = free_.size() + (uint64_t{capacity()} - next_);
  if (n > available) {
    return absl::ResourceExhaustedError(fmt::format(
        "{} is full: {} more rows asked, {} of {} rows free; raise the tier's vocabulary size, "
        "or let rows move to a slower tier",
        Label(), n, available, capacity()));
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = next_++;
    }
    state_[slot] = kAllocated;
    slots[i] = slot;
  }
  size_ += static_cast<uint32_t>(n);
  return absl::OkStatus();
}

absl::Status MemoryStore::Free(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "free"));
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint32_t slot = slots[i];
    if (state_[slot] != kAllocated) {
      // Pinned, or listed twice (freed earlier in this call): undo and refuse.
      const bool twice = state_[slot] == kFree;
      for (size_t j = 0; j < i; ++j) state_[slots[j]] = kAllocated;
      return absl::FailedPreconditionError(
          twice ? fmt::format("{}: slot {} is listed twice in one Free", Label(), slot)
                : fmt::format("{}: cannot free slot {}: it is pinned by a batch in flight", Label(),
                              slot));
    }
    state_[slot] = kFree;
  }
  free_.insert(free_.end(), slots.begin(), slots.end());
  size_ -= static_cast<uint32_t>(slots.size());
  return absl::OkStatus();
}

absl::Status MemoryStore::Read(absl::Span<const uint32_t> slots, float* out) const {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "read"));
  const size_t n = row_bytes();
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(out + i * row_floats(), rows_ + static_cast<size_t>(slots[i]) * row_floats(), n);
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::Write(absl::Span<const uint32_t> slots, const float* in) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "write"));
  const size_t n = row_bytes();
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(rows_ + static_cast<size_t>(slots[i]) * row_floats(), in + i * row_floats(), n);
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::Pin(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "pin"));
  for (size_t i = 0; i < slots.size(); ++i) {
    if (state_[slots[i]] == kMaxState) {
      for (size_t j = 0; j < i; ++j) --state_[slots[j]];
      return absl::FailedPreconditionError(
          fmt::format("{}: slot {} is pinned {} times already; unpin rows once their batch is done",
                      Label(), slots[i], kMaxState - kAllocated));
    }
    ++state_[slots[i]];
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::Unpin(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "unpin"));
  for (size_t i = 0; i < slots.size(); ++i) {
    if (state_[slots[i]] <= kAllocated) {
      for (size_t j = 0; j < i; ++j) ++state_[slots[j]];
      return absl::FailedPreconditionError(
          fmt::format("{}: unpin of slot {}, which is not pinned", Label(), slots[i]));
    }
    --state_[slots[i]];
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
