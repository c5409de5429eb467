// math_kernels_test.cc: BiasAddGrad (src/device/cpu/math_kernels.cc), whose column sums run in
// row blocks summed in block order: against a double-precision reference, and bitwise the same
// at 1 and 2 threads (the blocks depend on the shape only).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

std::vector<float> BiasGrad(const Tensor& dy, int threads) {
  Graph g;
  Scope root(&g);
  const int64_t c = dy.dim(1);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{dy.dim(0), c});
  Output b = ops::Placeholder(root.WithOpName("b"), DType::kFloat32, Shape{c});
  Output w = ops::Placeholder(root.WithOpName("w"), DType::kFloat32, dy.shape());
  // d/db sum(BiasAdd(x, b) * w) = column sums of w: BiasAddGrad over w.
  Output loss = ops::ReduceSum(root, ops::Mul(root, ops::BiasAdd(root, x, b), w));
  auto grads = Gradients(root, {loss}, {b});
  EXPECT_TRUE(grads.ok()) << grads.status();
  SessionConfig config;
  config.intra_op_parallelism = threads;
  auto session = Session::Create(g, config);
  EXPECT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{"x", Tensor(DType::kFloat32, dy.shape())},
                              {"b", Tensor(DType::kFloat32, Shape{c})},
                              {"w", dy}},
                             {(*grads)[0].name()});
  EXPECT_TRUE(out.ok()) << out.status();
  const auto flat = (*out)[0].flat<float>();
  return std::vector<float>(flat.begin(), flat.end());
}

TEST(BiasAddGradTest, BlockedColumnSumsMatchTheReferenceAtAnyThreadCount) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {3, 5}, {512, 3}, {513, 7}, {4099, 33}, {1500, 1}}) {
    Tensor dy(DType::kFloat32, Shape{rows, cols});
    std::mt19937 rng(static_cast<uint32_t>(rows));
    std::uniform_real_distribution<float> dist(-1, 1);
    for (float& v : dy.flat<float>()) v = dist(rng);
    const std::vector<float> one = BiasGrad(dy, 1), two = BiasGrad(dy, 2);
    EXPECT_EQ(one, two) << rows << "x" << cols;
    for (int64_t j = 0; j < cols; ++j) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += dy.data<float>()[r * cols + j];
      EXPECT_NEAR(one[j], want, 1e-4 * std::sqrt(static_cast<double>(rows))) << rows << " " << j;
    }
  }
}

}  // namespace
}  // namespace recsdk
