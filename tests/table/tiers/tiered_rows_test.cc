// Tests of src/table/tiers/tiered_rows.{h,cc}: rows read and updated batch by batch through the
// tiers stay exactly those of a flat map (tiers are transparent), the previous batch's rows never
// move, and full or too-small tiers fail with nothing lost.
#include "src/table/tiers/tiered_rows.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk::internal {
namespace {

using ::recsdk::testing::TierTestDir;
using ::testing::HasSubstr;

constexpr int kRowFloats = 5;

void Init(int64_t key, float* row) {
  for (int j = 0; j < kRowFloats; ++j) row[j] = static_cast<float>(key * 10 + j);
}

std::vector<float> InitRow(int64_t key) {
  std::vector<float> row(kRowFloats);
  Init(key, row.data());
  return row;
}

struct Config {
  std::string name;
  uint32_t device, host, ssd;
  SsdReadPath read_path;
};

class TieredRowsTransparency : public ::testing::TestWithParam<Config> {};

TEST_P(TieredRowsTransparency, RowsMatchAFlatMapAndThePreviousBatchNeverMoves) {
  const Config& c = GetParam();
  TierTestDir dir;
  TieredRowsOptions o;
  o.table = "user_table";
  o.row_floats = kRowFloats;
  o.device_rows = c.device;
  o.host_rows = c.host;
  o.ssd_rows = c.ssd;
  o.ssd_folders = {dir.Sub("ssd")};
  o.ssd_read_path = c.read_path;
  auto made = TieredRows::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  TieredRows& rows = **made;
  constexpr int64_t kKeys = 1500;
  std::map<int64_t, std::vector<float>> reference;
  uint64_t rng = 42;
  std::vector<int64_t> previous_keys;
  std::vector<uint32_t> previous_slots;
  for (int batch = 0; batch < 200; ++batch) {
    // Skewed keys: u^3 puts most draws on low keys, the rest spread over all of them.
    std::vector<int64_t> keys;
    std::set<int64_t> seen;
    for (int i = 0; i < 80; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const double u = static_cast<double>(rng >> 11) * 0x1.0p-53;
      const int64_t key = static_cast<int64_t>(kKeys * u * u * u);
      if (seen.insert(key).second && keys.size() < 50) keys.push_back(key);
    }
    std::vector<uint32_t> slots(keys.size());
    const absl::Status st = rows.PrepareBatch(keys, Init, slots.data());
    ASSERT_TRUE(st.ok()) << "batch " << batch << ": " << st;
    // The previous batch may still be in flight: its rows stay where they were.
    for (size_t i = 0; i < previous_keys.size(); ++i) {
      const RowLocation loc = *rows.Locate(previous_keys[i]);
      ASSERT_EQ(loc.tier, Tier::kDevice) << previous_keys[i];
      ASSERT_EQ(loc.slot, previous_slots[i]) << previous_keys[i];
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = reference.find(keys[i]);
      if (it == reference.end()) it = reference.emplace(keys[i], InitRow(keys[i])).first;
      float* row = rows.DeviceRow(slots[i]);
      ASSERT_EQ(std::vector<float>(row, row + kRowFloats), it->second)
          << "key " << keys[i] << " batch " << batch;
      // The step: an update the next read must see, wherever the row went in between.
      for (int j = 0; j < kRowFloats; ++j) {
        const float delta = static_cast<float>(batch % 7) * 0.5f + static_cast<float>(j);
        row[j] += delta;
        it->second[j] += delta;
      }
    }
    previous_keys = keys;
    previous_slots = slots;
  }
  std::vector<int64_t> all;
  std::vector<float> want;
  for (const auto& [key, row] : reference) {
    all.push_back(key);
    want.insert(want.end(), row.begin(), row.end());
  }
  std::vector<float> got(want.size());
  ASSERT_TRUE(rows.ReadRows(all, got.data()).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(rows.size(), reference.size());
  // The tiers were really used.
  EXPECT_GT(rows.moved_to(Tier::kHost), 500u);
  EXPECT_GT(rows.moved_to(Tier::kDevice), 500u);
  if (c.ssd > 0) {
    EXPECT_GT(rows.moved_to(Tier::kSsd), 100u);
    EXPECT_GT(rows.rows_on(Tier::kSsd), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tiers, TieredRowsTransparency,
    ::testing::Values(Config{"device_host", 120, 1500, 0, SsdReadPath::kAuto},
                      Config{"device_host_ssd", 120, 200, 1500, SsdReadPath::kAuto},
                      Config{"device_host_ssd_buffered", 110, 150, 1500, SsdReadPath::kBuffered}),
    [](const auto& info) { return info.param.name; });

TieredRowsOptions Small(const TierTestDir& dir, uint32_t device, uint32_t host, uint32_t ssd) {
  TieredRowsOptions o;
  o.table = "small_table";
  o.row_floats = kRowFloats;
  o.device_rows = device;
  o.host_rows = host;
  o.ssd_rows = ssd;
  o.ssd_folders = {dir.Sub("ssd")};
  return o;
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> keys;
  for (int64_t k = begin; k < end; ++k) keys.push_back(k);
  return keys;
}

TEST(TieredRowsTest, DeviceSmallerThanTwoBatchesIsAnErrorNamingTheSettingAndTheNumber) {
  TierTestDir dir;
  auto rows = *TieredRows::Create(Small(dir, 60, 100, 0));
  std::vector<uint32_t> slots(40);
  ASSERT_TRUE(rows->PrepareBatch(Range(0, 40), Init, slots.data()).ok());
  const absl::Status st = rows->PrepareBatch(Range(100, 140), Init, slots.data());
  ASSERT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("small_table"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("device_vocabulary_size 60"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("80 rows"));
  // Still usable, and nothing moved: batch 0's rows are where they were.
  ASSERT_TRUE(rows->PrepareBatch(Range(0, 20), Init, slots.data()).ok());
  std::vector<float> row(kRowFloats);
  ASSERT_TRUE(rows->ReadRows({39}, row.data()).ok());
  EXPECT_EQ(row, InitRow(39));
}

TEST(TieredRowsTest, FullSsdIsResourceExhaustedAndNoRowIsLost) {
  TierTestDir dir;
  auto rows = *TieredRows::Create(Small(dir, 20, 20, 20));
  std::vector<uint32_t> slots(10);
  for (int64_t b = 0; b < 6; ++b) {
    ASSERT_TRUE(rows->PrepareBatch(Range(10 * b, 10 * b + 10), Init, slots.data()).ok()) << b;
  }
  EXPECT_EQ(rows->rows_on(Tier::kSsd), 20u);
  const absl::Status st = rows->PrepareBatch(Range(100, 110), Init, slots.data());
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("ssd"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("small_table"));
  std::vector<float> got(60 * kRowFloats), want;
  for (int64_t k = 0; k < 60; ++k) {
    const std::vector<float> r = InitRow(k);
    want.insert(want.end(), r.begin(), r.end());
  }
  ASSERT_TRUE(rows->ReadRows(Range(0, 60), got.data()).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(rows->size(), 60u);
  // Keys that are already somewhere still come up.
  ASSERT_TRUE(rows->PrepareBatch(Range(0, 10), Init, slots.data()).ok());
  EXPECT_EQ(std::vector<float>(rows->DeviceRow(slots[3]), rows->DeviceRow(slots[3]) + kRowFloats),
            InitRow(3));
}

TEST(TieredRowsTest, DeviceOnlyTableFullIsResourceExhaustedNamingTheSettings) {
  TierTestDir dir;
  auto rows = *TieredRows::Create(Small(dir, 30, 0, 0));
  std::vector<uint32_t> slots(10);
  for (int64_t b = 0; b < 3; ++b) {
    ASSERT_TRUE(rows->PrepareBatch(Range(10 * b, 10 * b + 10), Init, slots.data()).ok());
  }
  const absl::Status st = rows->PrepareBatch(Range(50, 60), Init, slots.data());
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("host_vocabulary_size"));
  ASSERT_TRUE(rows->PrepareBatch(Range(0, 10), Init, slots.data()).ok());
}

TEST(TieredRowsTest, CreateAndPrepareRejectWhatTheSpecForbids) {
  TierTestDir dir;
  TieredRowsOptions o = Small(dir, 10, 0, 10);
  absl::Status st = TieredRows::Create(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("host_vocabulary_size"));
  o = Small(dir, 10, 10, 10);
  o.ssd_folders.clear();
  st = TieredRows::Create(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("ssd_data_path"));
  o = Small(dir, 0, 10, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(TieredRows::Create(o).status()));
  auto rows = *TieredRows::Create(Small(dir, 10, 10, 0));
  std::vector<uint32_t> slots(3);
  st = rows->PrepareBatch({1, 2, 1}, Init, slots.data());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(rows->size(), 0u);
}

}  // namespace
}  // namespace recsdk::internal
