// evict_hook.cc: EvictHook, the trigger of eviction during training, and the rule of stale
// eviction (eviction.h), which every eviction of stale keys runs: EmbeddingTable::EvictStale, and
// the key stage's (KeyStage::AfterStep gives the hook tables whose EvictStale keeps the keys of
// its batches in flight). Not thread-safe: one training loop owns a hook.
#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "fmt/format.h"
#include "recsdk/table.h"
#include "src/table/eviction.h"

namespace recsdk {
namespace internal {

std::optional<int64_t> StaleCutoff(int64_t data_time, int64_t eviction_threshold,
                                   int64_t in_flight_from) {
  if (data_time == std::numeric_limits<int64_t>::min()) return std::nullopt;
  const int64_t cutoff = data_time - eviction_threshold;
  if (in_flight_from == kNothingInFlight) return cutoff;
  return std::min(cutoff, in_flight_from - 1);
}

StatusOr<int64_t> EvictStaleKeys(EmbeddingTable& table, int64_t in_flight_from) {
  const int64_t threshold = table.config().eviction_threshold;
  if (threshold < 0) return table.EvictStale();  // its FailedPrecondition names the fix
  const std::optional<int64_t> cutoff = StaleCutoff(table.data_time(), threshold, in_flight_from);
  if (!cutoff) return 0;
  return table.EvictLastAccessedAtOrBefore(*cutoff);
}

namespace {
std::atomic<DataTimeAgreement> data_time_agreement{nullptr};
}  // namespace

void SetDataTimeAgreement(DataTimeAgreement agree) { data_time_agreement.store(agree); }

Status AgreeDataTimes(absl::Span<EmbeddingTable* const> tables) {
  const DataTimeAgreement agree = data_time_agreement.load();
  return agree == nullptr ? absl::OkStatus() : agree(tables);
}

}  // namespace internal

EvictHook::EvictHook(bool evict_enable, int64_t evict_time_interval, int64_t evict_step_interval)
    : evict_enable_(evict_enable),
      evict_time_interval_(evict_time_interval),
      evict_step_interval_(evict_step_interval) {}

Status EvictHook::Validate() const {
  if (evict_enable_ && evict_time_interval_ <= 0 && evict_step_interval_ <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "EvictHook: evict_time_interval {} and evict_step_interval {} are both disabled while "
        "evict_enable is true; set one of them > 0 or evict_enable to false",
        evict_time_interval_, evict_step_interval_));
  }
  return absl::OkStatus();
}

StatusOr<int64_t> EvictHook::AfterStep(int64_t global_step,
                                       absl::Span<EmbeddingTable* const> tables) {
  if (!evict_enable_) return 0;
  if (Status s = Validate(); !s.ok()) return s;
  std::vector<EmbeddingTable*> evicting;
  for (EmbeddingTable* t : tables) {
    if (t->config().eviction_threshold >= 0) evicting.push_back(t);
  }
  // The time trigger reads the data time: on a worker of a job with ps ranks, the job's, which
  // the workers learn from the ps ranks here (one small collective per step; none without ps
  // ranks, and none for a hook that evicts by steps alone).
  if (evict_time_interval_ > 0) {
    if (Status s = internal::AgreeDataTimes(evicting); !s.ok()) return s;
  }
  int64_t now = std::numeric_limits<int64_t>::min();
  for (const EmbeddingTable* t : evicting) now = std::max(now, t->data_time());
  const bool have_time = now != std::numeric_limits<int64_t>::min();
  if (have_time && !has_last_time_) {
    has_last_time_ = true;
    last_time_ = now;
  }
  const bool step_due =
      evict_step_interval_ > 0 && global_step - last_step_ >= evict_step_interval_;
  const bool time_due =
      evict_time_interval_ > 0 && have_time && now - last_time_ >= evict_time_interval_;
  if (!step_due && !time_due) return 0;
  last_step_ = global_step;
  if (have_time) last_time_ = now;
  int64_t evicted = 0;
  for (EmbeddingTable* t : evicting) {
    StatusOr<int64_t> n = t->EvictStale();
    if (!n.ok()) return n.status();
    evicted += *n;
  }
  return evicted;
}

}  // namespace recsdk
