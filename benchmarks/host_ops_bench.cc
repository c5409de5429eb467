// host_ops_bench.cc: the host operators Less, Greater, FloorMod and Where: the vectorised kernels
// (ISA-dispatched) against plain scalar loops (vectorisation disabled), on 1M float32 elements,
// plus the op through a Session. Counter vs_scalar = scalar time / kernel time (higher is better).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/device/cpu/fast_kernels.h"

namespace {

constexpr int kN = 1 << 20;

struct Data {
  std::vector<float> x, y, out;
  std::vector<char> cond;
  std::vector<char> b;
  Data() : x(kN), y(kN), out(kN), cond(kN), b(kN) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-100, 100);
    for (int i = 0; i < kN; ++i) {
      x[i] = d(rng);
      y[i] = d(rng);
      if (y[i] == 0) y[i] = 1;
      cond[i] = (i * 7) % 3 == 0;
    }
  }
};

#define RECSDK_SCALAR __attribute__((noinline, optimize("no-tree-vectorize")))
RECSDK_SCALAR void ScalarLess(const float* x, const float* y, bool* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = x[i] < y[i];
}
RECSDK_SCALAR void ScalarGreater(const float* x, const float* y, bool* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = x[i] > y[i];
}
RECSDK_SCALAR void ScalarFloorMod(const float* x, const float* y, float* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = x[i] - std::floor(x[i] / y[i]) * y[i];
}
RECSDK_SCALAR void ScalarWhere(const bool* c, const float* x, const float* y, float* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
}

template <typename Fn>
double Time(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 20; ++r) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_HostOp(benchmark::State& state) {
  static Data d;
  const auto& k = recsdk::internal::Fast();
  const int which = static_cast<int>(state.range(0));
  bool* b = reinterpret_cast<bool*>(d.b.data());
  const bool* c = reinterpret_cast<const bool*>(d.cond.data());
  double fast_s = 0, scalar_s = 0;
  for (auto _ : state) {
    switch (which) {
      case 0:
        fast_s += Time([&] { k.less_f32(d.x.data(), d.y.data(), b, kN); });
        scalar_s += Time([&] { ScalarLess(d.x.data(), d.y.data(), b, kN); });
        break;
      case 1:
        fast_s += Time([&] { k.greater_f32(d.x.data(), d.y.data(), b, kN); });
        scalar_s += Time([&] { ScalarGreater(d.x.data(), d.y.data(), b, kN); });
        break;
      case 2:
        fast_s += Time([&] { k.floormod_f32(d.x.data(), d.y.data(), d.out.data(), kN); });
        scalar_s += Time([&] { ScalarFloorMod(d.x.data(), d.y.data(), d.out.data(), kN); });
        break;
      default:
        fast_s += Time([&] { k.where_f32(c, d.x.data(), d.y.data(), d.out.data(), kN); });
        scalar_s += Time([&] { ScalarWhere(c, d.x.data(), d.y.data(), d.out.data(), kN); });
        break;
    }
    benchmark::DoNotOptimize(d.out.data());
    benchmark::DoNotOptimize(b);
  }
  const char* names[] = {"Less", "Greater", "FloorMod", "Where"};
  state.SetLabel(std::string(names[which]) + " " + std::string(recsdk::internal::IsaName(k.isa)));
  state.counters["vs_scalar"] = scalar_s / fast_s;
  state.counters["kernel_Melem_per_s"] = 20.0 * kN * state.iterations() / fast_s / 1e6;
}
BENCHMARK(BM_HostOp)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
