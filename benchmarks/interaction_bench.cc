// interaction_bench.cc: where a CIN (layers::Cin) training step spends its time, at the xdeepfm
// sample's shape (batch 512, 10 fields of dim 8, 32-32 maps, split_half), to decide whether the
// layer needs a fused kernel.
//
// BM_CinVsItsGemms: two graphs run in alternating blocks of steps. "cin": the layer's forward and
// backward (the gradients with respect to the fields and every weight of sum(Cin(fields))).
// "gemms": only the layer's GEMMs and their gradients at the same shapes ([B*D, H_prev*F] x
// [H_prev*F, H] per layer, fed). Counter gemm_share = median over blocks of (gemms block time /
// cin block time): near 1 the GEMMs are the layer and a fused kernel has little to win; well
// below 1 the broadcast Mul, reshapes and reductions around them are worth fusing.
//
// Measured (2 shared cores, other builds running). With the outer product as a broadcast Mul:
// gemm_share 0.19 at 1 and 2 threads, 29-33k samples/s; an op trace of the step (15.8 ms) put
// 5.8 ms in Mul, 2.9 ms in SumToShapeOf (its broadcast gradient), 1.6 ms in Transpose and 4.3 ms
// in the GEMMs (as a BatchMatMul of [B*D, H, 1] by [B*D, 1, F] it was slower still: 16.6 ms in
// BatchMatMul). With the fused BatchOuterProduct the layer uses now: gemm_share 0.41-0.43,
// 73-74k samples/s, 2.4x.
#include <algorithm>
#include <chrono>
#include <random>

#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int64_t kBatch = 512, kFields = 10, kDim = 8;
constexpr int64_t kMaps[] = {32, 32};
// Maps each layer takes in with split_half: the fields, then half of the previous layer's.
constexpr int64_t kIn[] = {kFields, kMaps[0] / 2};

using bench::Check;

struct Model {
  Graph g;
  std::vector<std::string> fetch;
  FeedList feeds;
};

Tensor Random(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  std::vector<float> v(shape.num_elements());
  for (float& x : v) x = u(rng);
  return Check(Tensor::FromValues<float>(shape, v));
}

// Cin: the layer's step; fetches the gradients (fields and weights).
void BuildCin(Model* m) {
  Scope s(&m->g);
  const Shape shape{kBatch, kFields, kDim};
  Output fields = ops::Placeholder(s.WithOpName("fields"), DType::kFloat32, shape);
  layers::CinOptions o;
  o.layer_sizes = {kMaps[0], kMaps[1]};
  Output loss = ops::ReduceSum(s, Check(layers::Cin(s, fields, o)));
  std::vector<Output> xs = {fields};
  for (const Variable& v : TrainableVariables(m->g)) xs.push_back(v.value());
  for (const Output& g : Check(Gradients(s, {loss}, xs))) m->fetch.push_back(g.name());
  m->fetch.push_back(GlobalVariablesInitializer(s)->name());
  m->feeds.push_back({"fields", Random(shape, 1)});
}

// Gemms: the same GEMMs (fed left operands, constant kernels) and their gradients.
void BuildGemms(Model* m) {
  Scope s(&m->g);
  std::vector<Output> ys, xs;
  for (int k = 0; k < 2; ++k) {
    const Shape a_shape{kBatch * kDim, kIn[k] * kFields};
    const std::string name = "a" + std::to_string(k);
    Output a = ops::Placeholder(s.WithOpName(name), DType::kFloat32, a_shape);
    Output w = ops::Placeholder(s.WithOpName("w" + std::to_string(k)), DType::kFloat32,
                                Shape{kIn[k] * kFields, kMaps[k]});
    ys.push_back(ops::ReduceSum(s, ops::MatMul(s, a, w)));
    xs.push_back(a);
    xs.push_back(w);
    m->feeds.push_back({name, Random(a_shape, 2 + k)});
    m->feeds.push_back({"w" + std::to_string(k), Random(Shape{kIn[k] * kFields, kMaps[k]}, 4 + k)});
  }
  for (const Output& g : Check(Gradients(s, {ops::AddN(s, ys)}, xs))) m->fetch.push_back(g.name());
}

void BM_CinVsItsGemms(benchmark::State& state) {
  SessionConfig config;
  config.intra_op_parallelism = static_cast<int>(state.range(0));
  Model models[2];
  BuildCin(&models[0]);
  BuildGemms(&models[1]);
  std::unique_ptr<Session> sessions[2];
  std::vector<std::string> fetch[2];
  for (int i : {0, 1}) {
    sessions[i] = Check(Session::Create(models[i].g, config));
    fetch[i] = models[i].fetch;
  }
  // The CIN's last fetch is its initializer: run it once, then fetch only the gradients.
  if (!sessions[0]->Run({}, {}, {fetch[0].back()}).ok()) std::abort();
  fetch[0].pop_back();
  auto step = [&](int i) {
    std::vector<TensorName> names(fetch[i].begin(), fetch[i].end());
    auto out = sessions[i]->Run(models[i].feeds, names);
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      std::abort();
    }
  };
  constexpr int kSteps = 8;
  std::vector<double> ratios;
  double cin_seconds = 0;
  for (auto _ : state) {
    double t[2] = {0, 0};
    for (int i : {0, 1}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < kSteps; ++k) step(i);
      t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    cin_seconds += t[0];
    ratios.push_back(t[1] / t[0]);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["gemm_share"] = ratios[ratios.size() / 2];
  state.counters["cin_samples_per_s"] =
      static_cast<double>(state.iterations()) * kSteps * kBatch / cin_seconds;
}
BENCHMARK(BM_CinVsItsGemms)->Arg(1)->Arg(2)->Iterations(20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
