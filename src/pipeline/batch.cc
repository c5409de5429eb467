// batch.cc: Batch and MalformedCounts. Thread-compatible value types.
#include <algorithm>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/status_macros.h"

namespace recsdk {

Status Batch::AddColumn(std::string name, Tensor tensor) {
  if (column(name) != nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("Batch::AddColumn: column \"{}\" exists; use SetColumn to replace it", name));
  }
  return SetColumn(name, std::move(tensor));
}

Status Batch::SetColumn(std::string_view name, Tensor tensor) {
  if (!tensor.IsInitialized() || tensor.rank() == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "Batch: column \"{}\" must be a tensor of rank >= 1 (dimension 0 is the row)", name));
  }
  const bool replacing_only = columns_.size() == 1 && columns_[0].first == name;
  if (!columns_.empty() && !replacing_only && tensor.dim(0) != num_rows_) {
    return absl::InvalidArgumentError(fmt::format(
        "Batch: column \"{}\" has {} rows but the batch has {}; every column needs one row per "
        "sample",
        name, tensor.dim(0), num_rows_));
  }
  if (columns_.empty() || replacing_only) {
    num_rows_ = tensor.dim(0);
    num_valid_ = num_rows_;
  }
  for (auto& [n, t] : columns_) {
    if (n == name) {
      t = std::move(tensor);
      return absl::OkStatus();
    }
  }
  columns_.emplace_back(std::string(name), std::move(tensor));
  return absl::OkStatus();
}

const Tensor* Batch::column(std::string_view name) const {
  for (const auto& [n, t] : columns_) {
    if (n == name) return &t;
  }
  return nullptr;
}

StatusOr<Tensor> Batch::Column(std::string_view name) const {
  if (const Tensor* t = column(name)) return *t;
  std::string names;
  for (const auto& [n, t] : columns_) names += (names.empty() ? "" : ", ") + n;
  return absl::NotFoundError(fmt::format(
      "Batch: no column \"{}\"; the batch has [{}]; check the FeatureSpec index_key or the "
      "dataset schema (a merged feature's column, FeatureSpec fields, is added by "
      "MergeFeatureFields)",
      name, names));
}

StatusOr<Batch> Batch::Slice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > num_rows_) {
    return absl::InvalidArgumentError(
        fmt::format("Batch::Slice: rows [{}, {}) are not inside the batch's {} rows; pass 0 <= "
                    "begin <= end <= num_rows()",
                    begin, end, num_rows_));
  }
  Batch out;
  for (const auto& [n, t] : columns_) {
    RECSDK_ASSIGN_OR_RETURN(Tensor rows, t.SliceRows(begin, end));
    out.columns_.emplace_back(n, std::move(rows));
  }
  out.num_rows_ = end - begin;
  out.num_valid_ = std::clamp<int64_t>(num_valid_ - begin, 0, end - begin);
  return out;
}

std::string Batch::DebugString() const {
  std::string s = fmt::format("Batch(rows={}, valid={}", num_rows_, num_valid_);
  for (const auto& [n, t] : columns_) s += fmt::format(", {}={}", n, t.DebugString(4));
  return s + ")";
}

std::string_view MalformedReasonName(MalformedReason reason) {
  switch (reason) {
    case MalformedReason::kWrongColumnCount:
      return "wrong column count";
    case MalformedReason::kBadNumber:
      return "bad number";
    case MalformedReason::kBadHex:
      return "bad hex";
    case MalformedReason::kTruncated:
      return "truncated";
    case MalformedReason::kInvalidUtf8:
      return "invalid UTF-8";
    case MalformedReason::kCrcMismatch:
      return "CRC mismatch";
    case MalformedReason::kBadProtobuf:
      return "bad protobuf";
    case MalformedReason::kMissingFeature:
      return "missing feature";
    case MalformedReason::kWrongValueCount:
      return "wrong value count";
    case MalformedReason::kBadHeader:
      return "bad header";
  }
  return "unknown";
}

StatusOr<int64_t> Dataset::SkipBatches(int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        fmt::format("Dataset::SkipBatches: n is {}; it must be >= 0", n));
  }
  Batch discarded;
  for (int64_t i = 0; i < n; ++i) {
    RECSDK_ASSIGN_OR_RETURN(const bool more, GetNext(&discarded));
    if (!more) return i;
  }
  return n;
}

int64_t MalformedCounts::total() const {
  int64_t t = 0;
  for (int64_t c : by_reason) t += c;
  return t;
}

std::string MalformedCounts::DebugString() const {
  std::string s;
  for (int i = 0; i < kNumMalformedReasons; ++i) {
    if (by_reason[i] == 0) continue;
    s += fmt::format("{}{}: {}", s.empty() ? "" : ", ",
                     MalformedReasonName(static_cast<MalformedReason>(i)), by_reason[i]);
  }
  return s.empty() ? "none" : s;
}

}  // namespace recsdk
