// row_swapper.h: moving table rows between host memory and device memory, the swaps of the
// device tier (hot rows on the GPU, the rest in host memory): SwapIn copies rows from anywhere in
// host memory into chosen rows of a device RowTable, SwapOut the reverse. Rows go in chunks
// through two pinned staging buffers: while the copy engine moves chunk c, the host threads pack
// (or unpack) chunk c + 1, so a swap runs near the link's pinned-memory speed
// (benchmarks/cuda_bench.cc, BM_SwapIn / BM_SwapOut, against cudaMemcpy of pinned memory).
//
// Threading: a RowSwapper belongs to one thread at a time and issues its work on its own Stream,
// separate from compute streams; a caller orders compute after a swap with an Event. Packing
// uses the calling task arena's threads (oneTBB). SwapIn and SwapOut return when their rows have
// arrived; SwapInAsync returns once its rows are packed into pinned staging and its copies are
// enqueued (the staging buffers rotate across calls; the host waits, with a deadline, only to
// refill one whose copy is still in flight).
#ifndef RECSDK_SRC_DEVICE_CUDA_ROW_SWAPPER_H_
#define RECSDK_SRC_DEVICE_CUDA_ROW_SWAPPER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "recsdk/status.h"
#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_runtime.h"

namespace recsdk::cuda {

class RowSwapper {
 public:
  // Create: a swapper for rows of `row_floats` floats (the embedding and its slots), staging
  // `chunk_rows` rows per copy (two pinned and two device staging buffers of that size, plus the
  // row indices). InvalidArgument for sizes < 1; FailedPrecondition without a GPU.
  static StatusOr<std::unique_ptr<RowSwapper>> Create(int ordinal, int64_t row_floats,
                                                      int64_t chunk_rows);

  // SwapIn: for i < host_rows.size(), device row device_rows[i] of `table` = the row_floats
  // floats at host_rows[i]. The two vectors must have the same size; every device row must be in
  // [0, table.num_rows) and table.stride >= row_floats. Returns when the rows are on the device.
  [[nodiscard]] Status SwapIn(const std::vector<const float*>& host_rows,
                              const std::vector<int64_t>& device_rows, const RowTable& table);
  // SwapInAsync: SwapIn that returns once the copies are enqueued on stream(): the host rows may be
  // reused then; record an Event on stream() to order work after the rows' arrival.
  [[nodiscard]] Status SwapInAsync(const std::vector<const float*>& host_rows,
                                   const std::vector<int64_t>& device_rows, const RowTable& table);
  // SwapOut: for i < host_rows.size(), the row_floats floats at host_rows[i] = device row
  // device_rows[i] of `table`. Returns when the rows are in host memory.
  [[nodiscard]] Status SwapOut(const RowTable& table, const std::vector<int64_t>& device_rows,
                               const std::vector<float*>& host_rows);

  // stream: the stream the swaps run on (record an Event on it to order other work after one).
  Stream& stream() { return *stream_; }

 private:
  RowSwapper() = default;
  Status Check(const RowTable& table, const std::vector<int64_t>& device_rows,
               size_t host_rows) const;

  int64_t row_floats_ = 0;
  int64_t chunk_rows_ = 0;
  int64_t ids_offset_ = 0;  // bytes from a staging buffer's start to its row ids
  std::unique_ptr<Stream> stream_;
  // WaitStaging: the host waits until staging buffer `b`'s last copy is done (before refilling it).
  Status WaitStaging(int b, const char* what) const;

  std::unique_ptr<Event> done_[2];
  int next_ = 0;             // the staging buffer SwapInAsync fills first (rotates across calls)
  PinnedBuffer pinned_[2];   // [chunk_rows * row_floats floats | pad | chunk_rows int64 ids]
  DeviceBuffer staging_[2];  // the same layout on the device
};

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_ROW_SWAPPER_H_
