// Tests of src/table/tiers/ssd_store.{h,cc} beyond the RowStore contract (row_store_test.cc):
// files and folders, reopening, corrupt files, and full or vanished folders.
#include "src/table/tiers/ssd_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk::internal {
namespace {

using ::recsdk::testing::RowsFor;
using ::recsdk::testing::TierTestDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr int kRowFloats = 16;  // 64-byte rows

SsdStoreOptions Options(std::vector<std::string> folders, uint32_t capacity,
                        uint32_t rows_per_file) {
  SsdStoreOptions o;
  o.row_floats = kRowFloats;
  o.capacity = capacity;
  o.folders = std::move(folders);
  o.file_name = "user_table";
  o.rows_per_file = rows_per_file;
  o.io_threads = 2;
  return o;
}

std::vector<uint32_t> Alloc(SsdStore& s, size_t n) {
  std::vector<uint32_t> slots(n);
  EXPECT_TRUE(s.Allocate(n, slots.data()).ok());
  return slots;
}

TEST(SsdStoreTest, MakesPreallocatedFilesInSlotOrderOnlyAsAllocationNeedsThem) {
  TierTestDir dir;
  const std::string a = dir.Sub("a");
  auto s = *SsdStore::Create(Options({a}, 25, 10));
  EXPECT_TRUE(s->FilePaths().empty());
  Alloc(*s, 10);
  ASSERT_EQ(s->FilePaths().size(), 1u);
  Alloc(*s, 1);
  ASSERT_EQ(s->FilePaths().size(), 2u);
  Alloc(*s, 14);
  // Writing every row keeps the files at their preallocated size: each record is in its place.
  std::vector<uint32_t> all(25);
  for (uint32_t i = 0; i < 25; ++i) all[i] = i;
  ASSERT_TRUE(s->Write(all, RowsFor(all, kRowFloats, 1).data()).ok());
  const std::vector<std::string> paths = s->FilePaths();
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], a + "/user_table.00000.rows");
  EXPECT_EQ(paths[2], a + "/user_table.00002.rows");
  EXPECT_EQ(fs::file_size(paths[0]), SsdStore::kHeaderBytes + 10 * (64 + 4));
  EXPECT_EQ(fs::file_size(paths[2]), SsdStore::kHeaderBytes + 5 * (64 + 4));  // short last file
}

TEST(SsdStoreTest, RowsSurviveReopeningWithTheLiveSlotsAndFreeSlotsAreReused) {
  TierTestDir dir;
  const SsdStoreOptions o = Options({dir.Sub("a"), dir.Sub("b")}, 30, 8);
  std::vector<uint32_t> live;
  {
    auto s = *SsdStore::Create(o);
    std::vector<uint32_t> slots = Alloc(*s, 20);
    ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 4).data()).ok());
    ASSERT_TRUE(s->Free({slots[3], slots[11]}).ok());
    ASSERT_TRUE(s->Sync().ok());
    for (uint32_t slot : slots) {
      if (s->IsAllocated(slot)) live.push_back(slot);
    }
  }
  auto reopened = SsdStore::Open(o, live);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  SsdStore& s = **reopened;
  EXPECT_EQ(s.size(), 18u);
  std::vector<float> out(live.size() * kRowFloats);
  ASSERT_TRUE(s.Read(live, out.data()).ok());
  EXPECT_EQ(out, RowsFor(live, kRowFloats, 4));
  EXPECT_FALSE(s.IsAllocated(3));
  // 24 slots have files (3 files of 8); 6 of them are free and are used before new slots.
  std::vector<uint32_t> more = Alloc(s, 6);
  for (uint32_t slot : more) EXPECT_LT(slot, 24u);
  EXPECT_EQ(s.FilePaths().size(), 3u);
  Alloc(s, 6);
  EXPECT_EQ(s.FilePaths().size(), 4u);
}

