// table_test.cc: EmbeddingTable lookups, admission, padding, eviction, capacity, export and
// checkpoints, and TableConfig validation.
#include "recsdk/table.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "oneapi/tbb/global_control.h"
#include "src/common/env.h"
#include "src/common/hash.h"
#include "src/common/random.h"
#include "src/table/dedup.h"
#include "src/table/eviction.h"
#include "src/table/npy.h"
#include "src/table/table_impl.h"

namespace recsdk {
namespace {

using internal::AggregateGradients;
using internal::DedupKeys;
using internal::DedupResult;

TableConfig Config(int dim = 4, int64_t vocab = 100) {
  TableConfig c;
  c.name = "user_table";
  c.dim = dim;
  c.device_vocabulary_size = vocab;
  c.initializer = Initializer::Uniform(-1, 1, 7);
  return c;
}

std::unique_ptr<EmbeddingTable> Make(
    const TableConfig& c, const SparseOptimizerConfig& o = SparseOptimizerConfig::SGD(0.1f)) {
  auto t = EmbeddingTable::Create(c, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

std::vector<uint32_t> Resolve(EmbeddingTable& t, std::vector<int64_t> keys,
                              LookupMode mode = LookupMode::kTrain,
                              std::vector<int64_t> timestamps = {}) {
  std::vector<uint32_t> rows(keys.size());
  const Status s = t.Resolve(keys, {}, timestamps, mode, absl::MakeSpan(rows));
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

std::string TmpDir(const std::string& leaf) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/table_test_" +
                    std::to_string(static_cast<long>(::getpid())) + "_" + leaf;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(DedupTest, UniqueKeysRestoreIndexCounts) {
  const std::vector<int64_t> keys = {5, -3, 5, 9, -3, 5, INT64_MIN};
  DedupResult d;
  DedupKeys(keys, &d);
  EXPECT_EQ(d.unique_keys, (std::vector<int64_t>{5, -3, 9, INT64_MIN}));
  EXPECT_EQ(d.counts, (std::vector<uint32_t>{3, 2, 1, 1}));
  ASSERT_EQ(d.restore_index.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(d.unique_keys[d.restore_index[i]], keys[i]);
  const std::vector<int32_t> k32 = {1, 1, 2};
  DedupKeys(k32, &d);
  EXPECT_EQ(d.unique_keys, (std::vector<int64_t>{1, 2}));
  DedupKeys(std::vector<int64_t>{}, &d);
  EXPECT_TRUE(d.unique_keys.empty());
}

// ReferenceDedup: the plain twin of DedupKeys (std::unordered_map, first-seen order).
DedupResult ReferenceDedup(const std::vector<int64_t>& keys) {
  DedupResult r;
  std::unordered_map<int64_t, uint32_t> seen;
  for (const int64_t k : keys) {
    auto [it, inserted] = seen.emplace(k, static_cast<uint32_t>(r.unique_keys.size()));
    if (inserted) {
      r.unique_keys.push_back(k);
      r.counts.push_back(0);
    }
    ++r.counts[it->second];
    r.restore_index.push_back(it->second);
  }
  return r;
}

void ExpectSameDedup(const DedupResult& got, const DedupResult& want) {
  EXPECT_EQ(got.unique_keys, want.unique_keys);
  EXPECT_EQ(got.restore_index, want.restore_index);
  EXPECT_EQ(got.counts, want.counts);
}

std::vector<std::vector<int64_t>> DedupCases() {
  std::mt19937_64 rng(42);
  std::vector<std::vector<int64_t>> cases;
  for (const size_t n : {1u, 7u, 100u, 4096u, 106496u}) {
    std::vector<int64_t> uniform(n), zipf(n), narrow(n);
    // Zipf(1.05) over 1M ranks, by inverse CDF on a table of cumulative weights.
    static const std::vector<double> cdf = [] {
      std::vector<double> c(1 << 20);
      double acc = 0;
      for (size_t r = 0; r < c.size(); ++r)
        c[r] = acc += std::pow(static_cast<double>(r + 1), -1.05);
      for (double& x : c) x /= acc;
      return c;
    }();
    std::uniform_real_distribution<double> u01(0, 1);
    for (size_t i = 0; i < n; ++i) {
      uniform[i] = static_cast<int64_t>(rng());
      const size_t r = std::lower_bound(cdf.begin(), cdf.end(), u01(rng)) - cdf.begin();
      zipf[i] = static_cast<int64_t>(r * 0x9E3779B97F4A7C15ull);  // spread ranks over int64
      narrow[i] = static_cast<int64_t>(rng() % 1000) - 500;
    }
    cases.push_back(uniform);
    cases.push_back(zipf);
    cases.push_back(narrow);
    cases.push_back(std::vector<int64_t>(n, -7));  // all equal
  }
  return cases;
}

TEST(DedupTest, MatchesReferenceTwinOnRandomZipfAndAllEqualKeys) {
  DedupResult d;
  for (const auto& keys : DedupCases()) {
    SCOPED_TRACE(keys.size());
    DedupKeys(keys, &d);
    ExpectSameDedup(d, ReferenceDedup(keys));
    // The int32 overload sees the same keys truncated.
    std::vector<int32_t> k32(keys.size());
    std::vector<int64_t> k32_wide(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) k32_wide[i] = k32[i] = static_cast<int32_t>(keys[i]);
    DedupKeys(k32, &d);
    ExpectSameDedup(d, ReferenceDedup(k32_wide));
  }
}

TEST(DedupTest, SameOutputOnEveryThreadAndAcrossGenerationWrap) {
  const auto cases = DedupCases();
  std::vector<DedupResult> want;
  for (const auto& keys : cases) want.push_back(ReferenceDedup(keys));
  // Fresh threads (fresh per-thread scratch), two at once, each over every case in turn.
  std::vector<std::thread> threads;
  std::vector<int> failures(2, 0);
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      DedupResult d;
      for (size_t c = 0; c < cases.size(); ++c) {
        const size_t k = (c + static_cast<size_t>(t) * 5) % cases.size();
        DedupKeys(cases[k], &d);
        if (d.unique_keys != want[k].unique_keys || d.restore_index != want[k].restore_index ||
            d.counts != want[k].counts) {
          ++failures[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, (std::vector<int>{0, 0}));
  // Many calls on one thread so the scratch's generation counter wraps at least once.
  std::thread([&] {
    DedupResult d;
    const std::vector<int64_t> a = {3, 1, 3, 2, 1}, b = {9, 9, 8};
    const DedupResult wa = ReferenceDedup(a), wb = ReferenceDedup(b);
    int bad = 0;
    for (int i = 0; i < 70000; ++i) {
      DedupKeys((i & 1) ? a : b, &d);
      const DedupResult& w = (i & 1) ? wa : wb;
      bad += d.unique_keys != w.unique_keys || d.restore_index != w.restore_index ||
             d.counts != w.counts;
    }
    EXPECT_EQ(bad, 0);
  }).join();
}

TEST(DedupTest, AggregateGradientsSumsRepeatedKeys) {
  const std::vector<uint32_t> restore = {0, 1, 0, 0};
  const std::vector<float> grads = {1, 2, 10, 20, 100, 200, 1000, 2000};
  std::vector<float> out(4, -1);
  EXPECT_TRUE(AggregateGradients(restore, grads, 2, 2, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, (std::vector<float>{1101, 2202, 10, 20}));
}

TEST(TableTest, LookupInsertsAndInitialRowsAreReproducible) {
  auto a = Make(Config());
  auto b = Make(Config());
  auto ra = Resolve(*a, {1, 2, 3});
  auto rb = Resolve(*b, {3, 2, 1});  // other insertion order
  EXPECT_EQ(a->size(), 3);
  for (int64_t k : {1, 2, 3}) {
    auto va = a->ReadRow(k), vb = b->ReadRow(k);
    ASSERT_TRUE(va.ok() && vb.ok());
    EXPECT_EQ(*va, *vb);
    for (float v : *va) EXPECT_TRUE(v >= -1 && v <= 1);
  }
  EXPECT_NE(*a->ReadRow(1), *a->ReadRow(2));
  std::vector<float> out(3 * 4);
  EXPECT_TRUE(a->Gather(ra, absl::MakeSpan(out)).ok());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 4), *a->ReadRow(1));
  // Found again: same rows, no growth.
  EXPECT_EQ(Resolve(*a, {1, 2, 3}), ra);
  EXPECT_EQ(a->size(), 3);
}

// A new row's embedding is a pure function of (initializer seed, key): the first dim words of the
// Philox stream CombineSeeds(seed, key), mapped as the initializer says. Rows initialised many at
// a time (their streams side by side in vector lanes) must be those of one stream per key, for
// dims that fill and that do not fill the last block.
TEST(TableTest, InitialRowsAreTheKeysPhiloxStreams) {
  for (int dim : {3, 16, 17}) {
    for (bool glorot : {false, true}) {
      TableConfig c = Config(dim, 1000);
      c.initializer = glorot ? Initializer::GlorotUniform(11) : Initializer::Uniform(-0.5, 2, 9);
      auto t = Make(c, SparseOptimizerConfig::Adagrad(0.1f, 0.25f, 1e-10f));
      std::vector<int64_t> keys(300);
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 7919) - 5000;
      Resolve(*t, keys);
      const float limit = std::sqrt(6.0f / (2.0f * static_cast<float>(dim)));
      const float lo = glorot ? -limit : -0.5f, span = glorot ? 2.0f * limit : 2.5f;
      for (int64_t k : keys) {
        internal::PhiloxStream s(internal::CombineSeeds(glorot ? 11 : 9, static_cast<uint64_t>(k)),
                                 0);
        std::vector<float> want(2 * dim, 0.25f);  // the embedding, then Adagrad's accumulator
        for (int i = 0; i < dim; ++i) want[i] = lo + span * s.Uniform();
        auto row = t->ReadRow(k);
        ASSERT_TRUE(row.ok()) << row.status();
        ASSERT_EQ(*row, want) << "dim " << dim << " glorot " << glorot << " key " << k;
      }
    }
  }
}

// Gather, GatherRestored (their fast paths copy whole cache lines for dim % 16 == 0) and
// GatherPooled with one id per sample against the reference ReadRow / serving default / zeros,
// for dims with and without whole lines, with sentinel rows mixed in, bitwise equal on 1 and 2
// threads.
TEST(TableTest, GatherMatchesReadRowForAllDimsAndThreads) {
  for (int dim : {3, 16, 17, 32, 64}) {
    TableConfig c = Config(dim, 20000);
    c.serving_default_value = 0.25f;
    c.padding_keys = {-1};
    auto t = Make(c, SparseOptimizerConfig::Adagrad(0.1f));
    std::vector<int64_t> keys;
    for (int64_t k = 0; k < 12000; ++k) keys.push_back(k * 7919 % 15000);
    keys[5] = -1;
    DedupResult d;
    DedupKeys(keys, &d);
    std::vector<uint32_t> rows(d.unique_keys.size());
    ASSERT_TRUE(
        t->Resolve(d.unique_keys, d.counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
    rows[d.restore_index[7]] = EmbeddingTable::kDefaultRow;  // as if not admitted
    std::vector<float> want(keys.size() * dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t r = rows[d.restore_index[i]];
      float* w = want.data() + i * dim;
      if (r == EmbeddingTable::kPaddingRow) {
        std::fill(w, w + dim, 0.0f);
      } else if (r == EmbeddingTable::kDefaultRow) {
        std::fill(w, w + dim, 0.25f);
      } else {
        auto v = t->ReadRow(keys[i]);
        ASSERT_TRUE(v.ok());
        std::copy(v->begin(), v->begin() + dim, w);
      }
    }
    std::vector<uint32_t> flat(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) flat[i] = rows[d.restore_index[i]];
    for (int threads : {1, 2}) {
      tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
      std::vector<float> out(want.size(), -9.0f), out2(want.size(), -9.0f);
      EXPECT_TRUE(t->GatherRestored(rows, d.restore_index, absl::MakeSpan(out)).ok());
      EXPECT_TRUE(t->Gather(flat, absl::MakeSpan(out2)).ok());
      EXPECT_EQ(std::memcmp(out.data(), want.data(), want.size() * 4), 0) << dim << " " << threads;
      EXPECT_EQ(std::memcmp(out2.data(), want.data(), want.size() * 4), 0) << dim << " " << threads;
      // Pooled with one id per sample (its own path): every combiner gives the row itself.
      for (Combiner combiner : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
        std::vector<float> pooled(want.size(), -9.0f);
        EXPECT_TRUE(t->GatherPooled(rows, d.restore_index, static_cast<int64_t>(keys.size()), 1,
                                    combiner, absl::MakeSpan(pooled))
                        .ok());
        EXPECT_EQ(std::memcmp(pooled.data(), want.data(), want.size() * 4), 0)
            << dim << " " << threads << " combiner " << static_cast<int>(combiner);
      }
    }
  }
}

TEST(TableTest, EvalDoesNotInsertAndReadsServingDefault) {
  TableConfig c = Config();
  c.serving_default_value = 0.5f;
  auto t = Make(c);
  auto rows = Resolve(*t, {42}, LookupMode::kEval);
  EXPECT_EQ(rows[0], EmbeddingTable::kDefaultRow);
  EXPECT_EQ(t->size(), 0);
  std::vector<float> out(4);
  EXPECT_TRUE(t->Gather(rows, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, std::vector<float>(4, 0.5f));
}

TEST(TableTest, PaddingKeysReadZerosNeverTrainAndMask) {
  TableConfig c = Config();
  c.padding_keys = {-1};
  c.padding_keys_mask = true;
  c.serving_default_value = 3;
  auto t = Make(c);
  DedupResult d;
  const std::vector<int64_t> keys = {7, -1, 7, -1};
  DedupKeys(keys, &d);
  std::vector<uint32_t> rows(d.unique_keys.size());
  ASSERT_TRUE(
      t->Resolve(d.unique_keys, d.counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(rows[1], EmbeddingTable::kPaddingRow);
  EXPECT_EQ(t->size(), 1);
  std::vector<float> out(4 * 4);
  EXPECT_TRUE(t->GatherRestored(rows, d.restore_index, absl::MakeSpan(out)).ok());
  for (int i = 4; i < 8; ++i) EXPECT_EQ(out[i], 0.0f);
  std::vector<float> mask(4);
  EXPECT_TRUE(t->PaddingMask(rows, d.restore_index, absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask, (std::vector<float>{1, 0, 1, 0}));
  // Pooled mean over [2, 2]: sample 0 = {7, -1} -> mean over the one valid id.
  std::vector<float> pooled(2 * 4);
  ASSERT_TRUE(
      t->GatherPooled(rows, d.restore_index, 2, 2, Combiner::kMean, absl::MakeSpan(pooled)).ok());
  auto row7 = *t->ReadRow(7);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(pooled[i], row7[i]);
  ASSERT_TRUE(
      t->GatherPooled(rows, d.restore_index, 2, 2, Combiner::kSum, absl::MakeSpan(pooled)).ok());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(pooled[4 + i], row7[i]);
  EXPECT_FALSE(
      t->GatherPooled(rows, d.restore_index, 3, 2, Combiner::kSum, absl::MakeSpan(pooled)).ok());
  // Gradients for padding rows are skipped.
  std::vector<float> g(2 * 4, 1.0f);
  EXPECT_TRUE(t->ApplyGradients(rows, g, 1).ok());
  EXPECT_EQ(t->size(), 1);
  EXPECT_EQ(t->FindRow(-1), EmbeddingTable::kPaddingRow);
}

TEST(TableTest, PooledSqrtn) {
  auto t = Make(Config());
  auto rows = Resolve(*t, {1, 2});
  std::vector<uint32_t> restore = {0, 1};
  std::vector<float> out(4);
  ASSERT_TRUE(t->GatherPooled(rows, restore, 1, 2, Combiner::kSqrtn, absl::MakeSpan(out)).ok());
  auto r1 = *t->ReadRow(1), r2 = *t->ReadRow(2);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], (r1[i] + r2[i]) / std::sqrt(2.0f), 1e-6);
}

TEST(TableTest, AdmissionThresholdWithFaaeCoefficient) {
  TableConfig c = Config();
  c.access_threshold = 3;
  c.faae_coefficient = 1.0f;
  c.serving_default_value = -2;
  auto t = Make(c);
  // Two occurrences in one batch count 2.
  std::vector<int64_t> keys = {10};
  std::vector<uint32_t> counts = {2};
  std::vector<uint32_t> rows(1);
  ASSERT_TRUE(t->Resolve(keys, counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(rows[0], EmbeddingTable::kDefaultRow);
  EXPECT_EQ(t->AdmissionCount(10), 2.0f);
  // Evaluation reads, never counts.
  ASSERT_TRUE(t->Resolve(keys, counts, {}, LookupMode::kEval, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(t->AdmissionCount(10), 2.0f);
  // Gradients of a not-admitted key are dropped.
  std::vector<float> g(4, 1.0f);
  EXPECT_TRUE(t->ApplyGradients(rows, g, 1).ok());
  EXPECT_EQ(t->size(), 0);
  ASSERT_TRUE(t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  EXPECT_NE(rows[0], EmbeddingTable::kDefaultRow);
  EXPECT_EQ(t->size(), 1);
  EXPECT_EQ(t->AdmissionCount(10), 0.0f);

  TableConfig half = Config();
  half.access_threshold = 2;
  half.faae_coefficient = 0.5f;
  auto t2 = Make(half);
  for (int i = 0; i < 3; ++i) Resolve(*t2, {5});
  EXPECT_EQ(t2->size(), 0);
  EXPECT_FLOAT_EQ(t2->AdmissionCount(5), 1.5f);
  Resolve(*t2, {5});
  EXPECT_EQ(t2->size(), 1);
}

TEST(TableTest, EvictionByDataTimeReusesRows) {
  TableConfig c = Config(4, 3);
  c.access_threshold = 0;
  c.eviction_threshold = 100;
  auto t = Make(c);
  auto r1 = Resolve(*t, {1, 2}, LookupMode::kTrain, {1000, 1050});
  EXPECT_EQ(t->data_time(), 1050);
  Resolve(*t, {3}, LookupMode::kTrain, {1100});
  EXPECT_EQ(t->size(), 3);
  // Key 1 was last seen at 1000 = 1100 - 100: evicted. Key 2 (1050) stays.
  auto evicted = t->EvictStale();
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(*evicted, 1);
  EXPECT_EQ(t->size(), 2);
  EXPECT_EQ(t->FindRow(1), EmbeddingTable::kDefaultRow);
  // The freed row is reused by the next new key, which gets its own initial values.
  auto r4 = Resolve(*t, {4}, LookupMode::kTrain, {1101});
  EXPECT_EQ(r4[0], r1[0]);
  auto fresh = Make(c);
  Resolve(*fresh, {4});
  EXPECT_EQ(*t->ReadRow(4), *fresh->ReadRow(4));
  // Refreshing a key's timestamp keeps it.
  Resolve(*t, {2}, LookupMode::kTrain, {1200});
  ASSERT_TRUE(t->EvictLastAccessedAtOrBefore(1101).ok());
  EXPECT_EQ(t->size(), 1);
  EXPECT_NE(t->FindRow(2), EmbeddingTable::kDefaultRow);
}

TEST(TableTest, EvictionRemovesPendingCounts) {
  TableConfig c = Config();
  c.access_threshold = 5;
  c.eviction_threshold = 10;
  auto t = Make(c);
  Resolve(*t, {9}, LookupMode::kTrain, {0});
  Resolve(*t, {8}, LookupMode::kTrain, {20});
  EXPECT_EQ(t->AdmissionCount(9), 1.0f);
  ASSERT_TRUE(t->EvictStale().ok());
  EXPECT_EQ(t->AdmissionCount(9), 0.0f);
  EXPECT_EQ(t->AdmissionCount(8), 1.0f);
}

TEST(TableTest, EvictionDisabledIsFailedPrecondition) {
  auto t = Make(Config());
  EXPECT_EQ(t->EvictStale().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TableTest, EvictHookTriggersBySteps) {
  TableConfig c = Config();
  c.access_threshold = 0;
  c.eviction_threshold = 5;
  auto t = Make(c);
  EvictHook hook(true, /*evict_time_interval=*/0, /*evict_step_interval=*/2);
  ASSERT_TRUE(hook.Validate().ok());
  EmbeddingTable* tables[] = {t.get()};
  Resolve(*t, {1}, LookupMode::kTrain, {0});
  EXPECT_EQ(*hook.AfterStep(1, tables), 0);
  Resolve(*t, {2}, LookupMode::kTrain, {10});
  EXPECT_EQ(*hook.AfterStep(2, tables), 1);
  EXPECT_EQ(t->size(), 1);
  EXPECT_FALSE(EvictHook(true, 0, 0).Validate().ok());
  EvictHook by_time(true, 100, 0);
  Resolve(*t, {3}, LookupMode::kTrain, {50});
  EXPECT_EQ(*by_time.AfterStep(1, tables), 0);
  Resolve(*t, {3}, LookupMode::kTrain, {150});
  EXPECT_EQ(*by_time.AfterStep(2, tables), 1);  // key 2 (t=10) goes
}

// The one rule of stale eviction (eviction.h), with batches in flight (what the key stage's
// tables pass): keys last accessed at or after in_flight_from stay, the rest goes as EvictStale
// decides; with nothing in flight it evicts exactly what EvictStale evicts.
TEST(TableTest, EvictStaleKeysKeepsTheKeysOfBatchesInFlight) {
  TableConfig c = Config();
  c.access_threshold = 0;
  c.eviction_threshold = 5;
  auto make = [&] {
    auto t = Make(c);
    Resolve(*t, {1, 2, 3}, LookupMode::kTrain, {0, 10, 20});
    Resolve(*t, {4}, LookupMode::kTrain, {100});  // data time 100: keys 1-3 are stale
    return t;
  };
  auto a = make(), b = make(), reference = make();
  EXPECT_EQ(*internal::EvictStaleKeys(*a, /*in_flight_from=*/10), 1);
  EXPECT_EQ(a->FindRow(1), EmbeddingTable::kDefaultRow);  // before the oldest batch: goes
  EXPECT_NE(a->FindRow(2), EmbeddingTable::kDefaultRow);  // a batch at 10 may use it: stays
  EXPECT_NE(a->FindRow(3), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(*internal::EvictStaleKeys(*b), 3);
  EXPECT_EQ(*reference->EvictStale(), 3);
  for (int64_t key : {1, 2, 3, 4}) {
    EXPECT_EQ(b->FindRow(key), reference->FindRow(key)) << key;
  }
  EXPECT_EQ(internal::StaleCutoff(std::numeric_limits<int64_t>::min(), 5), std::nullopt);
  EXPECT_EQ(internal::StaleCutoff(100, 5), 95);
  EXPECT_EQ(internal::StaleCutoff(100, 5, /*in_flight_from=*/10), 9);
  auto disabled = Make(Config());
  EXPECT_EQ(internal::EvictStaleKeys(*disabled).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TableTest, FullTableIsResourceExhaustedNamingTheTable) {
  auto t = Make(Config(4, 2));
  Resolve(*t, {1, 2});
  std::vector<int64_t> keys = {3, 1};
  std::vector<uint32_t> rows(2);
  Status s = t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("user_table"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("use_dynamic_expansion"), absl::string_view::npos) << s;
  EXPECT_EQ(t->size(), 2);
  EXPECT_EQ(t->capacity(), 2);
}

TEST(TableTest, DynamicExpansionGrows) {
  TableConfig c = Config(4, 8);
  c.use_dynamic_expansion = true;
  EXPECT_FALSE(EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)).ok());
  auto t = Make(c, SparseOptimizerConfig::SGDByAddr(0.1f));
  // capacity() is the limit the table enforces: what its row reservation holds, fixed for life.
  const int64_t reserved = std::min<int64_t>(EmbeddingTable::kMaxRows, (int64_t{1} << 40) / 16);
  EXPECT_EQ(t->capacity(), reserved);
  const int64_t memory_before = t->MemoryBytes();
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 200000; ++i) keys.push_back(i * 31);
  auto rows = Resolve(*t, keys);
  EXPECT_EQ(t->size(), 200000);
  EXPECT_EQ(t->capacity(), reserved);
  EXPECT_GT(t->MemoryBytes(), memory_before + 200000 * 16);
  // Rows of 64 floats + 128 LazyAdam slots: 768 bytes, so the reservation holds fewer rows.
  TableConfig wide = Config(64, 8);
  wide.use_dynamic_expansion = true;
  auto w = Make(wide, SparseOptimizerConfig::LazyAdamByAddress());
  EXPECT_EQ(w->capacity(), (int64_t{1} << 40) / 768);
  for (size_t i = 0; i < keys.size(); i += 997) EXPECT_EQ(t->FindRow(keys[i]), rows[i]);
  // By-address update through the lookup's row addresses.
  std::vector<float*> addr(2);
  std::vector<uint32_t> two = {rows[0], rows[1]};
  ASSERT_TRUE(t->RowAddresses(two, absl::MakeSpan(addr)).ok());
  auto before = *t->ReadRow(keys[1]);
  std::vector<float> g(8, 1.0f);
  EXPECT_TRUE(t->ApplyGradientsByAddress(addr, g, 1).ok());
  auto after = *t->ReadRow(keys[1]);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(after[i], before[i] - 0.1f, 1e-6);
}

TEST(TableTest, Int32KeysRejectOutOfRange) {
  TableConfig c = Config();
  c.key_dtype = DType::kInt32;
  auto t = Make(c);
  std::vector<int64_t> keys = {int64_t{1} << 40};
  std::vector<uint32_t> rows(1);
  EXPECT_EQ(t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).code(),
            absl::StatusCode::kInvalidArgument);
  Resolve(*t, {-5, 2147483647});
  EXPECT_EQ(t->size(), 2);
}

TEST(TableTest, ExportNpyHeaderAndImportRoundTrip) {
  auto t = Make(Config());
  Resolve(*t, {30, -4, 7});
  const std::string dir = TmpDir("export");
  ASSERT_TRUE(t->ExportNpy(dir + "/k.npy", dir + "/v.npy").ok());
  auto raw = internal::ReadFile(dir + "/k.npy");
  ASSERT_TRUE(raw.ok());
  ASSERT_GE(raw->size(), 64u + 24);
  EXPECT_EQ(raw->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len =
      static_cast<unsigned char>((*raw)[8]) | (static_cast<unsigned char>((*raw)[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_NE(raw->find("'descr': '<i8', 'fortran_order': False, 'shape': (3,)"), std::string::npos);
  EXPECT_EQ(raw->size(), 10 + header_len + 3 * 8);
  auto v = internal::ReadNpy(dir + "/v.npy");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->shape, (std::vector<int64_t>{3, 4}));
  // Sorted by key: -4, 7, 30.
  std::vector<float> first(4);
  std::memcpy(first.data(), v->data.data(), 16);
  const std::vector<float> row = *t->ReadRow(-4);
  EXPECT_EQ(first, std::vector<float>(row.begin(), row.begin() + 4));
  auto u = Make(Config());
  ASSERT_TRUE(u->ImportNpy(dir + "/k.npy", dir + "/v.npy").ok());
  EXPECT_EQ(u->size(), 3);
  for (int64_t k : {30, -4, 7}) EXPECT_EQ(*u->ReadRow(k), *t->ReadRow(k));
  if (std::system("python3 -c 'import numpy' >/dev/null 2>&1") == 0) {
    const std::string cmd = "python3 -c \"import numpy as np; k=np.load('" + dir +
                            "/k.npy'); v=np.load('" + dir +
                            "/v.npy'); assert list(k)==[-4,7,30] and v.shape==(3,4)\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
}

// Issue 28 item 4: the npy writer goes through the Env, atomically: a full disk, a failed write
// or a failed sync leaves the previous export whole and readable.
TEST(TableTest, NpyWriterFaultsLeaveThePreviousFileWhole) {
  const std::string dir = fmt::format("/tmp/npy_faults_{}", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  internal::FaultInjectionEnv env(internal::Env::Default());
  const std::vector<float> old_rows = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(internal::WriteNpy(dir + "/v.npy", "<f4", {2, 3}, old_rows.data(), 24, &env).ok());
  const std::vector<float> new_rows(3000, 7.0f);
  auto expect_old = [&](const Status& s, absl::StatusCode code) {
    EXPECT_EQ(s.code(), code) << s;
    auto a = internal::ReadNpy(dir + "/v.npy");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::memcmp(a->data.data(), old_rows.data(), 24), 0);
    EXPECT_FALSE(std::filesystem::exists(dir + "/v.npy.tmp"));
  };
  env.disk_full_after_bytes = 1000;
  expect_old(internal::WriteNpy(dir + "/v.npy", "<f4", {1000, 3}, new_rows.data(), 12000, &env),
             absl::StatusCode::kResourceExhausted);
  env.disk_full_after_bytes = -1;
  env.fail_write_after = 1;  // the header goes, the rows fail: a short write
  expect_old(internal::WriteNpy(dir + "/v.npy", "<f4", {1000, 3}, new_rows.data(), 12000, &env),
             absl::StatusCode::kInternal);
  env.fail_write_after = -1;
  env.fail_sync = true;
  expect_old(internal::WriteNpy(dir + "/v.npy", "<f4", {1000, 3}, new_rows.data(), 12000, &env),
             absl::StatusCode::kInternal);
  env.fail_sync = false;
  ASSERT_TRUE(
      internal::WriteNpy(dir + "/v.npy", "<f4", {1000, 3}, new_rows.data(), 12000, &env).ok());
  EXPECT_EQ(internal::ReadNpy(dir + "/v.npy")->shape, (std::vector<int64_t>{1000, 3}));
  std::filesystem::remove_all(dir);
}

TEST(TableTest, ImportNpyMissingIsNotFoundCorruptIsDataLossAndChangesNothing) {
  auto src = Make(Config());
  Resolve(*src, {1, 2, 3});
  const std::string dir = TmpDir("import_corrupt");
  const std::string keys = dir + "/k.npy", values = dir + "/v.npy";
  ASSERT_TRUE(src->ExportNpy(keys, values).ok());
  const std::string good_values = *internal::ReadFile(values);
  const std::string good_keys = *internal::ReadFile(keys);

  // The target already holds key 2 (with other values) and key 9; a failed import must leave
  // both rows, and nothing else, in place.
  auto t = Make(Config());
  const std::vector<uint32_t> rows = Resolve(*t, {9, 2});
  const std::vector<float> g(2 * 4, 1.0f);
  // Rows start from the key's seed: make them differ.
  EXPECT_TRUE(t->ApplyGradients(rows, g, 1).ok());
  const std::vector<float> row2 = *t->ReadRow(2), row9 = *t->ReadRow(9);
  ASSERT_NE(row2, *src->ReadRow(2));
  auto expect_unchanged = [&](const std::string& what) {
    EXPECT_EQ(t->size(), 2) << what;
    EXPECT_EQ(*t->ReadRow(2), row2) << what;
    EXPECT_EQ(*t->ReadRow(9), row9) << what;
    EXPECT_EQ(t->FindRow(1), EmbeddingTable::kDefaultRow) << what;
    EXPECT_EQ(t->FindRow(3), EmbeddingTable::kDefaultRow) << what;
  };
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  auto expect_code = [&](absl::StatusCode code, const std::string& what) {
    const Status s = t->ImportNpy(keys, values);
    EXPECT_EQ(s.code(), code) << what << ": " << s;
    expect_unchanged(what);
  };

  write(values, good_values.substr(0, good_values.size() - 5));
  expect_code(absl::StatusCode::kDataLoss, "values payload truncated");
  write(values, good_values.substr(0, 20));
  expect_code(absl::StatusCode::kDataLoss, "values header truncated");
  std::string bad_magic = good_values;
  bad_magic[1] = 'X';
  write(values, bad_magic);
  expect_code(absl::StatusCode::kDataLoss, "values magic corrupt");
  write(values, good_values);
  write(keys, good_keys.substr(0, good_keys.size() - 8));
  expect_code(absl::StatusCode::kDataLoss, "keys payload truncated");
  // Consistent files, but the values have another dim than the table.
  auto wide = Make(Config(/*dim=*/5));
  Resolve(*wide, {1, 2, 3});
  ASSERT_TRUE(wide->ExportNpy(keys, values).ok());
  expect_code(absl::StatusCode::kDataLoss, "values of another dim");
  std::filesystem::remove(values);
  expect_code(absl::StatusCode::kNotFound, "values file missing");

  // Restored files import fine afterwards.
  write(keys, good_keys);
  write(values, good_values);
  ASSERT_TRUE(t->ImportNpy(keys, values).ok());
  EXPECT_EQ(t->size(), 4);
  EXPECT_EQ(*t->ReadRow(2), *src->ReadRow(2));
}

TEST(TableSnapshotTest, FullRoundTripWithSlotsAdmissionAndTimestamps) {
  TableConfig c = Config();
  c.access_threshold = 2;
  c.eviction_threshold = 1000;
  auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto t = Make(c, opt);
  std::vector<int64_t> keys = {1, 2, 3};
  std::vector<uint32_t> counts = {2, 2, 1};
  std::vector<int64_t> ts = {10, 20, 30};
  std::vector<uint32_t> rows(3);
  ASSERT_TRUE(t->Resolve(keys, counts, ts, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  std::vector<float> g(3 * 4, 0.5f);
  EXPECT_TRUE(t->ApplyGradients(rows, g, 1).ok());
  ASSERT_TRUE(t->SetAccessThreshold(5).ok());  // set_threshold since creation: saved too
  auto snap = t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->keys, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(snap->pending_keys, (std::vector<int64_t>{3}));
  auto u = Make(c, opt);
  Resolve(*u, {77});  // replaced by the snapshot
  Status s = u->LoadSnapshot(*snap);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(u->size(), 2);
  EXPECT_EQ(u->FindRow(77), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(u->data_time(), 30);
  EXPECT_EQ(*u->ReadRow(1), *t->ReadRow(1));
  EXPECT_EQ(*u->ReadRow(2), *t->ReadRow(2));
  EXPECT_EQ(u->AdmissionCount(3), 1.0f);
  EXPECT_EQ(u->config().access_threshold, 5);
  // Timestamps came back: a cutoff of 20 removes key 1 (t=10) and 2 (t=20) only.
  ASSERT_TRUE(u->EvictLastAccessedAtOrBefore(20).ok());
  EXPECT_EQ(u->size(), 0);
  EXPECT_EQ(u->AdmissionCount(3), 1.0f);
}

TEST(TableSnapshotTest, MismatchIsFailedPreconditionNamingBothValues) {
  auto t = Make(Config(), SparseOptimizerConfig::Adagrad());
  Resolve(*t, {1, 2});
  const TableSnapshot snap = *t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  auto expect = [&](EmbeddingTable& u, const std::string& needle) {
    const Status s = u.LoadSnapshot(snap);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
    EXPECT_EQ(u.size(), 0);
  };
  expect(*Make(Config(), SparseOptimizerConfig::LazyAdam()), "optimizer Adagrad");
  expect(*Make(Config(/*dim=*/8), SparseOptimizerConfig::Adagrad()),
         "dim 4 but the table has dim 8");
  TableConfig c32 = Config();
  c32.key_dtype = DType::kInt32;
  expect(*Make(c32, SparseOptimizerConfig::Adagrad()),
         "key dtype int64 but the table has key dtype int32");
}

TEST(TableSnapshotTest, BadSnapshotIsDataLossAndLeavesTableUnchanged) {
  auto t = Make(Config(), SparseOptimizerConfig::Adagrad());
  Resolve(*t, {1, 2, 3});
  const TableSnapshot good = *t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  auto u = Make(Config(), SparseOptimizerConfig::Adagrad());
  Resolve(*u, {7, 8});
  const std::vector<float> row7 = *u->ReadRow(7);
  auto expect_data_loss = [&](TableSnapshot bad, const std::string& needle) {
    const Status s = u->LoadSnapshot(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << needle << ": " << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
    EXPECT_EQ(u->size(), 2);
    EXPECT_EQ(*u->ReadRow(7), row7);
  };
  TableSnapshot dup = good;
  dup.keys = {1, 2, 2};
  expect_data_loss(dup, "not sorted and unique");
  TableSnapshot short_rows = good;
  short_rows.rows.pop_back();
  expect_data_loss(short_rows, "row floats");
  // An int32 table refuses keys outside its range, as ImportNpy does.
  TableConfig c32 = Config();
  c32.key_dtype = DType::kInt32;
  auto t32 = Make(c32, SparseOptimizerConfig::Adagrad());
  Resolve(*t32, {5});
  TableSnapshot wide = *t32->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  wide.keys = {int64_t{1} << 40};
  const Status s = t32->LoadSnapshot(wide);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("1099511627776"), std::string::npos) << s;
  EXPECT_NE(t32->FindRow(5), EmbeddingTable::kDefaultRow);
  // The table still works: a new key gets a fresh row.
  Resolve(*u, {9});
  EXPECT_EQ(u->size(), 3);
}

// TrainDim4: one training step of a dim-4 table: `keys` resolved at data time `time`, every
// gradient element `grad`.
void TrainDim4(EmbeddingTable& table, const std::vector<int64_t>& keys, int64_t time, float grad) {
  std::vector<int64_t> ts(keys.size(), time);
  std::vector<uint32_t> rows(keys.size());
  ASSERT_TRUE(table.Resolve(keys, {}, ts, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  std::vector<float> g(keys.size() * 4, grad);
  EXPECT_TRUE(table.ApplyGradients(rows, g, 1).ok());
}

TEST(TableSnapshotTest, DeltaHoldsChangedRowsAndEvictedKeysAndReplaysExactly) {
  TableConfig c = Config(4, 1000);
  c.access_threshold = 1;
  c.eviction_threshold = 100;
  auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto t = Make(c, opt);
  auto train = [](EmbeddingTable& tab, std::vector<int64_t> keys, int64_t time, float grad) {
    TrainDim4(tab, keys, time, grad);
  };
  std::vector<int64_t> first;
  for (int64_t k = 0; k < 100; ++k) first.push_back(k);
  train(*t, first, 10, 0.5f);
  const TableSnapshot full = *t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  EXPECT_EQ(full.keys.size(), 100u);
  // Change 3 rows, add 1 key, evict the other 97 keys (last seen at 10), then re-add key 7.
  train(*t, {60, 61, 62, 500}, 200, -0.25f);
  ASSERT_TRUE(t->EvictLastAccessedAtOrBefore(10).ok());
  train(*t, {7}, 201, 1.0f);
  const TableSnapshot delta = *t->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_TRUE(delta.is_delta);
  EXPECT_EQ(delta.keys, (std::vector<int64_t>{7, 60, 61, 62, 500}));
  ASSERT_EQ(delta.removed_keys.size(), 97u);  // key 7 too: the delta evicts, then writes it
  // Nothing changed since: an empty delta.
  const TableSnapshot empty = *t->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_TRUE(empty.keys.empty());
  EXPECT_TRUE(empty.removed_keys.empty());

  // Full + delta reproduces the table exactly: same keys, rows and timestamps.
  auto u = Make(c, opt);
  ASSERT_TRUE(u->LoadSnapshot(full).ok());
  ASSERT_TRUE(u->LoadSnapshot(delta).ok());
  const TableSnapshot want = *t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  const TableSnapshot got = *u->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_EQ(got.timestamps, want.timestamps);
  EXPECT_EQ(got.data_time, want.data_time);
  EXPECT_EQ(u->FindRow(3), EmbeddingTable::kDefaultRow);  // evicted keys stay evicted
}

// A delta finds its rows from the dirty bytes and the key each row was bound to: a row changed
// and then freed, or freed and rebound to another key, must show up under its current key only.
TEST(TableSnapshotTest, DeltaOfRowsFreedOrReboundSinceTheLastSnapshot) {
  TableConfig c = Config(4, 8);
  c.access_threshold = 0;
  c.eviction_threshold = 5;
  auto opt = SparseOptimizerConfig::SGD(0.1f);
  auto t = Make(c, opt);
  auto train = [&](std::vector<int64_t> keys, int64_t time) { TrainDim4(*t, keys, time, 1.0f); };
  train({1, 2, 3, 4}, 10);
  ASSERT_TRUE(t->Snapshot(EmbeddingTable::SnapshotKind::kFull).ok());
  // Keys 1, 2 and 3 change, then 1 and 3 are evicted (their rows freed, still dirty), then key
  // 9 takes one of the freed rows and key 4 changes.
  train({1, 2, 3}, 20);
  train({2, 4}, 40);
  ASSERT_EQ(*t->EvictLastAccessedAtOrBefore(20), 2);
  train({9, 4}, 41);
  const TableSnapshot delta = *t->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_EQ(delta.keys, (std::vector<int64_t>{2, 4, 9}));
  EXPECT_EQ(delta.removed_keys, (std::vector<int64_t>{1, 3}));
  for (size_t i = 0; i < delta.keys.size(); ++i) {
    const std::vector<float> row = *t->ReadRow(delta.keys[i]);
    EXPECT_EQ(std::vector<float>(delta.rows.begin() + static_cast<std::ptrdiff_t>(i * 4),
                                 delta.rows.begin() + static_cast<std::ptrdiff_t>(i * 4 + 4)),
              std::vector<float>(row.begin(), row.begin() + 4))
        << delta.keys[i];
  }
}

// CollectingSink: a SnapshotRowSink that keeps what it is given, failing at piece `fail_at`.
struct CollectingSink final : SnapshotRowSink {
  int fail_at = -1;
  int begins = 0;
  size_t begin_keys = 0;
  std::vector<size_t> piece_floats;
  std::vector<float> rows;
  Status Begin(const TableSnapshot& s) override {
    ++begins;
    begin_keys = s.keys.size();
    EXPECT_TRUE(s.rows.empty());
    return absl::OkStatus();
  }
  Status Rows(absl::Span<const float> r) override {
    if (static_cast<int>(piece_floats.size()) == fail_at) {
      return absl::DataLossError("disk full (test)");
    }
    piece_floats.push_back(r.size());
    rows.insert(rows.end(), r.begin(), r.end());
    return absl::OkStatus();
  }
};

TEST(TableSnapshotTest, SinkGetsTheSnapshotRowsInPiecesAndItsErrorKeepsTracking) {
  // 300k rows of dim 4 + 4 Adagrad slots (9.6 MB): several pieces of a few MiB. Rows differ by
  // key (the initializer); eviction keeps timestamps, so touching a key later changes its row.
  const int64_t n = 300000;
  TableConfig c = Config(4, n);
  c.access_threshold = 1;
  c.eviction_threshold = 1000;
  auto t = Make(c, SparseOptimizerConfig::Adagrad(0.1f));
  std::vector<int64_t> keys(n);
  for (int64_t i = 0; i < n; ++i) keys[i] = (i * 7919) % n * 3 - n;  // unsorted, some negative
  std::vector<uint32_t> rows(n);
  const std::vector<int64_t> at10(n, 10);
  ASSERT_TRUE(t->Resolve(keys, {}, at10, LookupMode::kTrain, absl::MakeSpan(rows)).ok());

  const TableSnapshot want = *t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  CollectingSink sink;
  auto got = t->SnapshotToSink(EmbeddingTable::SnapshotKind::kFull, sink);  // restarts tracking
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.begin_keys, static_cast<size_t>(n));
  EXPECT_GT(sink.piece_floats.size(), 1u);
  for (size_t f : sink.piece_floats) EXPECT_EQ(f % 8, 0u);  // whole rows only
  EXPECT_EQ(got->keys, want.keys);
  EXPECT_TRUE(got->rows.empty());
  ASSERT_EQ(sink.rows.size(), want.rows.size());
  EXPECT_EQ(std::memcmp(sink.rows.data(), want.rows.data(), want.rows.size() * sizeof(float)), 0);

  // A delta through a sink that fails midway: the error comes back, and the tracking is kept, so
  // the next delta still holds every changed row.
  const std::vector<int64_t> some(keys.begin(), keys.begin() + 200000), at20(200000, 20);
  std::vector<uint32_t> some_rows(some.size());
  ASSERT_TRUE(t->Resolve(some, {}, at20, LookupMode::kTrain, absl::MakeSpan(some_rows)).ok());
  CollectingSink failing;
  failing.fail_at = 1;
  auto failed = t->SnapshotToSink(EmbeddingTable::SnapshotKind::kDelta, failing);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  EXPECT_EQ(failing.piece_floats.size(), 1u);
  CollectingSink delta_sink;
  auto delta = t->SnapshotToSink(EmbeddingTable::SnapshotKind::kDelta, delta_sink);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(delta->keys.size(), 200000u);
  EXPECT_EQ(delta_sink.rows.size(), 200000u * 8);
  // The tracking restarted after that delta: nothing is left.
  CollectingSink empty_sink;
  auto empty = t->SnapshotToSink(EmbeddingTable::SnapshotKind::kDelta, empty_sink);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->keys.empty());
  EXPECT_EQ(empty_sink.begins, 1);
  EXPECT_TRUE(empty_sink.piece_floats.empty());
}

TEST(TableSnapshotTest, AdoptSnapshotTakesTheRowPagesAndTheTableTrainsOn) {
  // 100k rows of dim 16 + 16 Adagrad slots: a 12.8 MB row buffer of its own mapping.
  const int64_t n = 100000;
  const auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto t = Make(Config(16, 2 * n), opt);
  std::vector<int64_t> keys(n);
  for (int64_t i = 0; i < n; ++i) keys[i] = (i * 7919) % n - n / 2;
  std::vector<uint32_t> rows(n);
  ASSERT_TRUE(t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  TableSnapshot snap = *t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  const TableSnapshot copy = snap;
  auto u = Make(Config(16, 2 * n), opt);
  Resolve(*u, {123456789});  // replaced by the snapshot
  const Status s = u->AdoptSnapshot(std::move(snap));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(u->size(), n);
  EXPECT_EQ(u->FindRow(123456789), EmbeddingTable::kDefaultRow);
  const TableSnapshot got = *u->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  EXPECT_EQ(got.keys, copy.keys);
  ASSERT_EQ(got.rows.size(), copy.rows.size());
  EXPECT_EQ(std::memcmp(got.rows.data(), copy.rows.data(), copy.rows.size() * sizeof(float)), 0);
  // The buffer was either moved (it reads zeros now) or copied (unchanged): never half of each.
  const bool moved =
      std::all_of(snap.rows.begin(), snap.rows.end(), [](float v) { return v == 0; });
  if (!moved) {
    EXPECT_EQ(std::memcmp(snap.rows.data(), copy.rows.data(), copy.rows.size() * sizeof(float)), 0);
  }
  std::printf("AdoptSnapshot %s the rows\n", moved ? "moved" : "copied");
  // The table goes on identically: known keys keep their rows, new keys get the same fresh rows
  // in rows past the adopted ones, and a delta applied on top (copied, never adopted) matches.
  std::vector<int64_t> more = {keys[5], keys[77], 10 * n, 10 * n + 1};
  std::vector<uint32_t> rt(4), ru(4);
  ASSERT_TRUE(t->Resolve(more, {}, {}, LookupMode::kTrain, absl::MakeSpan(rt)).ok());
  ASSERT_TRUE(u->Resolve(more, {}, {}, LookupMode::kTrain, absl::MakeSpan(ru)).ok());
  EXPECT_EQ(ru[2], static_cast<uint32_t>(n));
  for (int64_t k : more) EXPECT_EQ(*u->ReadRow(k), *t->ReadRow(k)) << k;
  TableSnapshot delta = *t->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
  auto w = Make(Config(16, 2 * n), opt);
  ASSERT_TRUE(w->AdoptSnapshot(TableSnapshot(copy)).ok());
  ASSERT_TRUE(w->AdoptSnapshot(std::move(delta)).ok());
  const TableSnapshot want = *t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  const TableSnapshot again = *w->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  EXPECT_EQ(again.keys, want.keys);
  EXPECT_EQ(std::memcmp(again.rows.data(), want.rows.data(), want.rows.size() * sizeof(float)), 0);
}

TEST(TableSnapshotTest, RadixSortOfEntriesMatchesStdSort) {
  std::mt19937_64 rng(3);
  auto check = [&](const std::string& what, auto make_key) {
    absl::flat_hash_set<int64_t> seen;
    internal::KeyRows entries;
    while (entries.size() < 100000) {
      const int64_t k = make_key();
      if (seen.insert(k).second) entries.emplace_back(k, static_cast<uint32_t>(entries.size()));
    }
    internal::KeyRows want(entries.begin(), entries.end());
    std::sort(want.begin(), want.end());
    internal::SortEntriesByKey(entries);
    EXPECT_TRUE(std::equal(entries.begin(), entries.end(), want.begin(), want.end())) << what;
  };
  check("any 64-bit", [&] { return static_cast<int64_t>(rng()); });
  check("around zero", [&] { return static_cast<int64_t>(rng() % 400000) - 200000; });
  check("clustered high",
        [&] { return (int64_t{1} << 62) + static_cast<int64_t>(rng() % 300000); });
  int64_t extremes = 0;
  check("extremes", [&] {
    const int64_t i = extremes++;
    return i % 2 == 0 ? std::numeric_limits<int64_t>::min() + i
                      : std::numeric_limits<int64_t>::max() - i;
  });
}

TEST(TableConfigTest, ValidationMessagesNameOptionValueAndFix) {
  auto expect_error = [](TableConfig c, const std::string& needle) {
    Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
  };
  EXPECT_TRUE(Config().Validate().ok());
  TableConfig c = Config();
  c.dim = 0;
  expect_error(c, "dim 0");
  c = Config();
  c.dim = 8193;
  expect_error(c, "1..8192");
  c = Config();
  c.access_threshold = -2;
  expect_error(c, "access_threshold -2");
  c = Config();
  c.eviction_threshold = -5;
  c.access_threshold = 0;
  expect_error(c, "eviction_threshold -5");
  c = Config();
  c.eviction_threshold = 10;
  expect_error(c, "eviction needs admission");
  c = Config();
  c.device_vocabulary_size = 0;
  expect_error(c, "device_vocabulary_size 0");
  c = Config();
  c.ssd_vocabulary_size = 10;
  expect_error(c, "host tier");
  c.host_vocabulary_size = 10;
  expect_error(c, "ssd_data_path");
  c.ssd_data_path = {"/definitely/not/here"};
  expect_error(c, "existing directory");
  c.ssd_data_path = {"/tmp"};
  EXPECT_TRUE(c.Validate().ok());
  c = Config();
  c.all2all_gradients_op = "mean";
  expect_error(c, "sum_gradients_and_div_by_ranksize");
  c = Config();
  c.faae_coefficient = 0;
  expect_error(c, "faae_coefficient");
  c = Config();
  c.value_dtype = DType::kFloat16;
  expect_error(c, "value_dtype");
  c = Config();
  c.name = "bad name";
  expect_error(c, "name");
  c = Config();
  c.initializer = Initializer::Uniform(1, -1);
  expect_error(c, "user_table");
}

}  // namespace
}  // namespace recsdk
