// tiered_checkpoint_test.cc: checkpoints of tables whose rows live mostly on the SSD tier (issue
// 29). A save writes them in storage order (the SSD files read front to back; format version 2,
// "row_order": "storage"); a restore puts them back key by key (into a tiered or a flat table),
// streams them into the tiers with bounded memory, and training then goes on bitwise as if never
// stopped. A manifest of an unknown format version is refused naming the version. A checkpoint
// that links the SSD segment files (format version 3, the Saver's default) copies none of the SSD
// rows, stays intact while training goes on and its SSD folder is deleted, and is refused once a
// later one released its slots.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "recsdk/checkpoint.h"
#include "recsdk/table.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/env.h"
#include "src/table/npy.h"
#include "src/table/tier_lease.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk {
namespace {

// kUnderAddressSanitizer: this test binary runs under ASan (GCC's macro, or clang's feature test).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAddressSanitizer = true;
#else
constexpr bool kUnderAddressSanitizer = false;
#endif
#else
constexpr bool kUnderAddressSanitizer = false;
#endif

TableConfig Config(int dim, int64_t device, int64_t host, int64_t ssd, const std::string& dir) {
  TableConfig c;
  c.name = "big";
  c.dim = dim;
  c.device_vocabulary_size = device;
  c.initializer = Initializer::Uniform(-1, 1, 11);
  c.host_vocabulary_size = host;
  c.ssd_vocabulary_size = ssd;
  if (ssd > 0) c.ssd_data_path = {dir};
  return c;
}

std::unique_ptr<EmbeddingTable> Make(const TableConfig& c) {
  auto t = EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.05f));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Batch: distinct keys from a skewed stream over [0, keys).
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

// Step: resolve, gather, a gradient from the embeddings, apply; returns the embeddings.
std::vector<float> Step(EmbeddingTable& t, const std::vector<int64_t>& keys, int64_t step) {
  std::vector<uint32_t> rows(keys.size());
  const Status s = t.Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> emb(keys.size() * static_cast<size_t>(t.dim()));
  EXPECT_TRUE(t.Gather(rows, absl::MakeSpan(emb)).ok());
  std::vector<float> grads(emb.size());
  for (size_t i = 0; i < emb.size(); ++i) grads[i] = 0.5f * emb[i] - 0.01f * (i % 7);
  EXPECT_TRUE(t.ApplyGradients(rows, grads, step).ok());
  return emb;
}

void ExpectSameRows(EmbeddingTable& a, EmbeddingTable& b) {
  auto sa = a.Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  auto sb = b.Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sa->keys, sb->keys);
  ASSERT_EQ(sa->rows.size(), sb->rows.size());
  EXPECT_EQ(std::memcmp(sa->rows.data(), sb->rows.data(), sa->rows.size() * sizeof(float)), 0);
}

nlohmann::json ReadManifest(const std::string& dir) {
  return internal::ReadJsonDocument(internal::Env::Default(), dir + "/manifest.json").value();
}

TEST(TieredCheckpoint, SavedInStorageOrderRestoredKeyByKeyAndTrainingGoesOnAsNeverStopped) {
  testing::TierTestDir dir;
  auto tiered = Make(Config(8, 80, 100, 3000, dir.Sub("ssd")));
  auto flat = Make(Config(8, 3000, 0, 0, ""));
  std::mt19937_64 rng(3);
  for (int step = 1; step <= 60; ++step) {
    const auto keys = Batch(rng, 30, 2000);
    Step(*tiered, keys, step);
    Step(*flat, keys, step);
  }
  const std::string ckpt = dir.path() + "/ckpt";
  ASSERT_TRUE(SaveTable(*tiered, ckpt).ok());
  const nlohmann::json m = ReadManifest(ckpt);
  EXPECT_EQ(m["format_version"], 2);
  EXPECT_EQ(m["table"]["row_order"], "storage");  // rows as the tiers store them
  // Into a fresh tiered table (its SSD tier written afresh) and into a flat one.
  auto back = Make(Config(8, 80, 100, 3000, dir.Sub("ssd2")));
  const Status restored = RestoreTable(*back, ckpt);
  ASSERT_TRUE(restored.ok()) << restored;
  ExpectSameRows(*flat, *back);
  auto back_flat = Make(Config(8, 3000, 0, 0, ""));
  ASSERT_TRUE(RestoreTable(*back_flat, ckpt).ok());
  ExpectSameRows(*flat, *back_flat);
  // A flat table's checkpoint stays in key order.
  ASSERT_TRUE(SaveTable(*flat, dir.path() + "/flat").ok());
  EXPECT_FALSE(ReadManifest(dir.path() + "/flat")["table"].contains("row_order"));
  for (int step = 61; step <= 90; ++step) {
    const auto keys = Batch(rng, 30, 2000);
    const auto want = Step(*flat, keys, step);
    const auto got = Step(*back, keys, step);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "step " << step;
  }
  ExpectSameRows(*flat, *back);
}

