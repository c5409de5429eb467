// gemm_test_util.h: operands for the GEMM tests (gemm_test.cc, gemm_tuner_test.cc). Header-only.
#ifndef RECSDK_TESTS_DEVICE_CPU_GEMM_TEST_UTIL_H_
#define RECSDK_TESTS_DEVICE_CPU_GEMM_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

namespace recsdk::internal::gemm_test {

// RandomVector: n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace recsdk::internal::gemm_test

#endif  // RECSDK_TESTS_DEVICE_CPU_GEMM_TEST_UTIL_H_
