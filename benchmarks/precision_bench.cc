// precision_bench.cc: what precision_mode allow_mix_precision buys on this CPU, one intra-op
// thread, float32 and bfloat16 run alternately in the same iteration.
//
//   BM_Gemm/m/n/k:   the float32 GEMM the MatMul kernel uses (Fast().sgemm) against the bfloat16
//                    GEMM (Bf16GemmSingleThread, operands already bfloat16), DLRM's shapes.
//   BM_WeightPacking/k/n: what weights kept pre-packed for the GEMM (variable_format_optimize)
//                    could save on the product x[m,k] w[k,n]. Both kernels pack w into panels on
//                    every call; the cost per call of that (and of the other per-call work) is at
//                    most t(16 rows) - 16/4096 t(4096 rows). Counters pack_share_{fp32,bf16} =
//                    that bound / t(4096 rows): an upper bound on the saving at batch 4096.
//   BM_TrainStep/b:  a training step (forward, backward, Adam) of DLRM's top MLP 367-512-256-1
//                    at batch b in a float32 Session and in a mixed-precision Session; the mixed
//                    step includes its casts.
// Counter bf16_vs_fp32 = float32 time / bfloat16 time (the speed-up; _cpu: process CPU time, the
// figure to quote on a loaded machine); for the steps also
// loss_rel_diff, |loss_fp32 - loss_mixed| / loss_fp32 after the iterations (both sessions see the
// same batches). Without AVX-512 BF16 the bf16 side is the scalar emulation (slower; the
// counter shows it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <random>