// Rewrites the manifest's format_version (its checksum recomputed).
void SetVersion(const std::string& dir, int version) {
  nlohmann::json m = ReadManifest(dir);
  m["format_version"] = version;
  ASSERT_TRUE(internal::WriteJsonDocument(internal::Env::Default(), dir + "/manifest.json", m,
                                          /*atomic=*/true)
                  .ok());
}

TEST(TieredCheckpoint, KeyOrderVersion1IsReadAndAnUnknownVersionIsRefusedNamingIt) {
  testing::TierTestDir dir;
  auto flat = Make(Config(4, 500, 0, 0, ""));
  std::mt19937_64 rng(4);
  for (int step = 1; step <= 5; ++step) Step(*flat, Batch(rng, 20, 400), step);
  const std::string ckpt = dir.path() + "/t";
  ASSERT_TRUE(SaveTable(*flat, ckpt).ok());
  SetVersion(ckpt, 1);  // a key-ordered table is exactly what version 1 wrote
  auto back = Make(Config(4, 500, 0, 0, ""));
  ASSERT_TRUE(RestoreTable(*back, ckpt).ok());
  ExpectSameRows(*flat, *back);
  SetVersion(ckpt, 4);
  const Status refused = RestoreTable(*back, ckpt);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("format version 4"), std::string::npos) << refused;
}

TEST(TieredCheckpoint, CorruptStreamedRowsAreDataLossAndChangeNothing) {
  testing::TierTestDir dir;
  auto t = Make(Config(8, 80, 100, 3000, dir.Sub("ssd")));
  std::mt19937_64 rng(5);
  for (int step = 1; step <= 30; ++step) Step(*t, Batch(rng, 30, 2000), step);
  const std::string ckpt = dir.path() + "/ckpt";
  ASSERT_TRUE(SaveTable(*t, ckpt).ok());
  {
    std::fstream f(ckpt + "/rows.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  auto back = Make(Config(8, 80, 100, 3000, dir.Sub("ssd2")));
  Step(*back, {1, 2, 3}, 1);
  const Status s = RestoreTable(*back, ckpt);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("rows.npy"), std::string::npos) << s;
  EXPECT_EQ(back->size(), 3);
}

// LinkedSave: a table checkpoint whose SSD rows stay in the SSD files, hard-linked (what a
// Saver's full save writes by default), committed: the table's hold is settled as the Saver does.
Status LinkedSave(EmbeddingTable& t, const std::string& dir) {
  internal::Env* env = internal::Env::Default();
  if (Status s = env->CreateDir(dir); !s.ok()) return s;
  auto entry =
      internal::SnapshotAndWriteTable(env, dir, "", t, EmbeddingTable::SnapshotKind::kFull, nullptr,
                                      /*link_ssd=*/true);
  if (!entry.ok()) {
    (void)t.SettleSsdHold(false);
    return entry.status();
  }
  nlohmann::json m = {{"format_version", internal::kLinkedSsdFormatVersion}, {"table", *entry}};
  if (Status s = internal::WriteJsonDocument(env, dir + "/manifest.json", m, /*atomic=*/true);
      !s.ok()) {
    (void)t.SettleSsdHold(false);
    return s;
  }
  return t.SettleSsdHold(true);
}

// Bytes of a directory's files (apparent sizes, subfolders included).
int64_t DirBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += static_cast<int64_t>(e.file_size());
  }
  return bytes;
}

