// loss_scale_test.cc: DenseLossScaleOptimizer / SparseLossScaleOptimizer (src/optimizers/
// loss_scale.cc). Static scaling by a power of two trains bit for bit like no scaling; dynamic
// scaling skips a step whose scaled gradients overflow (weights, Adam's slots and step, table
// rows all unchanged; the global step still advances), lowers the scale, raises it after N good
// steps and keeps it within its bounds; invalid options are errors naming the option.
#include "recsdk/loss_scale.h"

#include <gtest/gtest.h>

#include <cstring>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int kBatch = 4, kIn = 3;

std::vector<float> Values(Session& session, const std::string& name) {
  auto out = session.Run({}, {name});
  EXPECT_TRUE(out.ok()) << name << ": " << out.status();
  if (!out.ok()) return {};
  const Tensor& t = (*out)[0];
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}
int64_t Int(Session& session, const std::string& name) {
  auto out = session.Run({}, {name});
  EXPECT_TRUE(out.ok()) << name << ": " << out.status();
  return out.ok() ? (*out)[0].data<int64_t>()[0] : -1;
}
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// DenseModel: loss = mean((x w - y)^2) with w [3,1].
struct DenseModel {
  Graph g;
  Scope s{&g};
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
  std::unique_ptr<Session> session;

  explicit DenseModel(std::shared_ptr<Optimizer> opt) {
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{kBatch, kIn});
    Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kBatch, 1});
    VariableOptions vo;
    vo.initializer = Initializer::Constant(0.5);
    Variable w = Variable::Make(s, "w", Shape{kIn, 1}, vo);
    loss =
        ops::ReduceMean(s.WithOpName("loss"), ops::Square(s, ops::Sub(s, ops::MatMul(s, x, w), y)));
    train = ValueOrDie(opt->Minimize(s, loss));
    init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.ok()) << s.status();
    session = ValueOrDie(Session::Create(g, SessionConfig{}));
    EXPECT_TRUE(session->Run({}, {}, {init->name()}).ok());
  }
  // Step: one training step with inputs scaled by `magnitude`.
  Status Step(float magnitude, int step) {
    std::vector<float> xv(kBatch * kIn), yv(kBatch);
    for (int i = 0; i < kBatch * kIn; ++i) xv[i] = magnitude * (0.1f * ((i + step) % 7) - 0.3f);
    for (int i = 0; i < kBatch; ++i) yv[i] = static_cast<float>((i + step) % 2);
    FeedList feeds = {{"x", *Tensor::FromValues<float>(Shape{kBatch, kIn}, xv)},
                      {"y", *Tensor::FromValues<float>(Shape{kBatch, 1}, yv)}};
    std::vector<Tensor> out;
    return session->Run(feeds, {}, {train->name()}, &out);
  }
};

TEST(DenseLossScaleOptimizer, StaticPowerOfTwoScaleTrainsBitForBitLikeNoScaling) {
  DenseModel plain(std::make_shared<AdamOptimizer>(AdamOptions{0.01}));
  DenseModel scaled(std::make_shared<DenseLossScaleOptimizer>(
      std::make_shared<AdamOptimizer>(AdamOptions{0.01}), 65536.0));
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(plain.Step(1.0f, step).ok());
    ASSERT_TRUE(scaled.Step(1.0f, step).ok());
  }
  const auto a = Values(*plain.session, "w/read"), b = Values(*scaled.session, "w/read");
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_NE(a[0], 0.5f);  // it trained
  // The graph multiplies the loss by the constant scale.
  bool found = false;
  for (const Node* n : scaled.g.nodes())
    found = found || n->name().find("scaled_loss") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(DenseLossScaleOptimizer, DynamicSkipsOverflowLowersAndRaisesTheScale) {
  LossScaleOptions o;
  o.dynamic = true;
  o.loss_scale = 65536;
  o.incr_every_n_steps = 2;
  o.max_loss_scale = 131072;
  auto opt = std::make_shared<DenseLossScaleOptimizer>(
      std::make_shared<AdamOptimizer>(AdamOptions{0.01}), o);
  DenseModel m(opt);
  const std::string scale = "loss_scale/loss_scale/read";
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{65536.0f});

  // A good step trains and counts.
  {
    Status st = m.Step(1.0f, 0);
    ASSERT_TRUE(st.ok()) << st;
  }
  const auto w1 = Values(*m.session, "w/read");
  const auto m1 = Values(*m.session, "w/Adam/m/read");
  EXPECT_NE(w1[0], 0.5f);
  EXPECT_EQ(Int(*m.session, "Adam/step/read"), 1);
  EXPECT_EQ(Int(*m.session, "loss_scale/good_steps/read"), 1);

  // Inputs of 1e18 give a finite loss (~1e36) whose scaled gradients overflow float32: the step
  // is skipped entirely and the scale halves.
  ASSERT_TRUE(m.Step(1e18f, 1).ok());
  EXPECT_TRUE(SameBits(Values(*m.session, "w/read"), w1));
  EXPECT_TRUE(SameBits(Values(*m.session, "w/Adam/m/read"), m1));
  EXPECT_EQ(Int(*m.session, "Adam/step/read"), 1);
  EXPECT_EQ(Int(*m.session, "global_step/read"), 2);  // the batch still counts
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{32768.0f});
  EXPECT_EQ(Int(*m.session, "loss_scale/good_steps/read"), 0);

  // Two good steps in a row raise it again; two more would exceed max_loss_scale = 131072 once.
  ASSERT_TRUE(m.Step(1.0f, 2).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{32768.0f});
  ASSERT_TRUE(m.Step(1.0f, 3).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{65536.0f});
  EXPECT_EQ(Int(*m.session, "Adam/step/read"), 3);
  for (int step = 4; step < 8; ++step) ASSERT_TRUE(m.Step(1.0f, step).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{131072.0f});  // capped
  EXPECT_EQ(Int(*m.session, "global_step/read"), 8);
}

