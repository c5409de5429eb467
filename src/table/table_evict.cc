// table_evict.cc: TableImpl's eviction (by data time) and set_threshold. Exclusive access.
#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/table/eviction.h"
#include "src/table/table_impl.h"

namespace recsdk::internal {

StatusOr<int64_t> TableImpl::EvictStale() {
  if (!evicting_) return NoEviction();
  return EvictStaleKeys(*this);
}

Status TableImpl::NoEviction() const {
  return absl::FailedPreconditionError(fmt::format(
      "table \"{}\" has eviction disabled (eviction_threshold -1); set eviction_threshold >= 0 "
      "and access_threshold >= 0 to evict",
      name()));
}

StatusOr<int64_t> TableImpl::EvictLastAccessedAtOrBefore(int64_t cutoff) {
  if (!evicting_) return NoEviction();
  std::vector<std::pair<int64_t, uint32_t>> victims;
  index_->ForEach([&](int64_t key, uint32_t row) {
    if (*Timestamp(row) <= cutoff) victims.emplace_back(key, row);
  });
  // Evicted keys leave every tier. The caller guarantees no batch in flight uses them (the key
  // stage caps the cutoff below its batches' times), so their device rows leave the leases of
  // finished batches too.
  std::unique_lock<std::mutex> tier_lock(tier_mu_, std::defer_lock);
  if (tiered_) {
    tier_lock.lock();
    absl::flat_hash_set<uint32_t> device_slots;
    for (const auto& [key, row] : victims) {
      if (row < static_cast<uint32_t>(device_rows_)) device_slots.insert(row);
    }
    ScrubLeases(device_slots);
  }
  for (const auto& [key, row] : victims) {
    index_->Erase(key);
    RemoveAt(row);
    removed_.insert(key);
  }
  int64_t evicted = static_cast<int64_t>(victims.size());
  absl::erase_if(pending_, [&](const auto& kv) {
    const bool old = kv.second.timestamp <= cutoff;
    evicted += old ? 1 : 0;
    return old;
  });
  return evicted;
}

Status TableImpl::SetAccessThreshold(int64_t access_threshold) {
  if (!admitting_) {
    return absl::FailedPreconditionError(fmt::format(
        "set_threshold: table \"{}\" was created without admission (access_threshold -1), "
        "so its threshold cannot change to {}; create it with access_threshold >= 0",
        name(), access_threshold));
  }
  if (access_threshold < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "set_threshold: table \"{}\": access_threshold {} is below 0; admission stays on for "
        "the table's life, so use 0 to admit every key",
        name(), access_threshold));
  }
  config_.access_threshold = access_threshold;
  return absl::OkStatus();
}

}  // namespace recsdk::internal
