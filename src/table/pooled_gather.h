// pooled_gather.h: the loop of a pooled lookup (EmbeddingTable::GatherPooledStrided) over any
// storage of rows: a table's slab (TableImpl), or the rows a sharded table received from their
// owners for one batch (src/dist/sharded_table.h). One loop, so both pool exactly alike: padding
// rows count for nothing, default rows as `default_value` in every column, mean and sqrtn divide
// by the valid rows of the sample. Internal.
//
// Threading: reads the rows, writes `out` only; splits the batch with ParallelFor.
#ifndef RECSDK_TABLE_POOLED_GATHER_H_
#define RECSDK_TABLE_POOLED_GATHER_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "recsdk/table.h"
#include "src/common/parallel_for.h"

namespace recsdk::internal {

// PooledGatherRows: for b < batch, out[b * stride + d] (d < dim) = the combiner over j < per of
// the embedding of unique_rows[restore[b * per + j]]. row_of(row) gives the embedding of a row
// below kDefaultRow; prefetch(row) may start loading it (sentinels included: it must skip them).
// The caller has checked the restore indices and the rows.
template <typename RowFn, typename PrefetchFn>
void PooledGatherRows(const RowFn& row_of, const PrefetchFn& prefetch, const uint32_t* unique_rows,
                      const uint32_t* restore, size_t batch, size_t per, Combiner combiner,
                      size_t stride, int dim, float default_value, float* out) {
  constexpr uint32_t kDefaultRow = EmbeddingTable::kDefaultRow;
  constexpr uint32_t kPaddingRow = EmbeddingTable::kPaddingRow;
  // Rows are prefetched kAhead positions ahead across samples, not only within one: with one id
  // per sample (Criteo's features) a per-sample look-ahead never prefetched at all.
  constexpr size_t kAhead = 16;
  // Samples per chunk: a sample is `per` rows of `dim` floats, so 64 of them are microseconds.
  constexpr size_t kGrain = 64;
  auto chunks = [&](auto&& f) { ParallelFor(batch, kGrain, f); };
  if (per == 1) {
    // One id per sample: every combiner gives 0 + the row (a mean or sqrtn of one valid row
    // scales by 1), so a sample is one pass over its row, with the row's width a constant for
    // the common dim 16.
    auto one = [&](auto dim_c, size_t b0, size_t b1) {
      const int d_end = dim_c;
      for (size_t b = b0; b < std::min(b1, b0 + kAhead); ++b) prefetch(unique_rows[restore[b]]);
      for (size_t b = b0; b < b1; ++b) {
        if (b + kAhead < b1) prefetch(unique_rows[restore[b + kAhead]]);
        float* __restrict o = out + b * stride;
        const uint32_t row = unique_rows[restore[b]];
        if (row < kDefaultRow) {
          const float* __restrict w = row_of(row);
          for (int d = 0; d < d_end; ++d) o[d] = 0.0f + w[d];
        } else {
          const float v = row == kDefaultRow ? 0.0f + default_value : 0.0f;
          for (int d = 0; d < d_end; ++d) o[d] = v;
        }
      }
    };
    chunks([&](size_t b0, size_t b1) {
      if (dim == 16) {
        one(std::integral_constant<int, 16>{}, b0, b1);
      } else {
        one(dim, b0, b1);
      }
    });
    return;
  }
  chunks([&](size_t b0, size_t b1) {
    const size_t p_end = b1 * per;
    for (size_t p = b0 * per; p < std::min(p_end, b0 * per + kAhead); ++p) {
      prefetch(unique_rows[restore[p]]);
    }
    for (size_t b = b0; b < b1; ++b) {
      float* o = out + b * stride;
      std::fill(o, o + dim, 0.0f);
      int64_t valid = 0;
      const uint32_t* idx = restore + b * per;
      for (size_t j = 0; j < per; ++j) {
        const size_t ahead = b * per + j + kAhead;
        if (ahead < p_end) prefetch(unique_rows[restore[ahead]]);
        const uint32_t row = unique_rows[idx[j]];
        if (row == kPaddingRow) continue;
        ++valid;
        if (row == kDefaultRow) {
          for (int d = 0; d < dim; ++d) o[d] += default_value;
          continue;
        }
        const float* w = row_of(row);
        for (int d = 0; d < dim; ++d) o[d] += w[d];
      }
      if (valid == 0 || combiner == Combiner::kSum) continue;
      const float scale = combiner == Combiner::kMean ? 1.0f / static_cast<float>(valid)
                                                      : 1.0f / std::sqrt(static_cast<float>(valid));
      for (int d = 0; d < dim; ++d) o[d] *= scale;
    }
  });
}

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_POOLED_GATHER_H_
