// embedding_roofline_bench.cc: the embedding-only training step of one table against the
// machine's random-access roofline, measured in the same run (issue 29, `embedding_vs_roofline`).
//
//   BM_EmbeddingStep/dim/zipf/threads: per iteration, one batch of 4096 x 26 ids through the
//       table as a training step runs it: DedupKeys, Resolve (kTrain), GatherRestored (the
//       forward lookup), AggregateGradients (one summed gradient per unique key) and
//       ApplyGradients with Adagrad (row and accumulator slot). Then the roofline on the same ids:
//       for every id, in the same order, a random read of its row AND slot from a dense
//       [rows, 2 x dim] array (software prefetch 16 ahead, huge pages as the table's slab), the
//       row copied out (the gather) and row and slot written back (the update): one random
//       row + slot read and write per id, with no index, no dedup and no arithmetic to speak of.
//       Then the two-pass bound on the same ids (TwoPassStep: all rows read, then all rows and
//       slots read and written: the order a training step must touch them in).
//       Counters: ids_per_s (the table), roofline_ids_per_s, embedding_vs_roofline = roofline time
//       / table time (goal >= 0.7), two_pass_ids_per_s, embedding_vs_two_pass (table vs the
//       two-pass bound), two_pass_vs_roofline (the bound's own ratio to the roofline: what a
//       perfect gather-then-update step would score), and each phase's share of the table's time
//       (dedup_share,
//       resolve_share, gather_share, aggregate_share, apply_share), unique_frac, and
//       embedding_vs_roofline_cpu (the ratio in process CPU time: on a loaded machine, where
//       wall time includes waits for a core; meaningful at 1 thread).
//   BM_AggregateStrategy/dim/zipf/threads: the step's AggregateGradients alone on the same
//       batches, its strategies (kScan, the old one; kSort; kAuto, what the step runs) timed side
//       by side in each iteration; counters sort_vs_scan and auto_vs_scan (above 1: faster).
//
// Rows: RECSDK_EMB_ROOF_ROWS, else max(2M, 1 GiB of rows + slots): 8.4M at dim 16, 2M at 64 and
// 128 (1 and 2 GB; this VM's L3 is 260 MB); the dense array is as large again. Ids: uniform or
// Zipf(1.05) ranks over the rows, hashed to keys (Mix64), as table_bench. Threads: oneTBB's
// max_allowed_parallelism for both sides.
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "benchmarks/embedding_bench_util.h"
#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/parallel_for.h"
#include "recsdk/table.h"
#include "src/common/hash.h"
#include "src/table/dedup.h"

namespace recsdk {
namespace {

constexpr int kBatch = 4096;
constexpr int kFields = 26;
constexpr int kBatchKeys = kBatch * kFields;
constexpr int kNumBatches = 8;
constexpr double kZipfS = 1.05;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ProcessCpuSeconds: CPU time of the whole process (all threads). On a shared machine a case's
// wall time includes the time its threads wait for a core; its CPU time does not.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Rows: RECSDK_EMB_ROOF_ROWS, else at least 2M and at least 1 GiB of rows + slots (this VM's L3
// is 260 MB), the dense array as large again.
int64_t Rows(int dim) {
  const char* env = std::getenv("RECSDK_EMB_ROOF_ROWS");
  if (env != nullptr) return std::atoll(env);
  return std::max<int64_t>(2000000, (int64_t{1} << 30) / (8 * dim));
}

// MakeRanks: kNumBatches batches of ranks, uniform or Zipf(kZipfS) over [0, rows).
std::vector<int64_t> MakeRanks(int64_t rows, bool zipf, uint64_t seed) {
  return bench::MakeRanks(rows, static_cast<size_t>(kNumBatches) * kBatchKeys, zipf, kZipfS, seed);
}

using bench::DenseArray;

// RooflineStep: for every id, read row + slot (prefetched 16 ahead), copy the row out, write row
// and slot back changed.
void RooflineStep(const DenseArray& a, int dim, const int64_t* ranks, size_t n, float* out) {
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, n, 4096), [&](const tbb::blocked_range<size_t>& r) {
        constexpr size_t kAhead = 16;
        const size_t width = 2 * static_cast<size_t>(dim);
        for (size_t i = r.begin(); i < r.end(); ++i) {
          if (i + kAhead < r.end()) {
            const char* p = reinterpret_cast<const char*>(a.data + ranks[i + kAhead] * width);
            for (size_t off = 0; off < width * sizeof(float); off += 64) {
              __builtin_prefetch(p + off, 1);
            }
          }
          float* row = a.data + ranks[i] * width;
          std::memcpy(out + i * dim, row, static_cast<size_t>(dim) * sizeof(float));
          for (int d = 0; d < dim; ++d) {
            row[dim + d] += 1e-7f;
            row[d] -= 1e-7f;
          }
        }
      });
}

