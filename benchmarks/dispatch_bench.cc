// dispatch_bench.cc: per-op overhead of the executor. A chain of N scalar Adds costs almost
// nothing to compute, so time per op is dispatch: plan lookup, input gathering, kernel call,
// output allocation and release. Counters: per_op (seconds per op) for the sequential executor and
// for DNN_V100:2 (the parallel ready-queue executor). BM_ObserverCost: the same chain run
// alternately without observers and with a no-op ExecutionObserver (RunOptions), counter
// observed_vs_plain = time with / time without (the price of observing every node).
// BM_AttrRead: what a kernel pays to read a defaulted attribute (Softmax's "axis") through
// NodeAttrs, which takes the declaration the node keeps, against looking the op up in the registry
// on every call (the way before); counter lookup_vs_cached = time of the lookup / time of
// NodeAttrs.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "recsdk/recsdk.h"
#include "src/graph/op_registry.h"

namespace {

void BM_OpDispatch(benchmark::State& state) {
  using namespace recsdk;
  const int chain = static_cast<int>(state.range(0));
  const bool parallel = state.range(1) != 0;
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{});
  Output one = ops::Const(root, 1.0f);
  Output h = x;
  for (int i = 0; i < chain; ++i) h = ops::Add(root, h, one);
  ops::Identity(root.WithOpName("y"), h);
  SessionConfig config;
  if (parallel) config.stream_max_parallel_num = "DNN_V100:2";
  auto session = Session::Create(g, config);
  FeedList feeds = {{"x", Tensor::Scalar<float>(0)}};
  for (auto _ : state) {
    auto out = (*session)->Run(feeds, {"y"});
    benchmark::DoNotOptimize(out);
  }
  // Seconds per op, shown by the report as e.g. "350n".
  state.counters["per_op"] = benchmark::Counter(
      static_cast<double>(chain + 2),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_OpDispatch)
    ->Args({100, 0})
    ->Args({1000, 0})
    ->Args({1000, 1})
    ->Unit(benchmark::kMicrosecond);

class NoOpObserver final : public recsdk::ExecutionObserver {
 public:
  void AfterNode(const recsdk::NodeExecution& e) override { benchmark::DoNotOptimize(e.end_ns); }
};

void BM_ObserverCost(benchmark::State& state) {
  using namespace recsdk;
  using Clock = std::chrono::steady_clock;
  const int chain = static_cast<int>(state.range(0));
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{});
  Output one = ops::Const(root, 1.0f);
  Output h = x;
  for (int i = 0; i < chain; ++i) h = ops::Add(root, h, one);
  ops::Identity(root.WithOpName("y"), h);
  auto session = Session::Create(g);
  FeedList feeds = {{"x", Tensor::Scalar<float>(0)}};
  NoOpObserver observer;
  RunOptions plain, observed;
  observed.observers = {&observer};
  std::vector<Tensor> out;
  double plain_s = 0, observed_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize((*session)->Run(plain, feeds, {"y"}, {}, &out));
    auto t1 = Clock::now();
    benchmark::DoNotOptimize((*session)->Run(observed, feeds, {"y"}, {}, &out));
    auto t2 = Clock::now();
    plain_s += std::chrono::duration<double>(t1 - t0).count();
    observed_s += std::chrono::duration<double>(t2 - t1).count();
  }
  state.counters["observed_vs_plain"] = observed_s / plain_s;
  state.counters["plain_per_op_ns"] =
      1e9 * plain_s / static_cast<double>(state.iterations()) / (chain + 2);
}
BENCHMARK(BM_ObserverCost)->Arg(1000)->Unit(benchmark::kMicrosecond);

