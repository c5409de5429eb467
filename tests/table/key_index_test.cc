// key_index_test.cc: KeyIndex insert/find/erase/grow against absl::flat_hash_map.
#include "src/table/key_index.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "src/common/cpu_features.h"

namespace recsdk::internal {
namespace {

TEST(KeyIndexTest, InsertFindErase) {
  KeyIndex index(4);
  EXPECT_EQ(index.Find(7), KeyIndex::kEmpty);
  EXPECT_TRUE(index.Insert(7, 1));
  EXPECT_FALSE(index.Insert(7, 2));
  EXPECT_EQ(index.Find(7), 1u);
  EXPECT_TRUE(index.Erase(7));
  EXPECT_FALSE(index.Erase(7));
  EXPECT_EQ(index.Find(7), KeyIndex::kEmpty);
  EXPECT_EQ(index.size(), 0u);
}

TEST(KeyIndexTest, ExtremeKeys) {
  KeyIndex index;
  const int64_t keys[] = {0,
                          -1,
                          std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max(),
                          int64_t{1} << 62};
  uint32_t row = 0;
  for (int64_t k : keys) EXPECT_TRUE(index.Insert(k, row++));
  row = 0;
  for (int64_t k : keys) EXPECT_EQ(index.Find(k), row++);
}

// Keys that differ only in high bits, or are multiples of large powers of two, stress the hash.
TEST(KeyIndexTest, CollisionHeavyKeysAndGrowth) {
  KeyIndex index(8);
  absl::flat_hash_map<int64_t, uint32_t> ref;
  uint32_t row = 0;
  for (int64_t i = 0; i < 20000; ++i) {
    for (int64_t k : {i << 32, i << 40, -(i << 20), i * 1024}) {
      if (ref.emplace(k, row).second) {
        EXPECT_TRUE(index.Insert(k, row));
        ++row;
      }
    }
  }
  EXPECT_EQ(index.size(), ref.size());
  EXPECT_LE(static_cast<double>(index.size()), KeyIndex::kMaxLoad * index.num_slots());
  for (const auto& [k, r] : ref) ASSERT_EQ(index.Find(k), r) << k;
}

TEST(KeyIndexTest, RandomOpsMatchReference) {
  std::mt19937_64 rng(42);
  KeyIndex index(16);
  absl::flat_hash_map<int64_t, uint32_t> ref;
  for (int op = 0; op < 200000; ++op) {
    const int64_t key = static_cast<int64_t>(rng() % 5000) - 2500;
    const int what = static_cast<int>(rng() % 3);
    if (what == 0) {
      const uint32_t r = static_cast<uint32_t>(op);
      const bool inserted = ref.emplace(key, r).second;
      ASSERT_EQ(index.Insert(key, r), inserted);
    } else if (what == 1) {
      ASSERT_EQ(index.Erase(key), ref.erase(key) == 1);
    } else {
      auto it = ref.find(key);
      ASSERT_EQ(index.Find(key), it == ref.end() ? KeyIndex::kEmpty : it->second);
    }
  }
  size_t visited = 0;
  index.ForEach([&](int64_t k, uint32_t r) {
    ++visited;
    EXPECT_EQ(ref.at(k), r);
  });
  EXPECT_EQ(visited, ref.size());
}

// Inserts and erases at the maximum load with no growth: full buckets, cuckoo walks, entries
// moving between their two buckets while others are erased.
TEST(KeyIndexTest, EraseAndInsertAtMaximumLoadMatchReference) {
  for (const uint64_t capacity : {20u, 1000u, 50000u}) {
    SCOPED_TRACE(capacity);
    std::mt19937_64 rng(capacity);
    KeyIndex index(capacity);
    const uint64_t slots = index.num_slots();
    absl::flat_hash_map<int64_t, uint32_t> ref;
    for (int op = 0; op < 400000; ++op) {
      const int64_t key = static_cast<int64_t>(rng() % (capacity * 2));
      if (ref.size() < capacity && (rng() & 1)) {
        const bool inserted = ref.emplace(key, static_cast<uint32_t>(op)).second;
        ASSERT_EQ(index.Insert(key, static_cast<uint32_t>(op)), inserted);
      } else {
        ASSERT_EQ(index.Erase(key), ref.erase(key) == 1);
      }
      if (op % 1000 == 0) {
        for (const auto& [k, r] : ref) ASSERT_EQ(index.Find(k), r) << k;
      }
    }
    EXPECT_EQ(index.num_slots(), slots);  // never grew
    EXPECT_EQ(index.size(), ref.size());
    for (int64_t k = 0; k < static_cast<int64_t>(capacity * 2); ++k) {
      auto it = ref.find(k);
      ASSERT_EQ(index.Find(k), it == ref.end() ? KeyIndex::kEmpty : it->second) << k;
    }
  }
}

// Every ISA variant of FindBatch (those this CPU runs) against Find, on present and absent keys.
TEST(KeyIndexTest, FindBatchMatchesFindOnEveryIsa) {
  KeyIndex index(1000);
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 1000; ++i) {
    index.Insert(i * 7919, static_cast<uint32_t>(i));
    keys.push_back(i * 7919);
    keys.push_back(i * 7919 + 1);  // mostly absent
  }
  keys.push_back(-1);  // the byte pattern of never-used entries
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
    SCOPED_TRACE(IsaName(isa));
    std::vector<uint32_t> rows(keys.size(), 12345);
    index.FindBatchFor(isa, keys.data(), keys.size(), rows.data());
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(rows[i], index.Find(keys[i])) << keys[i];
  }
}

