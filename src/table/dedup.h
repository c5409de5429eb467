// dedup.h: the per-batch key work in front of a table: DedupKeys (the unique keys of a batch and
// where each position's key went) and AggregateGradients (one summed gradient per unique key).
// Internal: the lookup kernels (table_key_work.h), the key stage, the sparse apply kernels and
// the sharded table call them; users reach tables through sparse_lookup and the optimizers, and
// EmbeddingTable's Resolve takes keys that are already unique.
//
// Threading: both are thread-safe: DedupKeys keeps its hash scratch per thread, and
// AggregateGradients writes only `out` (it splits large batches with ParallelFor, bitwise the same
// at any thread count).
#ifndef RECSDK_TABLE_DEDUP_H_
#define RECSDK_TABLE_DEDUP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "recsdk/status.h"
#include "recsdk/table.h"

namespace recsdk::internal {

// DedupResult: unique keys in order of first occurrence and, for each input position, the index
// of its key in unique_keys. counts[u] is how often unique_keys[u] occurred.
struct DedupResult {
  std::vector<int64_t> unique_keys;
  std::vector<uint32_t> restore_index;
  std::vector<uint32_t> counts;
};

// DedupKeys: one pass over all the keys of a table in a batch (every feature and lookup of it,
// concatenated). O(keys); reuses `out`'s buffers. Thread-safe (scratch is per thread).
void DedupKeys(absl::Span<const int64_t> keys, DedupResult* out);
void DedupKeys(absl::Span<const int32_t> keys, DedupResult* out);

// AggregateStrategy: how AggregateGradients splits a batch over threads. Every strategy gives
// the same bits (each id's sum is 0 + its gradients in position order); they differ in speed.
//   kScan: each task owns a range of ids and walks the whole restore index, adding the positions
//          that fall in its range (one streaming pass over the gradients a task; with several
//          tasks each one's stream of gradient lines is mostly lines it skips).
//   kSort: a stable counting sort of the positions by id first; each task then reads only its own
//          ids' gradients (prefetched). Pays an extra pass over the index and random reads.
//   kAuto: kSort when several threads may run, the batch is skewed (on average 2 or more
//          positions per id, as with Zipf ids) and rows are wide (dim >= 128), kScan
//          otherwise: the faster of the two in
//          `BM_AggregateStrategy` (benchmarks/embedding_roofline_bench.cc, docs/tiers.md).
enum class AggregateStrategy { kAuto, kScan, kSort };

// AggregateGradients: out[u] = sum of grads[i] over the positions i with restore_index[i] == u,
// for u < num_unique; grads is [restore_index.size(), dim], out is [num_unique, dim] (overwritten).
// Repeated keys in a batch therefore update their row once with the summed gradient. Each sum is
// 0 + grads[i0] + grads[i1] + ... in position order, whatever the thread count or strategy.
// InvalidArgument (out untouched) when dim < 1, num_unique < 0, a span's size does not match, or
// a restore index is num_unique or more.
[[nodiscard]] Status AggregateGradients(absl::Span<const uint32_t> restore_index,
                                        absl::Span<const float> grads, int dim, int64_t num_unique,
                                        absl::Span<float> out,
                                        AggregateStrategy strategy = AggregateStrategy::kAuto);

// LookupGradient: one feature of a lookup for AggregateLookupGradients: its restore index
// [batch, per] into the lookup's unique rows and the gradient of its embedding: [batch, dim]
// when pooled, [batch * per, dim] when not.
struct LookupGradient {
  absl::Span<const int32_t> restore;
  int64_t batch = 0;
  int64_t per = 0;
  absl::Span<const float> grad;
};
// AggregateLookupGradients: TableGradAggregate's sums (the CPU kernel, and the reference its CUDA
// twin is tested against): out[u] = 0 + each contribution to unique row u in (feature, sample,
// position) order. Unpooled: grad[b * per + j] to restore[b, j]. Pooled: grad[b] (times 1 /
// valid for kMean, 1 / sqrt(valid) for kSqrtn, valid = the sample's positions whose row is not
// EmbeddingTable::kPaddingRow) to each non-padding restore[b, j]. out is [unique_rows.size(),
// dim] and overwritten. InvalidArgument (naming the feature) for a restore index outside the
// unique rows or a gradient whose size does not match.
Status AggregateLookupGradients(absl::Span<const uint32_t> unique_rows,
                                absl::Span<const LookupGradient> features,
                                std::optional<Combiner> combiner, int64_t dim,
                                absl::Span<float> out);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_DEDUP_H_
