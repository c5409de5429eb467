// tier_swap_bench: the cost of the tiers' per-batch swap (TieredRows::PrepareBatch,
// src/table/tiers/tiered_rows.h) plus a minimal step that reads and updates every row of the
// batch, with the device tier at 100%, 25% and 10% of the key space (the host holding the rest),
// and at 10% with host 10% and the rest on SSD. Zipf(1.05) ids, 200k keys, batches of 4096 ids
// (deduplicated before the swap, as the key stage does), rows of 48 floats (dim 16 with Adam's two
// slots), after a warm-up of 150 batches.
//
// Counters: batches_per_s; device_hit_rate (unique keys found on the device); and
// swap_vs_full_device = batches/s over the all-on-device case's, measured right before. This
// is the swap stage alone: in training the model's compute runs too (and the key stage runs the
// swap ahead of it, in the background), so the end-to-end tier10_vs_full_device can only
// be higher than this ratio. The machine is shared: read the ratios as ranges.
//
// Run: build/benchmarks/tier_swap_bench (files for the SSD case under $RECSDK_SSD_BENCH_DIR,
// default /tmp/recsdk_tier_swap_bench, removed at the end).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "src/table/tiers/tiered_rows.h"

namespace recsdk::internal {
namespace {

constexpr int64_t kKeys = 200000;
constexpr int kBatchIds = 4096;
constexpr int kBatches = 450;
constexpr int kWarmup = 150;
constexpr int kRowFloats = 48;

std::string BenchDir() {
  const char* d = std::getenv("RECSDK_SSD_BENCH_DIR");
  return d != nullptr && *d ? std::string(d) + "/swap" : "/tmp/recsdk_tier_swap_bench";
}

// Batches of unique keys drawn from Zipf(1.05) over kKeys (ranks mapped through a fixed
// permutation).
const std::vector<std::vector<int64_t>>& Stream() {
  static const auto* stream = [] {
    std::vector<double> cdf(kKeys);
    double sum = 0;
    for (int64_t r = 0; r < kKeys; ++r) {
      sum += 1.0 / std::pow(static_cast<double>(r + 1), 1.05);
      cdf[r] = sum;
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return rng;
    };
    std::vector<int64_t> perm(kKeys);
    for (int64_t i = 0; i < kKeys; ++i) perm[i] = i;
    for (int64_t i = kKeys - 1; i > 0; --i) std::swap(perm[i], perm[next() % (i + 1)]);
    auto* batches = new std::vector<std::vector<int64_t>>(kBatches);
    for (auto& batch : *batches) {
      for (int i = 0; i < kBatchIds; ++i) {
        const double u = static_cast<double>(next() >> 11) * 0x1.0p-53 * sum;
        const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        batch.push_back(perm[std::min(rank, kKeys - 1)]);
      }
      std::sort(batch.begin(), batch.end());
      batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    }
    return batches;
  }();
  return *stream;
}

struct Result {
  double batches_per_s = 0;
  double hit_rate = 0;
};

// Run: the stream through TieredRows with the given tier sizes (percent of kKeys).
Result Run(int device_pct, int host_pct, int ssd_pct) {
  const auto& stream = Stream();
  std::filesystem::create_directories(BenchDir());
  TieredRowsOptions o;
  o.table = "swap_bench";
  o.row_floats = kRowFloats;
  o.device_rows = static_cast<uint32_t>(kKeys * device_pct / 100);
  o.host_rows = static_cast<uint32_t>(kKeys * host_pct / 100);
  o.ssd_rows = static_cast<uint32_t>(kKeys * ssd_pct / 100);
  o.ssd_folders = {BenchDir()};
  std::unique_ptr<TieredRows> rows = *TieredRows::Create(o);
  auto init = [](int64_t key, float* row) {
    for (int j = 0; j < kRowFloats; ++j) row[j] = static_cast<float>(key % 97) * 0.01f;
  };
  std::vector<uint32_t> slots;
  uint64_t unique = 0, hits = 0;
  double seconds = 0;
  for (int b = 0; b < kBatches; ++b) {
    const std::vector<int64_t>& keys = stream[b];
    // Device hits, counted before the swap moves anything.
    uint64_t batch_hits = 0;
    for (int64_t key : keys) {
      auto loc = rows->Locate(key);
      batch_hits += loc.ok() && loc->tier == Tier::kDevice;
    }
    slots.resize(keys.size());
    const auto start = std::chrono::steady_clock::now();
    if (!rows->PrepareBatch(keys, init, slots.data()).ok()) std::abort();
    // The step's share that touches the rows: an update of every row of the batch.
    for (uint32_t slot : slots) {
      float* row = rows->DeviceRow(slot);
      for (int j = 0; j < kRowFloats; ++j) row[j] += 0.001f;
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (b >= kWarmup) {
      seconds += s;
      unique += keys.size();
      hits += batch_hits;
    }
  }
  Result r;
  r.batches_per_s = (kBatches - kWarmup) / seconds;
  r.hit_rate = static_cast<double>(hits) / static_cast<double>(unique);
  return r;
}

// Args: device %, host %, ssd %.
void BM_TierSwap(benchmark::State& state) {
  const int device = static_cast<int>(state.range(0));
  const int host = static_cast<int>(state.range(1));
  const int ssd = static_cast<int>(state.range(2));
  Result r;
  double full = 0;
  for (auto _ : state) {
    // The all-on-device baseline right before, so both see the same moment of the machine.
    state.PauseTiming();
    full = Run(100, 0, 0).batches_per_s;
    state.ResumeTiming();
    r = Run(device, host, ssd);
  }
  state.counters["batches_per_s"] = r.batches_per_s;
  state.counters["device_hit_rate"] = r.hit_rate;
  state.counters["swap_vs_full_device"] = r.batches_per_s / full;
  state.SetLabel("device " + std::to_string(device) + "% host " + std::to_string(host) + "% ssd " +
                 std::to_string(ssd) + "%");
}
BENCHMARK(BM_TierSwap)
    ->Args({25, 75, 0})
    ->Args({10, 90, 0})
    ->Args({10, 10, 80})
    ->ArgNames({"device", "host", "ssd"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk::internal

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(recsdk::internal::BenchDir(), ec);
  return 0;
}