TEST(TieredCheckpoint, LinkedSsdSegmentsNeedNoSecondCopyAndSurviveTrainingAndAFolderDeleted) {
  testing::TierTestDir dir;
  auto tiered = Make(Config(8, 80, 100, 2000, dir.Sub("ssd")));
  auto flat = Make(Config(8, 3000, 0, 0, ""));
  std::mt19937_64 rng(7);
  for (int step = 1; step <= 60; ++step) {
    const auto keys = Batch(rng, 30, 2000);
    Step(*tiered, keys, step);
    Step(*flat, keys, step);
  }
  const std::string ckpt = dir.path() + "/ckpt";
  const Status saved = LinkedSave(*tiered, ckpt);
  ASSERT_TRUE(saved.ok()) << saved;
  ASSERT_TRUE(SaveTable(*flat, dir.path() + "/flat_then").ok());  // the state to compare with
  const nlohmann::json m = ReadManifest(ckpt);
  ASSERT_TRUE(m["table"].contains("ssd_segments")) << m.dump();
  const int64_t n = m["table"]["size"].get<int64_t>();
  const int64_t on_ssd = m["table"]["files"]["ssd_slots"]["shape"][0].get<int64_t>();
  EXPECT_GT(on_ssd, n / 2);  // most rows are on SSD
  EXPECT_EQ(m["table"]["files"]["rows"]["shape"][0].get<int64_t>(), n - on_ssd);  // not copied
  // The checkpoint's own files (all but the links to the SSD tier's) are smaller than one copy of
  // the SSD rows (16 floats a row): keys, slots and the device and host rows.
  const int64_t linked = DirBytes(ckpt + "/ssd");
  EXPECT_GT(linked, 0);
  EXPECT_LT(DirBytes(ckpt) - linked, on_ssd * 16 * 4) << "the checkpoint copied SSD rows";
  // Training goes on, long enough for next-fit allocation to wrap around the SSD slots (rows
  // promoted free their slots, rows demoted take free ones): the checkpoint's slots are not
  // reused (without the hold this test fails: the restored rows differ).
  for (int step = 61; step <= 400; ++step) {
    const auto keys = Batch(rng, 30, 2000);
    Step(*tiered, keys, step);
  }
  // The user deletes the live SSD folder: the checkpoint's hard links keep its rows.
  tiered.reset();
  std::filesystem::remove_all(dir.path() + "/ssd");
  auto back = Make(Config(8, 80, 100, 2000, dir.Sub("ssd2")));
  const Status restored = RestoreTable(*back, ckpt);
  ASSERT_TRUE(restored.ok()) << restored;
  auto then = Make(Config(8, 3000, 0, 0, ""));
  ASSERT_TRUE(RestoreTable(*then, dir.path() + "/flat_then").ok());
  ExpectSameRows(*then, *back);
  for (int step = 61; step <= 90; ++step) {
    const auto keys = Batch(rng, 30, 2000);
    const auto want = Step(*then, keys, step);
    const auto got = Step(*back, keys, step);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "step " << step;
  }
  ExpectSameRows(*then, *back);
}

