// Sharded tables under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt): a model with a sparse
// table, trained on N ranks (each on its shard of every global batch, the table sharded over the
// ranks, dense gradients averaged by DistributedOptimizer) ends with the table rows and dense
// weights of one process trained on the full global batches, computed on every rank in the same
// test with a plain table and a plain optimizer. Admission counts add up over the ranks (a key
// seen once on each of two ranks is admitted by a threshold of 2), and the key stage refuses a
// sharded table with the reason. Every wait has a deadline, and CTest a TIMEOUT.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/device/table_resource.h"
#include "src/dist/sharded_table.h"
#include "src/session/passes/pass_manager.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point

namespace recsdk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kDim = 4;
constexpr int kFeatures = 2;
constexpr int64_t kVocab = 40;

// Batch: `rows` rows of ids [rows, kFeatures], dense x [rows, 2] and label [rows, 1].
struct SparseBatch {
  int64_t rows = 0;
  std::vector<int64_t> ids;
  std::vector<float> x, y;
};

// GlobalBatch: a pure function of the step; labels follow the ids' parity and x, so the model
// has something to learn.
SparseBatch GlobalBatch(int step, int64_t rows) {
  SparseBatch b;
  b.rows = rows;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = step * rows + i;
    int64_t odd = 0;
    for (int f = 0; f < kFeatures; ++f) {
      const int64_t id = (r * (7 + 4 * f) + 3 * f) % kVocab + 1000 * f;
      b.ids.push_back(id);
      odd += id % 2;
    }
    const float x0 = std::sin(0.3f * static_cast<float>(r));
    b.x.push_back(x0);
    b.x.push_back(std::cos(0.7f * static_cast<float>(r)));
    b.y.push_back(odd + (x0 > 0 ? 1 : 0) >= 2 ? 1.0f : 0.0f);
  }
  return b;
}

SparseBatch ShardOf(const SparseBatch& g, int size, int rank) {
  SparseBatch b;
  for (int64_t i = rank; i < g.rows; i += size) {
    b.ids.insert(b.ids.end(), g.ids.begin() + i * kFeatures, g.ids.begin() + (i + 1) * kFeatures);
    b.x.insert(b.x.end(), g.x.begin() + i * 2, g.x.begin() + (i + 1) * 2);
    b.y.push_back(g.y[i]);
    ++b.rows;
  }
  return b;
}

// SparseNet: ids -> sparse_lookup (mean over the features' rows) beside x -> Dense(8, relu) ->
// Dense(1) -> sigmoid cross-entropy. The table "emb" admits a key at its second occurrence and
// trains with Adagrad; the dense layers with `opt`.
struct SparseNet {
  Graph g;
  Scope s{&g};
  Output loss;
  Node* train = nullptr;
  std::unique_ptr<Session> session;
  SessionConfig config_;

  // second_table: a second table "emb2" looked up on the same ids (two tables' collectives in a
  // step). config: the Session's.
  SparseNet(const std::shared_ptr<Optimizer>& opt, int64_t rows, bool second_table = false,
            const SessionConfig& config = {})
      : config_(config) {
    g.set_random_seed(5);
    Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{rows, kFeatures});
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{rows, 2});
    Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{rows, 1});
    TableConfig table;
    table.name = "emb";
    table.dim = kDim;
    table.device_vocabulary_size = 4096;
    table.access_threshold = 2;
    table.initializer = Initializer::Uniform(-0.3, 0.3, 17);
    StatusOr<SparseTable> t1 = create_table(s, table, SparseOptimizerConfig::Adagrad(0.2f));
    EXPECT_TRUE(t1.ok()) << t1.status();
    SparseLookupOptions lo;
    lo.combiner = Combiner::kMean;
    StatusOr<Output> emb = sparse_lookup(s, *t1, ids, lo);
    EXPECT_TRUE(emb.ok()) << emb.status();
    std::vector<Output> parts = {*emb, x};
    if (second_table) {
      table.name = "emb2";
      StatusOr<SparseTable> t2 = create_table(s, table, SparseOptimizerConfig::LazyAdam(0.05f));
      EXPECT_TRUE(t2.ok()) << t2.status();
      SparseLookupOptions o2;
      o2.combiner = Combiner::kSum;
      StatusOr<Output> e2 = sparse_lookup(s, *t2, ids, o2);
      EXPECT_TRUE(e2.ok()) << e2.status();
      parts.push_back(*e2);
    }
    Output h = ops::Concat(s, parts, 1);
    layers::DenseOptions fc1;
    fc1.units = 8;
    fc1.activation = layers::Activation::kRelu;
    fc1.name = "fc1";
    layers::DenseOptions fc2;
    fc2.units = 1;
    fc2.name = "fc2";
    Output logits = layers::Dense(s, layers::Dense(s, h, fc1), fc2);
    loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, y, logits));
    StatusOr<Node*> dense = opt->Minimize(s, loss);
    StatusOr<Node*> sparse = SparseMinimize(s, loss);
    EXPECT_TRUE(dense.ok() && sparse.ok());
    train = ops::Group(s, {*dense, *sparse});
    Node* init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.ok()) << s.status();
    StatusOr<std::unique_ptr<Session>> created = Session::Create(g, config_);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return;
    session = std::move(*created);
    EXPECT_TRUE(session->Run({}, {}, {init->name()}, nullptr).ok());
  }

  Status Step(const SparseBatch& b) {
    FeedList feeds = {{"ids", *Tensor::FromValues<int64_t>(Shape{b.rows, kFeatures}, b.ids)},
                      {"x", *Tensor::FromValues<float>(Shape{b.rows, 2}, b.x)},
                      {"y", *Tensor::FromValues<float>(Shape{b.rows, 1}, b.y)}};
    return session->Run(feeds, {}, {train->name()}, nullptr);
  }

  std::vector<float> Weights() {
    std::vector<float> all;
    for (const Variable& v : TrainableVariables(g)) {
      StatusOr<std::vector<Tensor>> out = session->Run({}, {v.name() + "/read"});
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return {};
      const Tensor& t = (*out)[0];
      all.insert(all.end(), t.data<float>(), t.data<float>() + t.num_elements());
    }
    return all;
  }
};

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const float scale = std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-2f});
    EXPECT_LE(std::fabs(a[i] - b[i]), 1e-5f * scale)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

