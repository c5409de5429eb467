// tiered_checkpoint_test.cc: checkpoints of tables whose rows live mostly on the SSD tier (issue
// 29). A save writes them in storage order (the SSD files read front to back; format version 2,
// "row_order": "storage"); a restore puts them back key by key (into a tiered or a flat table),
// streams them into the tiers with bounded memory, and training then goes on bitwise as if never
// stopped. A manifest of an unknown format version is refused naming the version.
#include <cmath>
#include <cstring>
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
  SetVersion(ckpt, 3);
  const Status refused = RestoreTable(*back, ckpt);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(std::string(refused.message()).find("format version 3"), std::string::npos) << refused;
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