// Keys found by brute force to share both buckets overflow them: the cuckoo walk cannot place
// them, so they go to the stash. Every operation must still see them.
TEST(KeyIndexTest, KeysThatOverflowTheirBucketsLiveInTheStash) {
  KeyIndex index(10000);
  const uint64_t slots = index.num_slots();
  uint64_t want1 = 0, want2 = 0;
  index.BucketOffsets(0, &want1, &want2);
  std::vector<int64_t> same;  // keys whose two buckets are key 0's
  for (int64_t k = 0; same.size() < 3 * KeyIndex::kBucketSlots; ++k) {
    uint64_t b1 = 0, b2 = 0;
    index.BucketOffsets(k, &b1, &b2);
    if ((b1 == want1 && b2 == want2) || (b1 == want2 && b2 == want1)) same.push_back(k);
  }
  absl::flat_hash_map<int64_t, uint32_t> ref;
  for (size_t i = 0; i < same.size(); ++i) {
    ASSERT_TRUE(index.Insert(same[i], static_cast<uint32_t>(i)));
    ref[same[i]] = static_cast<uint32_t>(i);
  }
  EXPECT_FALSE(index.Insert(same.back(), 99));  // a stashed key is found as present
  EXPECT_EQ(index.stash_size(), same.size() - 2 * KeyIndex::kBucketSlots);
  EXPECT_EQ(index.num_slots(), slots);
  auto check = [&] {
    for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
      if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
      std::vector<uint32_t> rows(same.size());
      index.FindBatchFor(isa, same.data(), same.size(), rows.data());
      for (size_t i = 0; i < same.size(); ++i) {
        auto it = ref.find(same[i]);
        ASSERT_EQ(rows[i], it == ref.end() ? KeyIndex::kEmpty : it->second) << IsaName(isa);
        ASSERT_EQ(index.Find(same[i]), rows[i]);
      }
    }
    size_t visited = 0;
    index.ForEach([&](int64_t k, uint32_t r) {
      ++visited;
      EXPECT_EQ(ref.at(k), r);
    });
    EXPECT_EQ(visited, ref.size());
    EXPECT_EQ(index.size(), ref.size());
  };
  check();
  // Erase some from the buckets and some from the stash, then refill.
  for (size_t i = 0; i < same.size(); i += 2) {
    ASSERT_TRUE(index.Erase(same[i]));
    ref.erase(same[i]);
  }
  check();
  for (size_t i = 0; i < same.size(); i += 4) {
    ASSERT_TRUE(index.Insert(same[i], static_cast<uint32_t>(1000 + i)));
    ref[same[i]] = static_cast<uint32_t>(1000 + i);
  }
  check();
  index.Reserve(slots * 2);  // growth moves the stash back into (larger) buckets
  check();
}

TEST(KeyIndexTest, InsertBatchMatchesInsertAndGrowsOnce) {
  KeyIndex index(16);
  std::mt19937_64 rng(5);
  std::vector<int64_t> keys(50000);
  std::vector<uint32_t> rows(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<int64_t>(rng());
    rows[i] = static_cast<uint32_t>(i);
  }
  keys[7] = keys[3];                         // a repeat: the first wins, as with Insert
  ASSERT_TRUE(index.Insert(keys[10], 999));  // already present: kept
  EXPECT_EQ(index.InsertBatch(keys.data(), rows.data(), keys.size()), keys.size() - 2);
  EXPECT_EQ(index.size(), keys.size() - 1);
  EXPECT_EQ(index.Find(keys[3]), 3u);
  EXPECT_EQ(index.Find(keys[10]), 999u);
  for (size_t i = 11; i < keys.size(); ++i) ASSERT_EQ(index.Find(keys[i]), rows[i]) << i;
  EXPECT_LE(static_cast<double>(index.size()), KeyIndex::kMaxLoad * index.num_slots());
}

