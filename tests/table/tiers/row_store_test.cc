// Tests of src/table/tiers/row_store.{h,cc}: the RowStore contract, run on every store (device
// and host memory, SSD with and without I/O threads), location packing and MoveRows.
#include "src/table/tiers/row_store.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/table/tiers/memory_store.h"
#include "src/table/tiers/ssd_store.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk::internal {
namespace {

using ::recsdk::testing::RowsFor;
using ::recsdk::testing::TierTestDir;
using ::testing::HasSubstr;

constexpr int kRowFloats = 6;
constexpr uint32_t kCapacity = 40;

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<RowStore>(const TierTestDir&, uint32_t capacity)> make;
};

std::vector<StoreKind> Kinds() {
  return {
      {"device_memory",
       [](const TierTestDir&, uint32_t capacity) -> std::unique_ptr<RowStore> {
         MemoryStoreOptions o;
         o.tier = Tier::kDevice;
         o.row_floats = kRowFloats;
         o.capacity = capacity;
         return *MemoryStore::Create(o);
       }},
      {"host_memory",
       [](const TierTestDir&, uint32_t capacity) -> std::unique_ptr<RowStore> {
         MemoryStoreOptions o;
         o.tier = Tier::kHost;
         o.row_floats = kRowFloats;
         o.capacity = capacity;
         return *MemoryStore::Create(o);
       }},
      {"ssd_inline",
       [](const TierTestDir& dir, uint32_t capacity) -> std::unique_ptr<RowStore> {
         SsdStoreOptions o;
         o.row_floats = kRowFloats;
         o.capacity = capacity;
         o.folders = {dir.Sub("a"), dir.Sub("b")};
         o.file_name = "t";
         o.rows_per_file = 7;  // several files, a short last one
         o.io_threads = 0;
         return *SsdStore::Create(o);
       }},
      {"ssd_threads",
       [](const TierTestDir& dir, uint32_t capacity) -> std::unique_ptr<RowStore> {
         SsdStoreOptions o;
         o.row_floats = kRowFloats;
         o.capacity = capacity;
         o.folders = {dir.Sub("a")};
         o.file_name = "t";
         o.rows_per_file = 16;
         o.io_threads = 3;
         o.read_path = SsdReadPath::kBuffered;  // the other store takes the direct path
         return *SsdStore::Create(o);
       }},
  };
}

class RowStoreContract : public ::testing::TestWithParam<StoreKind> {
 protected:
  std::unique_ptr<RowStore> Make(uint32_t capacity = kCapacity) {
    return GetParam().make(dir_, capacity);
  }
  std::vector<uint32_t> Alloc(RowStore& s, size_t n) {
    std::vector<uint32_t> slots(n);
    EXPECT_TRUE(s.Allocate(n, slots.data()).ok());
    return slots;
  }
  std::vector<float> ReadAll(RowStore& s, const std::vector<uint32_t>& slots) {
    std::vector<float> out(slots.size() * kRowFloats, -1.0f);
    EXPECT_TRUE(s.Read(slots, out.data()).ok());
    return out;
  }
  TierTestDir dir_;
};

TEST_P(RowStoreContract, AllocatesDistinctSlotsAndRoundTripsRowsInAnyOrder) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, kCapacity);
  EXPECT_EQ(s->size(), kCapacity);
  EXPECT_EQ(std::set<uint32_t>(slots.begin(), slots.end()).size(), kCapacity);
  for (uint32_t slot : slots) EXPECT_LT(slot, kCapacity);
  // Write in one order, read back in another (reversed, and a shuffled subset with a repeat).
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 1).data()).ok());
  std::vector<uint32_t> reversed(slots.rbegin(), slots.rend());
  EXPECT_EQ(ReadAll(*s, reversed), RowsFor(reversed, kRowFloats, 1));
  std::vector<uint32_t> some = {slots[5], slots[30], slots[5], slots[0], slots[39], slots[6]};
  EXPECT_EQ(ReadAll(*s, some), RowsFor(some, kRowFloats, 1));
}

