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
// them (an event), and compute enqueued after them starts after them (an event): a row a step's
// kernel reads or writes is swapped only before or after it, never during. Both return when the
// copy has finished (the host buffer may be reused then). ComputeFence marks the compute work
// enqueued so far (an Event): the table releases a batch's pinned device rows only once the fence
// recorded when the step's rows were given back has passed (src/table/tier_lease.h), so a victim is
// never moved out while a queued kernel still reads it.
//
// Threading: the table calls Read/Write under its tier lock (one at a time); ComputeFence from
// the thread that releases leases.
#ifndef RECSDK_DEVICE_TIER_MEMORY_H_
#define RECSDK_DEVICE_TIER_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/types/span.h"
#include "src/device/stream.h"

namespace recsdk::internal {

// DeviceTierMemory: capacity() rows of row_floats() floats in device memory.
class DeviceTierMemory {
 public:
  virtual ~DeviceTierMemory() = default;
  // rows: the device address of slot 0's row; slot r's row is rows() + r * row_floats(). Only the
  // device's own kernels may dereference it.
  virtual float* rows() const = 0;
  virtual int row_floats() const = 0;
  virtual uint32_t capacity() const = 0;
  // Read: out[i * row_floats, (i + 1) * row_floats) = the row in slots[i] (host memory); done
  // when it returns. InvalidArgument for a slot >= capacity() (nothing copied).
  virtual Status Read(absl::Span<const uint32_t> slots, float* out) = 0;
  // Write: the row in slots[i] = in[i * row_floats, ...); a slot listed twice gets the later row;
  // done when it returns. InvalidArgument for a slot >= capacity() (nothing copied).
  virtual Status Write(absl::Span<const uint32_t> slots, const float* in) = 0;
  // ComputeFence: an event after the compute work enqueued on the device so far.
  virtual StatusOr<std::shared_ptr<Event>> ComputeFence() = 0;
};

class Allocator;
class Device;

// CreateTransferTierMemory: device tier memory over any device: `rows` rows of `row_floats`
// floats of `memory` (the device's raw memory), charged exactly to the device's variable pool
// while it lives (LimitedAllocator::Charge: ResourceExhausted naming `label`, the bytes, the limit
// and variable_memory_max_size when it does not fit), moved through the device's DataTransfer on
// its copy stream, one copy per run of consecutive slots. `label` names the table in messages.
StatusOr<std::unique_ptr<DeviceTierMemory>> CreateTransferTierMemory(
    Device& device, std::shared_ptr<Allocator> memory, int64_t rows, int row_floats,
    const std::string& label);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_TIER_MEMORY_H_
