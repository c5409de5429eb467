// tier_memory.h: the memory of a tiered table's device tier when it is not the host's
// (issue 27, "the device tier of tables in device memory"). The table layer sees it through this
// interface only; a backend makes one (Device::CreateTableTierMemory in device.h;
// CreateTransferTierMemory below is the generic one, over the device's allocator and
// DataTransfer) and the Session installs it on a tiered table it creates (table_resource.cc, with
// UseDeviceTierMemory of src/table/tier_lease.h).
//
// What changes for the table (table_impl.h): its device rows are rows() (device memory, slot r at
// rows() + r * row_floats) instead of its host slab. The table's gather and update kernels for
// that device read and write them there; the table's host code (the key stage's swaps in
// ExecuteTiers, fresh rows' initialisation, ReadRowsAt / WriteRowsAt and so every snapshot,
// export, import and single-key read of a tiered table) moves rows only through Read and Write,
// never through a host pointer. Without one (the CPU device), the table keeps its host slab and
// nothing changes.
//
// Ordering: Read and Write run on the device's copy stream after the compute work enqueued before
// them (an event), so a row a queued kernel still reads or writes is swapped only after it.
// Read (a snapshot's read, an export) returns when its rows are in `out`, so it waits for the copy
// (with a deadline, counted in TierSwapCounters). A swap-out is ReadAsync: the key stage's Resolve
// queues it and goes on; the table writes the rows into its host tier only when something next
// reads or frees host rows (the next Resolve, a snapshot), after WaitRead. Write (a swap-in) is
// asynchronous: it copies `in` into a staging buffer the copy owns until the copy's event, enqueues
// the copy and returns without waiting, so the key stage's Resolve, running ahead of compute, never
// blocks on a swap-in. The step whose kernels read those rows calls ComputeAfterWrites before its
// gather: the compute stream then waits for every swap-in enqueued so far (on the device; a
// synchronous stream waits on the host). A Read after a Write of the same slot is ordered by the
// copy stream. ComputeFence marks the compute work enqueued so far (an Event): the table releases a
// batch's pinned device rows only once the fence recorded when the step's rows were given back has
// passed (src/table/tier_lease.h), so a victim is never moved out while a queued kernel still reads
// it.
//
// Threading: the table calls Read/Write under its tier lock (one at a time); ComputeFence from
// the thread that releases leases; ComputeAfterWrites from the executor's kernels, beside a Write.
#ifndef RECSDK_DEVICE_TIER_MEMORY_H_
#define RECSDK_DEVICE_TIER_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "src/device/stream.h"

