// dense_update_kernels_test.cc: every ISA variant of the dense update loops (the ones this CPU
// runs) is bitwise equal to its scalar reference twin, over lengths that leave vector tails, with
// and without Adam's decoupled weight decay, over several steps (so m, v and acc carry state).
#include "src/device/cpu/dense_update_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

std::vector<float> Random(std::mt19937& rng, int64_t n, float scale, bool positive) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = positive ? std::abs(nd(rng)) : nd(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DenseUpdateKernelsTest, AdamVariantsAreBitwiseEqualToTheReference) {
  std::mt19937 rng(11);
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
    const DenseUpdateKernels& k = DenseUpdateFastFor(isa);
    for (bool decay : {false, true}) {
      for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 33, 100, 1000}) {
        SCOPED_TRACE(::testing::Message() << IsaName(isa) << " n " << n << " decay " << decay);
        std::vector<float> w = Random(rng, n, 0.5f, false), m = Random(rng, n, 0.1f, false),
                           v = Random(rng, n, 0.01f, true);
        std::vector<float> w2 = w, m2 = m, v2 = v;
        for (int step = 1; step <= 3; ++step) {
          const std::vector<float> g = Random(rng, n, 1.0f, false);
          const double b1 = 0.9, b2 = 0.999, lr = 0.01, wd = decay ? 0.05 : 0.0;
          const AdamParams p{
              static_cast<float>(b1),
              static_cast<float>(b2),
              static_cast<float>(1 - b1),
              static_cast<float>(1 - b2),
              1e-8f,
              static_cast<float>(lr * std::sqrt(1 - std::pow(b2, step)) / (1 - std::pow(b1, step))),
              static_cast<float>(lr * wd),
              decay};
          k.adam(w.data(), m.data(), v.data(), g.data(), n, p);
          DenseAdamReference(w2.data(), m2.data(), v2.data(), g.data(), n, p);
        }
        EXPECT_TRUE(SameBits(w, w2));
        EXPECT_TRUE(SameBits(m, m2));
        EXPECT_TRUE(SameBits(v, v2));
      }
    }
  }
}

TEST(DenseUpdateKernelsTest, AdagradVariantsAreBitwiseEqualToTheReference) {
  std::mt19937 rng(12);
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
    const DenseUpdateKernels& k = DenseUpdateFastFor(isa);
    for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 33, 100, 1000}) {
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " n " << n);
      std::vector<float> w = Random(rng, n, 0.5f, false), acc = Random(rng, n, 0.1f, true);
      std::vector<float> w2 = w, acc2 = acc;
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = Random(rng, n, 1.0f, false);
        k.adagrad(w.data(), acc.data(), g.data(), n, 0.01f, 1e-10f);
        DenseAdagradReference(w2.data(), acc2.data(), g.data(), n, 0.01f, 1e-10f);
      }
      EXPECT_TRUE(SameBits(w, w2));
      EXPECT_TRUE(SameBits(acc, acc2));
    }
  }
}

}  // namespace
}  // namespace recsdk::internal