using ShardedTableTest = dist::testing::RanksTest;

TEST_F(ShardedTableTest, RanksTrainAShardedTableLikeOneProcessOnTheGlobalBatches) {
  constexpr int64_t kGlobalRows = 12;
  constexpr int kSteps = 15;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.3}); };
  SparseNet ranks(npu_distributed_optimizer_wrapper(sgd()), kGlobalRows / size_);
  ASSERT_NE(ranks.session, nullptr);
  EmbeddingTable* sharded = *LookupTable(*ranks.session, "emb");
  // The reference: one process's table, made while no decorator shards tables. Its dense
  // optimizer makes no collective; every rank computes the same reference.
  internal::SetTableDecorator(nullptr);
  SparseNet one(sgd(), kGlobalRows);
  ASSERT_NE(one.session, nullptr);
  EmbeddingTable* plain = *LookupTable(*one.session, "emb");
  internal::SetTableDecorator(dist::MaybeShardTable);
  ASSERT_EQ(sharded->size(), 0);
  for (int step = 0; step < kSteps; ++step) {
    const SparseBatch global = GlobalBatch(step, kGlobalRows);
    const Status a = ranks.Step(ShardOf(global, size_, rank_));
    ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a;
    const Status b = one.Step(global);
    ASSERT_TRUE(b.ok()) << b;
  }
  const std::string who = "rank " + std::to_string(rank_) + " vs one process";
  ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  // Each key's row lives on its owner, trained as the one process trained it; the owner holds
  // exactly the admitted keys it owns.
  int64_t owned = 0;
  for (int f = 0; f < kFeatures; ++f) {
    for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
      const StatusOr<std::vector<float>> want = plain->ReadRow(id);
      const StatusOr<std::vector<float>> got = sharded->ReadRow(id);
      if (dist::ShardedTable::Owner(id, size_) != rank_) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
        EXPECT_THAT(std::string(got.status().message()), HasSubstr("held by rank"));
        continue;
      }
      ASSERT_EQ(got.ok(), want.ok()) << who << ", key " << id << ": " << got.status();
      if (!want.ok()) continue;
      ++owned;
      ExpectClose(*got, *want, who + ", row of key " + std::to_string(id));
    }
  }
  EXPECT_EQ(sharded->size(), owned);
  EXPECT_GT(owned, 0);
  EXPECT_LT(owned, plain->size()) << "the other ranks hold the rest";
}

// order_collectives chains every node that makes a collective in id order, so two tables'
// lookups and updates and the dense all-reduce run in one order on every rank even when the
// executor runs independent nodes at once.
TEST_F(ShardedTableTest, AStepsCollectivesRunInOneOrderOnEveryRank) {
  SessionConfig parallel;
  parallel.stream_max_parallel_num = "DNN_V100:4";
  SparseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()), 4,
                /*second_table=*/true, parallel);
  ASSERT_NE(net.session, nullptr);
  for (int step = 0; step < 8; ++step) {
    const Status st = net.Step(ShardOf(GlobalBatch(step, 4 * size_), size_, rank_));
    ASSERT_TRUE(st.ok()) << "rank " << rank_ << " step " << step << ": " << st;
  }
  std::unique_ptr<Graph> copy = net.g.Copy();
  ASSERT_TRUE(internal::RunPass("order_collectives", {}, copy.get()).ok());
  std::vector<Node*> chain;
  for (Node* n : copy->nodes()) {
    const std::string& t = n->type();
    if (t == "AllReduceMean" || t == "SparseLookup" || t == "TableApply") chain.push_back(n);
  }
  ASSERT_GE(chain.size(), 5u) << "two lookups, two applies, the dense all-reduce";
  for (size_t i = 1; i < chain.size(); ++i) {
    const std::vector<Node*>& deps = chain[i]->control_inputs();
    EXPECT_NE(std::find(deps.begin(), deps.end(), chain[i - 1]), deps.end())
        << chain[i]->name() << " does not wait for " << chain[i - 1]->name();
  }
}

TEST_F(ShardedTableTest, TheKeyStageRefusesAShardedTableSayingWhy) {
  SparseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()), 4);
  ASSERT_NE(net.session, nullptr);
  SyntheticOptions d;
  d.num_rows = 8;
  d.vocabulary_sizes = {10};
  StatusOr<std::unique_ptr<Dataset>> data = SyntheticDataset(d);
  ASSERT_TRUE(data.ok()) << data.status();
  StatusOr<std::unique_ptr<KeyStage>> stage = StartAscPipeline(*net.session, std::move(*data));
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stage.status().message()),
              AllOf(HasSubstr("table \"emb\" is sharded over " + std::to_string(size_)),
                    HasSubstr("in-graph lookups")));
}

}  // namespace
}  // namespace recsdk
