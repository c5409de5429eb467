// eviction.h: the one rule of stale eviction, shared by EmbeddingTable::EvictStale (table_evict.cc)
// and EvictHook::AfterStep (evict_hook.cc), the trigger that training loops and the key stage run.
#ifndef RECSDK_TABLE_EVICTION_H_
#define RECSDK_TABLE_EVICTION_H_

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/types/span.h"
#include "recsdk/status.h"
#include "recsdk/table.h"

namespace recsdk::internal {

// kNothingInFlight: the in_flight_from of a table no batch in flight uses.
inline constexpr int64_t kNothingInFlight = std::numeric_limits<int64_t>::max();

// StaleCutoff: the latest last-access time a stale key has: data_time - eviction_threshold, and
// below in_flight_from (the oldest data time of a batch in flight: the keys it may use stay).
// nullopt while the table has seen no data time (nothing is stale yet).
std::optional<int64_t> StaleCutoff(int64_t data_time, int64_t eviction_threshold,
                                   int64_t in_flight_from = kNothingInFlight);

// EvictStaleKeys: evicts the keys of `table` that StaleCutoff calls stale; returns how many.
// FailedPrecondition (EvictStale's) for a table without eviction. Exclusive access to the table.
[[nodiscard]] StatusOr<int64_t> EvictStaleKeys(EmbeddingTable& table,
                                               int64_t in_flight_from = kNothingInFlight);

// DataTimeAgreement: makes data_time() of each of `tables` that a rank of a distributed job
// cannot know alone (a worker's sharded table whose keys live on ps ranks) report the job's data
// time now. A collective of the job's workers when it has such tables; EvictHook::AfterStep calls
// it before it reads the data times of its time trigger, with the same tables on every worker.
using DataTimeAgreement = Status (*)(absl::Span<EmbeddingTable* const> tables);

// SetDataTimeAgreement: installs `agree` for the process (src/dist installs its own with the
// collective ops); AgreeDataTimes runs it (OK at once when none is installed: every table's data
// time is then its own). Thread-safe.
void SetDataTimeAgreement(DataTimeAgreement agree);
[[nodiscard]] Status AgreeDataTimes(absl::Span<EmbeddingTable* const> tables);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_EVICTION_H_