TEST(DenseLossScaleOptimizer, LowersOnlyAfterDecrEveryNOverflowsAndNotBelowTheMinimum) {
  LossScaleOptions o;
  o.dynamic = true;
  o.loss_scale = 4;
  o.min_loss_scale = 2;
  o.decr_every_n_nan_or_inf = 2;
  DenseModel m(std::make_shared<DenseLossScaleOptimizer>(
      std::make_shared<SgdOptimizer>(SgdOptions{0.01}), o));
  const std::string scale = "loss_scale/loss_scale/read";
  // 1e30 inputs overflow the loss itself, at any scale.
  ASSERT_TRUE(m.Step(1e30f, 0).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{4.0f});  // one overflow: not yet
  ASSERT_TRUE(m.Step(1e30f, 1).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{2.0f});
  ASSERT_TRUE(m.Step(1e30f, 2).ok());
  ASSERT_TRUE(m.Step(1e30f, 3).ok());
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{2.0f});          // the minimum
  EXPECT_EQ(Values(*m.session, "w/read"), std::vector<float>(kIn, 0.5f));  // never applied
}

TEST(LossScaleOptions, InvalidOptionsNameTheOption) {
  const std::vector<std::pair<std::function<void(LossScaleOptions&)>, const char*>> cases = {
      {[](LossScaleOptions& o) { o.loss_scale = 0.5; }, "loss_scale"},
      {[](LossScaleOptions& o) { o.incr_every_n_steps = 0; }, "incr_every_n_steps"},
      {[](LossScaleOptions& o) { o.decr_every_n_nan_or_inf = 0; }, "decr_every_n_nan_or_inf"},
      {[](LossScaleOptions& o) { o.incr_ratio = 1.0; }, "incr_ratio"},
      {[](LossScaleOptions& o) { o.decr_ratio = 1.0; }, "decr_ratio"},
      {[](LossScaleOptions& o) { o.min_loss_scale = 1e6; }, "min_loss_scale"},
  };
  for (const auto& [set, fragment] : cases) {
    LossScaleOptions o;
    o.dynamic = true;
    set(o);
    const Status s = o.Validate();
    EXPECT_FALSE(s.ok()) << fragment;
    EXPECT_NE(s.message().find(fragment), std::string_view::npos) << s.message();
  }
  // The error reaches the caller from Minimize.
  Graph g;
  Scope s(&g);
  Variable w = Variable::Make(s, "w", Shape{1});
  LossScaleOptions bad;
  bad.loss_scale = -1;
  DenseLossScaleOptimizer opt(std::make_shared<SgdOptimizer>(), bad);
  EXPECT_FALSE(opt.Minimize(s, ops::ReduceSum(s, ops::Square(s, w))).ok());
}

// Sparse: one table, sum-pooled lookups, one dense layer.
struct SparseModel {
  Graph g;
  Scope s{&g};
  Node* train = nullptr;
  std::unique_ptr<Session> session;
  SparseLossScaleOptimizer opt;

