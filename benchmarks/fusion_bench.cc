// fusion_bench.cc: what the optional fusion passes (enable_scope_fusion_passes) buy on a
// Criteo-shaped model: 26 tables (dim 16, one id per sample, sum-pooled) and 13 dense features
// concatenated into an MLP 256-128-1, batch 4096, SGD on both sides.
//
// BM_GatherConcatFusion: two Sessions of the same graph, one with "fuse_dense" and one with
// "fuse_dense,fuse_gather_concat", run in alternating blocks of steps. Arg 0: a training step
// (forward, backward, updates); arg 1: the forward concat alone (fetching the features tensor,
// which isolates the fused op). BM_DenseFusion: training steps without any fusion against
// "fuse_dense". Counter fused_vs_plain = median over blocks of (plain block time / fused block
// time).
#include <algorithm>
#include <chrono>
#include <random>

#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kTables = 26, kDim = 16, kDense = 13;
constexpr int64_t kBatch = 4096, kVocab = 100000;

using bench::Check;

struct Model {
  Graph g;
  std::string train_dense, train_sparse, init;
};

void Build(Model* m) {
  m->g.set_random_seed(5);
  Scope s(&m->g);
  std::vector<Output> parts;
  for (int t = 0; t < kTables; ++t) {
    TableConfig c;
    c.name = "t" + std::to_string(t);
    c.dim = kDim;
    c.device_vocabulary_size = 2 * kVocab;
    c.initializer = Initializer::Uniform(-0.05, 0.05, 7);
    SparseTable table = Check(create_table(s, c, SparseOptimizerConfig::SGD(0.05f)));
    Output ids =
        ops::Placeholder(s.WithOpName("ids" + std::to_string(t)), DType::kInt64, Shape{kBatch, 1});
    SparseLookupOptions lo;
    lo.combiner = Combiner::kSum;
    parts.push_back(Check(sparse_lookup(s, table, ids, lo)));
  }
  parts.push_back(ops::Placeholder(s.WithOpName("dense"), DType::kFloat32, Shape{kBatch, kDense}));
  Output x = ops::Concat(s.WithOpName("features"), parts, 1);
  for (int units : {256, 128}) {
    layers::DenseOptions d;
    d.units = units;
    d.activation = layers::Activation::kRelu;
    x = layers::Dense(s, x, d);
  }
  layers::DenseOptions out;
  out.units = 1;
  Output logits = layers::Dense(s, x, out);
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kBatch, 1});
  ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  SgdOptimizer sgd(SgdOptions{0.05});
  m->train_dense = Check(sgd.Minimize(s, Output(m->g.FindNode("loss"), 0)))->name();
  m->train_sparse = Check(SparseMinimize(s, Output(m->g.FindNode("loss"), 0)))->name();
  m->init = GlobalVariablesInitializer(s)->name();
}

std::vector<FeedList> MakeFeeds(int n) {
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<FeedList> out(n);
  for (FeedList& f : out) {
    for (int t = 0; t < kTables; ++t) {
      std::vector<int64_t> v(kBatch);
      for (int64_t& x : v) x = id(rng);
      f.push_back(
          {"ids" + std::to_string(t), Check(Tensor::FromValues<int64_t>(Shape{kBatch, 1}, v))});
    }
    std::vector<float> d(kBatch * kDense), y(kBatch);
    for (float& x : d) x = u(rng);
    for (float& x : y) x = u(rng) < 0.25f ? 1.0f : 0.0f;
    f.push_back({"dense", Check(Tensor::FromValues<float>(Shape{kBatch, kDense}, d))});
    f.push_back({"y", Check(Tensor::FromValues<float>(Shape{kBatch, 1}, y))});
  }
  return out;
}

// RunPair: alternating blocks of steps of the two configs; sets fused_vs_plain.
void RunPair(benchmark::State& state, const char* plain_passes, const char* fused_passes,
             bool train) {
  Model m;
  Build(&m);
  SessionConfig plain;
  plain.enable_scope_fusion_passes = plain_passes;
  SessionConfig fused;
  fused.enable_scope_fusion_passes = fused_passes;
  std::unique_ptr<Session> sessions[2] = {Check(Session::Create(m.g, plain)),
                                          Check(Session::Create(m.g, fused))};
  const std::vector<FeedList> feeds = MakeFeeds(8);
  for (auto& s : sessions) {
    if (!s->Run({}, {}, {m.init}).ok()) std::abort();
  }
  auto step = [&](Session& s, const FeedList& f) {
    auto out = train ? s.Run(f, {"loss"}, {m.train_dense, m.train_sparse}) : s.Run(f, {"features"});
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      std::abort();
    }
  };
  constexpr int kSteps = 4;
  std::vector<double> ratios;
  int64_t i = 0;
  for (auto _ : state) {
    double t[2] = {0, 0};
    for (int which : {0, 1}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < kSteps; ++k) step(*sessions[which], feeds[(i + k) % feeds.size()]);
      t[which] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    i += kSteps;
    ratios.push_back(t[0] / t[1]);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["fused_vs_plain"] = ratios[ratios.size() / 2];
  state.SetLabel(train ? "training step" : "forward concat only");
}

void BM_GatherConcatFusion(benchmark::State& state) {
  RunPair(state, "fuse_dense", "fuse_dense,fuse_gather_concat", state.range(0) == 0);
}
BENCHMARK(BM_GatherConcatFusion)->Arg(0)->Arg(1)->Iterations(15)->Unit(benchmark::kMillisecond);

void BM_DenseFusion(benchmark::State& state) { RunPair(state, "", "fuse_dense", true); }
BENCHMARK(BM_DenseFusion)->Iterations(15)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
