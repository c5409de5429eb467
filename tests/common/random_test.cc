// Tests of src/common/random.h: Philox streams and the ziggurat normal sampler.
#include "src/common/random.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

std::vector<double> Draw(int n, uint64_t key, bool truncated) {
  std::vector<double> v(n);
  PhiloxStream s(key, 0);
  for (double& x : v) x = truncated ? s.TruncatedNormal() : s.Normal();
  return v;
}

// Kolmogorov-Smirnov distance between the sample and a CDF.
template <typename Cdf>
double KsDistance(std::vector<double> v, Cdf cdf) {
  std::sort(v.begin(), v.end());
  double d = 0;
  const double n = static_cast<double>(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    d = std::max({d, std::abs(f - static_cast<double>(i) / n),
                  std::abs(f - static_cast<double>(i + 1) / n)});
  }
  return d;
}

TEST(RandomTest, PhiloxStreamsArePureFunctionsOfKeyAndStream) {
  PhiloxStream a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 64; ++i) {
    const uint32_t x = a.NextBits();
    EXPECT_EQ(x, b.NextBits());
    same_c += x == c.NextBits();
    same_d += x == d.NextBits();
  }
  EXPECT_LT(same_c, 2);
  EXPECT_LT(same_d, 2);
}

TEST(RandomTest, StreamWordsAreThoseOfConsecutivePhiloxCounters) {
  // The stream computes several blocks at once after its first; the words must not change.
  PhiloxStream s(0x1234567890ull, 42);
  for (uint64_t counter = 0; counter < 100; ++counter) {
    const std::array<uint32_t, 4> block = Philox4x32(0x1234567890ull, counter, 42);
    for (uint32_t w : block) ASSERT_EQ(s.NextBits(), w) << "counter " << counter;
  }
  // The SIMD specialisation, crossing into the counter's high word.
  uint32_t four[16];
  Philox4x32Blocks<4>(7, 0xFFFFFFFEull, 0x123456789ull, four);
  for (int b = 0; b < 4; ++b) {
    const std::array<uint32_t, 4> block = Philox4x32(7, 0xFFFFFFFEull + b, 0x123456789ull);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(four[4 * b + w], block[w]) << b;
  }
}

TEST(RandomTest, StreamBlocksAreTheFirstWordsOfEachStreamOnEveryIsa) {
  // Many streams side by side (a table's new rows): each stream's words in order, whatever the
  // lane its blocks land in; counts that leave the last vector partly empty included.
  std::vector<uint64_t> keys(37);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 0x9E3779B97F4A7C15ull * (i + 1) ^ (i << 40);
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
    for (int blocks : {1, 3, 4, 5}) {
      for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{37}}) {
        std::vector<uint32_t> out(n * 4 * blocks, 0xDEADBEEFu);
        PhiloxStreamBlocksFor(isa, keys.data(), n, blocks, 0x55, out.data());
        for (size_t i = 0; i < n; ++i) {
          PhiloxStream s(keys[i], 0x55);
          for (int w = 0; w < 4 * blocks; ++w) {
            ASSERT_EQ(out[i * 4 * blocks + w], s.NextBits())
                << IsaName(isa) << " blocks " << blocks << " n " << n << " stream " << i << " word "
                << w;
          }
        }
      }
    }
  }
}

TEST(RandomTest, PhiloxMatchesTheKnownAnswer) {
  // Philox4x32-10 known-answer vector (Salmon et al., Random123 kat_vectors): counter
  // {0, 0, 0, 0}, key {0, 0} -> {6627e8d5, e169c58d, bc57ac4c, 9b00dbd8}.
  const std::array<uint32_t, 4> r = Philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(RandomTest, ZigguratNormalHasTheStandardNormalDistribution) {
  constexpr int kN = 2000000;
  const std::vector<double> v = Draw(kN, 1234, false);
  double mean = 0, m2 = 0, m4 = 0;
  int beyond2 = 0, beyond_tail = 0, negative = 0;
  for (double x : v) {
    mean += x;
    m2 += x * x;
    m4 += x * x * x * x;
    beyond2 += std::abs(x) > 2.0;
    beyond_tail += std::abs(x) > ZigguratTables::kTail;
    negative += x < 0;
  }
  mean /= kN;
  m2 /= kN;
  m4 /= kN;
  EXPECT_NEAR(mean, 0.0, 0.003);
  EXPECT_NEAR(m2, 1.0, 0.004);
  EXPECT_NEAR(m4, 3.0, 0.03);  // kurtosis of the normal
  EXPECT_NEAR(static_cast<double>(negative) / kN, 0.5, 0.002);
  EXPECT_NEAR(static_cast<double>(beyond2) / kN, 2 * (1 - NormalCdf(2.0)), 0.0006);
  // The tail beyond r (where the ziggurat switches to exponential rejection) is drawn too.
  EXPECT_NEAR(static_cast<double>(beyond_tail) / kN, 2 * (1 - NormalCdf(ZigguratTables::kTail)),
              0.00012);
  // KS: the 99.9% critical distance for n = 2e6 is 1.95 / sqrt(n) = 0.0014.
  EXPECT_LT(KsDistance(v, NormalCdf), 0.0014);
}

TEST(RandomTest, BoxMullerBaselineAgreesInDistribution) {
  constexpr int kN = 400000;
  std::vector<double> v(kN);
  PhiloxStream s(99, 0);
  for (double& x : v) x = BoxMullerNormal(s);
  EXPECT_LT(KsDistance(v, NormalCdf), 1.95 / std::sqrt(static_cast<double>(kN)));
}

TEST(RandomTest, TruncatedNormalStaysWithinTwoSigmaWithTheTruncatedVariance) {
  constexpr int kN = 1000000;
  const std::vector<double> v = Draw(kN, 77, true);
  const double z = NormalCdf(2.0) - NormalCdf(-2.0);
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * M_PI);
  double m2 = 0;
  for (double x : v) {
    ASSERT_LE(std::abs(x), 2.0);
    m2 += x * x;
  }
  EXPECT_NEAR(m2 / kN, 1.0 - 4.0 * phi2 / z, 0.004);  // 0.7737
  auto truncated_cdf = [&](double x) { return (NormalCdf(x) - NormalCdf(-2.0)) / z; };
  EXPECT_LT(KsDistance(v, truncated_cdf), 1.95 / std::sqrt(static_cast<double>(kN)));
}

TEST(RandomTest, ZigguratLayersCoverTheHalfNormal) {
  const ZigguratTables& z = Ziggurat();
  // Right edges grow from the top layer to the tail start; the base strip is the widest.
  for (int i = 2; i < 128; ++i) EXPECT_LT(z.width[i - 1], z.width[i]) << i;
  EXPECT_NEAR(z.width[127] * 16777216.0, ZigguratTables::kTail, 1e-5);
  EXPECT_GT(z.width[0], z.width[127]);
  EXPECT_EQ(z.accept[1], 0u);  // the top layer has no part wholly under the curve
  for (int i = 1; i < 128; ++i) EXPECT_LT(z.density[i], z.density[i - 1]) << i;
}

}  // namespace
}  // namespace recsdk::internal
