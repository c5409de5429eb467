// tier_lease.h: how the key stage resolves keys of a tiered table (host_vocabulary_size > 0) and
// says when a batch's rows may move again. Internal: the public Resolve (recsdk/table.h) keeps
// the rows of its last two calls on the device, which is right for a caller that runs one batch
// at a time; the key stage runs several batches ahead of the step, so it pins each batch's device
// rows under a lease of its own and releases them once the step that used them has finished.
//
// Protocol (DESIGN.md's invariant: nothing the key stage does moves or frees a row that a batch
// in flight refers to):
//   ResolveWithLease(table, ..., {owner, batch}): a Resolve whose device rows stay pinned until
//     ReleaseLeases(table, owner, b) with b > batch. Rows of other leases are never chosen as
//     victims. When the device tier has too few unpinned rows for the batch:
//       - Unavailable, with nothing changed, when `owner` still holds leases older than its latest
//         one (batches resolved ahead and not yet consumed): retry once the consumer has released
//         some (the key stage waits for its consumer);
//       - otherwise FailedPrecondition naming the table, the rows the batch and the previous one
//         need together and device_vocabulary_size (the spec's "two consecutive batches" rule).
//   ReleaseLeases(table, owner, before_batch): unpins the owner's leases of batches < before_batch
//     (INT64_MAX: all of them, e.g. when a stage stops).
// On a table without tiers both are a plain Resolve and a no-op.
//
// Threading: as Resolve (the table serialises its tier state internally, so evaluation resolves
// holding the key lock shared are safe too). ReleaseLeases may run beside Gather/Apply.
#ifndef RECSDK_TABLE_TIER_LEASE_H_
#define RECSDK_TABLE_TIER_LEASE_H_

#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "recsdk/table.h"
#include "src/device/tier_memory.h"

namespace recsdk::internal {

struct ResolveLease {
  // owner: who holds the lease (the key stage); nullptr is the public Resolve's own "last two
  // calls" lease.
  const void* owner = nullptr;
  // batch: the owner's batch number; increasing per owner.
  int64_t batch = 0;
};

// IsTiered: whether the table keeps rows off the device (host_vocabulary_size > 0).
bool IsTiered(const EmbeddingTable& table);

[[nodiscard]] Status ResolveWithLease(EmbeddingTable& table, absl::Span<const int64_t> unique_keys,
                                      absl::Span<const uint32_t> counts,
                                      absl::Span<const int64_t> timestamps, LookupMode mode,
                                      absl::Span<uint32_t> rows, const ResolveLease& lease);

void ReleaseLeases(EmbeddingTable& table, const void* owner, int64_t before_batch);

// DeviceTierBytes: the bytes of a tiered table's device tier (device_vocabulary_size rows of
// embedding + optimizer slots), a separate mapping the Session charges to
// variable_memory_max_size; 0 without tiers.
int64_t DeviceTierBytes(const EmbeddingTable& table);

// DeviceTierShape: the rows and floats per row of a tiered table's device tier ({0, 0} without
// tiers), what DeviceTierMemory for it must hold.
struct DeviceTierShape {
  int64_t rows = 0;
  int row_floats = 0;
};
DeviceTierShape GetDeviceTierShape(const EmbeddingTable& table);

// UseDeviceTierMemory: the device tier of a tiered table that holds no row yet lives in `memory`
// from now on (device_tier_memory.h): the Session does this for tables it creates on a device
// whose memory is not the host's. FailedPrecondition for an untiered or used table,
// InvalidArgument for memory of another shape; nothing changed then.
[[nodiscard]] Status UseDeviceTierMemory(EmbeddingTable& table,
                                         std::unique_ptr<DeviceTierMemory> memory);

// DeviceTierMemoryOf: the device memory a tiered table's device tier lives in (installed by
// UseDeviceTierMemory), or null when its rows are host memory (untiered tables, tables on the CPU
// device, tables wrapped by something other than the Session's LockedTable). A device's table
// kernels read and update the rows there in place: slot r (the row id a lookup returns) is at
// rows() + r * row_floats(), [dim embedding | optimizer slots]. Valid while the table lives.
DeviceTierMemory* DeviceTierMemoryOf(const EmbeddingTable& table);
// TierStats: rows per tier and rows moved so far (for benchmarks and tests); zeros without tiers.
struct TierStats {
  int64_t device_rows = 0, host_rows = 0, ssd_rows = 0;
  int64_t promoted = 0;  // rows moved up to the device (host or SSD -> device)
  int64_t demoted = 0;   // rows moved down (device -> host, host -> SSD)
  int64_t device_hits = 0, device_lookups = 0;  // batch keys found on the device / looked up
  // SSD rows read from the page cache (blocks still cached) and from the disk.
  int64_t ssd_cached_reads = 0, ssd_disk_reads = 0;
};
TierStats GetTierStats(const EmbeddingTable& table);

// DropSsdCleanPages: drops the clean cached pages of a tiered table's SSD files
// (SsdStore::DropCleanPages), so its next SSD reads come from the disk unless the rows were
// written since (benchmarks: an SSD tier larger than the page cache). No-op without SSD tier.
void DropSsdCleanPages(EmbeddingTable& table);

// PrefillSsd: a bulk path to build a table larger than memory: rows for the keys not in the
// table yet (duplicates and present keys are skipped), each initialised from (seed, key) exactly
// as its first use would initialise it, written straight into the SSD tier in one bulk write (next
// fit: adjacent slots, so a sequential write), never through the device and host tiers. The rows
// count as changed since the last snapshot, as fresh rows do. Training then finds them on SSD
// with the values a lazily created row would have had. FailedPrecondition without an SSD tier or
// with admission (access_threshold > 0); ResourceExhausted naming the table when the SSD tier
// lacks room (nothing changed); an I/O error leaves the table as it was. Not concurrent with a
// running key stage's Resolve of the same table (it takes the tier lock, so it is safe, but the
// rows' placement then depends on timing).
Status PrefillSsd(EmbeddingTable& table, absl::Span<const int64_t> keys);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIER_LEASE_H_