TEST_P(RowStoreContract, SlotWrittenTwiceInOneCallKeepsTheLaterRow) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, 3);
  std::vector<uint32_t> twice = {slots[1], slots[0], slots[1]};
  std::vector<float> rows = RowsFor(twice, kRowFloats, 1);
  std::fill(rows.begin() + 2 * kRowFloats, rows.end(), 42.0f);
  ASSERT_TRUE(s->Write(twice, rows.data()).ok());
  std::vector<float> got = ReadAll(*s, {slots[1]});
  EXPECT_EQ(got, std::vector<float>(kRowFloats, 42.0f));
}

TEST_P(RowStoreContract, FullTierIsResourceExhaustedAndChangesNothing) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, kCapacity - 3);
  std::vector<uint32_t> more(4, 12345);
  const absl::Status full = s->Allocate(4, more.data());
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr(TierName(s->tier())));
  EXPECT_EQ(s->size(), kCapacity - 3);
  EXPECT_EQ(more, std::vector<uint32_t>(4, 12345));
  // Still usable: the last three fit, then freeing one makes room for one more.
  std::vector<uint32_t> last = Alloc(*s, 3);
  ASSERT_TRUE(s->Free({slots[2]}).ok());
  uint32_t again = 0;
  ASSERT_TRUE(s->Allocate(1, &again).ok());
  EXPECT_EQ(again, slots[2]);  // freed slots are reused
}

// Memory stores reuse freed slots last freed first; the SSD store allocates by next fit (the free
// slots in slot order from where the last allocation stopped, wrapping at the end of its files), so
// a swap's demoted rows land in adjacent slots.
TEST_P(RowStoreContract, FreedSlotsAreReusedAndCannotBeRead) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, 10);
  ASSERT_TRUE(s->Free({slots[3], slots[7]}).ok());
  EXPECT_EQ(s->size(), 8u);
  EXPECT_FALSE(s->IsAllocated(slots[3]));
  std::vector<float> out(kRowFloats);
  const absl::Status read = s->Read({slots[3]}, out.data());
  EXPECT_TRUE(absl::IsFailedPrecondition(read)) << read;
  EXPECT_THAT(std::string(read.message()), HasSubstr("not allocated"));
  std::vector<uint32_t> two = Alloc(*s, 2);
  if (s->tier() != Tier::kSsd) {
    EXPECT_EQ(two, (std::vector<uint32_t>{slots[7], slots[3]}));
    return;
  }
  // Next fit: the slots after the last allocation first, then, wrapping, the freed ones in slot
  // order; a file is made only when the files made have too few free slots.
  EXPECT_EQ(two, (std::vector<uint32_t>{10, 11}));
  if (static_cast<const SsdStore&>(*s).rows_per_file() == 16) {  // one file holds [0, 16)
    EXPECT_EQ(Alloc(*s, 4), (std::vector<uint32_t>{12, 13, 14, 15}));
    EXPECT_EQ(Alloc(*s, 2), (std::vector<uint32_t>{3, 7}));
    EXPECT_EQ(Alloc(*s, 1), (std::vector<uint32_t>{16}));
    return;
  }
  // Files of 7 rows: [0, 14) so far.
  EXPECT_EQ(Alloc(*s, 4), (std::vector<uint32_t>{12, 13, 3, 7}));
  EXPECT_EQ(Alloc(*s, 1), (std::vector<uint32_t>{14}));  // a third file
  ASSERT_TRUE(s->Free({slots[5], 13u, 2u}).ok());
  EXPECT_EQ(Alloc(*s, 3), (std::vector<uint32_t>{15, 16, 17}));
  EXPECT_EQ(Alloc(*s, 4), (std::vector<uint32_t>{18, 19, 20, 2}));
  EXPECT_EQ(Alloc(*s, 2), (std::vector<uint32_t>{5, 13}));
}