// Next fit against a brute-force model (a flag per slot, a linear scan from the cursor): random
// allocations and frees over 20000 slots, so the scan crosses many words of the bitmap and of its
// summary (a bit per 64 slots) and wraps often; files are made only when the files made are full.
TEST(SsdStoreTest, NextFitMatchesABruteForceModel) {
  TierTestDir dir;
  constexpr uint32_t kCap = 20000, kPerFile = 3000;
  auto s = *SsdStore::Create(Options({dir.Sub("a")}, kCap, kPerFile));
  std::vector<bool> used(kCap, false);
  uint64_t files = 0, cursor = 0;
  uint32_t size = 0;
  uint64_t state = 12345;
  auto rand = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  std::vector<uint32_t> live;
  for (int round = 0; round < 400; ++round) {
    // Frees: a random share of the live slots, scattered (a swap's promotions).
    const size_t frees = live.empty() ? 0 : rand(std::min<size_t>(live.size(), 300));
    std::vector<uint32_t> freed;
    for (size_t i = 0; i < frees; ++i) {
      const size_t j = rand(live.size());
      freed.push_back(live[j]);
      live[j] = live.back();
      live.pop_back();
    }
    ASSERT_TRUE(s->Free(freed).ok());
    for (uint32_t f : freed) used[f] = false;
    size -= static_cast<uint32_t>(freed.size());
    const size_t n = std::min<size_t>(rand(400), kCap - size);
    std::vector<uint32_t> want;
    while (files * kPerFile < std::min<uint64_t>(kCap, size + n)) ++files;
    const uint64_t limit = std::min<uint64_t>(kCap, files * kPerFile);
    uint64_t at = cursor < limit ? cursor : 0;
    for (size_t i = 0; i < n; ++i) {
      while (at < limit && used[at]) ++at;
      if (at == limit) {
        at = 0;
        while (used[at]) ++at;
      }
      want.push_back(static_cast<uint32_t>(at));
      used[at] = true;
      ++at;
    }
    cursor = at;
    size += static_cast<uint32_t>(n);
    std::vector<uint32_t> got(n);
    ASSERT_TRUE(s->Allocate(n, got.data()).ok()) << "round " << round;
    ASSERT_EQ(got, want) << "round " << round;
    live.insert(live.end(), got.begin(), got.end());
    ASSERT_EQ(s->size(), size);
    ASSERT_EQ(s->FilePaths().size(), files);
  }
  // Full: every slot allocated, then one more is refused and nothing changes.
  std::vector<uint32_t> rest(kCap - size);
  ASSERT_TRUE(s->Allocate(rest.size(), rest.data()).ok());
  uint32_t one = 0;
  EXPECT_TRUE(absl::IsResourceExhausted(s->Allocate(1, &one)));
  EXPECT_EQ(s->size(), kCap);
}

TEST(SsdStoreTest, TruncatedFileOnOpenIsDataLossNamingTheFile) {
  TierTestDir dir;
  const SsdStoreOptions o = Options({dir.Sub("a")}, 20, 10);
  std::vector<uint32_t> slots;
  std::string second;
  {
    auto s = *SsdStore::Create(o);
    slots = Alloc(*s, 15);
    ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 1).data()).ok());
    second = s->FilePaths()[1];
  }
  fs::resize_file(second, fs::file_size(second) - 10);
  auto reopened = SsdStore::Open(o, slots);
  ASSERT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
  EXPECT_THAT(std::string(reopened.status().message()), HasSubstr(second));
  EXPECT_THAT(std::string(reopened.status().message()), HasSubstr("truncated"));
}

TEST(SsdStoreTest, CorruptHeaderOrOtherStoresFileIsDataLossNamingTheFile) {
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 20, 10);
  std::string first;
  {
    auto s = *SsdStore::Create(o);
    Alloc(*s, 5);
    first = s->FilePaths()[0];
  }
  {
    // A different row size but the same file size: only the header can tell.
    SsdStoreOptions other = o;
    other.row_floats = 33;  // 5 records of 136 bytes = 10 of 68
    other.rows_per_file = 5;
    other.capacity = 10;
    auto reopened = SsdStore::Open(other, {});
    ASSERT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
    EXPECT_THAT(std::string(reopened.status().message()), HasSubstr(first));
    EXPECT_THAT(std::string(reopened.status().message()), HasSubstr("row size"));
  }
  {
    std::fstream f(first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('X');
  }
  auto reopened = SsdStore::Open(o, {});
  ASSERT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
  EXPECT_THAT(std::string(reopened.status().message()), HasSubstr("magic"));
}

TEST(SsdStoreTest, LiveSlotBeyondTheFilesFoundIsDataLossNamingTheMissingFile) {
  TierTestDir dir;
  const SsdStoreOptions o = Options({dir.Sub("a")}, 30, 10);
  {
    auto s = *SsdStore::Create(o);
    Alloc(*s, 25);
  }
  fs::remove(dir.path() + "/a/user_table.00002.rows");
  auto reopened = SsdStore::Open(o, {0, 22});
  ASSERT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
  EXPECT_THAT(std::string(reopened.status().message()), HasSubstr("user_table.00002.rows"));
}

