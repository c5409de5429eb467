// key_union_test.cc: the union an owner makes of the keys the ranks send it (key_union.h), as
// the sharded and replicated tables reuse it step after step.
#include "src/dist/key_union.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace recsdk::dist {
namespace {

using ::testing::ElementsAre;

// The union as a plain map computes it: first-arrival order, summed counts, latest times.
struct Expected {
  std::vector<int64_t> keys;
  std::vector<uint32_t> counts;
  std::vector<int64_t> times;
  std::vector<uint32_t> which;
};
Expected Reference(const std::vector<KeyRecord>& records) {
  Expected e;
  std::map<int64_t, uint32_t> index;
  for (const KeyRecord& r : records) {
    auto [it, inserted] = index.emplace(r.key, static_cast<uint32_t>(e.keys.size()));
    if (inserted) {
      e.keys.push_back(r.key);
      e.counts.push_back(0);
      e.times.push_back(kNoKeyTime);
    }
    e.which.push_back(it->second);
    e.counts[it->second] += static_cast<uint32_t>(std::max<int64_t>(r.count, 0));
    e.times[it->second] = std::max(e.times[it->second], r.time);
  }
  return e;
}

TEST(KeyUnion, UnitesInArrivalOrderSummingCountsAndKeepingTheLatestTime) {
  KeyUnion u;
  u.Unite({{7, 2, 10}, {-3, 1, 5}, {7, 3, 4}, {0, -1, 8}, {-3, 1, 9}}, /*data_time=*/0);
  EXPECT_THAT(u.keys, ElementsAre(7, -3, 0));
  EXPECT_THAT(u.counts, ElementsAre(5, 2, 0));  // a negative count adds nothing
  EXPECT_THAT(u.times, ElementsAre(10, 9, 8));
  EXPECT_THAT(u.which, ElementsAre(0, 1, 0, 2, 1));
}

TEST(KeyUnion, RecordsWithoutTimesTakeTheDataTimeOnlyWhenOthersHaveTimes) {
  KeyUnion u;
  u.Unite({{1, 1, kNoKeyTime}, {2, 1, kNoKeyTime}}, 42);
  EXPECT_TRUE(u.times.empty());
  u.Unite({{1, 1, kNoKeyTime}, {2, 1, 7}}, 42);
  EXPECT_THAT(u.times, ElementsAre(42, 7));
}

TEST(KeyUnion, CountsSaturateAtTheLargestUint32) {
  KeyUnion u;
  const int64_t big = std::numeric_limits<uint32_t>::max();
  u.Unite({{5, big, kNoKeyTime}, {5, big, kNoKeyTime}}, 0);
  EXPECT_THAT(u.counts, ElementsAre(std::numeric_limits<uint32_t>::max()));
}

// Refilled step after step with batches that grow and shrink (its index kept, stamped per call),
// the union must forget every earlier call's keys.
TEST(KeyUnion, ReusedAcrossCallsOfEverySizeEqualsAFreshUnion) {
  std::mt19937_64 rng(3);
  KeyUnion reused;
  for (int call = 0; call < 40; ++call) {
    const size_t n = (call * 7919) % 3000;
    // Keys sharing their low bits (as an owner's do) from a small range, so that many repeat.
    std::uniform_int_distribution<int64_t> key(0, static_cast<int64_t>(n / 2 + 1));
    std::vector<KeyRecord> records(n);
    for (KeyRecord& r : records) r = {key(rng) * 4 + 1, 1 + key(rng) % 3, key(rng)};
    reused.Unite(records, 0);
    const Expected want = Reference(records);
    ASSERT_EQ(reused.keys, want.keys) << "call " << call;
    ASSERT_EQ(reused.counts, want.counts) << "call " << call;
    ASSERT_EQ(reused.which, want.which) << "call " << call;
    if (n > 0) {
      ASSERT_EQ(reused.times, want.times) << "call " << call;
    }
  }
}

}  // namespace
}  // namespace recsdk::dist
