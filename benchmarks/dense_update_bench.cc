// dense_update_bench.cc: the dense optimizers' update loops (ApplyAdam, ApplyAdagrad on float32
// variables, src/device/cpu/dense_update_kernels.h): the ISA variant this CPU runs against the
// scalar reference twin (the loop state_kernels.cc ran before), both bitwise equal, timed
// alternately in the same run over a DCNv2-sized variable set (236k floats) and a larger one.
// Counter vs_scalar = reference time / variant time (higher is better).
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "src/device/cpu/dense_update_kernels.h"

namespace {

using recsdk::internal::AdamParams;
using recsdk::internal::DenseAdagradReference;
using recsdk::internal::DenseAdamReference;
using recsdk::internal::DenseUpdateFast;

struct Slots {
  std::vector<float> w, m, v, g;
  explicit Slots(int64_t n) : w(n), m(n), v(n), g(n) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < n; ++i) {
      w[i] = d(rng);
      g[i] = d(rng) * 1e-2f;
      v[i] = 1e-4f;
    }
  }
};

template <typename Fn>
double Seconds(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 10; ++r) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// range(0): elements; range(1): 0 Adam, 1 Adagrad.
void BM_DenseUpdate(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool adam = state.range(1) == 0;
  Slots s(n);
  const auto& k = DenseUpdateFast();
  const AdamParams p{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 1e-3f, 0.0f, false};
  double fast_s = 0, scalar_s = 0;
  for (auto _ : state) {
    if (adam) {
      fast_s += Seconds([&] { k.adam(s.w.data(), s.m.data(), s.v.data(), s.g.data(), n, p); });
      scalar_s += Seconds(
          [&] { DenseAdamReference(s.w.data(), s.m.data(), s.v.data(), s.g.data(), n, p); });
    } else {
      fast_s += Seconds([&] { k.adagrad(s.w.data(), s.v.data(), s.g.data(), n, 0.01f, 1e-10f); });
      scalar_s += Seconds(
          [&] { DenseAdagradReference(s.w.data(), s.v.data(), s.g.data(), n, 0.01f, 1e-10f); });
    }
    benchmark::DoNotOptimize(s.w.data());
  }
  state.SetLabel(std::string(adam ? "Adam " : "Adagrad ") +
                 std::string(recsdk::internal::IsaName(k.isa)));
  state.counters["vs_scalar"] = scalar_s / fast_s;
  state.counters["variant_Melem_per_s"] = 10.0 * n * state.iterations() / fast_s / 1e6;
}
BENCHMARK(BM_DenseUpdate)
    ->ArgsProduct({{236 << 10, 4 << 20}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
BENCHMARK_MAIN();
