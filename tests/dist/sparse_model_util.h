// sparse_model_util.h: a small model with a sparse table and its data, shared by the MPI tests
// of sharded tables (mpi_sharded_table_test.cc) and of their checkpoints (mpi_reshard_test.cc).
//
// GlobalBatch(step, rows) is a pure function of the step and ShardOf keeps rows i % size == rank
// (Shard's rule), so every rank can build both its own shard and the full batch one process would
// train on. SparseNet: ids -> sparse_lookup (mean over the features' rows) beside x ->
// Dense(8, relu) -> Dense(1) -> sigmoid cross-entropy; the table "emb" admits a key at its second
// occurrence and trains with Adagrad, the dense layers with the optimizer given.
#ifndef RECSDK_TESTS_DIST_SPARSE_MODEL_UTIL_H_
#define RECSDK_TESTS_DIST_SPARSE_MODEL_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk::testing::sparse {

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
inline SparseBatch GlobalBatch(int step, int64_t rows) {
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

inline SparseBatch ShardOf(const SparseBatch& g, int size, int rank) {
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
  Output logits;
  Node* train = nullptr;
  std::unique_ptr<Session> session;
  SessionConfig config_;

  // second_table: a second table "emb2" looked up on the same ids (two tables' collectives in a
  // step). config: the Session's. emb_is_dp: "emb" has TableConfig::is_dp (replicated on every
  // rank; "emb2" stays sharded).
  SparseNet(const std::shared_ptr<Optimizer>& opt, int64_t rows, bool second_table = false,
            const SessionConfig& config = {}, bool emb_is_dp = false)
      : config_(config) {
    g.set_random_seed(5);
    Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{rows, kFeatures});
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{rows, 2});
    Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{rows, 1});
    TableConfig table;
    table.name = "emb";
    table.dim = kDim;
    // N ranks must train like one process on the global batches (each rank's loss is the mean
    // over its share).
    table.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";
    table.device_vocabulary_size = 4096;
    table.access_threshold = 2;
    table.initializer = Initializer::Uniform(-0.3, 0.3, 17);
    table.is_dp = emb_is_dp;
    StatusOr<SparseTable> t1 = create_table(s, table, SparseOptimizerConfig::Adagrad(0.2f));
    EXPECT_TRUE(t1.ok()) << t1.status();
    SparseLookupOptions lo;
    lo.combiner = Combiner::kMean;
    StatusOr<Output> emb = sparse_lookup(s, *t1, ids, lo);
    EXPECT_TRUE(emb.ok()) << emb.status();
    std::vector<Output> parts = {*emb, x};
    if (second_table) {
      table.name = "emb2";
      table.is_dp = false;
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
    logits = layers::Dense(s, layers::Dense(s, h, fc1), fc2);
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

inline void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const float scale = std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-2f});
    EXPECT_LE(std::fabs(a[i] - b[i]), 1e-5f * scale)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

}  // namespace recsdk::testing::sparse

#endif  // RECSDK_TESTS_DIST_SPARSE_MODEL_UTIL_H_
