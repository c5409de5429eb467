// random_bench.cc: the samplers behind initializers and new table rows.
//
//   BM_Normal: PhiloxStream::Normal (ziggurat) against BoxMullerNormal (log, sqrt, cos per value)
//       drawing from the same streams, timed back to back. Counter vs_box_muller = Box-Muller
//       time / ziggurat time.
//   BM_UniformRows: the 16 uniform words of 4096 rows (one Philox stream per row, as a table's new
//       rows of a Uniform initializer draw them): PhiloxStreamBlocks (the streams side by side in
//       vector lanes) against a PhiloxStream per row, back to back on the same keys. Counter
//       batched_vs_per_row = per-row time / batched time.
//   BM_NewRows: Resolve of never-seen keys in a dim-16 TruncatedNormal table (the cost a table
//       pays per new key: index insert, row initialisation, optimizer slots, and the first
//       touch of the row's memory). Counter new_keys_per_s.
// Single-threaded.
#include <chrono>
#include <vector>

#include "benchmark/benchmark.h"
#include "oneapi/tbb/global_control.h"
#include "recsdk/table.h"
#include "src/common/random.h"

namespace recsdk {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void BM_Normal(benchmark::State& state) {
  constexpr int kPerRow = 16, kRows = 4096;
  std::vector<float> out(static_cast<size_t>(kPerRow) * kRows);
  double zig = 0, box = 0;
  uint64_t batch = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int r = 0; r < kRows; ++r) {
      internal::PhiloxStream s(batch, static_cast<uint64_t>(r));
      for (int i = 0; i < kPerRow; ++i) out[r * kPerRow + i] = s.Normal();
    }
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    for (int r = 0; r < kRows; ++r) {
      internal::PhiloxStream s(batch, static_cast<uint64_t>(r));
      for (int i = 0; i < kPerRow; ++i) out[r * kPerRow + i] = internal::BoxMullerNormal(s);
    }
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    zig += Seconds(t0, t1);
    box += Seconds(t1, t2);
    ++batch;
  }
  const double values = static_cast<double>(batch) * kPerRow * kRows;
  state.counters["ziggurat_per_s"] = values / zig;
  state.counters["box_muller_per_s"] = values / box;
  state.counters["vs_box_muller"] = box / zig;
}
BENCHMARK(BM_Normal);

void BM_UniformRows(benchmark::State& state) {
  constexpr int kPerRow = 16, kRows = 4096;
  std::vector<uint64_t> keys(kRows);
  std::vector<uint32_t> words(static_cast<size_t>(kPerRow) * kRows);
  std::vector<float> out(words.size()), ref(words.size());
  double batched = 0, per_row = 0;
  uint64_t batch = 0;
  for (auto _ : state) {
    for (int r = 0; r < kRows; ++r) keys[r] = batch * kRows + static_cast<uint64_t>(r);
    const auto t0 = Clock::now();
    internal::PhiloxStreamBlocks(keys.data(), kRows, kPerRow / 4, 0, words.data());
    for (size_t i = 0; i < words.size(); ++i) out[i] = internal::UniformFloat(words[i]);
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    for (int r = 0; r < kRows; ++r) {
      internal::PhiloxStream s(keys[r], 0);
      for (int i = 0; i < kPerRow; ++i) ref[r * kPerRow + i] = s.Uniform();
    }
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    if (out != ref) {
      state.SkipWithError("batched streams differ from per-row streams");
      break;
    }
    batched += Seconds(t0, t1);
    per_row += Seconds(t1, t2);
    ++batch;
  }
  state.counters["batched_rows_per_s"] = static_cast<double>(batch) * kRows / batched;
  state.counters["batched_vs_per_row"] = per_row / batched;
}
BENCHMARK(BM_UniformRows);

void BM_NewRows(benchmark::State& state) {
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
  constexpr int64_t kKeys = 65536;
  constexpr int64_t kCapacity = 1 << 22;
  TableConfig c;
  c.name = "new_rows";
  c.dim = 16;
  c.device_vocabulary_size = kCapacity;
  auto table = std::move(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.01f))).value();
  std::vector<int64_t> keys(kKeys);
  std::vector<uint32_t> rows(kKeys);
  int64_t next = 0;
  auto fill = [&] {
    for (int64_t& k : keys) k = next++;
  };
  double seconds = 0;
  int64_t inserted = 0;
  for (auto _ : state) {
    if (table->size() + kKeys > kCapacity) {
      state.PauseTiming();
      table = std::move(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.01f))).value();
      state.ResumeTiming();
    }
    fill();
    const auto t0 = Clock::now();
    if (!table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok()) {
      state.SkipWithError("resolve failed");
      break;
    }
    seconds += Seconds(t0, Clock::now());
    inserted += kKeys;
  }
  state.counters["new_keys_per_s"] = static_cast<double>(inserted) / seconds;
}
BENCHMARK(BM_NewRows)->Iterations(48);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
