// row_swapper.cc: RowSwapper (row_swapper.h). Compiled by the host compiler.
#include "src/device/cuda/row_swapper.h"

#include <algorithm>
#include <cstring>

#include "fmt/format.h"
#include "oneapi/tbb/parallel_for.h"
#include "src/device/cuda/cuda_error.h"
#include "src/device/cuda/kernels_launch.h"

namespace recsdk::cuda {
namespace {

// PackRows: dst[r] = src[r] (row_floats floats each) for r < n, split over the arena's threads:
// one host thread copies ~10 GB/s, a PCIe 5 link moves ~50 GB/s.
template <typename Src, typename Dst>
void ParallelRowCopy(int64_t n, int64_t row_floats, Src src, Dst dst) {
  const size_t bytes = static_cast<size_t>(row_floats) * sizeof(float);
  const int64_t grain = std::max<int64_t>(1, (int64_t{64} << 10) / static_cast<int64_t>(bytes));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i < r.end(); ++i) {
                        std::memcpy(dst(i), src(i), bytes);
                      }
                    });
}

}  // namespace

StatusOr<std::unique_ptr<RowSwapper>> RowSwapper::Create(int ordinal, int64_t row_floats,
                                                         int64_t chunk_rows) {
  if (row_floats < 1 || chunk_rows < 1 || row_floats > (int64_t{1} << 24) ||
      chunk_rows > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(fmt::format(
        "cuda::RowSwapper: row_floats {} and chunk_rows {} must be in [1, 2^24]; pass the "
        "table's row width (dim and slots) and the rows per staged copy (e.g. 4096)",
        row_floats, chunk_rows));
  }
  std::unique_ptr<RowSwapper> s(new RowSwapper());
  s->row_floats_ = row_floats;
  s->chunk_rows_ = chunk_rows;
  RECSDK_ASSIGN_OR_RETURN(s->stream_, Stream::Create(ordinal));
  // The row ids follow the values, at a 16-byte aligned offset.
  s->ids_offset_ = (chunk_rows * row_floats * static_cast<int64_t>(sizeof(float)) + 15) / 16 * 16;
  const int64_t bytes = s->ids_offset_ + chunk_rows * static_cast<int64_t>(sizeof(int64_t));
  for (int b = 0; b < 2; ++b) {
    RECSDK_ASSIGN_OR_RETURN(s->done_[b], Event::Create(*s->stream_));
    RECSDK_ASSIGN_OR_RETURN(s->pinned_[b], PinnedBuffer::Allocate(bytes));
    RECSDK_ASSIGN_OR_RETURN(s->staging_[b], DeviceBuffer::Allocate(*s->stream_, bytes));
    // Recorded once so that the first wait on each buffer returns at once.
    RECSDK_RETURN_IF_ERROR(s->done_[b]->Record(*s->stream_));
  }
  return s;
}

Status RowSwapper::Check(const RowTable& table, const std::vector<int64_t>& device_rows,
                         size_t host_rows) const {
  if (device_rows.size() != host_rows) {
    return absl::InvalidArgumentError(
        fmt::format("cuda::RowSwapper: {} device rows for {} host rows; pass one of each per row",
                    device_rows.size(), host_rows));
  }
  if (table.stride < row_floats_ || (table.num_rows > 0 && table.data == nullptr)) {
    return absl::InvalidArgumentError(fmt::format(
        "cuda::RowSwapper: the device table's stride {} is below the {} floats of a swapped row "
        "(or its data is null); pass the table the swapper was made for",
        table.stride, row_floats_));
  }
  for (size_t i = 0; i < device_rows.size(); ++i) {
    if (device_rows[i] < 0 || device_rows[i] >= table.num_rows) {
      return absl::InvalidArgumentError(
          fmt::format("cuda::RowSwapper: device row {} (entry {}) is outside the table's {} rows",
                      device_rows[i], i, table.num_rows));
    }
  }
  return absl::OkStatus();
}

Status RowSwapper::WaitStaging(int b, const char* what) const {
  constexpr absl::Duration kStagingWait = absl::Seconds(60);
  if (Status s = done_[b]->Synchronize(kStagingWait); !s.ok()) {
    return Status(s.code(), fmt::format("cuda::RowSwapper::{}: waiting (at most {}) for the last "
                                        "copy of pinned staging buffer {}: {}",
                                        what, absl::FormatDuration(kStagingWait), b, s.message()));
  }
  return absl::OkStatus();
}

Status RowSwapper::SwapIn(const std::vector<const float*>& host_rows,
                          const std::vector<int64_t>& device_rows, const RowTable& table) {
  RECSDK_RETURN_IF_ERROR(SwapInAsync(host_rows, device_rows, table));
  return stream_->Synchronize();
}