TEST(TieredCheckpoint, ALinkedCheckpointIsRefusedOnceALaterOneReleasedItsSlots) {
  testing::TierTestDir dir;
  auto t = Make(Config(8, 80, 100, 3000, dir.Sub("ssd")));
  std::mt19937_64 rng(8);
  for (int step = 1; step <= 40; ++step) Step(*t, Batch(rng, 30, 2000), step);
  ASSERT_TRUE(LinkedSave(*t, dir.path() + "/a").ok());
  // Import over keys on SSD writes their rows in place: held slots must move, not change.
  {
    std::vector<int64_t> keys;
    for (int64_t k = 1500; k < 1600; ++k) keys.push_back(k);
    std::vector<float> values(keys.size() * 8, 0.25f);
    const std::string kp = dir.path() + "/k.npy", vp = dir.path() + "/v.npy";
    ASSERT_TRUE(internal::WriteNpy(kp, "<i8", {static_cast<int64_t>(keys.size())}, keys.data(),
                                   keys.size() * 8)
                    .ok());
    ASSERT_TRUE(internal::WriteNpy(vp, "<f4", {static_cast<int64_t>(keys.size()), 8}, values.data(),
                                   values.size() * 4)
                    .ok());
    const Status imported = t->ImportNpy(kp, vp);
    ASSERT_TRUE(imported.ok()) << imported;
  }
  for (int step = 41; step <= 70; ++step) Step(*t, Batch(rng, 30, 2000), step);
  auto fresh = Make(Config(8, 80, 100, 3000, dir.Sub("ssd2")));
  const Status first = RestoreTable(*fresh, dir.path() + "/a");  // still the latest: fine
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(fresh->ReadRow(1550).value()[0] == 0.25f, false);  // the import came after it
  ASSERT_TRUE(LinkedSave(*t, dir.path() + "/b").ok());
  for (int step = 71; step <= 100; ++step) Step(*t, Batch(rng, 30, 2000), step);
  auto again = Make(Config(8, 80, 100, 3000, dir.Sub("ssd3")));
  Step(*again, {1, 2, 3}, 1);
  const Status refused = RestoreTable(*again, dir.path() + "/a");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("released"), std::string::npos) << refused;
  EXPECT_NE(std::string(refused.message()).find("copy_ssd_rows"), std::string::npos) << refused;
  EXPECT_EQ(again->size(), 3);
  const Status latest = RestoreTable(*again, dir.path() + "/b");
  ASSERT_TRUE(latest.ok()) << latest;
  EXPECT_EQ(again->ReadRow(1550).value()[0], 0.25f);
  // A damaged record of the linked segments is DataLoss naming the file; nothing changes.
  auto other = Make(Config(8, 80, 100, 3000, dir.Sub("ssd4")));
  Step(*other, {1, 2, 3}, 1);
  {
    const std::string seg = dir.path() + "/b/ssd/big.00000.rows";
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    auto slots = internal::ReadNpy(dir.path() + "/b/ssd_slots.npy");
    ASSERT_TRUE(slots.ok() && slots->NumElements() > 0);
    int64_t last = 0;
    std::memcpy(&last, slots->data.data() + slots->data.size() - 8, 8);
    const int64_t record = (8 * 2 + 2 + 1) * 4;  // row, Adagrad slots, history, CRC
    f.seekp(4096 + last * record + 5);
    f.put('\x55');
  }
  const Status bad = RestoreTable(*other, dir.path() + "/b");
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
  EXPECT_NE(std::string(bad.message()).find("big.00000.rows"), std::string::npos) << bad;
  EXPECT_EQ(other->size(), 3);
}

// An SSD tier on another file system than the checkpoint cannot be hard-linked: the save copies
// its rows (version-2 entry, no ssd_segments) and restores as before.
TEST(TieredCheckpoint, ADiskThatFillsWhileALinkedCheckpointHoldsSlotsFailsThePlanNotTheSwap) {
  // Rows coming up from slots a linked checkpoint holds leave them occupied (kept until the next
  // full save). The swap's file reservation must count them: else the swap finds no room for
  // the rows going down only after the rows coming up have left their slots, and a disk that
  // cannot take a new file then breaks the table instead of failing the batch.
  testing::TierTestDir dir;
  const std::string folder = dir.Sub("ssd");
  TableConfig c = Config(1024, 26, 20, 40000, folder);  // 4 KiB records: 16352 a 64 MiB file
  auto t = Make(c);
  ASSERT_NE(t, nullptr);
  constexpr int64_t kFilled = 16352 - 8;  // the first file, all but 8 slots
  std::vector<int64_t> keys(kFilled);
  for (int64_t k = 0; k < kFilled; ++k) keys[k] = k;
  ASSERT_TRUE(internal::PrefillSsd(*t, keys).ok());
  const Status saved = LinkedSave(*t, dir.path() + "/ckpt");
  ASSERT_TRUE(saved.ok()) << saved;
  std::filesystem::remove_all(folder);  // the open file stays usable; no new file can be made
  Status failed;
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 50 && failed.ok(); ++step) {
    // Rows from the prefilled (held) slots come up; the host's go down to new slots.
    std::vector<int64_t> batch = Batch(rng, 12, kFilled);
    std::vector<uint32_t> rows(batch.size());
    failed = t->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  }
  ASSERT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_NE(failed.message().find(folder), std::string_view::npos) << failed;
  const internal::TierStats st = internal::GetTierStats(*t);
  EXPECT_EQ(st.device_rows + st.host_rows + st.ssd_rows, t->size());
  auto snap = t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(static_cast<int64_t>(snap->keys.size()), t->size());
}