TEST(SsdStoreTest, CreateRemovesAnEarlierStoresFiles) {
  TierTestDir dir;
  const SsdStoreOptions o = Options({dir.Sub("a"), dir.Sub("b")}, 30, 10);
  {
    auto s = *SsdStore::Create(o);
    Alloc(*s, 25);
  }
  auto fresh = *SsdStore::Create(o);
  EXPECT_TRUE(fs::is_empty(dir.path() + "/a"));
  // Reopening now finds no files: a live slot is DataLoss, none is an empty store.
  EXPECT_TRUE(absl::IsDataLoss(SsdStore::Open(o, {0}).status()));
  EXPECT_EQ((*SsdStore::Open(o, {}))->size(), 0u);
}

TEST(SsdStoreTest, RejectsBadOptionsNamingThem) {
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.path() + "/missing"}, 10, 0);
  absl::Status st = SsdStore::Create(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("missing"));
  o.folders = {};
  EXPECT_TRUE(absl::IsInvalidArgument(SsdStore::Create(o).status()));
  o.folders = {dir.path()};
  o.file_name = "../escape";
  EXPECT_TRUE(absl::IsInvalidArgument(SsdStore::Create(o).status()));
  o.file_name = "t";
  o.capacity = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(SsdStore::Create(o).status()));
}

TEST(SsdStoreTest, VanishedFolderIsResourceExhaustedBeforeAnythingIsLost) {
  TierTestDir dir;
  const std::string a = dir.Sub("a");
  const std::string b = dir.Sub("b");
  auto s = *SsdStore::Create(Options({a, b}, 40, 10));
  std::vector<uint32_t> slots = Alloc(*s, 10);  // fills the first file, in a
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 5).data()).ok());
  fs::remove(b);
  // a still has room: the next file goes there.
  std::vector<uint32_t> more = Alloc(*s, 5);
  EXPECT_EQ(s->FilePaths()[1], a + "/user_table.00001.rows");
  fs::remove_all(a);  // the files stay open; the folder is gone
  std::vector<uint32_t> none(10, 777);
  const absl::Status st = s->Allocate(10, none.data());
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  const std::string message(st.message());
  EXPECT_THAT(message, HasSubstr("ssd tier"));
  EXPECT_THAT(message, HasSubstr(a));
  EXPECT_THAT(message, HasSubstr(b));
  EXPECT_THAT(message, HasSubstr("ssd_data_path"));
  EXPECT_EQ(none, std::vector<uint32_t>(10, 777));
  EXPECT_EQ(s->size(), 15u);
  // Still usable: the rows are there, the rest of the file is allocatable, freed slots reused.
  std::vector<float> out(slots.size() * kRowFloats);
  ASSERT_TRUE(s->Read(slots, out.data()).ok());
  EXPECT_EQ(out, RowsFor(slots, kRowFloats, 5));
  Alloc(*s, 5);
  ASSERT_TRUE(s->Free({slots[0]}).ok());
  EXPECT_EQ(Alloc(*s, 1), std::vector<uint32_t>{slots[0]});
  // And once a folder is back, the store grows again.
  fs::create_directories(b);
  EXPECT_TRUE(s->Allocate(1, none.data()).ok());
  EXPECT_EQ(s->FilePaths().back(), b + "/user_table.00002.rows");
}

// TmpfsMount: a 1 MiB tmpfs at `dir` (needs root; tests skip without it).
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::string& dir) : dir_(dir) {
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") == 0;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

TEST(SsdStoreTest, FullDiskMovesOnToTheNextFolderThenIsResourceExhausted) {
  TierTestDir dir;
  const std::string small = dir.Sub("small");
  const std::string small2 = dir.Sub("small2");
  TmpfsMount m1(small);
  TmpfsMount m2(small2);
  if (!m1.mounted() || !m2.mounted()) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs (needs root); the vanished-folder test covers "
                    "ResourceExhausted";
  }
  // Files of 4 KiB + 4096 records x 68 bytes = 276 KiB: three fit in small's 1 MiB; small2 holds
  // a 600 KiB filler, so one fits there.
  const std::string filler = small2 + "/filler";
  {
    std::ofstream f(filler, std::ios::binary);
    f << std::string(600 << 10, 'x');
  }
  SsdStoreOptions o = Options({small, small2}, 40000, 4096);
  auto s = *SsdStore::Create(o);
  std::vector<uint32_t> first = Alloc(*s, 3 * 4096);
  ASSERT_TRUE(s->Write(first, RowsFor(first, kRowFloats, 0).data()).ok());
  for (const std::string& path : s->FilePaths()) EXPECT_EQ(path.rfind(small + "/", 0), 0u);
  // The fourth file does not fit in small: it goes to small2.
  Alloc(*s, 4096);
  ASSERT_EQ(s->FilePaths().size(), 4u);
  EXPECT_EQ(s->FilePaths()[3].rfind(small2 + "/", 0), 0u);
  EXPECT_FALSE(fs::exists(small + "/user_table.00003.rows"));  // the failed file is removed
  // The fifth fits nowhere.
  std::vector<uint32_t> none(100, 9);
  const absl::Status st = s->Allocate(100, none.data());
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("\"" + small + "\": no space"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("\"" + small2 + "\": "));
  EXPECT_THAT(std::string(st.message()), HasSubstr("No space left"));
  EXPECT_EQ(none, std::vector<uint32_t>(100, 9));
  EXPECT_EQ(s->size(), 4u * 4096);
  EXPECT_FALSE(fs::exists(small2 + "/user_table.00004.rows"));
  std::vector<float> out(first.size() * kRowFloats);
  ASSERT_TRUE(s->Read(first, out.data()).ok());
  EXPECT_EQ(out, RowsFor(first, kRowFloats, 0));
  // Space freed: the store grows again, into the first folder with room.
  fs::remove(filler);
  ASSERT_TRUE(s->Allocate(100, none.data()).ok());
  EXPECT_EQ(s->FilePaths().back(), small2 + "/user_table.00004.rows");
}

