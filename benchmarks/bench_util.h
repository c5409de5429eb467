// bench_util.h: helpers shared by the benchmark programs. Header-only.
#ifndef RECSDK_BENCHMARKS_BENCH_UTIL_H_
#define RECSDK_BENCHMARKS_BENCH_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "recsdk/status.h"

namespace recsdk::bench {

// Check: the value of v, or the status on stderr and abort (a benchmark's setup cannot go on).
template <typename T>
T Check(StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    std::abort();
  }
  return *std::move(v);
}

}  // namespace recsdk::bench

#endif  // RECSDK_BENCHMARKS_BENCH_UTIL_H_
