// tier_policy_bench: device-cache hit rates of the eviction policies (src/table/tiers/
// eviction_policy.h) on Zipf(1.05) ids and on a drifting Zipf (the hot set shifting over time),
// with the device tier at 10% and 25% of the key space. Replays batches exactly as the key stage
// will: dedup the batch, Touch the hits, ChooseVictims for the misses beyond the free slots
// (never slots of the current or previous batch), Insert the misses with the key's host-side
// history (use count, last batch). Deterministic: the same figures every run (no timing in them).
//
// Counters: hit_rate (device hits / unique keys looked up, after a warm-up of 100 batches),
// id_hit_rate (the same per id, duplicates counted), vs_lru (hit_rate / LRU's on the same stream
// and size), misses_per_batch (rows brought to the device per batch: the swap traffic).
//
// Run: build/benchmarks/tier_policy_bench (about 20 s on 2 cores).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "src/table/tiers/eviction_policy.h"

namespace recsdk::internal {
namespace {

constexpr int64_t kKeys = 200000;
constexpr int kBatchIds = 4096;
constexpr int kBatches = 600;
constexpr int kWarmup = 100;
// kDriftPerBatch: how far the drifting stream's hot set moves each batch (keys): the top 1000
// ranks are replaced every 20 batches, the 10% cache's worth every 400.
constexpr int64_t kDriftPerBatch = 50;

enum class Stream { kZipf = 0, kDrift = 1 };

// ZipfIds: batches of ids, rank r drawn with probability ~ 1 / (r + 1)^1.05; rank -> key through
// a fixed random permutation, shifted by kDriftPerBatch each batch for the drifting stream.
std::vector<std::vector<int64_t>> MakeStream(Stream stream) {
  std::vector<double> cdf(kKeys);
  double sum = 0;
  for (int64_t r = 0; r < kKeys; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), 1.05);
    cdf[r] = sum;
  }
  std::vector<int64_t> perm(kKeys);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  for (int64_t i = 0; i < kKeys; ++i) perm[i] = i;
  for (int64_t i = kKeys - 1; i > 0; --i) std::swap(perm[i], perm[next() % (i + 1)]);
  std::vector<std::vector<int64_t>> batches(kBatches, std::vector<int64_t>(kBatchIds));
  for (int b = 0; b < kBatches; ++b) {
    const int64_t shift = stream == Stream::kDrift ? b * kDriftPerBatch : 0;
    for (int i = 0; i < kBatchIds; ++i) {
      const double u = static_cast<double>(next() >> 11) * 0x1.0p-53 * sum;
      const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      batches[b][i] = perm[(std::min(rank, kKeys - 1) + shift) % kKeys];
    }
  }
  return batches;
}

const std::vector<std::vector<int64_t>>& StreamFor(Stream stream) {
  static const auto* zipf = new std::vector<std::vector<int64_t>>(MakeStream(Stream::kZipf));
  static const auto* drift = new std::vector<std::vector<int64_t>>(MakeStream(Stream::kDrift));
  return stream == Stream::kZipf ? *zipf : *drift;
}

struct Result {
  double hit_rate = 0;
  double id_hit_rate = 0;
  double misses_per_batch = 0;
};