TEST(SsdStoreTest, CapacityReachedIsResourceExhaustedNamingTheSetting) {
  TierTestDir dir;
  auto s = *SsdStore::Create(Options({dir.Sub("a")}, 10, 4));
  Alloc(*s, 8);
  std::vector<uint32_t> three(3);
  const absl::Status st = s->Allocate(3, three.data());
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("ssd_vocabulary_size"));
  EXPECT_EQ(s->size(), 8u);
  EXPECT_TRUE(s->Allocate(2, three.data()).ok());
}

TEST(SsdStoreTest, BulkIoAcrossFileBoundariesAndLongRuns) {
  // Runs longer than one preadv (256 records) and crossing files, read through 3 threads.
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 5000, 700);
  o.io_threads = 3;
  auto s = *SsdStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*s, 5000);
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 6).data()).ok());
  ASSERT_TRUE(s->DropPageCache().ok());
  std::vector<uint32_t> stride;
  for (uint32_t i = 0; i < 5000; i += 3) stride.push_back((i * 7) % 5000);
  std::vector<float> out(stride.size() * kRowFloats);
  ASSERT_TRUE(s->Read(stride, out.data()).ok());
  EXPECT_EQ(out, RowsFor(stride, kRowFloats, 6));
  out.resize(slots.size() * kRowFloats);
  ASSERT_TRUE(s->Read(slots, out.data()).ok());
  EXPECT_EQ(out, RowsFor(slots, kRowFloats, 6));
}

TEST(SsdStoreTest, EveryReadPathReturnsTheSameRowsCachedOrCold) {
  // 96-byte rows straddle 4 KiB blocks; runs of adjacent slots are longer than one ring read
  // (32 KiB); slots repeat; files are short so runs end at file boundaries. Each path reads the
  // rows twice: with the pages cached (just written), then cold (the cache dropped).
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 6000, 2500);
  o.row_floats = 24;
  o.io_threads = 0;
  std::vector<uint32_t> slots;
  {
    auto s = *SsdStore::Create(o);
    slots = Alloc(*s, 6000);
    ASSERT_TRUE(s->Write(slots, RowsFor(slots, 24, 3).data()).ok());
  }
  std::vector<uint32_t> ask;
  for (uint32_t i = 0; i < 6000; i += 1 + (i % 5 == 0 ? 40 : 0)) ask.push_back(i);
  ask.push_back(17);
  ask.push_back(17);
  ask.push_back(5999);
  const std::vector<float> want = RowsFor(ask, 24, 3);
  for (SsdReadPath path : {SsdReadPath::kAuto, SsdReadPath::kDirect, SsdReadPath::kBuffered}) {
    SCOPED_TRACE(static_cast<int>(path));
    o.read_path = path;
    auto s = *SsdStore::Open(o, slots);
    // Rewritten, so the pages are cached (and dirty) again.
    ASSERT_TRUE(s->Write(slots, RowsFor(slots, 24, 3).data()).ok());
    std::vector<float> out(ask.size() * 24);
    ASSERT_TRUE(s->Read(ask, out.data()).ok());
    EXPECT_EQ(out, want);
    const SsdStore::ReadCounts cached = s->read_counts();
    ASSERT_TRUE(s->DropPageCache().ok());
    std::fill(out.begin(), out.end(), 0.0f);
    ASSERT_TRUE(s->Read(ask, out.data()).ok());
    EXPECT_EQ(out, want);
    const SsdStore::ReadCounts cold = s->read_counts();
    if (path == SsdReadPath::kBuffered) {
      EXPECT_FALSE(s->ring_reads());
      EXPECT_EQ(cold.cached_rows + cold.disk_rows, 0u);
    } else if (!s->ring_reads()) {
      continue;  // no io_uring here (or, for kDirect, no O_DIRECT): preadv, as kBuffered
    } else if (path == SsdReadPath::kAuto) {
      // Every dirty page is cached: none of the first reads went to the disk.
      EXPECT_EQ(cached.disk_rows, 0u);
      EXPECT_GE(cached.cached_rows, ask.size() - 1);  // a slot asked twice is read once
      EXPECT_GT(cold.disk_rows, 0u);
    } else {
      EXPECT_EQ(cold.cached_rows, 0u);  // around the cache, always
      EXPECT_GT(cached.disk_rows, 0u);
    }
  }
}