// TwoPassStep: the same memory traffic as RooflineStep, in the order a training step must make
// it: first the forward pass reads every id's row (embedding only) and copies it out, then the
// update pass reads and writes every id's row and slot. The gradients exist only after the whole
// forward pass, so the row's lines from the first pass are gone by the second (a batch's rows are
// tens of MB; L2 is 2 MB a core): per id, 1 + 2 = 3 lines' worth of random misses at dim 16
// where RooflineStep has 2. two_pass_ids_per_s is therefore the best a gather-then-update step can
// reach on this machine; embedding_vs_two_pass says how close the table comes to it.
void TwoPassStep(const DenseArray& a, int dim, const int64_t* ranks, size_t n, float* out) {
  const size_t width = 2 * static_cast<size_t>(dim);
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  constexpr size_t kAhead = 16;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, n, 4096), [&](const tbb::blocked_range<size_t>& r) {
        for (size_t i = r.begin(); i < r.end(); ++i) {
          if (i + kAhead < r.end()) {
            const char* p = reinterpret_cast<const char*>(a.data + ranks[i + kAhead] * width);
            for (size_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + off, 0);
          }
          std::memcpy(out + i * dim, a.data + ranks[i] * width, row_bytes);
        }
      });
  benchmark::ClobberMemory();
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, n, 4096), [&](const tbb::blocked_range<size_t>& r) {
        for (size_t i = r.begin(); i < r.end(); ++i) {
          if (i + kAhead < r.end()) {
            const char* p = reinterpret_cast<const char*>(a.data + ranks[i + kAhead] * width);
            for (size_t off = 0; off < width * sizeof(float); off += 64) {
              __builtin_prefetch(p + off, 1);
            }
          }
          float* row = a.data + ranks[i] * width;
          for (int d = 0; d < dim; ++d) {
            row[dim + d] += 1e-7f;
            row[d] -= 1e-7f;
          }
        }
      });
}

struct Fixture {
  int dim = 0;
  int64_t rows = 0;
  std::unique_ptr<EmbeddingTable> table;
  std::unique_ptr<DenseArray> dense;
};

Fixture& GetFixture(int dim, int64_t rows) {
  static Fixture f;
  if (f.table && f.dim == dim && f.rows == rows) return f;
  f = Fixture();
  f.dim = dim;
  f.rows = rows;
  TableConfig c;
  c.name = "roofline_table";
  c.dim = dim;
  c.device_vocabulary_size = rows;
  c.initializer = Initializer::Uniform(-0.05, 0.05, 1);
  f.table = std::move(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.01f))).value();
  constexpr int64_t kChunk = 1 << 20;
  std::vector<int64_t> keys;
  std::vector<uint32_t> ids;
  for (int64_t b = 0; b < rows; b += kChunk) {
    const int64_t e = std::min(rows, b + kChunk);
    keys.resize(static_cast<size_t>(e - b));
    ids.resize(keys.size());
    for (int64_t r = b; r < e; ++r) {
      keys[static_cast<size_t>(r - b)] = static_cast<int64_t>(internal::Mix64(r));
    }
    if (!f.table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(ids)).ok()) {
      std::abort();
    }
  }
  f.dense = std::make_unique<DenseArray>(rows, 2 * dim, 1e-6f);
  return f;
}

