// hash_optimizers_test.cc: the spec's sparse optimizer objects (src/session/hash_optimizers.cc):
// a model trained through create_hash_optimizer / get_dense_and_sparse_variable (estimator.h) /
// compute_gradients / apply_gradients equals the model trained through SparseOptimizerConfig and
// SparseMinimize, for LazyAdam, Adagrad, SGD and FTRL; misuse names the table and the fix.
#include "recsdk/hash_optimizers.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::SmallTable;
using testing::ValueOrDie;

constexpr int64_t kBatch = 8;
const char* const kTables[] = {"lazy_adam", "adagrad", "sgd", "ftrl"};

SparseOptimizerConfig OldConfig(int i) {
  switch (i) {
    case 0:
      return SparseOptimizerConfig::LazyAdam(0.01f);
    case 1:
      return SparseOptimizerConfig::Adagrad(0.05f);
    case 2:
      return SparseOptimizerConfig::SGD(0.1f, 0.01f);
    default:
      return SparseOptimizerConfig::FTRL(0.05f, -0.5f, 0.1f, 0.001f, 0.01f);
  }
}

HashOptimizer NewOptimizer(int i) {
  switch (i) {
    case 0:
      return ValueOrDie(optimizers::lazy_adam::create_hash_optimizer({.learning_rate = 0.01f}));
    case 1:
      return ValueOrDie(optimizers::adagrad::create_hash_optimizer({.learning_rate = 0.05f}));
    case 2:
      return ValueOrDie(optimizers::gradient_descent::create_hash_optimizer(
          {.learning_rate = 0.1f, .weight_decay = 0.01f}));
    default:
      return ValueOrDie(
          optimizers::ftrl::create_hash_optimizer({.learning_rate = 0.05f,
                                                   .l1_regularization_strength = 0.001f,
                                                   .l2_regularization_strength = 0.01f}));
  }
}

struct Model {
  Graph graph;
  std::vector<Output> ids;
  Output label, loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

// Four tables, one per rule, each looked up by its own id column; a small MLP; Adam for dense.
// spec_way: the spec's objects; otherwise SparseOptimizerConfig and SparseMinimize. scaled: the
// sparse side under static loss scaling 65536 (the guide's SparseLossScaleOptimizer).
void Build(Model* m, bool spec_way, bool scaled = false) {
  Scope s(&m->graph);
  m->graph.set_random_seed(5);
  std::vector<Output> parts;
  std::vector<HashOptimizer> hash;
  for (int i = 0; i < 4; ++i) {
    SparseTable t = spec_way ? ValueOrDie(create_table(s, SmallTable(kTables[i], 3),
                                                       hash.emplace_back(NewOptimizer(i))))
                             : ValueOrDie(create_table(s, SmallTable(kTables[i], 3), OldConfig(i)));
    m->ids.push_back(ops::Placeholder(s, DType::kInt64, Shape{kBatch, 2}));
    SparseLookupOptions o;
    o.combiner = Combiner::kMean;
    parts.push_back(ValueOrDie(sparse_lookup(s, t, m->ids.back(), o)));
  }
  m->label = ops::Placeholder(s, DType::kFloat32, Shape{kBatch, 1});
  Output logits =
      layers::Mlp(s, ops::Concat(s, parts, 1), {.hidden_units = {6}, .output_units = 1});
  m->loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, m->label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  std::vector<Node*> train;
  if (spec_way) {
    auto [dense_variables, sparse_variables] = ValueOrDie(get_dense_and_sparse_variable(&m->graph));
    EXPECT_EQ(dense_variables.size(), TrainableVariables(m->graph).size());
    EXPECT_FALSE(dense_variables.empty());
    ASSERT_EQ(sparse_variables.size(), 4u);
    GradsAndVars dense_grads = ValueOrDie(adam.ComputeGradients(s, m->loss, dense_variables));
    const Variable global_step = GetOrCreateGlobalStep(s);
    train.push_back(ValueOrDie(adam.ApplyGradients(s, dense_grads, &global_step)));
    // One optimizer per table here; the guide has one for all, the same calls.
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(sparse_variables[i].table_name(), kTables[i]);
      const std::vector<SparseTable> var_list = {sparse_variables[i]};
      SparseLossScaleOptimizer loss_scaled(hash[i], 65536);
      std::vector<SparseGradients> sparse_grads =
          scaled ? ValueOrDie(loss_scaled.compute_gradients(s, m->loss, var_list))
                 : ValueOrDie(hash[i].compute_gradients(s, m->loss, var_list));
      ASSERT_EQ(sparse_grads.size(), 1u);
      SparseGradsAndVars grads_and_vars;
      for (size_t k = 0; k < sparse_grads.size(); ++k) {
        grads_and_vars.emplace_back(sparse_grads[k], var_list[k]);
      }
      train.push_back(scaled ? ValueOrDie(loss_scaled.apply_gradients(s, grads_and_vars))
                             : ValueOrDie(hash[i].apply_gradients(s, grads_and_vars)));
    }
  } else {
    train.push_back(ValueOrDie(adam.Minimize(s, m->loss)));
    train.push_back(scaled ? ValueOrDie(SparseLossScaleOptimizer(65536).Minimize(s, m->loss))
                           : ValueOrDie(SparseMinimize(s, m->loss)));
  }
  m->train = ops::Group(s, train);
  m->init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> rows;  // per table, keys 0..19
};

