// interaction_kernels_test.cc: the fused DLRM dot interaction and the CIN's batched outer product
// (src/device/cpu/interaction_kernels.cc) against their reference twins, and the dot interaction
// through the op in a Session at several batch sizes. Their finite-difference gradient checks are
// in tests/graph/op_gradients_test.cc and tests/graph/interaction_layers_test.cc.
// Single-threaded test; the kernels may use threads.
#include "src/device/cpu/interaction_kernels.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

class DotInteractionKernelTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(DotInteractionKernelTest, FastMatchesReference) {
  const auto [batch, f, d] = GetParam();
  const int64_t pairs = int64_t{f} * (f - 1) / 2;
  const std::vector<float> x = Random(int64_t{batch} * f * d, 1);
  const std::vector<float> dy = Random(batch * pairs, 2);
  std::vector<float> ref(batch * pairs), fast(batch * pairs, -7.0f);
  internal::DotInteractionReference<float>(x.data(), batch, f, d, ref.data());
  internal::DotInteractionFast<float>(x.data(), batch, f, d, fast.data());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 1e-5f) << i;
  std::vector<float> gref(int64_t{batch} * f * d), gfast(gref.size(), -7.0f);
  internal::DotInteractionGradReference<float>(x.data(), dy.data(), batch, f, d, gref.data());
  internal::DotInteractionGradFast<float>(x.data(), dy.data(), batch, f, d, gfast.data());
  for (size_t i = 0; i < gref.size(); ++i) ASSERT_NEAR(gfast[i], gref[i], 1e-4f) << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotInteractionKernelTest,
                         ::testing::Values(std::make_tuple(1, 2, 1), std::make_tuple(3, 4, 5),
                                           std::make_tuple(5, 27, 16),
                                           std::make_tuple(4099, 27, 16), std::make_tuple(2, 1, 16),
                                           std::make_tuple(7, 9, 32), std::make_tuple(9, 33, 16),
                                           std::make_tuple(5, 64, 16), std::make_tuple(3, 65, 16)));

class BatchOuterProductKernelTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(BatchOuterProductKernelTest, FastMatchesReference) {
  const auto [rows, h, f] = GetParam();
  const std::vector<float> a = Random(int64_t{rows} * h, 1);
  const std::vector<float> b = Random(int64_t{rows} * f, 2);
  const std::vector<float> dz = Random(int64_t{rows} * h * f, 3);
  std::vector<float> ref(int64_t{rows} * h * f), fast(ref.size(), -7.0f);
  internal::BatchOuterProductReference<float>(a.data(), b.data(), rows, h, f, ref.data());
  internal::BatchOuterProductFast<float>(a.data(), b.data(), rows, h, f, fast.data());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(fast[i], ref[i]) << i;
  std::vector<float> da_ref(a.size()), db_ref(b.size()), da(a.size(), -7.0f), db(b.size(), -7.0f);
  internal::BatchOuterProductGradReference<float>(a.data(), b.data(), dz.data(), rows, h, f,
                                                  da_ref.data(), db_ref.data());
  internal::BatchOuterProductGradFast<float>(a.data(), b.data(), dz.data(), rows, h, f, da.data(),
                                             db.data());
  for (size_t i = 0; i < da.size(); ++i) ASSERT_NEAR(da[i], da_ref[i], 1e-4f) << i;
  for (size_t i = 0; i < db.size(); ++i) ASSERT_NEAR(db[i], db_ref[i], 1e-4f) << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchOuterProductKernelTest,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(3, 4, 5),
                                           std::make_tuple(4096, 10, 10),
                                           std::make_tuple(4096, 16, 10),
                                           std::make_tuple(7, 1, 33)));

TEST(BatchOuterProductTest, ReferenceIsRowMajorOuterProduct) {
  // One row: a = (1, 2), b = (3, 4, 5) -> (3, 4, 5, 6, 8, 10).
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  std::vector<float> z(6);
  internal::BatchOuterProductReference<float>(a.data(), b.data(), 1, 2, 3, z.data());
  EXPECT_EQ(z, (std::vector<float>{3, 4, 5, 6, 8, 10}));
}

TEST(DotInteractionTest, ReferenceIsDlrmPairOrder) {
  // Three 2-d vectors: pairs (1,0), (2,0), (2,1).
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> out(3);
  internal::DotInteractionReference<float>(x.data(), 1, 3, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{1 * 3 + 2 * 4, 1 * 5 + 2 * 6, 3 * 5 + 4 * 6}));
}

TEST(DotInteractionTest, OpRunsAnyBatchSizeInOneGraph) {
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 5, 3});
  Output y = ops::DotInteraction(s, x);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(y.shape(), (Shape{Shape::kUnknownDim, 10}));
  auto session = *Session::Create(g);
  for (int64_t batch : {1, 6, 33}) {
    const std::vector<float> v = Random(batch * 15, 3);
    Tensor t = *Tensor::FromValues<float>(Shape{batch, 5, 3}, absl::MakeConstSpan(v));
    auto out = session->Run({{"x", t}}, {y});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> ref(batch * 10);
    internal::DotInteractionReference<float>(v.data(), batch, 5, 3, ref.data());
    ASSERT_EQ((*out)[0].num_elements(), batch * 10);
    for (int64_t i = 0; i < batch * 10; ++i) EXPECT_FLOAT_EQ((*out)[0].data<float>()[i], ref[i]);
  }
}

TEST(DotInteractionTest, RejectsUnknownFeatureCountAndWrongRank) {
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s, DType::kFloat32, Shape{4, Shape::kUnknownDim, 3});
  ops::DotInteraction(s, x);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("number of features"), std::string::npos) << s.status();
  Graph g2;
  Scope s2(&g2);
  ops::DotInteraction(s2, ops::Placeholder(s2, DType::kFloat32, Shape{4, 3}));
  EXPECT_FALSE(s2.ok());
}

}  // namespace
}  // namespace recsdk