TEST_P(RowStoreContract, FreeOfPinnedOrDuplicateOrFreeSlotRefusesAndFreesNothing) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, 5);
  ASSERT_TRUE(s->Pin({slots[2]}).ok());
  absl::Status st = s->Free({slots[0], slots[1], slots[2]});
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("pinned"));
  st = s->Free({slots[3], slots[4], slots[3]});
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("twice"));
  st = s->Free({slots[0], kCapacity + 5});
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("out of range"));
  EXPECT_EQ(s->size(), 5u);
  for (uint32_t slot : slots) EXPECT_TRUE(s->IsAllocated(slot)) << slot;
  // Once unpinned, it can go.
  ASSERT_TRUE(s->Unpin({slots[2]}).ok());
  ASSERT_TRUE(s->Free({slots[2]}).ok());
  EXPECT_FALSE(s->IsAllocated(slots[2]));
}

TEST_P(RowStoreContract, PinsNestAndUnpinOfUnpinnedSlotRefuses) {
  auto s = Make();
  std::vector<uint32_t> slots = Alloc(*s, 3);
  ASSERT_TRUE(s->Pin({slots[0], slots[1]}).ok());
  ASSERT_TRUE(s->Pin({slots[0]}).ok());
  ASSERT_TRUE(s->Unpin({slots[0], slots[1]}).ok());
  EXPECT_TRUE(s->IsPinned(slots[0]));
  EXPECT_FALSE(s->IsPinned(slots[1]));
  // A failed Unpin leaves every pin as it was.
  const absl::Status st = s->Unpin({slots[0], slots[2]});
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(s->IsPinned(slots[0]));
  ASSERT_TRUE(s->Unpin({slots[0]}).ok());
  EXPECT_FALSE(s->IsPinned(slots[0]));
  uint32_t free_slot = kCapacity - 1;
  EXPECT_FALSE(s->IsAllocated(free_slot));
  EXPECT_TRUE(absl::IsFailedPrecondition(s->Pin({free_slot})));
}

TEST_P(RowStoreContract, MoveRowsCarriesContentsAndFreesTheSource) {
  auto from = Make();
  MemoryStoreOptions o;
  o.tier = Tier::kHost;
  o.row_floats = kRowFloats;
  o.capacity = 8;
  auto to = *MemoryStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*from, 12);
  ASSERT_TRUE(from->Write(slots, RowsFor(slots, kRowFloats, 2).data()).ok());
  std::vector<uint32_t> moving = {slots[9], slots[1], slots[4]};
  std::vector<uint32_t> dst(3);
  ASSERT_TRUE(MoveRows(*from, moving, *to, dst.data()).ok());
  EXPECT_EQ(ReadAll(*to, dst), RowsFor(moving, kRowFloats, 2));
  for (uint32_t slot : moving) EXPECT_FALSE(from->IsAllocated(slot));
  EXPECT_EQ(from->size(), 9u);
  // And back again, into the first store.
  std::vector<uint32_t> back(3);
  ASSERT_TRUE(MoveRows(*to, dst, *from, back.data()).ok());
  EXPECT_EQ(ReadAll(*from, back), RowsFor(moving, kRowFloats, 2));
  EXPECT_EQ(to->size(), 0u);
}

TEST_P(RowStoreContract, MoveRowsIntoAFullTierOrOfAPinnedRowChangesNothing) {
  auto from = Make();
  MemoryStoreOptions o;
  o.tier = Tier::kDevice;
  o.row_floats = kRowFloats;
  o.capacity = 2;
  auto to = *MemoryStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*from, 3);
  ASSERT_TRUE(from->Write(slots, RowsFor(slots, kRowFloats, 3).data()).ok());
  std::vector<uint32_t> dst(3);
  absl::Status st = MoveRows(*from, slots, *to, dst.data());
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_EQ(to->size(), 0u);
  EXPECT_EQ(from->size(), 3u);
  EXPECT_EQ(ReadAll(*from, slots), RowsFor(slots, kRowFloats, 3));
  ASSERT_TRUE(from->Pin({slots[1]}).ok());
  st = MoveRows(*from, {slots[0], slots[1]}, *to, dst.data());
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("pinned"));
  EXPECT_EQ(to->size(), 0u);
  EXPECT_TRUE(from->IsAllocated(slots[0]));
}