// MinTime: seconds each case runs at least, RECSDK_EMB_ROOF_MIN_TIME (default 1; a profile wants
// more, so the fixture's setup is a small part of the samples).
double MinTime() {
  const char* env = std::getenv("RECSDK_EMB_ROOF_MIN_TIME");
  return env != nullptr ? std::atof(env) : 1.0;
}

void BM_EmbeddingStep(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  const bool zipf = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  const int64_t rows = Rows(dim);
  Fixture& f = GetFixture(dim, rows);
  const std::vector<int64_t> ranks = MakeRanks(rows, zipf, 1234);
  std::vector<int64_t> keys(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    keys[i] = static_cast<int64_t>(internal::Mix64(ranks[i]));
  }
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
  std::vector<float> out(static_cast<size_t>(kBatchKeys) * dim);
  std::vector<float> grads(out.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 0.01f);
  for (auto& g : grads) g = nd(rng);
  std::vector<float> summed(grads.size());
  internal::DedupResult d;
  std::vector<uint32_t> ids;
  double t_table = 0, t_roof = 0, t_two = 0, t_dedup = 0, t_resolve = 0, t_gather = 0, t_agg = 0,
         t_apply = 0;
  double unique = 0;
  int64_t batch = 0;
  double c_table = 0, c_roof = 0;
  for (auto _ : state) {
    const size_t off = static_cast<size_t>(batch++ % kNumBatches) * kBatchKeys;
    const double c0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    internal::DedupKeys(absl::MakeConstSpan(keys.data() + off, kBatchKeys), &d);
    const auto t1 = Clock::now();
    ids.resize(d.unique_keys.size());
    if (!f.table->Resolve(d.unique_keys, d.counts, {}, LookupMode::kTrain, absl::MakeSpan(ids))
             .ok()) {
      state.SkipWithError("resolve failed");
      break;
    }
    const auto t2 = Clock::now();
    if (!f.table->GatherRestored(ids, d.restore_index, absl::MakeSpan(out)).ok()) {
      state.SkipWithError("gather failed");
      break;
    }
    benchmark::ClobberMemory();
    const auto t3 = Clock::now();
    const size_t nu = d.unique_keys.size();
    const auto sums = absl::MakeSpan(summed).first(nu * static_cast<size_t>(dim));
    if (!internal::AggregateGradients(d.restore_index, grads, dim, static_cast<int64_t>(nu), sums)
             .ok()) {
      state.SkipWithError("aggregate failed");
      break;
    }
    const auto t4 = Clock::now();
    if (!f.table->ApplyGradients(ids, sums, batch).ok()) {
      state.SkipWithError("update failed");
      break;
    }
    benchmark::ClobberMemory();
    const auto t5 = Clock::now();
    const double c5 = ProcessCpuSeconds();
    RooflineStep(*f.dense, dim, ranks.data() + off, kBatchKeys, out.data());
    benchmark::ClobberMemory();
    const auto t6 = Clock::now();
    const double c6 = ProcessCpuSeconds();
    c_table += c5 - c0;
    c_roof += c6 - c5;
    TwoPassStep(*f.dense, dim, ranks.data() + off, kBatchKeys, out.data());
    benchmark::ClobberMemory();
    const auto t7 = Clock::now();
    t_two += Seconds(t6, t7);
    t_dedup += Seconds(t0, t1);
    t_resolve += Seconds(t1, t2);
    t_gather += Seconds(t2, t3);
    t_agg += Seconds(t3, t4);
    t_apply += Seconds(t4, t5);
    t_table += Seconds(t0, t5);
    t_roof += Seconds(t5, t6);
    unique += static_cast<double>(nu) / kBatchKeys;
    state.SetIterationTime(Seconds(t0, t5));
  }
  const double n = static_cast<double>(batch) * kBatchKeys;
  state.counters["ids_per_s"] = n / t_table;
  state.counters["roofline_ids_per_s"] = n / t_roof;
  state.counters["embedding_vs_roofline"] = t_roof / t_table;
  state.counters["two_pass_ids_per_s"] = n / t_two;
  state.counters["embedding_vs_two_pass"] = t_two / t_table;
  state.counters["two_pass_vs_roofline"] = t_roof / t_two;
  state.counters["dedup_share"] = t_dedup / t_table;
  state.counters["resolve_share"] = t_resolve / t_table;
  state.counters["gather_share"] = t_gather / t_table;
  state.counters["aggregate_share"] = t_agg / t_table;
  state.counters["apply_share"] = t_apply / t_table;
  state.counters["unique_frac"] = unique / static_cast<double>(batch);
  // The same ratio in process CPU seconds: free of the waits for a core that a loaded machine
  // adds to wall time. Meaningful at 1 thread; with more, oneTBB's workers spin between
  // parallel loops and that spinning counts too.
  state.counters["embedding_vs_roofline_cpu"] = c_roof / c_table;
}

