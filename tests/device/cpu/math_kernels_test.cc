// math_kernels_test.cc: BiasAddGrad (src/device/cpu/math_kernels.cc), whose column sums run in
// row blocks summed in block order: against a double-precision reference, and bitwise the same
// at 1 and 2 threads (the blocks depend on the shape only). AddN, which sums up to four inputs per
// pass: bitwise the left-to-right float sum of its inputs, for 1 to 10 inputs and sizes across
// the parallel chunks, float32 and int64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
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

template <typename T>
void CheckAddN(DType dtype, int64_t n, int inputs) {
  Graph g;
  Scope root(&g);
  std::vector<Output> xs;
  std::vector<Tensor> values;
  FeedList feeds;
  std::mt19937 rng(static_cast<uint32_t>(n * 31 + inputs));
  std::uniform_real_distribution<double> dist(-1000, 1000);
  for (int k = 0; k < inputs; ++k) {
    xs.push_back(ops::Placeholder(root.WithOpName("x" + std::to_string(k)), dtype, Shape{n}));
    Tensor t(dtype, Shape{n});
    for (T& v : t.flat<T>()) v = static_cast<T>(dist(rng));
    feeds.emplace_back(xs.back(), t);
    values.push_back(t);
  }
  Output sum = ops::AddN(root.WithOpName("sum"), xs);
  auto session = Session::Create(g, SessionConfig{});
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run(feeds, {sum.name()});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t i = 0; i < n; ++i) {
    T want = values[0].data<T>()[i];
    for (int k = 1; k < inputs; ++k) want += values[k].data<T>()[i];
    ASSERT_EQ((*out)[0].data<T>()[i], want) << n << " elements, " << inputs << " inputs, at " << i;
  }
}

TEST(AddNTest, BitwiseTheLeftToRightSumOfItsInputs) {
  for (int64_t n : {1, 7, 40000, 70001}) {
    for (int inputs = 1; inputs <= 10; ++inputs) {
      CheckAddN<float>(DType::kFloat32, n, inputs);
      CheckAddN<int64_t>(DType::kInt64, n, inputs);
    }
  }
}

}  // namespace
}  // namespace recsdk
