// deterministic_test.cc: SessionConfig::deterministic: a small sparse + dense model trained with
// the same seed and data gives bitwise-identical losses, dense weights and table rows at 1 and at
// 2 intra-op threads (and at DNN_V100:2). Sizes are chosen so the kernels' parallel loops do split
// at 2 threads (batch 512, 64-wide layers).
#include <gtest/gtest.h>

#include <cstring>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int kBatch = 512, kIds = 4, kDim = 16;

struct Result {
  std::vector<float> losses;
  std::vector<float> kernel;
  std::vector<float> rows;
};

Result Train(const SessionConfig& config) {
  Graph g;
  g.set_random_seed(7);
  Scope s(&g);
  SparseTable t = ValueOrDie(
      create_table(s, testing::SmallTable("emb", kDim, 4096), SparseOptimizerConfig::SGD(0.05f)));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, kIds});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  Output emb = ValueOrDie(sparse_lookup(s, t, ids, lo));
  layers::DenseOptions d1;
  d1.units = 64;
  d1.activation = layers::Activation::kRelu;
  d1.name = "fc1";
  layers::DenseOptions d2;
  d2.units = 1;
  d2.name = "fc2";
  Output logits = layers::Dense(s, layers::Dense(s, emb, d1), d2);
  Output loss =
      ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  SgdOptimizer sgd(SgdOptions{0.1});
  Node* dense = ValueOrDie(sgd.Minimize(s, loss));
  Node* sparse = ValueOrDie(SparseMinimize(s, loss));
  Node* init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  auto session = ValueOrDie(Session::Create(g, config));
  EXPECT_TRUE(session->Run({}, {}, {init->name()}).ok());
  Result r;
  std::vector<int64_t> id_values(kBatch * kIds);
  std::vector<float> labels(kBatch);
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < kBatch * kIds; ++i) id_values[i] = (i * 7919 + step * 104729) % 3001;
    for (int i = 0; i < kBatch; ++i) labels[i] = static_cast<float>((i + step) % 3 == 0);
    FeedList feeds = {{"ids", *Tensor::FromValues<int64_t>(Shape{kBatch, kIds}, id_values)},
                      {"y", *Tensor::FromValues<float>(Shape{kBatch, 1}, labels)}};
    auto out = session->Run(feeds, {loss}, {dense->name(), sparse->name()});
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) r.losses.push_back((*out)[0].data<float>()[0]);
  }
  auto kernel = ValueOrDie(session->Run({}, {"fc1/kernel/read"}));
  r.kernel.assign(kernel[0].data<float>(), kernel[0].data<float>() + kernel[0].num_elements());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "emb"));
  for (int64_t key : {0, 17, 1234, 3000}) {
    auto row = table->ReadRow(key);
    if (row.ok()) r.rows.insert(r.rows.end(), row->begin(), row->end());
  }
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DeterministicTest, BitwiseIdenticalAtOneAndTwoThreads) {
  SessionConfig one;
  one.deterministic = true;
  one.intra_op_parallelism = 1;
  SessionConfig two = one;
  two.intra_op_parallelism = 2;
  SessionConfig two_streams = two;
  two_streams.stream_max_parallel_num = "DNN_V100:2";
  const Result a = Train(one), b = Train(two), c = Train(two_streams);
  ASSERT_EQ(a.losses.size(), 4u);
  EXPECT_FALSE(a.rows.empty());
  EXPECT_NE(a.losses.front(), a.losses.back());  // it trained
  for (const Result* r : {&b, &c}) {
    EXPECT_TRUE(SameBits(a.losses, r->losses));
    EXPECT_TRUE(SameBits(a.kernel, r->kernel));
    EXPECT_TRUE(SameBits(a.rows, r->rows));
  }
}

}  // namespace
}  // namespace recsdk
