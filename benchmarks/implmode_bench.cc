// implmode_bench.cc: op_select_implmode's variants (src/device/cpu/implmode_kernels.cc) on 1M
// float32 elements, one intra-op thread. Each benchmark runs the op alternately in
// high_precision and high_performance sessions; counter performance_vs_precision = time of
// high_precision / time of high_performance (the speed-up), and ns_per_element of each.
#include <benchmark/benchmark.h>

#include <chrono>

#include "recsdk/recsdk.h"

namespace {

constexpr int64_t kN = 1 << 20;

std::unique_ptr<recsdk::Session> Make(const char* op, const char* mode) {
  using namespace recsdk;
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{kN / 1024, 1024});
  root.WithOpName("y").AddNode(op, {x});
  SessionConfig c;
  c.op_select_implmode = mode;
  c.intra_op_parallelism = 1;
  auto s = Session::Create(g, c);
  return s.ok() ? std::move(*s) : nullptr;
}

void BM_ImplMode(benchmark::State& state, const char* op, float lo, float hi) {
  using namespace recsdk;
  using Clock = std::chrono::steady_clock;
  auto precise = Make(op, "high_precision");
  auto fast = Make(op, "high_performance");
  if (precise == nullptr || fast == nullptr) {
    state.SkipWithError("session creation failed");
    return;
  }
  std::vector<float> values(kN);
  for (int64_t i = 0; i < kN; ++i) values[i] = lo + (hi - lo) * static_cast<float>(i) / kN;
  FeedList feeds = {{"x", *Tensor::FromValues<float>(Shape{kN / 1024, 1024}, values)}};
  std::vector<Tensor> out;
  double precise_s = 0, fast_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(precise->Run(feeds, {"y"}, {}, &out));
    auto t1 = Clock::now();
    benchmark::DoNotOptimize(fast->Run(feeds, {"y"}, {}, &out));
    auto t2 = Clock::now();
    precise_s += std::chrono::duration<double>(t1 - t0).count();
    fast_s += std::chrono::duration<double>(t2 - t1).count();
  }
  const double n = static_cast<double>(state.iterations()) * kN;
  state.counters["performance_vs_precision"] = precise_s / fast_s;
  state.counters["precision_ns_per_element"] = 1e9 * precise_s / n;
  state.counters["performance_ns_per_element"] = 1e9 * fast_s / n;
}
BENCHMARK_CAPTURE(BM_ImplMode, Exp, "Exp", -20.f, 20.f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ImplMode, Log, "Log", 1e-3f, 100.f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ImplMode, Sigmoid, "Sigmoid", -15.f, 15.f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ImplMode, Tanh, "Tanh", -5.f, 5.f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ImplMode, Gelu, "Gelu", -6.f, 6.f)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ImplMode, Softmax, "Softmax", -30.f, 30.f)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
