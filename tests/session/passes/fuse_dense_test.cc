// fuse_dense_test.cc: the "fuse_dense" pass (src/session/passes/fuse_dense.cc): off by default,
// on when enable_scope_fusion_passes names it; the fused graph's loss and gradients equal the
// unfused graph's within float tolerance, through a training step; chains it must not fuse (a
// pre-activation used elsewhere, a transposed MatMul) keep their ReLU or MatMul; unknown pass
// names are refused; a bfloat16 FusedDense differentiates as its float32 form, rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

struct Model {
  Graph g;
  std::vector<Output> grads;
  Output loss;
  Output pre_used_elsewhere;
};

Tensor RandomTensor(const Shape& shape, uint32_t seed) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& v : t.flat<float>()) v = dist(rng);
  return t;
}

// x [64,13] -> relu(x w1 + b1) [64,32] -> (h w2 + b2) [64,8] -> relu(h2) also read raw, and a
// transposed MatMul + BiasAdd, summed into a scalar loss.
void Build(Model* m) {
  Scope root(&m->g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{64, 13});
  Output w1 = ops::Const(root.WithOpName("w1"), RandomTensor(Shape{13, 32}, 1));
  Output b1 = ops::Const(root.WithOpName("b1"), RandomTensor(Shape{32}, 2));
  Output w2 = ops::Const(root.WithOpName("w2"), RandomTensor(Shape{32, 8}, 3));
  Output b2 = ops::Const(root.WithOpName("b2"), RandomTensor(Shape{8}, 4));
  Output w3 = ops::Const(root.WithOpName("w3"), RandomTensor(Shape{32, 8}, 5));
  Output h1 = ops::Relu(root.WithOpName("h1"), ops::BiasAdd(root, ops::MatMul(root, x, w1), b1));
  Output pre2 = ops::BiasAdd(root.WithOpName("pre2"), ops::MatMul(root, h1, w2), b2);
  Output h2 = ops::Relu(root.WithOpName("h2"), pre2);
  // pre2 is read besides its Relu: the ReLU must stay unfused (the BiasAdd still fuses).
  Output h3 = ops::BiasAdd(root, ops::MatMul(root, h2, w3, {false, true}), b1);  // transposed
  m->loss = ops::ReduceSum(root.WithOpName("loss"),
                           ops::Add(root, ops::ReduceSum(root, ops::Square(root, pre2)),
                                    ops::Add(root, ops::ReduceSum(root, ops::Square(root, h2)),
                                             ops::ReduceSum(root, ops::Square(root, h3)))));
  auto grads = Gradients(root, {m->loss}, {w1, b1, w2, b2, w3, x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  m->grads = *grads;
}

std::vector<Tensor> RunModel(Model& m, const SessionConfig& config, int* fused_nodes) {
  auto session = Session::Create(m.g, config);
  EXPECT_TRUE(session.ok()) << session.status();
  *fused_nodes = 0;
  for (const Node* n : (*session)->graph().nodes()) {
    if (n->type() != "FusedDense") continue;
    ++*fused_nodes;
    // fused_from names the ops it replaced ("TYPE NAME"), its own former op last.
    const std::vector<std::string> from = n->StringsAttr("fused_from");
    EXPECT_GE(from.size(), 2u) << n->name();
    if (from.size() < 2) continue;
    // The product: MatMul, or BF16MatMul after mixed_precision (order 300).
    EXPECT_TRUE(from[0].rfind("MatMul ", 0) == 0 || from[0].rfind("BF16MatMul ", 0) == 0)
        << from[0];
    EXPECT_EQ(from[1].rfind("BiasAdd ", 0), 0u) << from[1];
    const std::string own =
        (n->StringAttr("activation") == "relu" ? "Relu " : "BiasAdd ") + n->name();
    EXPECT_EQ(from.back(), own);
  }
  std::vector<TensorName> fetches = {m.loss.name()};
  for (const Output& g : m.grads) fetches.push_back(g.name());
  auto out = (*session)->Run({{"x", RandomTensor(Shape{64, 13}, 9)}}, fetches);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>{};
}

TEST(FuseDenseTest, FusedEqualsUnfusedAndOnlyWhenAsked) {
  Model m;
  Build(&m);
  int plain_fused = -1, fused = -1;
  const std::vector<Tensor> plain = RunModel(m, SessionConfig{}, &plain_fused);
  SessionConfig config;
  config.enable_scope_fusion_passes = "fuse_dense";
  const std::vector<Tensor> with = RunModel(m, config, &fused);
  EXPECT_EQ(plain_fused, 0);
  // Layer 1 (MatMul + BiasAdd + Relu) and layer 2 (MatMul + BiasAdd; its pre-activation is read
  // elsewhere, so its Relu stays); the transposed MatMul is left alone.
  EXPECT_EQ(fused, 2);
  ASSERT_EQ(plain.size(), with.size());
  ASSERT_FALSE(plain.empty());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].shape(), with[i].shape()) << i;
    const auto a = plain[i].flat<float>(), b = with[i].flat<float>();
    for (size_t j = 0; j < a.size(); ++j) {
      ASSERT_NEAR(a[j], b[j], 1e-4f * std::max(1.0f, std::fabs(a[j]))) << "fetch " << i << " " << j;
    }
  }
}