Status RowSwapper::SwapInAsync(const std::vector<const float*>& host_rows,
                               const std::vector<int64_t>& device_rows, const RowTable& table) {
  RECSDK_RETURN_IF_ERROR(Check(table, device_rows, host_rows.size()));
  const int64_t n = static_cast<int64_t>(host_rows.size());
  const int64_t value_bytes = ids_offset_;
  for (int64_t begin = 0; begin < n; begin += chunk_rows_) {
    const int b = next_;
    next_ = 1 - next_;
    const int64_t rows = std::min(chunk_rows_, n - begin);
    // The copy that last read this pinned buffer (two chunks ago, maybe of an earlier call) must
    // be done before it is refilled.
    RECSDK_RETURN_IF_ERROR(WaitStaging(b, "SwapIn"));
    float* pinned = pinned_[b].as<float>();
    ParallelRowCopy(
        rows, row_floats_, [&](int64_t i) { return host_rows[static_cast<size_t>(begin + i)]; },
        [&](int64_t i) { return pinned + i * row_floats_; });
    auto* pinned_ids = reinterpret_cast<int64_t*>(pinned_[b].as<char>() + value_bytes);
    std::copy_n(device_rows.begin() + begin, rows, pinned_ids);
    const int64_t used = rows * row_floats_ * static_cast<int64_t>(sizeof(float));
    char* dev = staging_[b].as<char>();
    RECSDK_RETURN_IF_ERROR(CopyHostToDevice(*stream_, dev, pinned, used));
    RECSDK_RETURN_IF_ERROR(CopyHostToDevice(*stream_, dev + value_bytes, pinned_ids,
                                            rows * static_cast<int64_t>(sizeof(int64_t))));
    RECSDK_RETURN_IF_ERROR(CudaStatus(
        launch::ScatterRows(stream_->native(), reinterpret_cast<const float*>(dev), rows,
                            row_floats_, reinterpret_cast<const int64_t*>(dev + value_bytes),
                            table.data, table.stride),
        "cuda::RowSwapper::SwapIn scatter"));
    RECSDK_RETURN_IF_ERROR(done_[b]->Record(*stream_));
  }
  return absl::OkStatus();
}

Status RowSwapper::SwapOut(const RowTable& table, const std::vector<int64_t>& device_rows,
                           const std::vector<float*>& host_rows) {
  RECSDK_RETURN_IF_ERROR(Check(table, device_rows, host_rows.size()));
  const int64_t n = static_cast<int64_t>(host_rows.size());
  const int64_t value_bytes = ids_offset_;
  // A SwapInAsync before may still read the staging buffers this refills.
  for (int b = 0; b < 2; ++b) RECSDK_RETURN_IF_ERROR(WaitStaging(b, "SwapOut"));
  // Unpack: chunk `c` (staged in buffer c % 2) from pinned memory to its host rows.
  auto unpack = [&](int64_t c) -> Status {
    const int b = static_cast<int>(c % 2);
    const int64_t begin = c * chunk_rows_;
    const int64_t rows = std::min(chunk_rows_, n - begin);
    RECSDK_RETURN_IF_ERROR(WaitStaging(b, "SwapOut"));
    const float* pinned = pinned_[b].as<float>();
    ParallelRowCopy(
        rows, row_floats_, [&](int64_t i) { return pinned + i * row_floats_; },
        [&](int64_t i) { return host_rows[static_cast<size_t>(begin + i)]; });
    return absl::OkStatus();
  };
  const int64_t chunks = (n + chunk_rows_ - 1) / chunk_rows_;
  for (int64_t c = 0; c < chunks; ++c) {
    const int b = static_cast<int>(c % 2);
    const int64_t begin = c * chunk_rows_;
    const int64_t rows = std::min(chunk_rows_, n - begin);
    // Buffer b last held chunk c - 2, unpacked in the previous iteration.
    auto* pinned_ids = reinterpret_cast<int64_t*>(pinned_[b].as<char>() + value_bytes);
    std::copy_n(device_rows.begin() + begin, rows, pinned_ids);
    char* dev = staging_[b].as<char>();
    RECSDK_RETURN_IF_ERROR(CopyHostToDevice(*stream_, dev + value_bytes, pinned_ids,
                                            rows * static_cast<int64_t>(sizeof(int64_t))));
    RECSDK_RETURN_IF_ERROR(CudaStatus(
        launch::GatherRows(stream_->native(), table.data, table.num_rows, table.stride, row_floats_,
                           reinterpret_cast<const int64_t*>(dev + value_bytes), rows,
                           reinterpret_cast<float*>(dev), nullptr),
        "cuda::RowSwapper::SwapOut gather"));
    RECSDK_RETURN_IF_ERROR(
        CopyDeviceToHost(*stream_, pinned_[b].data(), dev,
                         rows * row_floats_ * static_cast<int64_t>(sizeof(float))));
    RECSDK_RETURN_IF_ERROR(done_[b]->Record(*stream_));
    // While this chunk moves, the previous one is unpacked.
    if (c > 0) RECSDK_RETURN_IF_ERROR(unpack(c - 1));
  }
  if (chunks > 0) RECSDK_RETURN_IF_ERROR(unpack(chunks - 1));
  return stream_->Synchronize();
}

}  // namespace recsdk::cuda
