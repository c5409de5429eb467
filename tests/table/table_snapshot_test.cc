// table_snapshot_test.cc: delta snapshots of a tiered table (src/table/table_snapshot.cc,
// TableImpl::DirtyEntries / ResetTracking). A delta holds exactly the rows changed since the last
// snapshot wherever they are now (device, host or SSD), rows that moved between tiers after they
// changed, prefilled and imported rows, and the keys evicted since; a full snapshot plus the
// deltas restores the table bitwise. The oracle is the same table with every row on the device,
// whose delta reads its change bytes. Both ways a tiered table finds its SSD rows are run: the list
// of keys that reached the SSD tier dirty (issue 29's O(changed) delta) and, past its bound, the
// walk of the whole key index.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "recsdk/table.h"
#include "src/table/npy.h"
#include "src/table/table_impl.h"
#include "src/table/tier_lease.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk {
namespace {

TableConfig Flat(int64_t vocab, bool evict) {
  TableConfig c;
  c.name = "delta_table";
  c.dim = 8;
  c.device_vocabulary_size = vocab;
  c.initializer = Initializer::Uniform(-1, 1, 7);
  if (evict) {
    c.access_threshold = 0;
    c.eviction_threshold = 30;
  }
  return c;
}

TableConfig Tiered(int64_t device, int64_t host, int64_t ssd, const std::string& dir, bool evict) {
  TableConfig c = Flat(device, evict);
  c.host_vocabulary_size = host;
  c.ssd_vocabulary_size = ssd;
  c.ssd_data_path = {dir};
  return c;
}

std::unique_ptr<EmbeddingTable> Make(const TableConfig& c) {
  auto t = EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.1f));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Batch: distinct keys from a skewed stream over [0, keys), so rows keep moving between tiers.
std::vector<int64_t> Batch(std::mt19937_64& rng, int n, int64_t keys) {
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> out;
  std::uniform_real_distribution<double> u(0, 1);
  while (static_cast<int>(out.size()) < n) {
    const int64_t k = static_cast<int64_t>(std::pow(u(rng), 3.0) * static_cast<double>(keys));
    if (seen.insert(k).second) out.push_back(k);
  }
  return out;
}