Trained Train(Model* m) {
  Trained r;
  auto session = ValueOrDie(Session::Create(m->graph));
  EXPECT_TRUE(session->Run({}, {}, {m->init}).ok());
  uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>((x >> 33) % 20);
  };
  for (int step = 0; step < 30; ++step) {
    FeedList feeds;
    for (const Output& ids : m->ids) {
      std::vector<int64_t> v(kBatch * 2);
      for (auto& k : v) k = next();
      feeds.emplace_back(ids, Ids(kBatch, 2, v));
    }
    std::vector<float> labels(kBatch);
    for (auto& l : labels) l = static_cast<float>(next() % 2);
    feeds.emplace_back(m->label, ValueOrDie(Tensor::FromValues<float>(
                                     Shape{kBatch, 1}, absl::MakeConstSpan(labels))));
    auto out = ValueOrDie(session->Run(feeds, {m->loss}, {m->train}));
    r.losses.push_back(out[0].data<float>()[0]);
  }
  for (const char* name : kTables) {
    EmbeddingTable* t = ValueOrDie(LookupTable(*session, name));
    std::vector<float> all;
    for (int64_t k = 0; k < 20; ++k) {
      auto row = t->ReadRow(k);
      if (row.ok()) all.insert(all.end(), row->begin(), row->end());
    }
    r.rows.push_back(all);
  }
  return r;
}

TEST(HashOptimizersTest, SpecObjectsTrainExactlyAsSparseMinimize) {
  Model old_way, spec_way;
  Build(&old_way, false);
  Build(&spec_way, true);
  const Trained expected = Train(&old_way);
  const Trained got = Train(&spec_way);
  ASSERT_EQ(expected.losses.size(), 30u);
  EXPECT_EQ(got.losses, expected.losses);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(expected.rows[i].empty()) << kTables[i];
    EXPECT_EQ(got.rows[i], expected.rows[i]) << kTables[i];
  }
  EXPECT_LT(expected.losses.back(), expected.losses.front() + 1.0f);
}

TEST(HashOptimizersTest, LossScaledSpecObjectsTrainAsTheScaledMinimize) {
  Model old_way, spec_way;
  Build(&old_way, false, true);
  Build(&spec_way, true, true);
  const Trained expected = Train(&old_way);
  const Trained got = Train(&spec_way);
  ASSERT_EQ(expected.losses.size(), 30u);
  EXPECT_EQ(got.losses, expected.losses);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.rows[i], expected.rows[i]) << kTables[i];
  // Without an inner optimizer the spec's methods are refused, naming the fix.
  Graph g;
  Scope s(&g);
  SparseLossScaleOptimizer bare(65536);
  auto refused = bare.compute_gradients(s, ops::Const(s, 1.0f));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("create_hash_optimizer"),
            std::string::npos)
      << refused.status();
}

TEST(HashOptimizersTest, MisuseNamesTheTableAndTheFix) {
  Graph g;
  Scope s(&g);
  HashOptimizer lazy_adam = ValueOrDie(optimizers::lazy_adam::create_hash_optimizer());
  HashOptimizer adagrad = ValueOrDie(optimizers::adagrad::create_hash_optimizer());
  EXPECT_EQ(lazy_adam.name(), "LazyAdam");
  SparseTable a = ValueOrDie(create_table(s, SmallTable("a", 2), lazy_adam));
  SparseTable b = ValueOrDie(create_table(s, SmallTable("b", 2), adagrad));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{2, 2});
  Output loss = ops::ReduceSum(
      s, ops::Add(s, ValueOrDie(sparse_lookup(s, a, ids)), ValueOrDie(sparse_lookup(s, b, ids))));
  // b was created with Adagrad: LazyAdam's objects refuse it, naming it.
  auto wrong = lazy_adam.compute_gradients(s, loss, {a, b});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(wrong.status().message()).find("\"b\""), std::string::npos)
      << wrong.status();
  EXPECT_NE(std::string(wrong.status().message()).find("create_table"), std::string::npos);
  // A gradient paired with another table.
  std::vector<SparseGradients> grads = ValueOrDie(lazy_adam.compute_gradients(s, loss, {a}));
  std::vector<SparseGradients> grads_b = ValueOrDie(adagrad.compute_gradients(s, loss, {b}));
  auto mispaired = adagrad.apply_gradients(s, {{grads[0], b}, {grads_b[0], b}});
  ASSERT_FALSE(mispaired.ok());
  EXPECT_NE(std::string(mispaired.status().message()).find("paired"), std::string::npos)
      << mispaired.status();
  EXPECT_TRUE(adagrad.apply_gradients(s, {{grads_b[0], b}}).ok());
  // SGD has no default learning rate, as in the spec.
  auto no_rate = optimizers::gradient_descent::create_hash_optimizer({});
  ASSERT_FALSE(no_rate.ok());
  EXPECT_NE(std::string(no_rate.status().message()).find("learning_rate"), std::string::npos)
      << no_rate.status();
  // The by-address variants are what use_dynamic_expansion tables take.
  HashOptimizer by_address = ValueOrDie(optimizers::lazy_adam::create_hash_optimizer_by_address());
  EXPECT_TRUE(by_address.config().ByAddress());
  TableConfig grows = SmallTable("grows", 2);
  grows.use_dynamic_expansion = true;
  EXPECT_TRUE(create_table(s, grows, by_address).ok());
}

}  // namespace
}  // namespace recsdk
