// parallel_for.h: the one parallel loop of the library (oneTBB underneath), its grains, and the
// rule that keeps results bitwise the same at any thread count. Internal.
//
// Every loop that splits work over threads goes through ParallelFor: the CPU kernels, the table's
// batch methods, AggregateGradients, the pooled gathers, the gemm's row blocks. Before,
// there were three helpers (kernel_util.h's ParallelFor, table_impl.h's ParallelChunks and
// BigChunks, pooled_gather.h's own lambda) plus raw tbb::parallel_for calls, each with its own
// grain and its own idea of where a chunk ends.
//
// The determinism rule (SessionConfig::deterministic promises bitwise-identical losses and
// checkpoints whatever the thread count):
//   1. ParallelFor's chunks are a function of (n, grain) alone: never of the thread count, of
//      which thread steals what, or of timing. A body may therefore reduce within its chunk.
//   2. Results that combine chunks (partial sums) are combined after the loop, in chunk order, on
//      one thread (BiasAddGrad's partial rows, AggregateGradients' ranges).
//   3. A grain computed from the thread count (LongChunkGrain) is only for bodies whose every
//      element is computed on its own (a row update, a copy): it moves the split, which rule 1
//      would otherwise forbid.
//
// Threading: ParallelFor runs in the calling thread's task arena (the Session's intra-op arena
// for kernels) and returns when every chunk is done. fn runs concurrently on disjoint ranges; it
// must not throw (oneTBB would rethrow it on the caller, past the Status boundary).
#ifndef RECSDK_COMMON_PARALLEL_FOR_H_
#define RECSDK_COMMON_PARALLEL_FOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/parallel_for.h"

namespace recsdk::internal {

// kElementwiseGrain: elements per chunk of an elementwise kernel (a few microseconds of work
// each, so scheduling costs stay below 1%, and a 1M-element tensor still spreads over 30 chunks).
inline constexpr int64_t kElementwiseGrain = 32768;

// kParallelGrain: items per chunk of a table batch method (Resolve, gathers, updates); below it a
// batch runs on the calling thread. An item is a key or a row: tens of nanoseconds to a few
// hundred, so a chunk is again microseconds of work.
inline constexpr size_t kParallelGrain = 2048;

// GrainPerItem: the grain, in items of `item_elements` elements each (rows of a matrix, samples
// of a batch), that gives chunks of about `elements` elements (kElementwiseGrain by default);
// at least 1.
inline constexpr int64_t GrainPerItem(int64_t item_elements, int64_t elements = kElementwiseGrain) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(item_elements, 1));
}

// MaxParallelism: how many threads oneTBB may use in this process (tbb::global_control's
// max_allowed_parallelism, which tests lower to run at a given thread count).
inline size_t MaxParallelism() {
  return std::max<size_t>(
      1, tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

// LongChunkGrain: a grain for loops that restart a prefetch pipeline at every chunk, so chunks
// stay long: about 4 chunks per allowed thread, each at least `min_grain` items. Depends on the
// thread count: rule 3 above.
inline size_t LongChunkGrain(size_t n, size_t min_grain = kParallelGrain) {
  const size_t parts = MaxParallelism() * 4;
  return std::max(min_grain, (n + parts - 1) / parts);
}

// ParallelFor: fn(begin, end) over ceil(n / grain) chunks that cover [0, n) exactly once, each of
// the same length give or take one (so no longer than `grain`, and longer than grain / 2 when
// there are several). n <= grain runs fn(0, n) on the calling thread; n <= 0 calls nothing.
// Index is the type of n (int64_t, size_t, uint32_t); grain <= 0 counts as 1.
template <typename Index, typename Fn>
void ParallelFor(Index n, std::type_identity_t<Index> grain, Fn&& fn) {
  static_assert(std::is_integral_v<Index>, "ParallelFor counts with an integer type");
  if (n <= Index{0}) return;
  if (grain <= Index{0}) grain = 1;
  if (n <= grain) {
    fn(Index{0}, n);
    return;
  }
  const Index chunks = n / grain + (n % grain != 0 ? 1 : 0);
  // Chunk c starts at c * q + min(c, r): the first r chunks hold one item more. No product of
  // n with anything, so no overflow for any n.
  const Index q = n / chunks, r = n % chunks;
  auto begin = [q, r](Index c) { return c * q + std::min(c, r); };
  tbb::parallel_for(Index{0}, chunks, [&](Index c) { fn(begin(c), begin(c + 1)); });
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_PARALLEL_FOR_H_
