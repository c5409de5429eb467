// mixed_precision_test.cc: the session pass "mixed_precision" (src/session/passes/
// mixed_precision.cc). It turns exactly the float32 products (forward and backward) into bfloat16
// products fed by one cast per operand, leaves variables, updates, losses and other sensitive ops
// in float32, is enabled by the low-precision modes only, and trains a sparse + dense model to a
// loss within 1% of float32 after the same steps.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int kBatch = 256, kIds = 4, kDim = 16;

struct Model {
  Graph g;
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

void Build(Model* m) {
  m->g.set_random_seed(11);
  Scope s(&m->g);
  SparseTable t = ValueOrDie(create_table(s, testing::SmallTable("emb", kDim, 4096),
                                          SparseOptimizerConfig::Adagrad(0.05f)));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, kIds});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kMean;
  Output emb = ValueOrDie(sparse_lookup(s, t, ids, lo));
  layers::MlpOptions mo;
  mo.hidden_units = {128, 64};
  mo.output_units = 1;
  mo.name = "mlp";
  Output logits = layers::Mlp(s, emb, mo);
  m->loss = ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  AdamOptimizer adam(AdamOptions{0.005});
  Node* dense = ValueOrDie(adam.Minimize(s, m->loss));
  Node* sparse = ValueOrDie(SparseMinimize(s, m->loss));
  m->train = ops::Group(s.WithOpName("train"), {dense, sparse});
  m->init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
}

FeedList Batch(int step) {
  std::vector<int64_t> idv(kBatch * kIds);
  std::vector<float> yv(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    int64_t sum = 0;
    for (int j = 0; j < kIds; ++j) {
      const int64_t id = (static_cast<int64_t>(i) * 7919 + j * 104729 + step * 31) % 997;
      idv[i * kIds + j] = id;
      sum += id % 5;
    }
    yv[i] = sum > 8 ? 1.0f : 0.0f;  // a learnable signal
  }
  return {{"ids", *Tensor::FromValues<int64_t>(Shape{kBatch, kIds}, idv)},
          {"y", *Tensor::FromValues<float>(Shape{kBatch, 1}, yv)}};
}

TEST(MixedPrecisionPass, RewritesEveryFloat32ProductAndNothingElse) {
  Model m;
  Build(&m);
  std::map<std::string, std::string> before;
  int products = 0;
  std::set<std::string> short_sums;  // k < 32: stays float32
  for (const Node* n : m.g.nodes()) {
    before[n->name()] = n->type();
    if (n->type() != "MatMul") continue;
    const Shape& a = n->input(0).shape();
    const int64_t k = n->BoolAttr("transpose_a") ? a.dim(0) : a.dim(1);
    if (k >= 0 && k < 32) {
      short_sums.insert(n->name());
    } else {
      ++products;
    }
  }
  // 3 forward and 6 backward products (input and weight gradients); two sum few terms: the first
  // layer's forward product (k = kDim = 16) and the logits layer's input gradient (k = 1).
  ASSERT_EQ(products, 7);
  ASSERT_EQ(short_sums.size(), 2u);
  SessionConfig c;
  c.precision_mode = "allow_mix_precision";
  auto session = ValueOrDie(Session::Create(m.g, c));
  const auto& applied = session->applied_passes();
  EXPECT_NE(std::find(applied.begin(), applied.end(), "mixed_precision"), applied.end());
  const Graph& g = session->graph();
  int bf16_products = 0, casts = 0;
  std::set<std::string> cast_sources;
  for (const Node* n : g.nodes()) {
    EXPECT_EQ(n->type() == "MatMul", short_sums.contains(n->name())) << n->name();
    for (const Output& in : n->inputs()) EXPECT_LT(in.node->id(), n->id()) << n->name();
    if (n->type() == "BF16MatMul") {
      ++bf16_products;
      EXPECT_EQ(before[n->name()], "MatMul");
      EXPECT_EQ(n->output_dtype(0), DType::kFloat32);
      for (const Output& in : n->inputs()) {
        EXPECT_EQ(in.node->type(), "Cast");
        EXPECT_EQ(in.dtype(), DType::kBFloat16);
        EXPECT_EQ(in.node->input(0).dtype(), DType::kFloat32);
      }
    }
    if (n->type() == "Cast" && !before.contains(n->name())) {
      ++casts;
      EXPECT_TRUE(cast_sources.insert(n->input(0).name()).second) << "one cast per operand";
    }
    if (!before.contains(n->name())) continue;
    // Everything else keeps its type and float32: variables, updates, losses, activations.
    if (before[n->name()] != "MatMul") {
      EXPECT_EQ(n->type(), before[n->name()]) << n->name();
    }
    if (n->type() == "VarHandle" || n->type().starts_with("Apply") ||
        n->type().find("CrossEntropy") != std::string::npos || n->type() == "Sigmoid" ||
        n->type() == "Exp" || n->type() == "Log" || n->type() == "Softmax") {
      for (const Output& in : n->inputs()) EXPECT_NE(in.dtype(), DType::kBFloat16) << n->name();
    }
  }
  EXPECT_EQ(bf16_products, products);
  // A weight read by the forward product and the input-gradient product is cast once.
  EXPECT_LT(casts, 2 * products);
  ASSERT_TRUE(session->Run({}, {}, {m.init->name()}).ok());
  auto out = session->Run(Batch(0), {m.loss}, {m.train->name()});
  ASSERT_TRUE(out.ok()) << out.status();
}