// Step: Resolve at data time `step`, gather, a gradient from the embedding, apply.
std::vector<float> Step(EmbeddingTable& t, const std::vector<int64_t>& keys, int64_t step) {
  std::vector<uint32_t> rows(keys.size());
  std::vector<int64_t> times(keys.size(), step);
  const Status s = t.Resolve(keys, {}, times, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> emb(keys.size() * static_cast<size_t>(t.dim()));
  EXPECT_TRUE(t.Gather(rows, absl::MakeSpan(emb)).ok());
  std::vector<float> grads(emb.size());
  for (size_t i = 0; i < emb.size(); ++i) {
    grads[i] = 0.5f * emb[i] - 0.01f * static_cast<float>(i % 7);
  }
  EXPECT_TRUE(t.ApplyGradients(rows, grads, step).ok());
  return emb;
}

void ExpectSameSnapshot(const TableSnapshot& a, const TableSnapshot& b, const std::string& what) {
  EXPECT_EQ(a.keys, b.keys) << what;
  ASSERT_EQ(a.rows.size(), b.rows.size()) << what;
  EXPECT_EQ(std::memcmp(a.rows.data(), b.rows.data(), a.rows.size() * sizeof(float)), 0) << what;
  EXPECT_EQ(a.timestamps, b.timestamps) << what;
  EXPECT_EQ(a.removed_keys, b.removed_keys) << what;
}

TableSnapshot Full(EmbeddingTable& t, EmbeddingTable::SnapshotKind kind) {
  auto s = t.Snapshot(kind);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : TableSnapshot{};
}

// WriteImport: keys and values (dim 8) as the .npy files ImportNpy reads.
void WriteImport(const std::string& dir, const std::vector<int64_t>& keys) {
  std::vector<float> values(keys.size() * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 13) - 1;
  ASSERT_TRUE(internal::WriteNpy(dir + "/k.npy", "<i8", {static_cast<int64_t>(keys.size())},
                                 keys.data(), keys.size() * sizeof(int64_t))
                  .ok());
  ASSERT_TRUE(internal::WriteNpy(dir + "/v.npy", "<f4", {static_cast<int64_t>(keys.size()), 8},
                                 values.data(), values.size() * sizeof(float))
                  .ok());
}

// DeltaCase: the bound of the list of dirty SSD keys (0: the table's own) and eviction.
struct DeltaCase {
  const char* name;
  size_t dirty_ssd_limit;
  bool evict;
};
void PrintTo(const DeltaCase& c, std::ostream* os) { *os << c.name; }

class TieredDelta : public ::testing::TestWithParam<DeltaCase> {};

// Four rounds of training (rows dirtied on the device, pushed down to host and SSD, some brought
// back up), with rows prefilled straight into the SSD tier, an import over every tier and
// evictions between them; after each round a delta of the tiered table equals, key for key and
// bit for bit, the delta of the same table with every row on the device. A fresh tiered table
// given the first full snapshot and then the four deltas equals the table that never stopped.
TEST_P(TieredDelta, HoldsExactlyTheChangedRowsOfEveryTierAndRestoresBitwise) {
  const DeltaCase& c = GetParam();
  testing::TierTestDir dir;
  auto flat = Make(Flat(4000, c.evict));
  auto tiered = Make(Tiered(24, 16, 4000, dir.Sub("ssd"), c.evict));
  ASSERT_NE(flat, nullptr);
  ASSERT_NE(tiered, nullptr);
  if (c.dirty_ssd_limit != 0) {
    auto* impl = dynamic_cast<internal::TableImpl*>(tiered.get());
    ASSERT_NE(impl, nullptr);
    impl->SetDirtySsdKeyLimit(c.dirty_ssd_limit);
  }
  // Prefill (the tiered table) or first use (the flat one) give the same rows.
  auto prefill = [&](int64_t from, int64_t to) {
    std::vector<int64_t> keys;
    for (int64_t k = from; k < to; ++k) keys.push_back(k);
    ASSERT_TRUE(internal::PrefillSsd(*tiered, keys).ok());
    std::vector<uint32_t> rows(keys.size());
    ASSERT_TRUE(flat->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  };
  if (!c.evict) prefill(1000, 1300);
  std::mt19937_64 rng(17);
  int64_t step = 0;
  for (int s = 0; s < 10; ++s, ++step) {
    const auto keys = Batch(rng, 12, 1500);
    Step(*flat, keys, step);
    Step(*tiered, keys, step);
  }
  const TableSnapshot base = Full(*tiered, EmbeddingTable::SnapshotKind::kFull);
  Full(*flat, EmbeddingTable::SnapshotKind::kFull);
  std::vector<TableSnapshot> deltas;
  for (int round = 1; round <= 4; ++round) {
    for (int s = 0; s < 15; ++s, ++step) {
      const auto keys = Batch(rng, 12, 1500);
      Step(*flat, keys, step);
      Step(*tiered, keys, step);
    }
    if (round == 2 && !c.evict) prefill(5000, 5100);  // new rows straight onto SSD, dirty
    if (round == 3) {
      // Imported rows: held ones in every tier, and new ones, placed where there is room.
      std::vector<int64_t> keys;
      for (int64_t k = 0; k < 1500; k += 7) keys.push_back(k);
      for (int64_t k = 7000; k < 7060; ++k) keys.push_back(k);
      const std::string d = dir.Sub("import" + std::to_string(round));
      WriteImport(d, keys);
      ASSERT_TRUE(flat->ImportNpy(d + "/k.npy", d + "/v.npy").ok());
      const Status imported = tiered->ImportNpy(d + "/k.npy", d + "/v.npy");
      ASSERT_TRUE(imported.ok()) << imported;
    }
    if (c.evict && round >= 2) {
      auto ea = flat->EvictStale();
      auto eb = tiered->EvictStale();
      ASSERT_TRUE(ea.ok() && eb.ok());
      EXPECT_EQ(*ea, *eb);
    }
    const TableSnapshot want = Full(*flat, EmbeddingTable::SnapshotKind::kDelta);
    TableSnapshot got = Full(*tiered, EmbeddingTable::SnapshotKind::kDelta);
    ASSERT_FALSE(got.keys.empty());
    ExpectSameSnapshot(want, got, "delta of round " + std::to_string(round));
    deltas.push_back(std::move(got));
  }
  const internal::TierStats st = internal::GetTierStats(*tiered);
  EXPECT_GT(st.demoted, 0);
  EXPECT_GT(st.ssd_rows, 0);
  // A delta with nothing changed since is empty.
  const TableSnapshot none = Full(*tiered, EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_TRUE(none.keys.empty());
  EXPECT_TRUE(none.removed_keys.empty());
  // Full + deltas into a fresh tiered table: the table that never stopped, bit for bit.
  testing::TierTestDir dir2;
  auto restored = Make(Tiered(24, 16, 4000, dir2.Sub("ssd"), c.evict));
  ASSERT_TRUE(restored->LoadSnapshot(base).ok());
  for (const TableSnapshot& d : deltas) {
    const Status loaded = restored->LoadSnapshot(d);
    ASSERT_TRUE(loaded.ok()) << loaded;
  }
  ExpectSameSnapshot(Full(*tiered, EmbeddingTable::SnapshotKind::kFullKeepTracking),
                     Full(*restored, EmbeddingTable::SnapshotKind::kFullKeepTracking), "restored");
  // And training goes on identically.
  for (int s = 0; s < 10; ++s, ++step) {
    const auto keys = Batch(rng, 12, 1500);
    const auto a = Step(*tiered, keys, step);
    const auto b = Step(*restored, keys, step);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(DirtySsdKeys, TieredDelta,
                         ::testing::Values(DeltaCase{"listed", 0, false},
                                           DeltaCase{"listed_evicting", 0, true},
                                           DeltaCase{"overflowing_to_the_index_walk", 2, false},
                                           DeltaCase{"overflowing_evicting", 2, true}),
                         [](const ::testing::TestParamInfo<DeltaCase>& info) {
                           return std::string(info.param.name);
                         });

// The case the list exists for: a row changed on the device, pushed down to the SSD tier by later
// batches (the walk of the index found it; the device and host change bytes no longer hold it),
// is in the next delta; after that delta it is clean, and a row brought back up from SSD and
// changed again is in the one after.
TEST(TieredDeltaRows, ARowChangedThenPushedToSsdIsInTheDelta) {
  testing::TierTestDir dir;
  auto tiered = Make(Tiered(24, 16, 4000, dir.Sub("ssd"), false));
  ASSERT_NE(tiered, nullptr);
  int64_t step = 0;
  for (int64_t k = 0; k < 200; k += 10, ++step) {
    std::vector<int64_t> keys;
    for (int64_t j = k; j < k + 10; ++j) keys.push_back(j);
    Step(*tiered, keys, step);
  }
  Full(*tiered, EmbeddingTable::SnapshotKind::kFull);
  Step(*tiered, {7}, step++);  // key 7 changes on the device
  for (int64_t k = 1000; k < 1200; k += 10) {
    std::vector<int64_t> keys;
    for (int64_t j = k; j < k + 10; ++j) keys.push_back(j);
    for (int r = 0; r < 3; ++r) Step(*tiered, keys, step++);  // used more, and later, than key 7
  }
  // 200 newer rows went through 40 device and host slots: key 7's row was pushed to SSD (a
  // delta that misses it fails below: the list is how the delta finds it).
  EXPECT_EQ(tiered->FindRow(7), EmbeddingTable::kDefaultRow);
  EXPECT_EQ(tiered->size(), 400);
  EXPECT_GE(internal::GetTierStats(*tiered).ssd_rows, 400 - 40);
  TableSnapshot d1 = Full(*tiered, EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_TRUE(std::binary_search(d1.keys.begin(), d1.keys.end(), 7));
  EXPECT_EQ(d1.keys.size(), 201u);  // key 7 and the 200 new rows
  auto after = tiered->ReadRow(7);
  ASSERT_TRUE(after.ok());
  const auto at = std::lower_bound(d1.keys.begin(), d1.keys.end(), 7) - d1.keys.begin();
  EXPECT_EQ(std::memcmp(d1.rows.data() + at * 16, after->data(), 16 * sizeof(float)), 0);
  // Nothing changed since: key 7 is clean on SSD.
  EXPECT_TRUE(Full(*tiered, EmbeddingTable::SnapshotKind::kDelta).keys.empty());
  Step(*tiered, {7, 3}, step++);
  TableSnapshot d2 = Full(*tiered, EmbeddingTable::SnapshotKind::kDelta);
  EXPECT_EQ(d2.keys, (std::vector<int64_t>{3, 7}));
}

}  // namespace
}  // namespace recsdk
