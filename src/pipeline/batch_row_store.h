// batch_row_store.h: a growable columnar store of rows with the column layout of a Batch, used by
// the row-level transforms (Shard, Shuffle, BatchRows) to copy rows between batches. Not
// thread-safe.
#ifndef RECSDK_PIPELINE_BATCH_ROW_STORE_H_
#define RECSDK_PIPELINE_BATCH_ROW_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/dataset.h"

namespace recsdk::internal {

class BatchRowStore {
 public:
  BatchRowStore() = default;
  // Init takes the column layout (names, dtypes, per-row shapes) of `like`; drops all rows.
  void Init(const Batch& like);
  bool initialized() const { return initialized_; }
  // CheckLayout: InvalidArgument naming the column when `batch` does not match the layout.
  Status CheckLayout(const Batch& batch) const;

  int64_t size() const { return size_; }
  void Reserve(int64_t rows);
  void Clear() { size_ = 0; }
  // PopBack drops the last row.
  void PopBack() { --size_; }
  // AppendRows copies rows [begin, end) of `batch` (layout already checked).
  void AppendRows(const Batch& batch, int64_t begin, int64_t end);
  // SetRow overwrites row i with row r of `batch`.
  void SetRow(int64_t i, const Batch& batch, int64_t r);
  // AppendFrom copies row i of `other` (same layout) to the end.
  void AppendFrom(const BatchRowStore& other, int64_t i);
  // SwapRows exchanges rows i and j.
  void SwapRows(int64_t i, int64_t j);
  // ToBatch builds a Batch of the first `size()` rows, padded with zero rows to `padded_rows`
  // when that is larger; then clears the store.
  Batch TakeBatch(int64_t padded_rows = 0);

 private:
  struct Col {
    std::string name;
    DType dtype;
    Shape row_shape;  // the tensor shape without dimension 0
    size_t row_bytes;
    std::vector<char> data;
  };
  void Grow(int64_t rows);

  bool initialized_ = false;
  std::vector<Col> cols_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_BATCH_ROW_STORE_H_