// BM_AggregateStrategy/dim/zipf/threads: AggregateGradients alone on the step's batches (the
// same ids, DedupKeys' restore index), its strategies side by side in every iteration, their
// order rotating so load drifts fall on each alike: kScan (each task walks the whole index; the
// only strategy before issue 29's embed work), kSort (a counting sort of the positions by id,
// each task reading only its own ids' gradients) and kAuto (what the step runs). Counters:
// scan_ms, sort_ms, auto_ms (per batch), sort_vs_scan and auto_vs_scan (scan time / that
// strategy's time: above 1 is faster than the scan).
void BM_AggregateStrategy(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0));
  const bool zipf = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  const std::vector<int64_t> ranks = MakeRanks(Rows(dim), zipf, 1234);
  std::vector<internal::DedupResult> batches(kNumBatches);
  for (int b = 0; b < kNumBatches; ++b) {
    std::vector<int64_t> keys(kBatchKeys);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] =
          static_cast<int64_t>(internal::Mix64(ranks[static_cast<size_t>(b) * kBatchKeys + i]));
    }
    internal::DedupKeys(keys, &batches[static_cast<size_t>(b)]);
  }
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
  std::vector<float> grads(static_cast<size_t>(kBatchKeys) * dim);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 0.01f);
  for (auto& g : grads) g = nd(rng);
  std::vector<float> summed(grads.size());
  using internal::AggregateStrategy;
  constexpr AggregateStrategy kOrder[3] = {AggregateStrategy::kScan, AggregateStrategy::kSort,
                                           AggregateStrategy::kAuto};
  double t[3] = {0, 0, 0};
  int64_t batch = 0;
  for (auto _ : state) {
    const internal::DedupResult& d = batches[static_cast<size_t>(batch % kNumBatches)];
    const size_t nu = d.unique_keys.size();
    const auto sums = absl::MakeSpan(summed).first(nu * static_cast<size_t>(dim));
    double total = 0;
    for (int j = 0; j < 3; ++j) {
      const int which = static_cast<int>((batch + j) % 3);
      const auto t0 = Clock::now();
      if (!internal::AggregateGradients(d.restore_index, grads, dim, static_cast<int64_t>(nu), sums,
                                        kOrder[which])
               .ok()) {
        state.SkipWithError("aggregate failed");
        return;
      }
      benchmark::ClobberMemory();
      const double s = Seconds(t0, Clock::now());
      t[which] += s;
      total += s;
    }
    ++batch;
    state.SetIterationTime(total);
  }
  const double per = 1e3 / static_cast<double>(std::max<int64_t>(batch, 1));
  state.counters["scan_ms"] = t[0] * per;
  state.counters["sort_ms"] = t[1] * per;
  state.counters["auto_ms"] = t[2] * per;
  state.counters["sort_vs_scan"] = t[0] / t[1];
  state.counters["auto_vs_scan"] = t[0] / t[2];
}

BENCHMARK(BM_AggregateStrategy)
    ->ArgNames({"dim", "zipf", "threads"})
    ->ArgsProduct({{16, 64, 128}, {0, 1}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(MinTime());

BENCHMARK(BM_EmbeddingStep)
    ->ArgNames({"dim", "zipf", "threads"})
    ->ArgsProduct({{16, 64, 128}, {0, 1}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(MinTime());

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
