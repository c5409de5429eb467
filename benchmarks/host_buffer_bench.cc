// host_buffer_bench.cc: the host buffer pool behind AllocateHostBuffer against plain
// aligned_alloc / free, timed back to back in one run on the same sequence of sizes.
//
//   BM_BatchBuffers/<zero>: the buffers of a training input batch as the scale sample's key stage
//       makes them (batch 4096: labels 16 KiB, 13 dense features 208 KiB, two id columns of
//       32 KiB, and four buffers of a varying size, 8-64 KiB, like unique-key lists), three
//       batches in flight (the oldest released when a new one is made). zero=1 also zero-fills
//       each buffer, as AllocateHostBuffer does, so the first touch of fresh pages counts.
//       Counters: pooled_ns and aligned_alloc_ns per buffer, pooled_vs_aligned_alloc =
//       aligned_alloc time / pooled time (above 1: the pool is faster). With 2 threads each runs
//       its own batches against the one pool (the per-class locks contended).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "benchmark/benchmark.h"
#include "src/common/host_buffer_pool.h"

namespace recsdk {
namespace {

using Clock = std::chrono::steady_clock;
using internal::HostBufferPool;

struct Block {
  void* p;
  size_t capacity;
};

// BatchSizes: the byte sizes of batch `b`'s buffers (the varying ones from a cheap hash of b).
std::vector<size_t> BatchSizes(uint64_t b) {
  std::vector<size_t> sizes = {4096 * 4, 4096 * 13 * 4, 4096 * 8, 4096 * 8};
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t h = (b * 4 + i + 1) * 0x9E3779B97F4A7C15ull;
    sizes.push_back((8 << 10) + static_cast<size_t>(h >> 40) % (56 << 10));
  }
  return sizes;
}

HostBufferPool& BenchPool() {
  static HostBufferPool* const pool = new HostBufferPool();
  return *pool;
}

template <typename Alloc, typename Free>
double RunBatches(int batches, bool zero, uint64_t seed, Alloc alloc, Free release) {
  std::deque<std::vector<Block>> in_flight;
  const auto t0 = Clock::now();
  for (int b = 0; b < batches; ++b) {
    std::vector<Block> batch;
    for (size_t bytes : BatchSizes(seed + static_cast<uint64_t>(b))) {
      Block blk = alloc(bytes);
      if (zero) std::memset(blk.p, 0, bytes);
      benchmark::DoNotOptimize(blk.p);
      batch.push_back(blk);
    }
    in_flight.push_back(std::move(batch));
    if (in_flight.size() > 3) {
      for (Block blk : in_flight.front()) release(blk);
      in_flight.pop_front();
    }
  }
  for (const auto& batch : in_flight) {
    for (Block blk : batch) release(blk);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void BM_BatchBuffers(benchmark::State& state) {
  const bool zero = state.range(0) != 0;
  constexpr int kBatches = 64;
  HostBufferPool& pool = BenchPool();
  double pooled = 0, plain = 0;
  uint64_t seed = static_cast<uint64_t>(state.thread_index()) << 32;
  for (auto _ : state) {
    pooled += RunBatches(
        kBatches, zero, seed,
        [&pool](size_t bytes) {
          Block blk{};
          blk.p = pool.Acquire(bytes, &blk.capacity);
          return blk;
        },
        [&pool](Block blk) { pool.Release(blk.p, blk.capacity); });
    plain += RunBatches(
        kBatches, zero, seed,
        [](size_t bytes) {
          const size_t rounded = (bytes + 63) / 64 * 64;
          Block blk{std::aligned_alloc(64, rounded), rounded};
          if (blk.p == nullptr) std::abort();
          return blk;
        },
        [](Block blk) { std::free(blk.p); });
    seed += kBatches;
  }
  const double buffers = static_cast<double>(state.iterations()) * kBatches * 8;
  using benchmark::Counter;
  state.counters["pooled_ns"] = Counter(pooled * 1e9 / buffers, Counter::kAvgThreads);
  state.counters["aligned_alloc_ns"] = Counter(plain * 1e9 / buffers, Counter::kAvgThreads);
  state.counters["pooled_vs_aligned_alloc"] = Counter(plain / pooled, Counter::kAvgThreads);
}
BENCHMARK(BM_BatchBuffers)->ArgName("zero")->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