TEST(TieredCheckpoint, SsdTierOnAnotherFileSystemIsCopied) {
  testing::TierTestDir dir;
  std::string shm = "/dev/shm/tiered_ckpt_XXXXXX";
  struct stat a = {}, b = {};
  if (::mkdtemp(shm.data()) == nullptr || stat(shm.c_str(), &a) != 0 ||
      stat(dir.path().c_str(), &b) != 0 || a.st_dev == b.st_dev) {
    if (shm.find("XXXXXX") == std::string::npos) std::filesystem::remove_all(shm);
    GTEST_SKIP() << "no second file system at /dev/shm";
  }
  {
    auto t = Make(Config(8, 80, 100, 3000, shm));
    std::mt19937_64 rng(10);
    for (int step = 1; step <= 30; ++step) Step(*t, Batch(rng, 30, 2000), step);
    const Status saved = LinkedSave(*t, dir.path() + "/ckpt");
    ASSERT_TRUE(saved.ok()) << saved;
    const nlohmann::json m = ReadManifest(dir.path() + "/ckpt");
    EXPECT_FALSE(m["table"].contains("ssd_segments")) << m.dump();
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/ckpt/ssd"));
    EXPECT_EQ(m["table"]["files"]["rows"]["shape"][0].get<int64_t>(), t->size());
    auto back = Make(Config(8, 80, 100, 3000, dir.Sub("ssd2")));
    const Status restored = RestoreTable(*back, dir.path() + "/ckpt");
    ASSERT_TRUE(restored.ok()) << restored;
    ExpectSameRows(*t, *back);
  }
  std::filesystem::remove_all(shm);
}

// A restore into an empty table reads the rows once, checking them as it loads (rows file CRC32C
// over the pieces in order, SSD records by their own CRC32C): a bad last piece is DataLoss naming
// the file and leaves the table empty, its host and SSD slots free, and usable.
TEST(TieredCheckpoint, OnePassRestoreIntoAnEmptyTableLeavesItEmptyOnACorruptLastPiece) {
  testing::TierTestDir dir;
  auto t = Make(Config(8, 80, 100, 3000, dir.Sub("ssd")));
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 30; ++step) Step(*t, Batch(rng, 30, 2000), step);
  const std::string ckpt = dir.path() + "/ckpt";
  ASSERT_TRUE(SaveTable(*t, ckpt).ok());
  char saved = 0;
  auto flip = [&](const std::string& file, std::streamoff at, bool restore) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    f.seekg(at, at < 0 ? std::ios::end : std::ios::beg);
    if (!restore) saved = static_cast<char>(f.get());
    f.seekp(at, at < 0 ? std::ios::end : std::ios::beg);
    f.put(restore ? saved : static_cast<char>(saved ^ 0x5a));
  };
  flip(ckpt + "/rows.npy", -3, false);
  auto back = Make(Config(8, 80, 100, 3000, dir.Sub("ssd2")));
  const Status s = RestoreTable(*back, ckpt);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("rows.npy"), std::string::npos) << s;
  EXPECT_EQ(back->size(), 0);
  const internal::TierStats emptied = internal::GetTierStats(*back);
  EXPECT_EQ(emptied.device_rows + emptied.host_rows + emptied.ssd_rows, 0);
  // Repaired, the same table restores and trains on as the original.
  flip(ckpt + "/rows.npy", -3, true);
  const Status again = RestoreTable(*back, ckpt);
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_GT(internal::GetTierStats(*back).ssd_rows, 0);
  for (int step = 31; step <= 40; ++step) {
    const auto batch = Batch(rng, 30, 2000);
    const auto want = Step(*t, batch, step);
    const auto got = Step(*back, batch, step);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  }
  // The same with the SSD rows in linked segments: a bad record of the last one.
  ASSERT_TRUE(LinkedSave(*t, dir.path() + "/linked").ok());
  auto slots = internal::ReadNpy(dir.path() + "/linked/ssd_slots.npy");
  ASSERT_TRUE(slots.ok() && slots->NumElements() > 0);
  int64_t last = 0;
  std::memcpy(&last, slots->data.data() + slots->data.size() - 8, 8);
  flip(dir.path() + "/linked/ssd/big.00000.rows", 4096 + last * (8 * 2 + 2 + 1) * 4 + 2, false);
  auto fresh = Make(Config(8, 80, 100, 3000, dir.Sub("ssd3")));
  const Status bad = RestoreTable(*fresh, dir.path() + "/linked");
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
  EXPECT_NE(std::string(bad.message()).find("big.00000.rows"), std::string::npos) << bad;
  EXPECT_EQ(fresh->size(), 0);
  const internal::TierStats none = internal::GetTierStats(*fresh);
  EXPECT_EQ(none.device_rows + none.host_rows + none.ssd_rows, 0);
}

