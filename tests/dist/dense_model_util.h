// dense_model_util.h: a small deterministic dense model and its data, shared by the
// single-process (distributed_test.cc) and the MPI (mpi_data_parallel_test.cc) tests.
//
// The model: x [rows, 4] -> Dense(8, relu) "fc1" -> Dense(1) "fc2" -> loss = mean((p - y)^2).
// Its initial weights depend only on the graph seed. GlobalBatch(step) is a pure function of the
// step, and ShardOf keeps rows i % size == rank, Shard's rule (recsdk/dataset.h), so every rank
// can build both its own shard and the full batch a single process would train on.
#ifndef RECSDK_TESTS_DIST_DENSE_MODEL_UTIL_H_
#define RECSDK_TESTS_DIST_DENSE_MODEL_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk::testing {

inline constexpr int kIn = 4;

// ModelBatch: rows of x (row-major, kIn per row) and y.
struct ModelBatch {
  int64_t rows = 0;
  std::vector<float> x, y;
};

// GlobalBatch: `rows` rows for `step`, a smooth target of the inputs plus a little structure.
inline ModelBatch GlobalBatch(int step, int64_t rows) {
  ModelBatch b;
  b.rows = rows;
  for (int64_t i = 0; i < rows; ++i) {
    float target = 0;
    for (int j = 0; j < kIn; ++j) {
      const float v = std::sin(0.37f * static_cast<float>(step * rows + i) + 1.3f * j);
      b.x.push_back(v);
      target += (j % 2 == 0 ? 0.5f : -0.25f) * v;
    }
    b.y.push_back(target + 0.1f);
  }
  return b;
}

// ShardOf: rows i with i % size == rank.
inline ModelBatch ShardOf(const ModelBatch& global, int size, int rank) {
  ModelBatch b;
  for (int64_t i = rank; i < global.rows; i += size) {
    b.x.insert(b.x.end(), global.x.begin() + i * kIn, global.x.begin() + (i + 1) * kIn);
    b.y.push_back(global.y[i]);
    ++b.rows;
  }
  return b;
}

struct DenseNet {
  Graph g;
  Scope s{&g};
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
  std::unique_ptr<Session> session;

  // DenseNet: the model for batches of `rows` rows, trained by `opt`, initialised from `seed`.
  // Creates the session and runs the init op unless `create_session` is false (the graph alone,
  // for a MonitoredSession). config: the Session's.
  DenseNet(const std::shared_ptr<Optimizer>& opt, int64_t seed, int64_t rows,
           bool create_session = true, const SessionConfig& config = {}) {
    g.set_random_seed(seed);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{rows, kIn});
    Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{rows, 1});
    layers::DenseOptions fc1;
    fc1.units = 8;
    fc1.activation = layers::Activation::kRelu;
    fc1.name = "fc1";
    layers::DenseOptions fc2;
    fc2.units = 1;
    fc2.name = "fc2";
    Output p = layers::Dense(s, layers::Dense(s, x, fc1), fc2);
    loss = ops::ReduceMean(s.WithOpName("loss"), ops::Square(s, ops::Sub(s, p, y)));
    StatusOr<Node*> t = opt->Minimize(s, loss);
    EXPECT_TRUE(t.ok()) << t.status();
    train = t.ok() ? *t : nullptr;
    init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || !create_session) return;
    StatusOr<std::unique_ptr<Session>> created = Session::Create(g, config);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return;
    session = std::move(*created);
    const Status st = session->Run({}, {}, {init->name()}, nullptr);
    EXPECT_TRUE(st.ok()) << st;
  }

  // Step: one training step on `b`; returns the loss before the update.
  StatusOr<float> Step(const ModelBatch& b) {
    FeedList feeds = {{"x", *Tensor::FromValues<float>(Shape{b.rows, kIn}, b.x)},
                      {"y", *Tensor::FromValues<float>(Shape{b.rows, 1}, b.y)}};
    std::vector<Tensor> out;
    const Status st = session->Run(feeds, {loss.name()}, {train->name()}, &out);
    if (!st.ok()) return st;
    return out[0].scalar<float>();
  }

  // Weights: every trainable variable's values, in creation order, one vector each, read
  // through `other` when given, else through this net's session.
  std::vector<std::vector<float>> Weights(Session* other = nullptr) {
    Session* from = other != nullptr ? other : session.get();
    std::vector<std::vector<float>> all;
    for (const Variable& v : TrainableVariables(g)) {
      StatusOr<std::vector<Tensor>> out = from->Run({}, {v.name() + "/read"});
      EXPECT_TRUE(out.ok()) << v.name() << ": " << out.status();
      if (!out.ok()) return {};
      const Tensor& t = (*out)[0];
      all.emplace_back(t.data<float>(), t.data<float>() + t.num_elements());
    }
    return all;
  }
};

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_DIST_DENSE_MODEL_UTIL_H_