  explicit SparseModel(LossScaleOptions o) : opt(std::move(o)) {
    g.set_random_seed(3);
    SparseTable t = ValueOrDie(create_table(s, testing::SmallTable("emb", 4, 256),
                                            SparseOptimizerConfig::LazyAdam(0.01f)));
    Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, 2});
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{kBatch, 1});
    SparseLookupOptions lo;
    lo.combiner = Combiner::kSum;
    Output emb = ValueOrDie(sparse_lookup(s, t, ids, lo));
    Output loss = ops::ReduceMean(s.WithOpName("loss"), ops::Square(s, ops::Mul(s, emb, x)));
    SparseApplyOptions ao;
    ao.increment_global_step = true;
    train = ValueOrDie(opt.Minimize(s, loss, {}, ao));
    Node* init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.ok()) << s.status();
    session = ValueOrDie(Session::Create(g, SessionConfig{}));
    EXPECT_TRUE(session->Run({}, {}, {init->name()}).ok());
  }
  Status Step(float magnitude) {
    std::vector<int64_t> idv = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> xv(kBatch, magnitude);
    FeedList feeds = {{"ids", *Tensor::FromValues<int64_t>(Shape{kBatch, 2}, idv)},
                      {"x", *Tensor::FromValues<float>(Shape{kBatch, 1}, xv)}};
    std::vector<Tensor> out;
    return session->Run(feeds, {}, {train->name()}, &out);
  }
  std::vector<float> Row(int64_t key) {
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "emb"));
    auto row = table->ReadRow(key);
    EXPECT_TRUE(row.ok()) << row.status();
    return row.ok() ? std::vector<float>(row->begin(), row->end()) : std::vector<float>{};
  }
};

TEST(SparseLossScaleOptimizer, DynamicSkipsTheTableUpdateOnOverflow) {
  LossScaleOptions o;
  o.dynamic = true;
  o.incr_every_n_steps = 1;
  o.max_loss_scale = 1 << 20;
  SparseModel m(o);
  const std::string scale = "sparse_loss_scale/loss_scale/read";
  ASSERT_TRUE(m.Step(1.0f).ok());
  const auto row = m.Row(3);
  ASSERT_EQ(row.size(), 12u);  // embedding + LazyAdam m and v: the slots must not move either
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{131072.0f});  // raised after 1 step
  ASSERT_TRUE(m.Step(1e18f).ok());  // finite loss, overflowing scaled gradients
  EXPECT_TRUE(SameBits(m.Row(3), row));
  EXPECT_EQ(Values(*m.session, scale), std::vector<float>{65536.0f});
  ASSERT_TRUE(m.Step(1.0f).ok());
  EXPECT_FALSE(SameBits(m.Row(3), row));  // trains again
  EXPECT_EQ(Int(*m.session, "global_step/read"), 3);
}

TEST(SparseLossScaleOptimizer, StaticScaleMatchesUnscaledSparseTraining) {
  SparseModel scaled(LossScaleOptions{});
  // The same model without scaling.
  Graph g;
  g.set_random_seed(3);
  Scope s(&g);
  SparseTable t = ValueOrDie(
      create_table(s, testing::SmallTable("emb", 4, 256), SparseOptimizerConfig::LazyAdam(0.01f)));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, 2});
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  Output emb = ValueOrDie(sparse_lookup(s, t, ids, lo));
  Output loss = ops::ReduceMean(s.WithOpName("loss"), ops::Square(s, ops::Mul(s, emb, x)));
  SparseApplyOptions ao;
  ao.increment_global_step = true;
  Node* train = ValueOrDie(SparseMinimize(s, loss, {}, ao));
  Node* init = GlobalVariablesInitializer(s);
  auto session = ValueOrDie(Session::Create(g, SessionConfig{}));
  ASSERT_TRUE(session->Run({}, {}, {init->name()}).ok());
  std::vector<int64_t> idv = {1, 2, 3, 4, 5, 6, 7, 8};
  FeedList feeds = {
      {"ids", *Tensor::FromValues<int64_t>(Shape{kBatch, 2}, idv)},
      {"x", *Tensor::FromValues<float>(Shape{kBatch, 1}, std::vector<float>(kBatch, 1.0f))}};
  for (int i = 0; i < 3; ++i) {
    std::vector<Tensor> out;
    ASSERT_TRUE(session->Run(feeds, {}, {train->name()}, &out).ok());
    ASSERT_TRUE(scaled.Step(1.0f).ok());
  }
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "emb"));
  auto row = table->ReadRow(3);
  ASSERT_TRUE(row.ok());
  EXPECT_TRUE(SameBits(std::vector<float>(row->begin(), row->end()), scaled.Row(3)));
}

}  // namespace
}  // namespace recsdk