int64_t StatusKb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  }
  return -1;
}

// A table of 250k rows of dim 32 + Adagrad slot (64 MB of rows), 1k on the device and 2k in host
// memory, the rest on SSD: its restore streams the rows into the tiers, so the process's peak
// RSS rises by far less than the rows (an in-memory restore holds all 64 MB at once).
TEST(TieredCheckpoint, StreamedRestoreOfATableOnSsdKeepsMemoryBounded) {
  testing::TierTestDir dir;
  constexpr int64_t kKeys = 250000;
  constexpr int kDim = 32;
  auto t = Make(Config(kDim, 1000, 2000, kKeys + 1000, dir.Sub("ssd")));
  std::vector<int64_t> keys(kKeys);
  for (int64_t i = 0; i < kKeys; ++i) keys[i] = (i * 7919) % kKeys;
  ASSERT_TRUE(internal::PrefillSsd(*t, keys).ok());
  std::mt19937_64 rng(6);
  for (int step = 1; step <= 20; ++step) Step(*t, Batch(rng, 200, kKeys), step);
  const std::string ckpt = dir.path() + "/ckpt";
  ASSERT_TRUE(SaveTable(*t, ckpt).ok());
  auto back = Make(Config(kDim, 1000, 2000, kKeys + 1000, dir.Sub("ssd2")));
  const int64_t rows_kb = kKeys * kDim * 2 * 4 / 1024;
  const int64_t before_kb = StatusKb("VmRSS:");
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";  // VmHWM := VmRSS
  }
  if (StatusKb("VmHWM:") > before_kb + 4096) GTEST_SKIP() << "/proc/self/clear_refs not allowed";
  const Status s = RestoreTable(*back, ckpt);
  ASSERT_TRUE(s.ok()) << s;
  // The peak rises by the keys (2 MB, and a sorted copy), the key index and 4 MiB pieces. Not
  // under AddressSanitizer: its shadow memory and quarantine of freed blocks (a 4 MiB piece freed
  // is kept, not reused) make the process's RSS say nothing about what the restore holds.
  const int64_t peak_kb = StatusKb("VmHWM:");
  if (!kUnderAddressSanitizer) {
    EXPECT_LT(peak_kb - before_kb, rows_kb / 3)
        << "restore peak RSS rose by " << peak_kb - before_kb << " kB; the rows are " << rows_kb
        << " kB";
  }
  EXPECT_EQ(back->size(), kKeys);
  for (int step = 21; step <= 40; ++step) {
    const auto batch = Batch(rng, 200, kKeys);
    const auto want = Step(*t, batch, step);
    const auto got = Step(*back, batch, step);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "step " << step;
  }
  ExpectSameRows(*t, *back);
}

}  // namespace
}  // namespace recsdk