class SsdReadPaths : public ::testing::TestWithParam<SsdReadPath> {};

TEST_P(SsdReadPaths, ReadOfARecordCutOffAfterOpeningIsDataLossNamingTheFile) {
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 20, 20);
  o.read_path = GetParam();
  auto s = *SsdStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*s, 20);
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 1).data()).ok());
  const std::string path = s->FilePaths()[0];
  ASSERT_EQ(::truncate(path.c_str(), SsdStore::kHeaderBytes + 5 * s->record_bytes()), 0);
  std::vector<float> out(kRowFloats);
  const absl::Status st = s->Read({slots[12]}, out.data());
  ASSERT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(path));
}

TEST_P(SsdReadPaths, CorruptRecordIsDataLossNamingTheFileAndSlotAndOthersStillRead) {
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 40, 20);
  o.read_path = GetParam();
  auto s = *SsdStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*s, 40);
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 2).data()).ok());
  ASSERT_TRUE(s->Sync().ok());
  // Flip one byte of slot 27's row (file 1, record 7), behind the store's back.
  const std::string path = s->FilePaths()[1];
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(SsdStore::kHeaderBytes + 7 * s->record_bytes() + 9);
    f.seekg(at);
    const char c = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x10));
  }
  ASSERT_TRUE(s->DropPageCache().ok());
  std::vector<float> out(3 * kRowFloats);
  const absl::Status st = s->Read({3, 27, 30}, out.data());
  ASSERT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(path));
  EXPECT_THAT(std::string(st.message()), HasSubstr("slot 27"));
  std::vector<uint32_t> others = {3, 26, 28, 30};
  std::vector<float> good(others.size() * kRowFloats);
  ASSERT_TRUE(s->Read(others, good.data()).ok());
  EXPECT_EQ(good, RowsFor(others, kRowFloats, 2));
  // Rewriting the row heals it.
  ASSERT_TRUE(s->Write({27}, RowsFor({27}, kRowFloats, 3).data()).ok());
  ASSERT_TRUE(s->Read({27}, out.data()).ok());
}

TEST_P(SsdReadPaths, RecordsCopiedToAnotherSlotFailTheirChecksum) {
  // The checksum is seeded with the slot: a record in the wrong place does not pass as another.
  TierTestDir dir;
  SsdStoreOptions o = Options({dir.Sub("a")}, 10, 10);
  o.read_path = GetParam();
  auto s = *SsdStore::Create(o);
  std::vector<uint32_t> slots = Alloc(*s, 10);
  ASSERT_TRUE(s->Write(slots, RowsFor(slots, kRowFloats, 1).data()).ok());
  ASSERT_TRUE(s->Sync().ok());
  const std::string path = s->FilePaths()[0];
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::string record(s->record_bytes(), '\0');
    f.seekg(static_cast<std::streamoff>(SsdStore::kHeaderBytes + 2 * s->record_bytes()));
    f.read(record.data(), static_cast<std::streamsize>(record.size()));
    f.seekp(static_cast<std::streamoff>(SsdStore::kHeaderBytes + 5 * s->record_bytes()));
    f.write(record.data(), static_cast<std::streamsize>(record.size()));
  }
  ASSERT_TRUE(s->DropPageCache().ok());
  std::vector<float> out(kRowFloats);
  EXPECT_TRUE(absl::IsDataLoss(s->Read({5}, out.data())));
  EXPECT_TRUE(s->Read({2}, out.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(Paths, SsdReadPaths,
                         ::testing::Values(SsdReadPath::kAuto, SsdReadPath::kDirect,
                                           SsdReadPath::kBuffered));

}  // namespace
}  // namespace recsdk::internal