#include "recsdk/recsdk.h"
#include "src/device/cpu/bf16_gemm.h"
#include "src/device/cpu/fast_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// CpuNow: this process's CPU seconds. On a loaded machine wall time mostly measures the wait for a
// core; with one intra-op thread the CPU time is the work, so the steps report both.
double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void BM_Gemm(benchmark::State& state) {
  using namespace recsdk::internal;
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  ConvertF32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  ConvertF32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  double fp32 = 0, bf16 = 0, c32 = 0, c16 = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    double cpu0 = CpuNow();
    Fast().sgemm(m, n, k, a.data(), k, false, b.data(), n, false, c.data(), n);
    fp32 += Since(t0);
    c32 += CpuNow() - cpu0;
    benchmark::DoNotOptimize(c.data());
    t0 = Clock::now();
    cpu0 = CpuNow();
    Bf16GemmSingleThread(m, n, k, a16.data(), k, false, b16.data(), n, false, c.data(), n);
    bf16 += Since(t0);
    c16 += CpuNow() - cpu0;
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * m * n * k * static_cast<double>(state.iterations());
  state.counters["bf16_vs_fp32"] = fp32 / bf16;
  state.counters["bf16_vs_fp32_cpu"] = c32 / c16;
  state.counters["fp32_gflops_cpu"] = flops / c32 * 1e-9;
  state.counters["bf16_gflops_cpu"] = flops / c16 * 1e-9;
  state.counters["avx512_bf16"] = HasBf16DotProducts() ? 1 : 0;
}
BENCHMARK(BM_Gemm)
    ->Args({4096, 512, 367})
    ->Args({4096, 256, 512})
    ->Args({512, 367, 4096})  // a weight gradient: k is the batch
    ->Args({4096, 512, 13})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_WeightPacking(benchmark::State& state) {
  using namespace recsdk::internal;
  const int64_t k = state.range(0), n = state.range(1), big = 4096, small = 16;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> a(big * k), b(k * n), c(big * n);
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  ConvertF32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  ConvertF32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  double t32[2] = {0, 0}, t16[2] = {0, 0};  // [small, big], CPU seconds
  constexpr int kSmallReps = 64;
  for (auto _ : state) {
    for (int which : {0, 1}) {
      const int64_t m = which == 0 ? small : big;
      const int reps = which == 0 ? kSmallReps : 1;
      double t0 = CpuNow();
      for (int r = 0; r < reps; ++r) {
        Fast().sgemm(m, n, k, a.data(), k, false, b.data(), n, false, c.data(), n);
      }
      t32[which] += (CpuNow() - t0) / reps;
      t0 = CpuNow();
      for (int r = 0; r < reps; ++r) {
        Bf16GemmSingleThread(m, n, k, a16.data(), k, false, b16.data(), n, false, c.data(), n);
      }
      t16[which] += (CpuNow() - t0) / reps;
      benchmark::DoNotOptimize(c.data());
    }
  }
  auto share = [&](const double* t) {
    return std::max(0.0, t[0] - static_cast<double>(small) / big * t[1]) / t[1];
  };
  state.counters["pack_share_fp32"] = share(t32);
  state.counters["pack_share_bf16"] = share(t16);
}
// The weights of DLRM's MLPs (bottom 13-512-256-16, top 367-512-256-1) with k >= 32.
BENCHMARK(BM_WeightPacking)
    ->Args({512, 256})
    ->Args({256, 16})
    ->Args({367, 512})
    ->Args({256, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

struct TopMlp {
  recsdk::Graph g;
  recsdk::Output loss;
  recsdk::Node* train = nullptr;
  std::unique_ptr<recsdk::Session> session;
};

std::unique_ptr<TopMlp> MakeTopMlp(int64_t batch, const char* precision_mode) {
  using namespace recsdk;
  auto m = std::make_unique<TopMlp>();
  m->g.set_random_seed(5);
  Scope s(&m->g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{batch, 367});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{batch, 1});
  layers::MlpOptions mo;
  mo.hidden_units = {512, 256};
  mo.output_units = 1;
  mo.name = "top";
  Output logits = layers::Mlp(s, x, mo);
  m->loss = ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  AdamOptimizer adam(AdamOptions{0.001});
  auto train = adam.Minimize(s, m->loss);
  Node* init = GlobalVariablesInitializer(s);
  if (!train.ok() || !s.ok()) return nullptr;
  m->train = *train;
  SessionConfig c;
  c.intra_op_parallelism = 1;
  c.precision_mode = precision_mode;
  auto session = Session::Create(m->g, c);
  if (!session.ok() || !(*session)->Run({}, {}, {init->name()}).ok()) return nullptr;
  m->session = std::move(*session);
  return m;
}

void BM_TrainStep(benchmark::State& state) {
  using namespace recsdk;
  const int64_t batch = state.range(0);
  auto fp32 = MakeTopMlp(batch, "must_keep_origin_dtype");
  auto mixed = MakeTopMlp(batch, "allow_mix_precision");
  if (fp32 == nullptr || mixed == nullptr) {
    state.SkipWithError("model build failed");
    return;
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  std::vector<FeedList> feeds;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> xv(batch * 367), yv(batch);
    for (auto& v : xv) v = dist(rng);
    for (int64_t r = 0; r < batch; ++r)
      yv[r] = xv[r * 367] + 0.5f * xv[r * 367 + 1] > 0 ? 1.0f : 0.0f;
    feeds.push_back({{"x", *Tensor::FromValues<float>(Shape{batch, 367}, xv)},
                     {"y", *Tensor::FromValues<float>(Shape{batch, 1}, yv)}});
  }
  double t32 = 0, t16 = 0, c32 = 0, c16 = 0;
  float loss32 = 0, loss16 = 0;
  int64_t step = 0;
  std::vector<Tensor> out;
  for (auto _ : state) {
    const FeedList& f = feeds[step++ % feeds.size()];
    auto t0 = Clock::now();
    double cpu0 = CpuNow();
    if (!fp32->session->Run(f, {fp32->loss}, {fp32->train->name()}, &out).ok()) {
      state.SkipWithError("fp32 step failed");
      return;
    }
    t32 += Since(t0);
    c32 += CpuNow() - cpu0;
    loss32 = out[0].data<float>()[0];
    t0 = Clock::now();
    cpu0 = CpuNow();
    if (!mixed->session->Run(f, {mixed->loss}, {mixed->train->name()}, &out).ok()) {
      state.SkipWithError("mixed step failed");
      return;
    }
    t16 += Since(t0);
    c16 += CpuNow() - cpu0;
    loss16 = out[0].data<float>()[0];
  }
  state.counters["bf16_vs_fp32"] = t32 / t16;
  state.counters["bf16_vs_fp32_cpu"] = c32 / c16;
  state.counters["loss_rel_diff"] = std::fabs(loss32 - loss16) / loss32;
  state.counters["steps"] = static_cast<double>(step);
}
BENCHMARK(BM_TrainStep)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

}  // namespace

BENCHMARK_MAIN();
