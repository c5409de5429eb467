// embedding_bench_util.h: the id streams and the dense roofline array shared by the embedding
// benchmarks (table_bench.cc, embedding_roofline_bench.cc). Header-only.
#ifndef RECSDK_BENCHMARKS_EMBEDDING_BENCH_UTIL_H_
#define RECSDK_BENCHMARKS_EMBEDDING_BENCH_UTIL_H_

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "oneapi/tbb/parallel_for.h"

namespace recsdk::bench {

// MakeRanks: `count` row ranks in [0, rows), uniform or Zipf with exponent `zipf_s` (rank 0 the
// most frequent), from `seed`.
inline std::vector<int64_t> MakeRanks(int64_t rows, size_t count, bool zipf, double zipf_s,
                                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ranks(count);
  if (!zipf) {
    std::uniform_int_distribution<int64_t> d(0, rows - 1);
    for (auto& r : ranks) r = d(rng);
    return ranks;
  }
  std::vector<double> cdf(static_cast<size_t>(rows));
  double sum = 0;
  for (int64_t i = 0; i < rows; ++i) {
    sum += std::pow(static_cast<double>(i + 1), -zipf_s);
    cdf[static_cast<size_t>(i)] = sum;
  }
  std::uniform_real_distribution<double> u(0, sum);
  for (auto& r : ranks) {
    r = std::min<int64_t>(rows - 1, std::upper_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
  }
  return ranks;
}

// DenseArray: [rows, width] floats with the table slab's huge-page advice (so a roofline read of
// it is fair), element (r, d) = (r + d) * scale.
struct DenseArray {
  float* data = nullptr;
  size_t bytes = 0;
  DenseArray(int64_t rows, int width, float scale = 1.0f) {
    bytes = static_cast<size_t>(rows) * static_cast<size_t>(width) * sizeof(float);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    madvise(p, bytes, MADV_HUGEPAGE);
    data = static_cast<float*>(p);
    tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
      for (int d = 0; d < width; ++d) data[r * width + d] = static_cast<float>(r + d) * scale;
    });
  }
  ~DenseArray() { munmap(data, bytes); }
  DenseArray(const DenseArray&) = delete;
  DenseArray& operator=(const DenseArray&) = delete;
};

}  // namespace recsdk::bench

#endif  // RECSDK_BENCHMARKS_EMBEDDING_BENCH_UTIL_H_
