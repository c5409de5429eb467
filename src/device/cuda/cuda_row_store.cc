// cuda_row_store.cc: the device tier's RowStore in GPU memory (cuda_row_store.h).
#include "src/device/cuda/cuda_row_store.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::cuda {

StatusOr<std::unique_ptr<CudaRowStore>> CudaRowStore::Create(const CudaRowStoreOptions& o) {
  if (o.row_floats <= 0 || o.dim <= 0 || o.dim > o.row_floats || o.capacity == 0 ||
      o.chunk_rows <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "CudaRowStore {}: row_floats {}, dim {}, capacity {}, chunk_rows {}: need row_floats > 0, "
        "0 < dim <= row_floats, capacity > 0 and chunk_rows > 0",
        o.label, o.row_floats, o.dim, o.capacity, o.chunk_rows));
  }
  if (GpuCount() == 0) {
    return absl::FailedPreconditionError(fmt::format(
        "CudaRowStore {}: no GPU found ({}); the device tier in GPU memory needs an NVIDIA GPU",
        o.label, NoGpuReason()));
  }
  internal::MemoryStoreOptions mo;
  mo.tier = internal::Tier::kDevice;
  mo.row_floats = o.row_floats;
  mo.capacity = o.capacity;
  mo.label = o.label;
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<internal::MemoryStore> slots,
                          internal::MemoryStore::Create(mo));
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<RowSwapper> swapper,
                          RowSwapper::Create(0, o.row_floats, o.chunk_rows));
  const int64_t bytes = static_cast<int64_t>(o.capacity) * o.row_floats * 4;
  StatusOr<DeviceBuffer> rows = DeviceBuffer::Allocate(swapper->stream(), bytes);
  if (!rows.ok()) {
    return Status(rows.status().code(),
                  fmt::format("CudaRowStore {}: {} rows of {} floats ({} bytes) in GPU memory: {}",
                              o.label, o.capacity, o.row_floats, bytes, rows.status().message()));
  }
  return std::unique_ptr<CudaRowStore>(
      new CudaRowStore(o, std::move(slots), std::move(swapper), *std::move(rows)));
}

CudaRowStore::CudaRowStore(const CudaRowStoreOptions& options,
                           std::unique_ptr<internal::MemoryStore> slots,
                           std::unique_ptr<RowSwapper> swapper, DeviceBuffer rows)
    : RowStore(internal::Tier::kDevice, options.row_floats, options.capacity),
      dim_(options.dim),
      slots_(std::move(slots)),
      swapper_(std::move(swapper)),
      rows_(std::move(rows)) {}

RowTable CudaRowStore::table() const {
  return RowTable{rows_.as<float>(), static_cast<int64_t>(capacity()), row_floats(), dim_};
}

absl::Status CudaRowStore::Read(absl::Span<const uint32_t> slots, float* out) const {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "Read"));
  if (slots.empty()) return absl::OkStatus();
  std::vector<int64_t> device_rows(slots.begin(), slots.end());
  std::vector<float*> host_rows(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) host_rows[i] = out + i * row_floats();
  return swapper_->SwapOut(table(), device_rows, host_rows);
}

absl::Status CudaRowStore::Write(absl::Span<const uint32_t> slots, const float* in) {
  RECSDK_RETURN_IF_ERROR(WriteAsync(slots, in));
  return swapper_->stream().Synchronize();
}

absl::Status CudaRowStore::WriteAsync(absl::Span<const uint32_t> slots, const float* in) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "Write"));
  if (slots.empty()) return absl::OkStatus();
  // A slot listed twice gets the later row: only its last occurrence is copied (the scatter on
  // the GPU writes a chunk's rows in no fixed order).
  std::unordered_map<uint32_t, size_t> last;
  last.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) last[slots[i]] = i;
  std::vector<int64_t> device_rows;
  std::vector<const float*> host_rows;
  device_rows.reserve(last.size());
  host_rows.reserve(last.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (last[slots[i]] != i) continue;
    device_rows.push_back(slots[i]);
    host_rows.push_back(in + i * row_floats());
  }
  return swapper_->SwapInAsync(host_rows, device_rows, table());
}

}  // namespace recsdk::cuda
