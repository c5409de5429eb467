// Tests of src/table/tiers/eviction_policy.{h,cc}: the order each policy evicts in, and that no
// policy ever evicts a slot the current or the previous batch uses.
#include "src/table/tiers/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

std::unique_ptr<EvictionPolicy> Make(EvictionPolicyKind kind, uint32_t capacity,
                                     double half_life = 32.0) {
  EvictionPolicyOptions o;
  o.kind = kind;
  o.capacity = capacity;
  o.half_life_batches = half_life;
  auto p = EvictionPolicy::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// SplitHits: the slots of the keys that have one (hits) and the keys that have none (misses);
// key_slot[key] is the key's slot or -1.
void SplitHits(const std::vector<int64_t>& keys, const std::vector<int64_t>& key_slot,
               std::vector<uint32_t>* hits, std::vector<int64_t>* misses) {
  for (int64_t key : keys) {
    if (key_slot[key] >= 0) {
      hits->push_back(static_cast<uint32_t>(key_slot[key]));
    } else {
      misses->push_back(key);
    }
  }
}

// Victims: ChooseVictims, then Remove each (as a caller that evicts them does).
std::vector<uint32_t> Victims(EvictionPolicy& p, size_t n) {
  std::vector<uint32_t> v(n);
  v.resize(p.ChooseVictims(n, v.data()));
  for (uint32_t slot : v) p.Remove(slot);
  return v;
}

class EvictionPolicyAll : public ::testing::TestWithParam<EvictionPolicyKind> {};

TEST_P(EvictionPolicyAll, NeverEvictsASlotOfTheCurrentOrThePreviousBatch) {
  // A cache of 64 slots under random batches of 20 keys out of 200, checked against a model of
  // when each slot was last used.
  constexpr uint32_t kSlots = 64;
  auto p = Make(GetParam(), kSlots);
  std::vector<int64_t> slot_key(kSlots, -1), last_use(kSlots, -1);
  std::vector<int64_t> key_slot(200, -1);
  std::vector<uint32_t> free_slots;
  for (uint32_t s = kSlots; s-- > 0;) free_slots.push_back(s);
  uint64_t rng = 7;
  size_t evicted = 0;
  for (int64_t batch = 0; batch < 300; ++batch) {
    p->BeginBatch();
    std::vector<int64_t> keys;
    while (keys.size() < 20) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t key = static_cast<int64_t>((rng >> 33) % 200);
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    std::vector<uint32_t> hits;
    std::vector<int64_t> misses;
    SplitHits(keys, key_slot, &hits, &misses);
    p->Touch(hits);
    for (uint32_t s : hits) last_use[s] = batch;
    const size_t need = misses.size() > free_slots.size() ? misses.size() - free_slots.size() : 0;
    std::vector<uint32_t> victims = Victims(*p, need);
    ASSERT_EQ(victims.size(), need) << "batch " << batch;  // 64 slots > 2 batches of 20
    for (uint32_t v : victims) {
      ASSERT_LT(last_use[v], batch - 1) << "slot " << v << " evicted in batch " << batch;
      key_slot[slot_key[v]] = -1;
      slot_key[v] = -1;
      free_slots.push_back(v);
    }
    evicted += victims.size();
    for (int64_t key : misses) {
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      slot_key[s] = key;
      key_slot[key] = s;
      last_use[s] = batch;
      EXPECT_TRUE(p->Insert(s, 0, -1).ok());
    }
    ASSERT_EQ(p->size(), kSlots - free_slots.size());
  }
  EXPECT_GT(evicted, 1000u);  // the check above really ran
}

TEST_P(EvictionPolicyAll, ReturnsFewerVictimsWhenTheRestAreProtected) {
  auto p = Make(GetParam(), 6);
  p->BeginBatch();  // batch 0
  for (uint32_t s : {0u, 1u, 2u}) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  p->BeginBatch();  // batch 1
  for (uint32_t s : {3u, 4u, 5u}) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  EXPECT_TRUE(Victims(*p, 2).empty());
  p->BeginBatch();  // batch 2: batch 0's slots are fair game, batch 1's are not
  EXPECT_THAT(Victims(*p, 5), UnorderedElementsAre(0u, 1u, 2u));
  EXPECT_EQ(p->size(), 3u);
  // Victims are no longer tracked.
  p->BeginBatch();
  p->BeginBatch();
  EXPECT_THAT(Victims(*p, 5), UnorderedElementsAre(3u, 4u, 5u));
  EXPECT_EQ(p->size(), 0u);
}

TEST_P(EvictionPolicyAll, RemovedSlotsAreNeverChosen) {
  auto p = Make(GetParam(), 4);
  p->BeginBatch();
  for (uint32_t s = 0; s < 4; ++s) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  p->Remove(1);
  p->Remove(1);  // no-op
  EXPECT_EQ(p->size(), 3u);
  p->BeginBatch();
  p->BeginBatch();
  EXPECT_THAT(Victims(*p, 4), UnorderedElementsAre(0u, 2u, 3u));
}

TEST_P(EvictionPolicyAll, StaysCorrectWhenTheHeapIsRebuilt) {
  // Thousands of touches on few slots force rebuilds of the lazy heap; the order must hold.
  auto p = Make(GetParam(), 3);
  p->BeginBatch();
  for (uint32_t s = 0; s < 3; ++s) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  for (int i = 0; i < 3000; ++i) {
    p->BeginBatch();
    p->Touch({1, 2});
  }
  p->BeginBatch();
  p->BeginBatch();
  // Slot 0 was used once, long ago: the first victim under every policy.
  EXPECT_THAT(Victims(*p, 1), ElementsAre(0u));
}

TEST_P(EvictionPolicyAll, VictimsStayTrackedUntilRemovedAndSkipExcludesSlots) {
  auto p = Make(GetParam(), 8);
  p->BeginBatch();
  for (uint32_t s = 0; s < 4; ++s) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  p->BeginBatch();
  p->BeginBatch();
  std::vector<uint32_t> v(2);
  ASSERT_EQ(p->ChooseVictims(2, v.data()), 2u);
  EXPECT_EQ(p->size(), 4u);
  // Not removed: the same two come back.
  std::vector<uint32_t> again(2);
  ASSERT_EQ(p->ChooseVictims(2, again.data()), 2u);
  EXPECT_EQ(again, v);
  // Skipping them (say they are pinned) gives the other two.
  std::vector<uint32_t> others(4);
  others.resize(
      p->ChooseVictims(4, others.data(), [&](uint32_t s) { return s == v[0] || s == v[1]; }));
  ASSERT_EQ(others.size(), 2u);
  for (uint32_t s : others) EXPECT_TRUE(s != v[0] && s != v[1]) << s;
  p->Remove(v[0]);
  EXPECT_EQ(p->size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EvictionPolicyAll,
                         ::testing::Values(EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu,
                                           EvictionPolicyKind::kLrfu),
                         [](const auto& info) { return EvictionPolicyName(info.param); });

// Slots 0..3 inserted in batches 0..3; slot 0 then used in batches 4..9 (six more uses), slot 3
// in batch 10. At batch 13 nothing is protected.
std::unique_ptr<EvictionPolicy> History(EvictionPolicyKind kind, double half_life = 32.0) {
  auto p = Make(kind, 8, half_life);
  for (uint32_t s = 0; s < 4; ++s) {
    p->BeginBatch();
    EXPECT_TRUE(p->Insert(s, 0, -1).ok());
  }
  for (int b = 4; b <= 9; ++b) {
    p->BeginBatch();
    p->Touch({0});
  }
  p->BeginBatch();  // 10
  p->Touch({3});
  for (int b = 11; b <= 13; ++b) p->BeginBatch();
  return p;
}

TEST(EvictionPolicyTest, LruEvictsTheLeastRecentlyUsed) {
  auto p = History(EvictionPolicyKind::kLru);
  EXPECT_THAT(Victims(*p, 4), ElementsAre(1u, 2u, 0u, 3u));
}

TEST(EvictionPolicyTest, LfuEvictsTheLeastUsedThenTheOlder) {
  auto p = History(EvictionPolicyKind::kLfu);
  // Uses: slot 0: 7, slot 3: 2, slots 1 and 2: 1 (1 used earlier).
  EXPECT_THAT(Victims(*p, 4), ElementsAre(1u, 2u, 3u, 0u));
}

TEST(EvictionPolicyTest, LfuCountsTheHistoryAKeyBringsBack) {
  auto p = Make(EvictionPolicyKind::kLfu, 4);
  p->BeginBatch();
  EXPECT_TRUE(p->Insert(0, 0, -1).ok());  // a new key
  EXPECT_TRUE(p->Insert(1, 50, 0).ok());  // a key used 50 times before it was evicted
  EXPECT_TRUE(p->Insert(2, 3, 0).ok());
  p->BeginBatch();
  p->BeginBatch();
  EXPECT_THAT(Victims(*p, 3), ElementsAre(0u, 2u, 1u));
}

TEST(EvictionPolicyTest, LrfuSitsBetweenLruAndLfuByItsHalfLife) {
  // Short half-life: recency decides (as LRU). Long: frequency decides (as LFU).
  auto short_life = History(EvictionPolicyKind::kLrfu, 0.05);
  EXPECT_THAT(Victims(*short_life, 4), ElementsAre(1u, 2u, 0u, 3u));
  auto long_life = History(EvictionPolicyKind::kLrfu, 1e6);
  EXPECT_THAT(Victims(*long_life, 4), ElementsAre(1u, 2u, 3u, 0u));
  // Half-life 2 batches: slot 0's seven uses (last at 9) outweigh slot 3's two (last at 10),
  // unlike LRU.
  auto mid = History(EvictionPolicyKind::kLrfu, 2.0);
  EXPECT_THAT(Victims(*mid, 4), ElementsAre(1u, 2u, 3u, 0u));
  // History given on Insert: three uses one batch ago outweigh one, which outweighs none.
  auto p = Make(EvictionPolicyKind::kLrfu, 4, 2.0);
  for (int b = 0; b < 10; ++b) p->BeginBatch();
  EXPECT_TRUE(p->Insert(0, 0, -1).ok());  // batch 9: new
  EXPECT_TRUE(p->Insert(1, 3, 8).ok());   // batch 9: three uses at batch 8
  EXPECT_TRUE(p->Insert(2, 1, 8).ok());   // batch 9: one use at batch 8
  p->BeginBatch();
  p->BeginBatch();
  EXPECT_THAT(Victims(*p, 3), ElementsAre(0u, 2u, 1u));
}

TEST(EvictionPolicyTest, TiesGoToTheLowerSlotSoEvictionIsDeterministic) {
  for (EvictionPolicyKind kind :
       {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kLrfu}) {
    auto p = Make(kind, 8);
    p->BeginBatch();
    for (uint32_t s : {5u, 2u, 7u, 0u}) EXPECT_TRUE(p->Insert(s, 0, -1).ok());
    p->BeginBatch();
    p->BeginBatch();
    EXPECT_THAT(Victims(*p, 4), ElementsAre(0u, 2u, 5u, 7u)) << EvictionPolicyName(kind);
  }
}

// BruteForce: the policy's documented order as a scan, the reference twin of the lazy heap:
// each tracked slot's score (LRU: the batch of last use; LFU: the use count; LRFU: log2 of the
// sum of 2^(batch of each use / half-life)), and victims in (score, last batch, slot) order among
// slots not used by the current or the previous batch nor skipped.
class BruteForce {
 public:
  BruteForce(EvictionPolicyKind kind, uint32_t capacity, double half_life)
      : kind_(kind), inv_half_life_(1.0 / half_life), slots_(capacity) {}
  void BeginBatch() { ++batch_; }
  void Touch(uint32_t slot) {
    Slot& s = slots_[slot];
    ++s.count;
    s.score = Score(s.score, s.count);
    s.last_batch = batch_;
  }
  void Insert(uint32_t slot, uint32_t prior_count, int64_t prior_last_batch) {
    Slot& s = slots_[slot];
    s.tracked = true;
    s.count = prior_count + 1;
    const double history = prior_count > 0 && prior_last_batch >= 0
                               ? std::log2(static_cast<double>(prior_count)) +
                                     static_cast<double>(prior_last_batch) * inv_half_life_
                               : kNone;
    s.score = Score(history, s.count);
    s.last_batch = batch_;
  }
  void Remove(uint32_t slot) { slots_[slot].tracked = false; }
  std::vector<uint32_t> Choose(size_t n, const std::function<bool(uint32_t)>& skip) const {
    std::vector<std::tuple<double, int64_t, uint32_t>> order;
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
      const Slot& s = slots_[slot];
      if (s.tracked && s.last_batch < batch_ - 1 && !(skip && skip(slot))) {
        order.emplace_back(s.score, s.last_batch, slot);
      }
    }
    std::sort(order.begin(), order.end());
    std::vector<uint32_t> out;
    for (size_t i = 0; i < order.size() && i < n; ++i) out.push_back(std::get<2>(order[i]));
    return out;
  }

 private:
  static constexpr double kNone = -std::numeric_limits<double>::infinity();
  struct Slot {
    double score = kNone;
    int64_t last_batch = -1;
    uint32_t count = 0;
    bool tracked = false;
  };
  // Score after a use at batch_ (the previous score `before`, `count` uses in all).
  double Score(double before, uint32_t count) const {
    switch (kind_) {
      case EvictionPolicyKind::kLru:
        return static_cast<double>(batch_);
      case EvictionPolicyKind::kLfu:
        return static_cast<double>(count);
      case EvictionPolicyKind::kLrfu: {
        const double now = static_cast<double>(batch_) * inv_half_life_;
        if (before == kNone) return now;
        const double hi = std::max(before, now);
        return hi + std::log1p(std::exp2(-std::abs(before - now))) / std::log(2.0);
      }
    }
    return 0;
  }
  EvictionPolicyKind kind_;
  double inv_half_life_;
  int64_t batch_ = -1;
  std::vector<Slot> slots_;
};

TEST_P(EvictionPolicyAll, VictimsComeInTheOrderOfABruteForceScan) {
  // A cache of 48 slots under random batches of 16 of 160 keys, keys bringing back their history,
  // random evictions, skipped slots and plans that fail (victims chosen, then neither removed nor
  // replaced): every ChooseVictims answer equals the scan's.
  constexpr uint32_t kSlots = 48;
  constexpr double kHalfLife = 8.0;
  auto p = Make(GetParam(), kSlots, kHalfLife);
  BruteForce ref(GetParam(), kSlots, kHalfLife);
  std::vector<int64_t> slot_key(kSlots, -1), key_slot(160, -1);
  std::vector<uint32_t> uses(160, 0);
  std::vector<int64_t> last_use(160, -1);
  std::vector<uint32_t> free_slots;
  for (uint32_t s = kSlots; s-- > 0;) free_slots.push_back(s);
  uint64_t rng = 11;
  auto next = [&rng](uint64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
  };
  auto drop = [&](uint32_t slot) {
    p->Remove(slot);
    ref.Remove(slot);
    key_slot[slot_key[slot]] = -1;
    slot_key[slot] = -1;
    free_slots.push_back(slot);
  };
  size_t compared = 0;
  for (int64_t batch = 0; batch < 400; ++batch) {
    p->BeginBatch();
    ref.BeginBatch();
    std::vector<int64_t> keys;
    while (keys.size() < 16) {
      // Skewed: low keys far more often.
      const int64_t key = static_cast<int64_t>(next(1 + next(160)));
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    std::vector<uint32_t> hits;
    std::vector<int64_t> misses;
    SplitHits(keys, key_slot, &hits, &misses);
    p->Touch(hits);
    for (uint32_t slot : hits) ref.Touch(slot);
    if (misses.size() > free_slots.size()) {
      const size_t need = misses.size() - free_slots.size();
      std::function<bool(uint32_t)> skip;
      if (batch % 3 == 0) skip = [](uint32_t slot) { return slot % 5 == 0; };
      std::vector<uint32_t> victims(need);
      victims.resize(p->ChooseVictims(need, victims.data(), skip));
      ASSERT_EQ(victims, ref.Choose(need, skip)) << "batch " << batch;
      ++compared;
      if (batch % 11 == 5) {
        // The plan fails: nothing moves, the batch's misses get no slot.
        for (int64_t key : keys) {
          ++uses[key];
          last_use[key] = batch;
        }
        continue;
      }
      for (uint32_t slot : victims) drop(slot);
    }
    for (int64_t key : misses) {
      if (free_slots.empty()) break;
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      ASSERT_TRUE(p->Insert(slot, uses[key], last_use[key]).ok());
      ref.Insert(slot, uses[key], last_use[key]);
      slot_key[slot] = key;
      key_slot[key] = slot;
    }
    for (int64_t key : keys) {
      ++uses[key];
      last_use[key] = batch;
    }
    // Now and then an eviction removes a slot the batches have not just used.
    if (batch % 7 == 3) {
      const uint32_t slot = static_cast<uint32_t>(next(kSlots));
      if (slot_key[slot] >= 0 && last_use[slot_key[slot]] < batch - 1) drop(slot);
    }
  }
  EXPECT_GT(compared, 100u);
}

TEST(EvictionPolicyTest, CreateRejectsBadOptions) {
  EvictionPolicyOptions o;
  o.capacity = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(EvictionPolicy::Create(o).status()));
  o.capacity = 4;
  o.half_life_batches = 0.0;
  EXPECT_TRUE(absl::IsInvalidArgument(EvictionPolicy::Create(o).status()));
  o.half_life_batches = -1.0;
  EXPECT_TRUE(absl::IsInvalidArgument(EvictionPolicy::Create(o).status()));
}

}  // namespace
}  // namespace recsdk::internal
