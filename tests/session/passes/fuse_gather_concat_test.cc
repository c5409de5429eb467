// fuse_gather_concat_test.cc: the "fuse_gather_concat" pass (src/session/passes/
// fuse_gather_concat.cc): off by default; on, the Concat of pooled lookups and dense columns
// becomes one TableGatherConcat and its ConcatGrad a SplitV; training with it gives bit-for-bit
// the losses, dense weights and table rows of training without it; a lookup whose result is also
// read elsewhere stays a dense input of the fused node; a Concat with no fusable lookup is left
// alone.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int kBatch = 96;

// CountingObserver: how many times each op type ran.
class CountingObserver final : public ExecutionObserver {
 public:
  void AfterNode(const NodeExecution& exec) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++ran[exec.node->type()];
  }
  std::map<std::string, int> ran;

 private:
  std::mutex mu_;
};

struct Result {
  std::vector<float> losses, kernel, rows;
  std::map<std::string, int> ran;       // op type -> executions over the training steps
  std::map<std::string, int> types;     // op type -> count in the Session's graph
  std::vector<int64_t> kinds;           // the fused node's segment_kinds
  std::vector<std::string> fused_from;  // the fused node's fused_from
};

// Concat([e_a, dense x, e_b1, e_c, e_b2], 1) -> 32 relu -> 1, where table b has two features in
// one lookup (mean), a is summed and c (sqrtn) is also added to the loss directly, so its gather
// must stay.
Result Train(const SessionConfig& config) {
  Graph g;
  g.set_random_seed(3);
  Scope s(&g);
  const SparseOptimizerConfig sgd = SparseOptimizerConfig::SGD(0.1f);
  SparseTable ta = ValueOrDie(create_table(s, testing::SmallTable("a", 4, 512), sgd));
  SparseTable tb = ValueOrDie(create_table(s, testing::SmallTable("b", 8, 512), sgd));
  SparseTable tc = ValueOrDie(create_table(s, testing::SmallTable("c", 4, 512), sgd));
  Output ia = ops::Placeholder(s.WithOpName("ia"), DType::kInt64, Shape{kBatch, 3});
  Output ib1 = ops::Placeholder(s.WithOpName("ib1"), DType::kInt64, Shape{kBatch, 2});
  Output ib2 = ops::Placeholder(s.WithOpName("ib2"), DType::kInt64, Shape{kBatch, 2});
  Output ic = ops::Placeholder(s.WithOpName("ic"), DType::kInt64, Shape{kBatch, 1});
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{kBatch, 5});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions sum, mean, sqrtn;
  sum.combiner = Combiner::kSum;
  mean.combiner = Combiner::kMean;
  sqrtn.combiner = Combiner::kSqrtn;
  Output ea = ValueOrDie(sparse_lookup(s, ta, ia, sum));
  std::vector<Output> eb = ValueOrDie(sparse_lookup(s, tb, std::vector<Output>{ib1, ib2}, mean));
  Output ec = ValueOrDie(sparse_lookup(s, tc, ic, sqrtn));
  Output features = ops::Concat(s.WithOpName("features"), {ea, x, eb[0], ec, eb[1]}, 1);
  layers::DenseOptions d1;
  d1.units = 32;
  d1.activation = layers::Activation::kRelu;
  d1.name = "fc1";
  layers::DenseOptions d2;
  d2.units = 1;
  d2.name = "fc2";
  Output logits = layers::Dense(s, layers::Dense(s, features, d1), d2);
  Output ce = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  Output loss = ops::Add(s.WithOpName("loss"), ce,
                         ops::Mul(s, ops::ReduceMean(s, ops::Square(s, ec)),
                                  ops::Const(s, *Tensor::FromValues<float>(Shape{}, {0.01f}))));
  SgdOptimizer opt(SgdOptions{0.1});
  Node* dense = ValueOrDie(opt.Minimize(s, loss));
  Node* sparse = ValueOrDie(SparseMinimize(s, loss));
  Node* init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  auto session = ValueOrDie(Session::Create(g, config));
  Result r;
  for (const Node* n : session->graph().nodes()) {
    ++r.types[n->type()];
    if (n->type() == "TableGatherConcat") {
      r.kinds = n->IntsAttr("segment_kinds");
      r.fused_from = n->StringsAttr("fused_from");
    }
  }
  EXPECT_TRUE(session->Run({}, {}, {init->name()}).ok());
  auto ids = [](int64_t cols, int64_t step, int64_t salt) {
    std::vector<int64_t> v(kBatch * cols);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i * 7919 + step * 104729 + salt) % 300;
    return *Tensor::FromValues<int64_t>(Shape{kBatch, cols}, v);
  };
  for (int step = 0; step < 6; ++step) {
    std::vector<float> xs(kBatch * 5), labels(kBatch);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 31 + step) % 17) / 17;
    for (int i = 0; i < kBatch; ++i) labels[i] = static_cast<float>((i * 7 + step) % 3 == 0);
    FeedList feeds = {{"ia", ids(3, step, 1)},
                      {"ib1", ids(2, step, 2)},
                      {"ib2", ids(2, step, 3)},
                      {"ic", ids(1, step, 4)},
                      {"x", *Tensor::FromValues<float>(Shape{kBatch, 5}, xs)},
                      {"y", *Tensor::FromValues<float>(Shape{kBatch, 1}, labels)}};
    CountingObserver counter;
    RunOptions options;
    options.observers = {&counter};
    std::vector<Tensor> out;
    const Status st =
        session->Run(options, feeds, {"loss", "features"}, {dense->name(), sparse->name()}, &out);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    for (const auto& [type, n] : counter.ran) r.ran[type] += n;
    r.losses.push_back(out[0].scalar<float>());
    EXPECT_EQ(out[1].shape(), (Shape{kBatch, 4 + 5 + 8 + 4 + 8}));
  }
  auto kernel = ValueOrDie(session->Run({}, {"fc1/kernel/read"}));
  r.kernel.assign(kernel[0].data<float>(), kernel[0].data<float>() + kernel[0].num_elements());
  for (const char* name : {"a", "b", "c"}) {
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, name));
    for (int64_t key : {0, 17, 123, 299}) {
      auto row = table->ReadRow(key);
      if (row.ok()) r.rows.insert(r.rows.end(), row->begin(), row->end());
    }
  }
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(FuseGatherConcatTest, FusedTrainsBitForBitLikeUnfusedAndOnlyWhenAsked) {
  SessionConfig plain;
  SessionConfig fused = plain;
  fused.enable_scope_fusion_passes = "fuse_dense, fuse_gather_concat";
  const Result a = Train(plain), b = Train(fused);
  EXPECT_EQ(a.types.count("TableGatherConcat"), 0u);
  EXPECT_EQ(b.types.at("TableGatherConcat"), 1);
  EXPECT_EQ(a.types.count("SplitV"), 0u);
  EXPECT_EQ(b.types.at("SplitV"), 1);  // the ConcatGrad
  EXPECT_EQ(b.types.count("ConcatGrad"), 0u);
  // a (gather), x (dense), b's first feature (gather), c (read elsewhere: dense), b's second.
  EXPECT_EQ(b.kinds, (std::vector<int64_t>{1, 0, 1, 0, 1}));
  // What the fused node replaced, for dumps and compare-dumps: the two fused gathers (a's, and
  // b's, whose two features are one gather) and the Concat itself, "TYPE NAME" each.
  ASSERT_EQ(b.fused_from.size(), 3u);
  EXPECT_EQ(b.fused_from[0].rfind("TableGather ", 0), 0u) << b.fused_from[0];
  EXPECT_EQ(b.fused_from[1].rfind("TableGather ", 0), 0u) << b.fused_from[1];
  EXPECT_EQ(b.fused_from[2].rfind("Concat ", 0), 0u) << b.fused_from[2];
  // Unfused, the three gathers run every step; fused, only c's (its result is read elsewhere).
  EXPECT_EQ(a.ran.at("TableGather"), 3 * 6);
  EXPECT_EQ(b.ran.at("TableGather"), 1 * 6);
  EXPECT_EQ(b.ran.at("TableGatherConcat"), 6);
  ASSERT_EQ(a.losses.size(), 6u);
  EXPECT_LT(a.losses.back(), a.losses.front());  // it trains
  EXPECT_FALSE(a.rows.empty());
  EXPECT_TRUE(SameBits(a.losses, b.losses));
  EXPECT_TRUE(SameBits(a.kernel, b.kernel));
  EXPECT_TRUE(SameBits(a.rows, b.rows));
}

TEST(FuseGatherConcatTest, AConcatWithoutPooledLookupsIsLeftAlone) {
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{4, 2});
  Output c = ops::Concat(s.WithOpName("c"), {x, x}, 1);
  SessionConfig config;
  config.enable_scope_fusion_passes = "fuse_gather_concat";
  auto session = ValueOrDie(Session::Create(g, config));
  ASSERT_NE(session->graph().FindNode("c"), nullptr);
  EXPECT_EQ(session->graph().FindNode("c")->type(), "Concat");
  EXPECT_TRUE(session->Run({{"x", Tensor(DType::kFloat32, Shape{4, 2})}}, {c.name()}).ok());
}

}  // namespace
}  // namespace recsdk