namespace recsdk::internal {

// TierSwapCounters: what the device tiers of one device moved and waited for since it was made
// (the Session's SessionStats reports them). Thread-safe (relaxed atomics).
struct TierSwapCounters {
  // swap_in_rows / swap_in_bytes: rows written to device tiers (Write: promotions, fresh rows,
  // imports); swap_out_rows / swap_out_bytes: rows read back (Read: demotions, snapshots, exports).
  std::atomic<int64_t> swap_in_rows{0}, swap_in_bytes{0};
  std::atomic<int64_t> swap_out_rows{0}, swap_out_bytes{0};
  // swap_in_host_waits: times the host blocked for a swap-in's copy (a staging buffer still in
  // flight, a tier memory freed with copies queued); 0 on a steady training loop.
  // swap_out_host_waits: times the host waited for a Read's copy (one per Read).
  std::atomic<int64_t> swap_in_host_waits{0}, swap_out_host_waits{0};
  // compute_waits: times a step's compute stream was ordered after pending swap-ins
  // (ComputeAfterWrites found some).
  std::atomic<int64_t> compute_waits{0};
};

// SwapOutOrder: what a ReadAsync's copy waits for on the device besides the swaps queued before it
// (always in order on the copy stream). kAfterQueuedCompute: every compute work enqueued so far
// (the generic fence, as Read). kAfterReleaseFences: no compute work: the caller vouches that no
// queued kernel uses the slots any more because the releases that unpinned them took effect only
// once their fences (ComputeFence after the steps that used them) had passed; this is the table's
// swap-out of its victims (table_tiers.cc), which then overlaps the step in flight instead of
// queueing behind it.
enum class SwapOutOrder { kAfterQueuedCompute, kAfterReleaseFences };

// PendingRows: the rows a ReadAsync queued: in `rows` once `done` has passed (null: already).
struct PendingRows {
  std::shared_ptr<Event> done;
  std::shared_ptr<std::vector<float>> rows;
};

// DeviceTierMemory: capacity() rows of row_floats() floats in device memory.
class DeviceTierMemory {
 public:
  virtual ~DeviceTierMemory() = default;
  // rows: the device address of slot 0's row; slot r's row is rows() + r * row_floats(). Only the
  // device's own kernels may dereference it.
  virtual float* rows() const = 0;
  virtual int row_floats() const = 0;
  virtual uint32_t capacity() const = 0;
  // Read: out[i * row_floats, (i + 1) * row_floats) = the row in slots[i] (host memory), after
  // every Write before it; done when it returns. InvalidArgument for a slot >= capacity()
  // (nothing copied).
  virtual Status Read(absl::Span<const uint32_t> slots, float* out) = 0;
  // ReadAsync: Read without the host wait (a swap-out): the copy is queued after the swaps before
  // it and, per `order`, the compute work so far, into rows the result owns, and ReadAsync returns;
  // the caller's WaitRead gives them. A Write of the same slots queued after it lands after the
  // copy has read them. Default: Read (done on return: a memory whose copies are synchronous).
  virtual StatusOr<PendingRows> ReadAsync(absl::Span<const uint32_t> slots,
                                          SwapOutOrder /*order*/) {
    PendingRows p{nullptr, std::make_shared<std::vector<float>>(slots.size() *
                                                                static_cast<size_t>(row_floats()))};
    Status s = Read(slots, p.rows->data());
    if (!s.ok()) return s;
    return p;
  }
  // WaitRead: waits (with a deadline, counted in swap_out_host_waits when it had to) until a
  // ReadAsync's rows are there.
  virtual Status WaitRead(const PendingRows& pending) {
    return pending.done == nullptr ? absl::OkStatus() : pending.done->Wait(absl::Minutes(2));
  }
  // Write: the row in slots[i] = in[i * row_floats, ...); a slot listed twice gets the later row.
  // `in` may be reused when it returns; the copy may still be queued then (see ComputeAfterWrites).
  // InvalidArgument for a slot >= capacity() (nothing copied).
  virtual Status Write(absl::Span<const uint32_t> slots, const float* in) = 0;
  // ComputeAfterWrites: compute work enqueued from now on starts after every Write so far (a
  // table kernel calls it before it reads or updates the rows). Default: nothing to wait for (a
  // memory whose Write is complete on return).
  virtual Status ComputeAfterWrites() { return absl::OkStatus(); }
  // ComputeFence: an event after the compute work enqueued on the device so far.
  virtual StatusOr<std::shared_ptr<Event>> ComputeFence() = 0;
};

class Allocator;
class Device;

// CreateTransferTierMemory: device tier memory over any device: `rows` rows of `row_floats`
// floats of `memory` (the device's raw memory), charged exactly to the device's variable pool
// while it lives (LimitedAllocator::Charge: ResourceExhausted naming `label`, the bytes, the limit
// and variable_memory_max_size when it does not fit), moved through the device's DataTransfer on
// its copy stream, one copy per run of consecutive slots (Write asynchronous, its staging buffer
// owned by the queued copy), counted in `device.tier_swaps()`. `label` names the table in
// messages.
StatusOr<std::unique_ptr<DeviceTierMemory>> CreateTransferTierMemory(
    Device& device, std::shared_ptr<Allocator> memory, int64_t rows, int row_floats,
    const std::string& label);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_TIER_MEMORY_H_
