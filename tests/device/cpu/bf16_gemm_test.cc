// bf16_gemm_test.cc: the bfloat16 GEMM (src/device/cpu/bf16_gemm.cc). The AVX-512 BF16 path
// equals its reference twin bit for bit over shapes that exercise every edge (odd k, column and
// row tails, k blocks, both transposes, strided operands, the threaded split), the twin is within
// float32 rounding of a float64 product of the same bfloat16 values, and the conversion matches
// bfloat16::FromFloat on every class of input.
#include "src/device/cpu/bf16_gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "recsdk/dtype.h"

namespace recsdk::internal {
namespace {

std::vector<uint16_t> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = bfloat16::FromFloat(dist(rng)).bits;
  return out;
}

float ToF(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

struct Shape3 {
  int64_t m, n, k;
};

class Bf16GemmTest : public ::testing::TestWithParam<std::tuple<Shape3, bool, bool>> {};

TEST_P(Bf16GemmTest, FastPathEqualsReferenceBitForBit) {
  const auto [shape, ta, tb] = GetParam();
  const auto [m, n, k] = shape;
  // Strided operands: two spare columns per stored row.
  const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 2, ldc = n + 3;
  const auto a = RandomBf16((ta ? k : m) * lda, 1);
  const auto b = RandomBf16((tb ? n : k) * ldb, 2);
  std::vector<float> fast(m * ldc, -7.0f), single(m * ldc, -7.0f), ref(m * ldc, -7.0f);
  Bf16Gemm(m, n, k, a.data(), lda, ta, b.data(), ldb, tb, fast.data(), ldc);
  Bf16GemmSingleThread(m, n, k, a.data(), lda, ta, b.data(), ldb, tb, single.data(), ldc);
  Bf16GemmReference(m, n, k, a.data(), lda, ta, b.data(), ldb, tb, ref.data(), ldc);
  double max_rel = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      if (j >= n) {  // the gap between rows of C is never written
        ASSERT_EQ(fast[at], -7.0f);
        ASSERT_EQ(ref[at], -7.0f);
        continue;
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(fast[at]), std::bit_cast<uint32_t>(ref[at]))
          << "m=" << m << " n=" << n << " k=" << k << " at (" << i << "," << j
          << "): fast=" << fast[at] << " ref=" << ref[at]
          << (HasBf16DotProducts() ? "" : " (no AVX-512 BF16: both are the reference)");
      ASSERT_EQ(std::bit_cast<uint32_t>(single[at]), std::bit_cast<uint32_t>(ref[at]));
      // The twin against a float64 product of the same bfloat16 values: float32 accumulation
      // of k terms of magnitude ~1 stays within k * 2^-24 relative to the sum of |terms|.
      double exact = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ToF(ta ? a[p * lda + i] : a[i * lda + p]);
        const double y = ToF(tb ? b[j * ldb + p] : b[p * ldb + j]);
        exact += x * y;
        magnitude += std::fabs(x * y);
      }
      const double err = std::fabs(ref[at] - exact) / std::max(magnitude, 1e-30);
      max_rel = std::max(max_rel, err);
      ASSERT_LE(err, static_cast<double>(k + 1) * std::ldexp(1.0, -24));
    }
  }
  // Long sums round somewhere: the comparison with float64 is not vacuous there.
  if (k >= 64) {
    EXPECT_GT(max_rel, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16GemmTest,
    ::testing::Combine(::testing::Values(Shape3{1, 1, 1}, Shape3{3, 17, 5}, Shape3{4, 64, 64},
                                         Shape3{7, 70, 33}, Shape3{65, 300, 9},
                                         Shape3{130, 257, 600}, Shape3{5, 2, 1025}),
                       ::testing::Bool(), ::testing::Bool()));

TEST(Bf16Gemm, EmptyDimensionsAndZeroK) {
  std::vector<float> c(6, 5.0f);
  const std::vector<uint16_t> a(6, 0x3f80), b(6, 0x3f80);
  Bf16Gemm(2, 3, 0, a.data(), 1, false, b.data(), 3, false, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 0.0f);
  c.assign(6, 5.0f);
  Bf16Gemm(0, 3, 2, a.data(), 2, false, b.data(), 3, false, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 5.0f);
}

TEST(Bf16Gemm, InfAndNanPropagate) {
  // 1x2 . 2x2: an Inf meets a zero (NaN) in column 0 and a finite value in column 1.
  const std::vector<uint16_t> a = {bfloat16::FromFloat(std::numeric_limits<float>::infinity()).bits,
                                   bfloat16::FromFloat(1.0f).bits};
  const std::vector<uint16_t> b = {bfloat16::FromFloat(0.0f).bits, bfloat16::FromFloat(2.0f).bits,
                                   bfloat16::FromFloat(1.0f).bits, bfloat16::FromFloat(1.0f).bits};
  std::vector<float> c(2), ref(2);
  Bf16Gemm(1, 2, 2, a.data(), 2, false, b.data(), 2, false, c.data(), 2);
  Bf16GemmReference(1, 2, 2, a.data(), 2, false, b.data(), 2, false, ref.data(), 2);
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_TRUE(std::isinf(c[1]));
  EXPECT_TRUE(std::isnan(ref[0]));
  EXPECT_TRUE(std::isinf(ref[1]));
}

TEST(Bf16Gemm, ConversionMatchesFromFloat) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f,  // exactly halfway between two bfloat16 values: ties to even
                          1.01171875f,  // halfway, rounds up to even
                          3.14159265f,
                          -2.5e-39f,  // float32 denormal
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u)};  // signalling NaN
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::vector<uint16_t> y(x.size());
  ConvertF32ToBf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], bfloat16::FromFloat(x[i]).bits) << "x=" << x[i] << " at " << i;
  }
}

}  // namespace
}  // namespace recsdk::internal