Result Replay(EvictionPolicyKind kind, double half_life, Stream stream, int percent) {
  const auto& batches = StreamFor(stream);
  const uint32_t slots = static_cast<uint32_t>(kKeys * percent / 100);
  EvictionPolicyOptions options;
  options.kind = kind;
  options.capacity = slots;
  options.half_life_batches = half_life > 0 ? half_life : 32.0;  // only LRFU reads it
  std::unique_ptr<EvictionPolicy> policy = *EvictionPolicy::Create(options);
  std::vector<int32_t> key_slot(kKeys, -1), slot_key(slots, -1);
  std::vector<uint32_t> uses(kKeys, 0);  // the host-side history the table keeps per key
  std::vector<int64_t> last_batch(kKeys, -1);
  std::vector<int32_t> seen(kKeys, -1);
  std::vector<uint32_t> free_slots;
  for (uint32_t s = slots; s-- > 0;) free_slots.push_back(s);
  uint64_t unique = 0, hits = 0, ids = 0, id_hits = 0, misses_after_warmup = 0;
  std::vector<int64_t> unique_keys, missing;
  std::vector<uint32_t> hit_slots, victims;
  for (int b = 0; b < kBatches; ++b) {
    policy->BeginBatch();
    unique_keys.clear();
    missing.clear();
    hit_slots.clear();
    const bool counted = b >= kWarmup;
    for (int64_t key : batches[b]) {
      if (counted) {
        ++ids;
        id_hits += key_slot[key] >= 0;
      }
      if (seen[key] == b) continue;
      seen[key] = b;
      unique_keys.push_back(key);
      if (key_slot[key] >= 0) {
        hit_slots.push_back(static_cast<uint32_t>(key_slot[key]));
      } else {
        missing.push_back(key);
      }
    }
    if (counted) {
      unique += unique_keys.size();
      hits += hit_slots.size();
      misses_after_warmup += missing.size();
    }
    policy->Touch(hit_slots);
    const size_t need = missing.size() > free_slots.size() ? missing.size() - free_slots.size() : 0;
    victims.resize(need);
    victims.resize(policy->ChooseVictims(need, victims.data()));
    if (victims.size() < need) std::abort();  // the cache holds far more than two batches
    for (uint32_t v : victims) {
      policy->Remove(v);
      key_slot[slot_key[v]] = -1;
      free_slots.push_back(v);
    }
    for (int64_t key : missing) {
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      key_slot[key] = static_cast<int32_t>(s);
      slot_key[s] = static_cast<int32_t>(key);
      if (!policy->Insert(s, uses[key], last_batch[key]).ok()) std::abort();
    }
    for (int64_t key : unique_keys) {
      ++uses[key];
      last_batch[key] = b;
    }
  }
  Result r;
  r.hit_rate = static_cast<double>(hits) / static_cast<double>(unique);
  r.id_hit_rate = static_cast<double>(id_hits) / static_cast<double>(ids);
  r.misses_per_batch = static_cast<double>(misses_after_warmup) / (kBatches - kWarmup);
  return r;
}

const Result& LruResult(Stream stream, int percent) {
  static auto* cache = new std::map<std::pair<int, int>, Result>();
  auto key = std::make_pair(static_cast<int>(stream), percent);
  auto it = cache->find(key);
  if (it == cache->end()) {
    it = cache->emplace(key, Replay(EvictionPolicyKind::kLru, 1.0, stream, percent)).first;
  }
  return it->second;
}

// Args: kind, LRFU half-life (batches; ignored by LRU and LFU), stream, device percent.
void BM_PolicyHitRate(benchmark::State& state) {
  const auto kind = static_cast<EvictionPolicyKind>(state.range(0));
  const double half_life = static_cast<double>(state.range(1));
  const auto stream = static_cast<Stream>(state.range(2));
  const int percent = static_cast<int>(state.range(3));
  Result r;
  for (auto _ : state) {
    r = Replay(kind, half_life, stream, percent);
    benchmark::DoNotOptimize(r);
  }
  state.counters["hit_rate"] = r.hit_rate;
  state.counters["id_hit_rate"] = r.id_hit_rate;
  state.counters["vs_lru"] = r.hit_rate / LruResult(stream, percent).hit_rate;
  state.counters["misses_per_batch"] = r.misses_per_batch;
  state.SetLabel(
      std::string(EvictionPolicyName(kind)) +
      (kind == EvictionPolicyKind::kLrfu ? "(h=" + std::to_string(state.range(1)) + ")" : "") +
      (stream == Stream::kZipf ? " zipf" : " drift") + " device " + std::to_string(percent) + "%");
}

void PolicyArgs(benchmark::internal::Benchmark* b) {
  for (int stream : {0, 1}) {
    for (int percent : {10, 25}) {
      b->Args({static_cast<int>(EvictionPolicyKind::kLru), 0, stream, percent});
      b->Args({static_cast<int>(EvictionPolicyKind::kLfu), 0, stream, percent});
      for (int half_life : {8, 32, 64, 128}) {
        b->Args({static_cast<int>(EvictionPolicyKind::kLrfu), half_life, stream, percent});
      }
    }
  }
}
BENCHMARK(BM_PolicyHitRate)
    ->Apply(PolicyArgs)
    ->ArgNames({"kind", "half_life", "stream", "pct"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk::internal

BENCHMARK_MAIN();
