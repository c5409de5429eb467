// table_update.cc: TableImpl's sparse optimizer updates, by row id and by address (the per-ISA
// kernels of table_kernels.h, RowUpdater for FTRL). Threading: each row of a batch is updated by
// one task; concurrent calls must touch disjoint rows (recsdk/table.h).
#include <cstdint>

#include "fmt/format.h"
#include "src/common/prefetch.h"
#include "src/common/status_macros.h"
#include "src/table/table_impl.h"
#include "src/table/table_kernels.h"

namespace recsdk::internal {

// UpdateBatch: one optimizer step on rows [b, e) of a batch, given by id (ids) or by address
// (addrs). SGD, Adagrad and LazyAdam run the per-ISA kernels (bitwise equal to RowUpdater, their
// reference twin); FTRL runs RowUpdater.
void TableImpl::UpdateBatch(const RowUpdater& updater, const uint32_t* ids, float* const* addrs,
                            size_t b, size_t e, const float* grads) const {
  const TableKernels& k = TableFast();
  const int64_t dim = config_.dim, rb = static_cast<int64_t>(row_bytes_);
  const int64_t n = static_cast<int64_t>(e - b);
  const float* g = grads + b * static_cast<size_t>(dim);
  const SparseOptimizerConfig& o = optimizer_;
  // The change-tracking bytes are one per row, as scattered as the rows: each is a cache miss
  // of its own (dim 16, uniform ids: this loop took 0.6x the Adagrad kernel's time, perf), so
  // they are prefetched as far ahead as the kernel prefetches its rows.
  constexpr size_t kDirtyAhead = 16;
  uint8_t* const dirty = Dirty();
  for (size_t i = b; i < e; ++i) {
    if (ids != nullptr) {
      if (i + kDirtyAhead < e && ids[i + kDirtyAhead] < kDefaultRow) {
        PrefetchWrite(dirty + ids[i + kDirtyAhead]);
      }
      if (ids[i] < kDefaultRow) MarkDirty(ids[i]);
    } else if (addrs[i] != nullptr) {
      MarkDirty(static_cast<uint32_t>(
          static_cast<uint64_t>(reinterpret_cast<const char*>(addrs[i]) - rows_base_) /
          row_bytes_));
    }
  }
  switch (o.kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      ids ? k.sgd_rows(rows_base_, rb, ids + b, n, g, dim, o.learning_rate, o.weight_decay)
          : k.sgd_addrs(addrs + b, rb, n, g, dim, o.learning_rate, o.weight_decay);
      return;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      ids ? k.adagrad_rows(rows_base_, rb, ids + b, n, g, dim, o.learning_rate, o.adagrad_epsilon,
                           o.weight_decay)
          : k.adagrad_addrs(addrs + b, rb, n, g, dim, o.learning_rate, o.adagrad_epsilon,
                            o.weight_decay);
      return;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      ids ? k.lazy_adam_rows(rows_base_, rb, ids + b, n, g, dim, o.beta1, o.beta2, o.epsilon,
                             updater.adam_lr_t(), o.weight_decay)
          : k.lazy_adam_addrs(addrs + b, rb, n, g, dim, o.beta1, o.beta2, o.epsilon,
                              updater.adam_lr_t(), o.weight_decay);
      return;
    case SparseOptimizerKind::kFTRL:
      for (size_t i = b; i < e; ++i) {
        float* row = ids ? (ids[i] < kDefaultRow ? Row(ids[i]) : nullptr) : addrs[i];
        if (row != nullptr) updater.Apply(row, grads + i * static_cast<size_t>(dim));
      }
      return;
  }
}

Status TableImpl::ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> grads,
                                 int64_t step) {
  RECSDK_RETURN_IF_ERROR(
      CheckSpan("ApplyGradients' summed gradients", grads.size(), rows.size(), config_.dim));
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(rows, {}));
  const RowUpdater updater(optimizer_, config_.dim, step);
  ParallelFor(rows.size(), LongChunkGrain(rows.size()), [&](size_t b, size_t e) {
    UpdateBatch(updater, rows.data(), nullptr, b, e, grads.data());
  });
  return absl::OkStatus();
}

Status TableImpl::RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) {
  if (addresses.size() != rows.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": RowAddresses of {} rows got room for {} addresses; pass one slot per row",
        name(), rows.size(), addresses.size()));
  }
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(rows, {}));
  for (size_t i = 0; i < rows.size(); ++i) {
    addresses[i] = rows[i] < kDefaultRow ? Row(rows[i]) : nullptr;
  }
  return absl::OkStatus();
}

Status TableImpl::ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                          absl::Span<const float> grads, int64_t step) {
  RECSDK_RETURN_IF_ERROR(CheckSpan("ApplyGradientsByAddress' summed gradients", grads.size(),
                                   addresses.size(), config_.dim));
  // Every address must be the first float of a device row: [base, base + device rows), on a
  // row boundary. Anything else would be written through as if it were a row.
  const auto base = reinterpret_cast<uintptr_t>(rows_base_);
  const uint64_t end = static_cast<uint64_t>(device_rows_) * row_bytes_;
  for (float* a : addresses) {
    if (a == nullptr) continue;
    const auto p = reinterpret_cast<uintptr_t>(a);
    const uint64_t off = static_cast<uint64_t>(p - base);  // wraps past `end` when p < base
    if (p < base || off >= end || off % row_bytes_ != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": address {} is not the start of one of this table's rows; pass addresses "
          "that RowAddresses returned for this table",
          name(), static_cast<const void*>(a)));
    }
  }
  const RowUpdater updater(optimizer_, config_.dim, step);
  ParallelFor(addresses.size(), LongChunkGrain(addresses.size()), [&](size_t b, size_t e) {
    UpdateBatch(updater, nullptr, addresses.data(), b, e, grads.data());
  });
  return absl::OkStatus();
}

}  // namespace recsdk::internal