// After mixed_precision (order 300), layer 2's product (k = 32) is a BF16MatMul; fuse_dense
// (order 400) fuses it with its bias into a FusedDense on bfloat16 operands, which gives the same
// bits as the unfused BF16MatMul -> BiasAdd.
TEST(FuseDenseTest, FusesTheBfloat16ProductsOfMixedPrecisionBitForBit) {
  Model m;
  Build(&m);
  SessionConfig mixed;
  mixed.precision_mode = "allow_mix_precision";
  SessionConfig fused = mixed;
  fused.enable_scope_fusion_passes = "fuse_dense";
  int plain_fused = -1, with_fused = -1;
  const std::vector<Tensor> plain = RunModel(m, mixed, &plain_fused);
  const std::vector<Tensor> with = RunModel(m, fused, &with_fused);
  EXPECT_EQ(plain_fused, 0);
  EXPECT_EQ(with_fused, 2);
  auto session = Session::Create(m.g, fused);
  ASSERT_TRUE(session.ok()) << session.status();
  int bf16_fused = 0;
  for (const Node* n : (*session)->graph().nodes()) {
    bf16_fused += n->type() == "FusedDense" && n->input(0).dtype() == DType::kBFloat16;
  }
  EXPECT_EQ(bf16_fused, 1);
  ASSERT_EQ(plain.size(), with.size());
  ASSERT_FALSE(plain.empty());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].shape(), with[i].shape()) << i;
    const auto a = plain[i].flat<float>(), b = with[i].flat<float>();
    for (size_t j = 0; j < a.size(); ++j) ASSERT_EQ(a[j], b[j]) << "fetch " << i << " " << j;
  }
}

// A FusedDense on bfloat16 operands differentiates like its float32 form on the operands widened
// (exactly) to float32, each operand's gradient rounded to bfloat16: bit for bit without an
// activation (the upstream gradient does not depend on the forward product), and with ReLU
// within bfloat16 rounding (the mask comes from each form's own forward product).
TEST(FuseDenseTest, Bfloat16FusedDenseGradientIsTheFloatGradientRounded) {
  for (const char* act : {"none", "relu"}) {
    Graph g;
    Scope root(&g);
    const Output a =
        ops::Cast(root, ops::Const(root, RandomTensor(Shape{16, 12}, 21)), DType::kBFloat16);
    const Output w =
        ops::Cast(root, ops::Const(root, RandomTensor(Shape{12, 7}, 22)), DType::kBFloat16);
    const Output b = ops::Const(root, RandomTensor(Shape{7}, 23));
    const Output r = ops::Const(root, RandomTensor(Shape{16, 7}, 24));
    const Output af = ops::Cast(root, a, DType::kFloat32), wf = ops::Cast(root, w, DType::kFloat32);
    auto dense = [&](Output x, Output y) {
      return Output(
          root.AddNode("FusedDense", {x, y, b}, {{"activation", AttrValue(std::string(act))}}), 0);
    };
    const Output loss = ops::ReduceSum(root, ops::Mul(root, dense(a, w), r));
    const Output loss_f = ops::ReduceSum(root, ops::Mul(root, dense(af, wf), r));
    auto grads = Gradients(root, {loss}, {a, w, b});
    ASSERT_TRUE(grads.ok()) << grads.status();
    auto grads_f = Gradients(root, {loss_f}, {af, wf, b});
    ASSERT_TRUE(grads_f.ok()) << grads_f.status();
    ASSERT_EQ((*grads)[0].dtype(), DType::kBFloat16);
    ASSERT_EQ((*grads)[1].dtype(), DType::kBFloat16);
    std::vector<TensorName> fetches;
    for (int i = 0; i < 2; ++i) {
      fetches.push_back(ops::Cast(root, (*grads)[i], DType::kFloat32).name());
      fetches.push_back(
          ops::Cast(root, ops::Cast(root, (*grads_f)[i], DType::kBFloat16), DType::kFloat32)
              .name());
    }
    fetches.push_back((*grads)[2].name());
    fetches.push_back((*grads_f)[2].name());
    auto session = Session::Create(g, SessionConfig{});
    ASSERT_TRUE(session.ok()) << session.status();
    auto out = (*session)->Run({}, fetches);
    ASSERT_TRUE(out.ok()) << out.status();
    const bool exact = std::string(act) == "none";
    for (size_t i = 0; i < out->size(); i += 2) {
      const auto got = (*out)[i].flat<float>(), want = (*out)[i + 1].flat<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) {
        if (exact) {
          ASSERT_EQ(got[j], want[j]) << act << " gradient " << i / 2 << " at " << j;
        } else {
          ASSERT_NEAR(got[j], want[j], 0.02 * (1 + std::fabs(want[j])))
              << act << " gradient " << i / 2 << " at " << j;
        }
      }
    }
  }
}

TEST(FuseDenseTest, UnknownFusionPassIsRefused) {
  SessionConfig config;
  config.enable_scope_fusion_passes = "fuse_dense, MatMulBiasAdd";
  const Status s = config.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("MatMulBiasAdd"), std::string::npos) << s;
  config.enable_scope_fusion_passes = " fuse_dense ";
  EXPECT_TRUE(config.Validate().ok());
}

}  // namespace
}  // namespace recsdk