TEST(MixedPrecisionPass, OnlyTheLowPrecisionModesEnableIt) {
  Model m;
  Build(&m);
  auto ran = [&](const SessionConfig& c) {
    auto session = ValueOrDie(Session::Create(m.g, c));
    const auto& a = session->applied_passes();
    return std::find(a.begin(), a.end(), "mixed_precision") != a.end();
  };
  for (const char* mode : {"allow_mix_precision", "force_fp16"}) {
    SessionConfig c;
    c.precision_mode = mode;
    EXPECT_TRUE(ran(c)) << mode;
  }
  for (const char* mode : {"mixed_bfloat16", "mixed_float16", "fp16", "cube_fp16in_fp32out"}) {
    SessionConfig c;
    c.precision_mode_v2 = mode;
    EXPECT_TRUE(ran(c)) << mode;
  }
  for (const char* mode : {"", "allow_fp32_to_fp16", "must_keep_origin_dtype"}) {
    SessionConfig c;
    c.precision_mode = mode;
    EXPECT_FALSE(ran(c)) << mode;
  }
  SessionConfig origin;
  origin.precision_mode_v2 = "origin";
  EXPECT_FALSE(ran(origin));
}

// Trains `steps` steps and returns the mean loss of the last five.
double Train(const SessionConfig& c, int steps, std::vector<float>* first_losses) {
  Model m;
  Build(&m);
  auto session = ValueOrDie(Session::Create(m.g, c));
  EXPECT_TRUE(session->Run({}, {}, {m.init->name()}).ok());
  double tail = 0;
  for (int step = 0; step < steps; ++step) {
    auto out = session->Run(Batch(step), {m.loss}, {m.train->name()});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return NAN;
    const float loss = (*out)[0].data<float>()[0];
    if (step < 3) first_losses->push_back(loss);
    if (step >= steps - 5) tail += loss / 5;
  }
  return tail;
}

TEST(MixedPrecisionPass, LossAfterTrainingIsWithinOnePercentOfFloat32) {
  SessionConfig fp32;
  SessionConfig mixed;
  mixed.precision_mode = "allow_mix_precision";
  std::vector<float> first32, first16;
  const double a = Train(fp32, 60, &first32), b = Train(mixed, 60, &first16);
  EXPECT_LT(a, first32[0] * 0.97) << "the model must learn for the comparison to mean anything";
  EXPECT_LT(std::fabs(a - b) / a, 0.01) << "float32 " << a << " mixed " << b;
  // bfloat16 products are not float32 ones: the first losses differ, slightly.
  EXPECT_NE(first32[0], first16[0]);
  EXPECT_LT(std::fabs(first32[0] - first16[0]) / first32[0], 0.01);
}

}  // namespace
}  // namespace recsdk