// BM_ProfilingCost: the same chain in a plain session and in one with profiling_mode
// (task_trace:training_trace, a Chrome trace file per Run under /tmp/recsdk_bench_profiling),
// alternately; counter profiled_vs_plain = time with / time without (wall), and
// run_thread_cpu_vs_plain = the calling thread's CPU time with / without.
void BM_ProfilingCost(benchmark::State& state) {
  using namespace recsdk;
  using Clock = std::chrono::steady_clock;
  const int chain = static_cast<int>(state.range(0));
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{});
  Output one = ops::Const(root, 1.0f);
  Output h = x;
  for (int i = 0; i < chain; ++i) h = ops::Add(root, h, one);
  ops::Identity(root.WithOpName("y"), h);
  SessionConfig profiled_config;
  profiled_config.profiling_mode = true;
  profiled_config.profiling_options = "task_trace:training_trace";
  profiled_config.fp_point = "x";
  profiled_config.bp_point = "y";
  profiled_config.profiling_dir = "/tmp/recsdk_bench_profiling";
  auto plain = Session::Create(g);
  auto profiled = Session::Create(g, profiled_config);
  if (!plain.ok() || !profiled.ok()) {
    state.SkipWithError("session creation failed");
    return;
  }
  FeedList feeds = {{"x", Tensor::Scalar<float>(0)}};
  std::vector<Tensor> out;
  double plain_s = 0, profiled_s = 0, plain_cpu = 0, profiled_cpu = 0;
  // ThreadCpu: this thread's CPU seconds. The Run executes on the calling thread (one stream), so
  // this is the cost the step itself pays; the trace writer's thread is not in it.
  auto thread_cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  // The profiler prints a summary per run to stderr; keep the benchmark's output readable.
  std::FILE* saved = stderr;
  stderr = std::fopen("/dev/null", "w");
  for (auto _ : state) {
    const double c0 = thread_cpu();
    auto t0 = Clock::now();
    benchmark::DoNotOptimize((*plain)->Run(feeds, {"y"}, {}, &out));
    const double c1 = thread_cpu();
    auto t1 = Clock::now();
    benchmark::DoNotOptimize((*profiled)->Run(feeds, {"y"}, {}, &out));
    auto t2 = Clock::now();
    const double c2 = thread_cpu();
    plain_s += std::chrono::duration<double>(t1 - t0).count();
    profiled_s += std::chrono::duration<double>(t2 - t1).count();
    plain_cpu += c1 - c0;
    profiled_cpu += c2 - c1;
  }
  std::fclose(stderr);
  stderr = saved;
  state.counters["profiled_vs_plain"] = profiled_s / plain_s;
  // run_thread_cpu_vs_plain: the Run thread's own CPU time with / without profiling (the trace
  // writer runs on its own thread; with Runs back to back it still bounds throughput, above).
  state.counters["run_thread_cpu_vs_plain"] = profiled_cpu / plain_cpu;
}
BENCHMARK(BM_ProfilingCost)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_AttrRead(benchmark::State& state) {
  using namespace recsdk;
  using Clock = std::chrono::steady_clock;
  constexpr int kReads = 1000;
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  const Node& node = *root.WithOpName("y").AddNode("Softmax", {x});
  double cached_s = 0, lookup_s = 0;
  int64_t sum = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    for (int i = 0; i < kReads; ++i) sum += internal::NodeAttrs(node).Int("axis");
    auto t1 = Clock::now();
    for (int i = 0; i < kReads; ++i) {
      const internal::OpDef* def = internal::OpRegistry::Global().Find(node.type());
      const int64_t* axis = internal::AttrOf(*def, node.attrs(), "axis").get_if<int64_t>();
      sum += axis != nullptr ? *axis : 0;
    }
    auto t2 = Clock::now();
    cached_s += std::chrono::duration<double>(t1 - t0).count();
    lookup_s += std::chrono::duration<double>(t2 - t1).count();
  }
  benchmark::DoNotOptimize(sum);
  const double reads = static_cast<double>(state.iterations()) * kReads;
  state.counters["cached_ns"] = 1e9 * cached_s / reads;
  state.counters["lookup_ns"] = 1e9 * lookup_s / reads;
  state.counters["lookup_vs_cached"] = lookup_s / cached_s;
}
BENCHMARK(BM_AttrRead)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