TEST(KeyIndexTest, ClearAndReserve) {
  KeyIndex index(4);
  for (int64_t i = 0; i < 100; ++i) index.Insert(i, static_cast<uint32_t>(i));
  index.Reserve(100000);
  EXPECT_GE(static_cast<double>(index.num_slots()), 100000 / KeyIndex::kMaxLoad);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(index.Find(i), static_cast<uint32_t>(i));
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Find(5), KeyIndex::kEmpty);
}

// BulkLoadDistinct (partitioned by first bucket when large, plain when small) finds what
// InsertBatch finds, for every key and for absent ones, with the stash in use.
TEST(KeyIndexTest, BulkLoadDistinctFindsWhatInsertBatchFinds) {
  std::mt19937_64 rng(11);
  const size_t n = 300000;
  std::vector<int64_t> keys;
  {
    absl::flat_hash_map<int64_t, uint32_t> seen;
    while (keys.size() < n) {
      const int64_t k = static_cast<int64_t>(rng());
      if (seen.emplace(k, 0).second) keys.push_back(k);
    }
  }
  // Keys sharing both buckets with key 0 (more than two buckets hold) force walks to fail.
  {
    KeyIndex probe(n);
    uint64_t want1 = 0, want2 = 0;
    probe.BucketOffsets(0, &want1, &want2);
    absl::flat_hash_map<int64_t, uint32_t> present;
    for (int64_t k : keys) present.emplace(k, 0);
    int extra = 0;
    for (int64_t k = 0; extra < 3 * KeyIndex::kBucketSlots; ++k) {
      uint64_t b1 = 0, b2 = 0;
      probe.BucketOffsets(k, &b1, &b2);
      if (((b1 == want1 && b2 == want2) || (b1 == want2 && b2 == want1)) && !present.contains(k)) {
        keys.push_back(k);
        ++extra;
      }
    }
  }
  std::vector<uint32_t> rows(keys.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint32_t>(i * 3 + 1);
  KeyIndex ref(keys.size());
  ASSERT_EQ(ref.InsertBatch(keys.data(), rows.data(), keys.size()), keys.size());
  std::vector<int64_t> absent(1000);
  for (auto& k : absent) k = static_cast<int64_t>(rng());
  for (size_t count : {keys.size(), size_t{5000}}) {
    SCOPED_TRACE(count);
    // The colliding keys are last: the small load gets some of its own at the end.
    std::vector<int64_t> ks(keys.end() - count, keys.end());
    std::vector<uint32_t> rs(rows.end() - count, rows.end());
    KeyIndex index(ks.size());
    index.BulkLoadDistinct(ks.data(), rs.data(), ks.size());
    EXPECT_EQ(index.size(), ks.size());
    // The keys sharing key 0's two buckets in an index of this size overflow into the stash.
    if (count == keys.size()) {
      EXPECT_GT(index.stash_size(), 0u);
    }
    for (size_t i = 0; i < ks.size(); ++i) ASSERT_EQ(index.Find(ks[i]), rs[i]) << i;
    std::vector<uint32_t> found(ks.size());
    index.FindBatch(ks.data(), ks.size(), found.data());
    ASSERT_EQ(found, rs);
    for (int64_t k : absent) ASSERT_EQ(index.Find(k), KeyIndex::kEmpty) << k;
    size_t visited = 0;
    index.ForEach([&](int64_t k, uint32_t r) {
      ++visited;
      ASSERT_EQ(ref.Find(k), r);
    });
    EXPECT_EQ(visited, ks.size());
    // Still an ordinary index afterwards: an insert of a present key changes nothing, erase works.
    EXPECT_FALSE(index.Insert(ks[5], 7));
    EXPECT_EQ(index.Find(ks[5]), rs[5]);
    EXPECT_TRUE(index.Erase(ks.back()));
    EXPECT_EQ(index.Find(ks.back()), KeyIndex::kEmpty);
  }
}

}  // namespace
}  // namespace recsdk::internal
