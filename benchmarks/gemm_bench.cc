// gemm_bench.cc: GFLOP/s of the MatMul kernel (the ISA-dispatched sgemm the CPU backend uses,
// and the MatMul op through a Session) against Eigen called directly. This file is compiled with
// -march=native so the Eigen baseline is Eigen at its best on this machine, not a baseline build.
// Counter vs_eigen = kernel GFLOP/s / Eigen GFLOP/s, both single-threaded, measured in one run.
// BM_DlrmGemm: every multiply of the DLRM step (batch 4096; forward, input and weight gradients)
// through ParallelSgemm on each backend against the kernel as it was before (Eigen split into row
// blocks of >= 32 rows, so the weights were packed once per block): vs_old = old time / new time.
// BM_DlrmAutoTune: the same multiplies with auto_tune_mode's tuned plans (gemm_tuner.h, tuned
// once before timing, bank in a temporary folder) against the default plans, interleaved:
// tuned_vs_default = default time / tuned time; `changed` = shapes whose plan differs.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <filesystem>
#include <random>

#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"
#include "recsdk/recsdk.h"
#include "src/device/cpu/fast_kernels.h"
#include "src/device/cpu/gemm.h"
#include "src/device/cpu/gemm_tuner.h"

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

// The MatMul kernel before gemm.cc: Eigen over row blocks of max(32, m/16) rows.
void OldGemm(int64_t m, int64_t n, int64_t k, const float* a, bool ta, const float* b, bool tb,
             float* c) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const auto& fast = recsdk::internal::Fast();
  if (2.0 * m * n * k < 4e6 || m < 64) {
    fast.sgemm(m, n, k, a, lda, ta, b, ldb, tb, c, n);
    return;
  }
  const int64_t block = std::max<int64_t>(32, (m + 15) / 16 / 8 * 8);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, block), [&](const auto& r) {
    const float* ab = ta ? a + r.begin() : a + r.begin() * lda;
    fast.sgemm(r.end() - r.begin(), n, k, ab, lda, ta, b, ldb, tb, c + r.begin() * n, n);
  });
}

struct DlrmShape {
  int64_t m, n, k;
  bool ta, tb;
};
// Bottom MLP 13-512-256-16 and top MLP 367-512-256-1 at batch 4096: forward (x W), input
// gradient (dy W^T) and weight gradient (x^T dy) of each layer.
const DlrmShape kDlrmShapes[] = {
    {4096, 512, 13, false, false},  {4096, 256, 512, false, false}, {4096, 16, 256, false, false},
    {4096, 512, 367, false, false}, {4096, 256, 512, false, false}, {4096, 1, 256, false, false},
    {4096, 512, 256, false, true},  {4096, 256, 16, false, true},   {4096, 367, 512, false, true},
    {4096, 512, 256, false, true},  {4096, 256, 1, false, true},    {13, 512, 4096, true, false},
    {512, 256, 4096, true, false},  {256, 16, 4096, true, false},   {367, 512, 4096, true, false},
    {512, 256, 4096, true, false},  {256, 1, 4096, true, false},
};

void BM_DlrmGemm(benchmark::State& state) {
  using recsdk::internal::GemmBackend;
  const int threads = static_cast<int>(state.range(0));
  std::vector<Mat> as, bs, cs;
  double flops = 0;
  for (const DlrmShape& s : kDlrmShapes) {
    as.push_back(Mat::Random(s.ta ? s.k : s.m, s.ta ? s.m : s.k));
    bs.push_back(Mat::Random(s.tb ? s.n : s.k, s.tb ? s.k : s.n));
    cs.push_back(Mat(s.m, s.n));
    flops += 2.0 * s.m * s.n * s.k;
  }
  tbb::task_arena arena(threads);
  auto step = [&](int which) {
    arena.execute([&] {
      for (size_t i = 0; i < std::size(kDlrmShapes); ++i) {
        const DlrmShape& s = kDlrmShapes[i];
        if (which == 0) {
          OldGemm(s.m, s.n, s.k, as[i].data(), s.ta, bs[i].data(), s.tb, cs[i].data());
        } else {
          recsdk::internal::ParallelSgemm(which == 1 ? GemmBackend::kEigen : GemmBackend::kOneDnn,
                                          s.m, s.n, s.k, as[i].data(), s.ta, bs[i].data(), s.tb,
                                          cs[i].data());
        }
      }
    });
  };
  double t[3] = {0, 0, 0};
  for (auto _ : state) {
    for (int which = 0; which < 3; ++which) t[which] += SecondsPerCall([&] { step(which); }, 3);
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["old_GFLOPs"] = flops / (t[0] / it) / 1e9;
  state.counters["eigen_GFLOPs"] = flops / (t[1] / it) / 1e9;
  state.counters["onednn_GFLOPs"] = flops / (t[2] / it) / 1e9;
  state.counters["eigen_vs_old"] = t[0] / t[1];
  state.counters["onednn_vs_old"] = t[0] / t[2];
  state.SetLabel(recsdk::internal::OneDnnAvailable() ? "onednn loaded"
                                                     : "onednn missing: eigen twice");
}
BENCHMARK(BM_DlrmGemm)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_DlrmAutoTune(benchmark::State& state) {
  using recsdk::internal::GemmPlan;
  using recsdk::internal::GemmShape;
  const int threads = static_cast<int>(state.range(0));
  const std::string bank =
      (std::filesystem::temp_directory_path() / "recsdk_gemm_bench_bank").string();
  std::filesystem::remove_all(bank);
  auto tuner = recsdk::internal::GemmTuner::Create(bank, threads);
  if (!tuner.ok()) {
    state.SkipWithError(std::string(tuner.status().message()).c_str());
    return;
  }
  std::vector<Mat> as, bs, cs;
  std::vector<GemmShape> shapes;
  std::vector<GemmPlan> tuned, defaults;
  for (const DlrmShape& s : kDlrmShapes) {
    as.push_back(Mat::Random(s.ta ? s.k : s.m, s.ta ? s.m : s.k));
    bs.push_back(Mat::Random(s.tb ? s.n : s.k, s.tb ? s.k : s.n));
    cs.push_back(Mat(s.m, s.n));
    shapes.push_back({0, s.m, s.n, s.k, s.ta, s.tb});
    defaults.push_back(recsdk::internal::DefaultGemmPlan(s.m, s.n, s.k));
  }
  tbb::task_arena arena(threads);
  int changed = 0;
  arena.execute([&] {
    for (size_t i = 0; i < shapes.size(); ++i) {
      tuned.push_back((*tuner)->Plan(shapes[i], as[i].data(), bs[i].data(), cs[i].data()));
      changed += !(tuned[i] == defaults[i]);
    }
  });
  auto step = [&](const std::vector<GemmPlan>& plans) {
    arena.execute([&] {
      for (size_t i = 0; i < shapes.size(); ++i) {
        recsdk::internal::RunGemmPlan(plans[i], shapes[i], as[i].data(), bs[i].data(),
                                      cs[i].data());
      }
    });
  };
  double t_default = 0, t_tuned = 0;
  for (auto _ : state) {
    t_default += SecondsPerCall([&] { step(defaults); }, 3);
    t_tuned += SecondsPerCall([&] { step(tuned); }, 3);
  }
  state.counters["tuned_vs_default"] = t_default / t_tuned;
  state.counters["changed"] = changed;
  std::filesystem::remove_all(bank);
}
BENCHMARK(BM_DlrmAutoTune)->Arg(1)->Arg(2)->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