TEST_P(RowStoreContract, ManyRowsRoundTripThroughRandomChurn) {
  // Allocation churn against a model of which slot holds which version of its row.
  auto s = Make(400);
  std::vector<uint32_t> live;
  std::vector<int> version(400, -1);
  uint64_t rng = 12345;
  auto next = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull; };
  for (int round = 0; round < 30; ++round) {
    const size_t n = std::min<size_t>(next() % 60, 400 - live.size());
    std::vector<uint32_t> got = Alloc(*s, n);
    ASSERT_TRUE(s->Write(got, RowsFor(got, kRowFloats, round % 9).data()).ok());
    for (uint32_t slot : got) version[slot] = round % 9;
    live.insert(live.end(), got.begin(), got.end());
    std::vector<uint32_t> freed;
    for (size_t i = 0; i < live.size();) {
      if (next() % 3 == 0) {
        freed.push_back(live[i]);
        live[i] = live.back();
        live.pop_back();
      } else {
        ++i;
      }
    }
    ASSERT_TRUE(s->Free(freed).ok());
    ASSERT_EQ(s->size(), live.size());
    std::vector<float> out = ReadAll(*s, live);
    for (size_t i = 0; i < live.size(); ++i) {
      std::vector<float> want = RowsFor({live[i]}, kRowFloats, version[live[i]]);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + i * kRowFloats))
          << "slot " << live[i] << " round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, RowStoreContract, ::testing::ValuesIn(Kinds()),
                         [](const auto& info) { return info.param.name; });

TEST(TierBasesTest, PacksAndUnpacksAtEveryBoundary) {
  TierBases bases(10, 20, 30);
  EXPECT_EQ(bases.end(), 60u);
  for (RowLocation loc :
       {RowLocation{Tier::kDevice, 0}, RowLocation{Tier::kDevice, 9}, RowLocation{Tier::kHost, 0},
        RowLocation{Tier::kHost, 19}, RowLocation{Tier::kSsd, 0}, RowLocation{Tier::kSsd, 29}}) {
    EXPECT_EQ(bases.Unpack(bases.Pack(loc)), loc) << TierName(loc.tier) << " " << loc.slot;
  }
  EXPECT_EQ(bases.Pack({Tier::kHost, 0}), 10u);
  EXPECT_EQ(bases.Pack({Tier::kSsd, 0}), 30u);
  // No host tier: device then SSD.
  TierBases no_host(5, 0, 5);
  EXPECT_EQ(no_host.Unpack(5).tier, Tier::kSsd);
  EXPECT_TRUE(TierBases::Check(1u << 31, 1u << 30, (1u << 30) - 1).ok());
  const absl::Status st = TierBases::Check(1u << 31, 1u << 30, 1u << 30);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

TEST(MemoryStoreTest, RowAddressesAreStableAndShowWrites) {
  MemoryStoreOptions o;
  o.tier = Tier::kDevice;
  o.row_floats = 4;
  o.capacity = 100;
  auto s = *MemoryStore::Create(o);
  std::vector<uint32_t> slots(50);
  ASSERT_TRUE(s->Allocate(50, slots.data()).ok());
  float* addr = s->RowAddress(slots[7]);
  addr[2] = 7.5f;
  std::vector<uint32_t> more(50);
  ASSERT_TRUE(s->Allocate(50, more.data()).ok());
  EXPECT_EQ(s->RowAddress(slots[7]), addr);
  std::vector<float> out(4);
  ASSERT_TRUE(s->Read({slots[7]}, out.data()).ok());
  EXPECT_EQ(out[2], 7.5f);
  EXPECT_EQ(s->RowAddress(slots[8]) - s->RowAddress(slots[7]),
            4 * (static_cast<int64_t>(slots[8]) - slots[7]));
}

TEST(MemoryStoreTest, RejectsBadOptions) {
  MemoryStoreOptions o;
  o.tier = Tier::kHost;
  o.row_floats = 0;
  o.capacity = 10;
  EXPECT_TRUE(absl::IsInvalidArgument(MemoryStore::Create(o).status()));
  o.row_floats = 4;
  o.tier = Tier::kSsd;
  EXPECT_TRUE(absl::IsInvalidArgument(MemoryStore::Create(o).status()));
}

}  // namespace
}  // namespace recsdk::internal
