// host_ops_test.cc: the vectorised host operators (Less, Greater, FloorMod, Where) of every ISA
// variant this CPU can run, against plain scalar references, and the ops end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "recsdk/recsdk.h"
#include "src/device/cpu/fast_kernels.h"

namespace recsdk {
namespace {

using internal::FastFor;
using internal::Isa;

std::vector<Isa> RunnableIsas() {
  std::vector<Isa> out = {Isa::kBaseline};
  if (static_cast<int>(internal::BestIsa()) >= 1) out.push_back(Isa::kAvx2);
  if (static_cast<int>(internal::BestIsa()) >= 2) out.push_back(Isa::kAvx512);
  return out;
}

float RefFloorMod(float x, float y) {
  // Python's x - floor(x / y) * y computed in double, rounded to float.
  const double r = std::fmod(static_cast<double>(x), static_cast<double>(y));
  return static_cast<float>((r != 0 && ((r < 0) != (y < 0))) ? r + y : r);
}

TEST(HostOpsTest, IsaVariantsMatchScalarReferences) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-50, 50);
  const int n = 1027;
  std::vector<float> x(n), y(n), out(n);
  std::vector<char> cond(n);
  bool b[n];
  for (int i = 0; i < n; ++i) {
    x[i] = dist(rng);
    y[i] = i % 7 == 0 ? x[i] : dist(rng);
    if (i % 11 == 0) y[i] = x[i] / 3.0f;              // quotients that round onto integers
    if (i % 13 == 0) x[i] = 3e9f * (i % 2 ? 1 : -1);  // quotients beyond 2^24
    if (i % 17 == 0) y[i] = -y[i];
    if (y[i] == 0) y[i] = 1;
    cond[i] = i % 3 == 0;
  }
  for (Isa isa : RunnableIsas()) {
    SCOPED_TRACE(std::string(internal::IsaName(isa)));
    const auto& k = FastFor(isa);
    k.less_f32(x.data(), y.data(), b, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], x[i] < y[i]);
    k.greater_f32(x.data(), y.data(), b, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(b[i], x[i] > y[i]);
    k.floormod_f32(x.data(), y.data(), out.data(), n);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(out[i], RefFloorMod(x[i], y[i])) << x[i] << " mod " << y[i];
    k.where_f32(reinterpret_cast<const bool*>(cond.data()), x.data(), y.data(), out.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], cond[i] ? x[i] : y[i]);
  }
}

TEST(HostOpsTest, SgemmVariantsMatchAcrossTransposes) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int m = 37, n = 29, k = 41;
  std::vector<float> a(m * k), b(k * n), ref(m * n), out(m * n);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Reference with explicit indexing.
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[p * m + i] : a[i * k + p];
            const float bv = tb ? b[j * k + p] : b[p * n + j];
            s += static_cast<double>(av) * bv;
          }
          ref[i * n + j] = static_cast<float>(s);
        }
      }
      for (Isa isa : RunnableIsas()) {
        FastFor(isa).sgemm(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, out.data(),
                           n);
        for (int i = 0; i < m * n; ++i)
          ASSERT_NEAR(out[i], ref[i], 1e-4)
              << internal::IsaName(isa) << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

TEST(HostOpsTest, OpsEndToEndWithBroadcastingAndIntegers) {
  Graph g;
  Scope root(&g);
  Output x = ops::Const(root, *Tensor::FromValues<int64_t>(Shape{2, 3}, {-7, -1, 0, 5, 7, 9}));
  Output three = ops::Const(root, int64_t{3});
  Output mod = ops::FloorMod(root, x, three);
  Output neg_mod = ops::FloorMod(root, x, ops::Const(root, int64_t{-3}));
  Output less =
      ops::Less(root, x, ops::Const(root, *Tensor::FromValues<int64_t>(Shape{3}, {0, 0, 6})));
  Output where = ops::Where(root, ops::Greater(root, x, three), x, ops::ZerosLike(root, x));
  auto s = Session::Create(g);
  ASSERT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run({}, {mod, neg_mod, less, where});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<int64_t>((*out)[0].data<int64_t>(), (*out)[0].data<int64_t>() + 6),
            (std::vector<int64_t>{2, 2, 0, 2, 1, 0}));
  EXPECT_EQ(std::vector<int64_t>((*out)[1].data<int64_t>(), (*out)[1].data<int64_t>() + 6),
            (std::vector<int64_t>{-1, -1, 0, -1, -2, 0}));
  const bool* l = (*out)[2].data<bool>();
  EXPECT_EQ(std::vector<bool>(l, l + 6),
            (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(std::vector<int64_t>((*out)[3].data<int64_t>(), (*out)[3].data<int64_t>() + 6),
            (std::vector<int64_t>{0, 0, 0, 5, 7, 9}));
}

}  // namespace
}  // namespace recsdk
