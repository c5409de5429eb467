// gemm_bench.cc: GFLOP/s of the MatMul kernel (the ISA-dispatched sgemm the CPU backend uses,
// and the MatMul op through a Session) against Eigen called directly. This file is compiled with
// -march=native so the Eigen baseline is Eigen at its best on this machine, not a baseline build.
// Counter vs_eigen = kernel GFLOP/s / Eigen GFLOP/s, both single-threaded, measured in one run.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <random>

#include "recsdk/recsdk.h"
#include "src/device/cpu/fast_kernels.h"

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename Fn>
double SecondsPerCall(Fn&& fn, int reps) {
  fn();  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void BM_SgemmKernelVsEigen(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Mat a = Mat::Random(n, n), b = Mat::Random(n, n), c(n, n), c2(n, n);
  const auto& fast = recsdk::internal::Fast();
  const double flops = 2.0 * n * n * n;
  const int reps = std::max(1, static_cast<int>(2e9 / flops));
  double kernel_s = 0, eigen_s = 0;
  for (auto _ : state) {
    kernel_s += SecondsPerCall(
        [&] { fast.sgemm(n, n, n, a.data(), n, false, b.data(), n, false, c.data(), n); }, reps);
    eigen_s += SecondsPerCall([&] { c2.noalias() = a * b; }, reps);
    benchmark::DoNotOptimize(c.data());
    benchmark::DoNotOptimize(c2.data());
  }
  state.counters["kernel_GFLOPs"] = flops / (kernel_s / state.iterations()) / 1e9;
  state.counters["eigen_GFLOPs"] = flops / (eigen_s / state.iterations()) / 1e9;
  state.counters["vs_eigen"] = eigen_s / kernel_s;
  state.SetLabel(std::string(recsdk::internal::IsaName(fast.isa)));
}
BENCHMARK(BM_SgemmKernelVsEigen)
    ->Arg(128)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

// The MatMul op through Session::Run (dispatch, allocation and threading included).
void BM_MatMulOpVsEigen(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  using namespace recsdk;
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{n, n});
  ops::MatMul(root.WithOpName("c"), a, a);
  SessionConfig config;
  config.intra_op_parallelism = threads;
  auto session = Session::Create(g, config);
  Tensor av(DType::kFloat32, Shape{n, n});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& v : av.flat<float>()) v = dist(rng);
  Eigen::Map<const Mat> am(av.data<float>(), n, n);
  Mat c2(n, n);
  const double flops = 2.0 * n * n * n;
  const int reps = std::max(1, static_cast<int>(2e9 / flops));
  double op_s = 0, eigen_s = 0;
  for (auto _ : state) {
    op_s += SecondsPerCall(
        [&] {
          benchmark::DoNotOptimize((*session)->Run({{"a", av}}, {"c"}));
        },
        reps);
    eigen_s += SecondsPerCall([&] { c2.noalias() = am * am; }, reps);
  }
  state.counters["op_GFLOPs"] = flops / (op_s / state.iterations()) / 1e9;
  state.counters["eigen_1thread_GFLOPs"] = flops / (eigen_s / state.iterations()) / 1e9;
  state.counters["vs_eigen"] = eigen_s / op_s;
}
BENCHMARK(BM_MatMulOpVsEigen)
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({1024, 2})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
