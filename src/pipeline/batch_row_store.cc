// batch_row_store.cc: see batch_row_store.h. Not thread-safe.
#include "src/pipeline/batch_row_store.h"

#include <algorithm>
#include <cstring>

#include "fmt/format.h"

namespace recsdk::internal {
namespace {
Shape RowShape(const Tensor& t) {
  Shape s = t.shape();
  s.RemoveDim(0);
  return s;
}
}  // namespace

void BatchRowStore::Init(const Batch& like) {
  cols_.clear();
  for (const auto& [name, t] : like.columns()) {
    Shape rs = RowShape(t);
    const size_t row_bytes = static_cast<size_t>(rs.num_elements()) * DTypeSize(t.dtype());
    cols_.push_back(Col{name, t.dtype(), rs, row_bytes, {}});
  }
  size_ = 0;
  capacity_ = 0;
  initialized_ = true;
}

Status BatchRowStore::CheckLayout(const Batch& batch) const {
  const auto& cs = batch.columns();
  bool ok = cs.size() == cols_.size();
  for (size_t i = 0; ok && i < cs.size(); ++i) {
    ok = cs[i].first == cols_[i].name && cs[i].second.dtype() == cols_[i].dtype &&
         RowShape(cs[i].second) == cols_[i].row_shape;
    if (!ok) {
      return absl::InvalidArgumentError(fmt::format(
          "dataset: column {} of a batch is \"{}\" {} {} but earlier batches had \"{}\" {} {}; "
          "every batch of a stream needs the same columns (check the Map function)",
          i, cs[i].first, DTypeName(cs[i].second.dtype()), RowShape(cs[i].second).ToString(),
          cols_[i].name, DTypeName(cols_[i].dtype), cols_[i].row_shape.ToString()));
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(fmt::format(
        "dataset: a batch has {} columns but earlier batches had {}; every batch of a stream "
        "needs the same columns (check the Map function)",
        cs.size(), cols_.size()));
  }
  return absl::OkStatus();
}

void BatchRowStore::Grow(int64_t rows) {
  if (rows <= capacity_) return;
  capacity_ = std::max<int64_t>(rows, capacity_ * 2);
  for (Col& c : cols_) c.data.resize(static_cast<size_t>(capacity_) * c.row_bytes);
}

void BatchRowStore::Reserve(int64_t rows) { Grow(rows); }

void BatchRowStore::AppendRows(const Batch& batch, int64_t begin, int64_t end) {
  if (end <= begin) return;
  Grow(size_ + (end - begin));
  const auto& cs = batch.columns();
  for (size_t i = 0; i < cols_.size(); ++i) {
    Col& c = cols_[i];
    if (c.row_bytes == 0) continue;
    const char* src = static_cast<const char*>(cs[i].second.raw_data()) + begin * c.row_bytes;
    std::memcpy(c.data.data() + size_ * c.row_bytes, src, (end - begin) * c.row_bytes);
  }
  size_ += end - begin;
}

void BatchRowStore::SetRow(int64_t i, const Batch& batch, int64_t r) {
  const auto& cs = batch.columns();
  for (size_t k = 0; k < cols_.size(); ++k) {
    Col& c = cols_[k];
    if (c.row_bytes == 0) continue;
    std::memcpy(c.data.data() + i * c.row_bytes,
                static_cast<const char*>(cs[k].second.raw_data()) + r * c.row_bytes, c.row_bytes);
  }
}

void BatchRowStore::AppendFrom(const BatchRowStore& other, int64_t i) {
  Grow(size_ + 1);
  for (size_t k = 0; k < cols_.size(); ++k) {
    Col& c = cols_[k];
    if (c.row_bytes == 0) continue;
    std::memcpy(c.data.data() + size_ * c.row_bytes, other.cols_[k].data.data() + i * c.row_bytes,
                c.row_bytes);
  }
  ++size_;
}

void BatchRowStore::SwapRows(int64_t i, int64_t j) {
  if (i == j) return;
  for (Col& c : cols_) {
    char* a = c.data.data() + i * c.row_bytes;
    char* b = c.data.data() + j * c.row_bytes;
    std::swap_ranges(a, a + c.row_bytes, b);
  }
}

Batch BatchRowStore::TakeBatch(int64_t padded_rows) {
  const int64_t rows = std::max(size_, padded_rows);
  Batch out;
  for (const Col& c : cols_) {
    Shape s = c.row_shape;
    s.InsertDim(0, rows);
    Tensor t(c.dtype, s);  // zero-filled, so padding rows are zeros
    if (size_ > 0 && c.row_bytes > 0) std::memcpy(t.raw_data(), c.data.data(), size_ * c.row_bytes);
    Status st = out.AddColumn(c.name, std::move(t));
    (void)st;  // the layout came from a valid batch
  }
  out.set_num_valid(size_);
  size_ = 0;
  return out;
}

}  // namespace recsdk::internal
