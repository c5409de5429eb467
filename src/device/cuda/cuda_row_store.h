// cuda_row_store.h: a RowStore (src/table/tiers/row_store.h) of tier kDevice whose rows live in GPU
// memory: the store the device tier of a table needs on the CUDA backend (issue 27 part 2's
// "hot rows on the device, host memory and SSD below"). Rows are one cudaMalloc'd block of
// capacity x row_floats floats, never moved, so a slot's device address is stable from Allocate
// to Free; Read and Write move rows between host memory and their slots through a RowSwapper
// (chunked through pinned staging buffers on the swapper's own stream), so MoveRows between this
// store and the host tier's MemoryStore is the tier's swap. The slot bookkeeping (free list,
// pins) is a MemoryStore's, whose own host mapping is never written (it commits no memory).
//
// A tiered table on the cuda device keeps its device tier in one (cuda_tier_memory.h: every slot
// allocated, the table's own bookkeeping choosing them); its lookups and updates run on table()
// (cuda_table_kernels.cc). Read and Write return when the rows have arrived; WriteAsync (what the
// device tier's swap-ins use) returns once the copies are enqueued on stream().
//
// RowAddress is nullptr (the rows are not host memory); table() gives the device rows for the
// CUDA kernels. Threading: as RowStore; Read/Write use the swapper, one call at a time.
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_ROW_STORE_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_ROW_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_runtime.h"
#include "src/device/cuda/row_swapper.h"
#include "src/table/tiers/memory_store.h"
#include "src/table/tiers/row_store.h"

namespace recsdk::cuda {

// CudaRowStoreOptions: the store's shape.
struct CudaRowStoreOptions {
  // row_floats: floats per row (embedding + optimizer slots); > 0.
  int row_floats = 0;
  // dim: the embedding's floats at the start of each row (what GatherRows returns); 0 < dim <=
  // row_floats.
  int dim = 0;
  // capacity: rows (the device tier's vocabulary size); > 0.
  uint32_t capacity = 0;
  // chunk_rows: rows per staged copy of Read/Write; > 0.
  int64_t chunk_rows = 4096;
  // label: what the store is for, in messages (e.g. `table "user_table"`).
  std::string label;
};

class CudaRowStore final : public internal::RowStore {
 public:
  // Create: InvalidArgument for bad options (before anything else), FailedPrecondition without a
  // GPU, ResourceExhausted naming the label and the bytes when GPU memory is short.
  static StatusOr<std::unique_ptr<CudaRowStore>> Create(const CudaRowStoreOptions& options);

  uint32_t size() const override { return slots_->size(); }
  absl::Status Allocate(size_t n, uint32_t* slots) override { return slots_->Allocate(n, slots); }
  absl::Status Free(absl::Span<const uint32_t> slots) override { return slots_->Free(slots); }
  // Read: rows to host memory (returns when they are there).
  absl::Status Read(absl::Span<const uint32_t> slots, float* out) const override;
  // Write: rows from host memory (returns when they are on the GPU); a slot listed twice gets the
  // later row.
  absl::Status Write(absl::Span<const uint32_t> slots, const float* in) override;
  // WriteAsync: Write that returns once its copies are enqueued on stream() (`in` may be reused
  // then); record an Event on stream() to order work after the rows' arrival.
  absl::Status WriteAsync(absl::Span<const uint32_t> slots, const float* in);
  absl::Status Pin(absl::Span<const uint32_t> slots) override { return slots_->Pin(slots); }
  absl::Status Unpin(absl::Span<const uint32_t> slots) override { return slots_->Unpin(slots); }
  bool IsPinned(uint32_t slot) const override { return slots_->IsPinned(slot); }
  bool IsAllocated(uint32_t slot) const override { return slots_->IsAllocated(slot); }

  // table: the rows in GPU memory, for GatherRows and SparseApply (row r = slot r).
  RowTable table() const;
  // stream: where Read and Write run (record an Event on it to order compute after a swap).
  Stream& stream() { return swapper_->stream(); }

 private:
  CudaRowStore(const CudaRowStoreOptions& options, std::unique_ptr<internal::MemoryStore> slots,
               std::unique_ptr<RowSwapper> swapper, DeviceBuffer rows);

  int dim_;
  std::unique_ptr<internal::MemoryStore> slots_;
  std::unique_ptr<RowSwapper> swapper_;  // Read is const; the swapper's staging is not state
  DeviceBuffer rows_;
};

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_ROW_STORE_H_
