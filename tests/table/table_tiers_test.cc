// table_tiers_test.cc: a table with host (and SSD) tiers behaves as the same table with every row
// on the device: the same lookups, updates, admission, eviction, export and snapshots give
// bitwise the same rows (src/table/table_tiers.cc); and the tiers' own rules: the "two
// consecutive batches" error, full tiers, and rows of batches in flight never moving.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "recsdk/table.h"
#include "src/device/tier_memory.h"
#include "src/table/tier_lease.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk {
namespace {

TableConfig Flat(int64_t vocab, bool evict = false) {
  TableConfig c;
  c.name = "user_table";
  c.dim = 8;
  c.device_vocabulary_size = vocab;
  c.initializer = Initializer::Uniform(-1, 1, 7);
  if (evict) {
    c.access_threshold = 2;
    c.eviction_threshold = 50;
  }
  return c;
}

TableConfig Tiered(int64_t device, int64_t host, int64_t ssd, const std::string& dir,
                   bool evict = false) {
  TableConfig c = Flat(device, evict);
  c.host_vocabulary_size = host;
  c.ssd_vocabulary_size = ssd;
  if (ssd > 0) c.ssd_data_path = {dir};
  return c;
}

std::unique_ptr<EmbeddingTable> Make(const TableConfig& c, const SparseOptimizerConfig& o) {
  auto t = EmbeddingTable::Create(c, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Batch: unique keys drawn from a skewed stream, so rows keep moving between tiers.
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

// Step: one training step on `t` as the graph does it: Resolve, gather, a gradient that depends
// on the embedding, apply (by id or by address). Returns the gathered embeddings.
std::vector<float> Step(EmbeddingTable& t, const std::vector<int64_t>& keys, int64_t step,
                        int64_t time, bool by_address) {
  std::vector<uint32_t> rows(keys.size());
  std::vector<int64_t> times(keys.size(), time);
  const Status s = t.Resolve(keys, {}, times, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> emb(keys.size() * static_cast<size_t>(t.dim()));
  EXPECT_TRUE(t.Gather(rows, absl::MakeSpan(emb)).ok());
  std::vector<float> grads(emb.size());
  for (size_t i = 0; i < emb.size(); ++i)
    grads[i] = 0.5f * emb[i] - 0.01f * static_cast<float>(i % 7);
  if (by_address) {
    std::vector<float*> addr(rows.size());
    EXPECT_TRUE(t.RowAddresses(rows, absl::MakeSpan(addr)).ok());
    EXPECT_TRUE(t.ApplyGradientsByAddress(addr, grads, step).ok());
  } else {
    EXPECT_TRUE(t.ApplyGradients(rows, grads, step).ok());
  }
  return emb;
}

void ExpectSameSnapshot(EmbeddingTable& a, EmbeddingTable& b) {
  auto sa = a.Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  auto sb = b.Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(sa->keys, sb->keys);
  ASSERT_EQ(sa->rows.size(), sb->rows.size());
  EXPECT_EQ(std::memcmp(sa->rows.data(), sb->rows.data(), sa->rows.size() * sizeof(float)), 0);
  EXPECT_EQ(sa->timestamps, sb->timestamps);
  EXPECT_EQ(sa->pending_keys, sb->pending_keys);
  EXPECT_EQ(sa->pending_counts, sb->pending_counts);
}

struct Layout {
  const char* name;
  int64_t device, host, ssd;
  SparseOptimizerConfig optimizer;
  bool by_address;
  bool evict;
};

// PrintTo: the layout's name (gtest would otherwise print the struct's bytes, padding included).
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class TierTransparency : public ::testing::TestWithParam<Layout> {};

// The same 120 batches through a table with every row on the device and through the tiered one:
// every lookup reads bitwise the same embeddings, and the final tables are bitwise equal.
TEST_P(TierTransparency, SameRowsAsAllOnDevice) {
  const Layout& l = GetParam();
  testing::TierTestDir dir;
  auto flat = Make(Flat(l.device + l.host + l.ssd, l.evict), l.optimizer);
  auto tiered = Make(Tiered(l.device, l.host, l.ssd, dir.Sub("ssd"), l.evict), l.optimizer);
  ASSERT_NE(flat, nullptr);
  ASSERT_NE(tiered, nullptr);
  ASSERT_TRUE(internal::IsTiered(*tiered));
  std::mt19937_64 rng(3);
  for (int step = 1; step <= 120; ++step) {
    const auto keys = Batch(rng, 12, 150);
    const auto a = Step(*flat, keys, step, step, l.by_address);
    const auto b = Step(*tiered, keys, step, step, l.by_address);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
    if (step % 30 == 0) {
      // Delta snapshots: the rows changed since the last snapshot, wherever they are now (the
      // tracking moves with the rows; SSD rows keep theirs in a bit apiece).
      const auto kind =
          step == 30 ? EmbeddingTable::SnapshotKind::kFull : EmbeddingTable::SnapshotKind::kDelta;
      auto da = flat->Snapshot(kind);
      auto db = tiered->Snapshot(kind);
      ASSERT_TRUE(da.ok() && db.ok());
      EXPECT_EQ(da->keys, db->keys) << "step " << step;
      ASSERT_EQ(da->rows.size(), db->rows.size()) << "step " << step;
      EXPECT_EQ(std::memcmp(da->rows.data(), db->rows.data(), da->rows.size() * sizeof(float)), 0);
      EXPECT_EQ(da->removed_keys, db->removed_keys);
    }
    if (l.evict && step % 40 == 0) {
      auto ea = flat->EvictStale();
      auto eb = tiered->EvictStale();
      ASSERT_TRUE(ea.ok() && eb.ok());
      EXPECT_EQ(*ea, *eb);
    }
  }
  EXPECT_EQ(flat->size(), tiered->size());
  ExpectSameSnapshot(*flat, *tiered);
  const internal::TierStats st = internal::GetTierStats(*tiered);
  EXPECT_GT(st.promoted, 0);
  EXPECT_GT(st.demoted, 0);
  EXPECT_LE(st.device_rows, l.device);
  if (l.ssd > 0) {
    EXPECT_GT(st.ssd_rows, 0);
  }
  EXPECT_EQ(st.device_rows + st.host_rows + st.ssd_rows, tiered->size());
  // Every key reads the same row wherever it lives.
  auto snap = flat->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(snap.ok());
  for (int64_t k : snap->keys) {
    auto ra = flat->ReadRow(k);
    auto rb = tiered->ReadRow(k);
    ASSERT_TRUE(ra.ok() && rb.ok()) << k;
    EXPECT_EQ(*ra, *rb) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TierTransparency,
    ::testing::Values(
        Layout{"host_sgd", 30, 200, 0, SparseOptimizerConfig::SGD(0.1f), false, false},
        Layout{"host_adagrad_addr", 30, 200, 0, SparseOptimizerConfig::AdagradByAddress(0.1f), true,
               false},
        Layout{"ssd_lazyadam", 26, 20, 200, SparseOptimizerConfig::LazyAdam(0.01f), false, false},
        Layout{"ssd_evict", 26, 20, 200, SparseOptimizerConfig::SGD(0.1f), false, true}),
    [](const auto& info) { return std::string(info.param.name); });

// internal::PrefillSsd (issue 29's bulk path to a table larger than memory): rows written
// straight into the SSD tier hold what a first use would have made, so training reads bitwise
// the same rows as a table that created them lazily; the rules refuse what it cannot do.
TEST(TieredTable, PrefillSsdGivesTheRowsAFirstUseWould) {
  testing::TierTestDir dir;
  const auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto flat = Make(Flat(400), opt);
  auto tiered = Make(Tiered(26, 20, 300, dir.Sub("ssd")), opt);
  ASSERT_NE(flat, nullptr);
  ASSERT_NE(tiered, nullptr);
  EXPECT_EQ(internal::PrefillSsd(*flat, {{1, 2}}).code(), absl::StatusCode::kFailedPrecondition);
  // Keys 0..149 in a scattered order, in two calls, with duplicates and a repeat: 150 rows.
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 150; ++i) keys.push_back((i * 97) % 150);
  std::vector<int64_t> first(keys.begin(), keys.begin() + 100);
  first.push_back(keys[3]);
  ASSERT_TRUE(internal::PrefillSsd(*tiered, first).ok());
  ASSERT_TRUE(internal::PrefillSsd(*tiered, keys).ok());
  EXPECT_EQ(tiered->size(), 150);
  EXPECT_EQ(internal::GetTierStats(*tiered).ssd_rows, 150);
  // More rows than the SSD tier has room for: refused whole, the table unchanged.
  std::vector<int64_t> many;
  for (int64_t k = 1000; k < 1200; ++k) many.push_back(k);
  const Status full = internal::PrefillSsd(*tiered, many);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("ssd_vocabulary_size"), std::string_view::npos) << full;
  EXPECT_EQ(tiered->size(), 150);
  std::mt19937_64 rng(5);
  for (int step = 1; step <= 60; ++step) {
    // Keys up to 170: some prefilled, some made lazily on the device.
    const auto batch = Batch(rng, 12, 170);
    const auto a = Step(*flat, batch, step, step, false);
    const auto b = Step(*tiered, batch, step, step, false);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
  }
  auto snap = flat->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(snap.ok());
  for (int64_t k : snap->keys) {
    auto ra = flat->ReadRow(k);
    auto rb = tiered->ReadRow(k);
    ASSERT_TRUE(ra.ok() && rb.ok()) << k;
    EXPECT_EQ(*ra, *rb) << k;
  }
  // A prefilled key no batch used holds its first-use row: the flat table makes it now.
  std::vector<int64_t> unused;
  for (int64_t k = 0; k < 150; ++k) {
    if (!std::binary_search(snap->keys.begin(), snap->keys.end(), k)) unused.push_back(k);
  }
  ASSERT_FALSE(unused.empty());
  std::vector<uint32_t> rows(unused.size());
  ASSERT_TRUE(flat->Resolve(unused, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  for (int64_t k : unused) {
    auto ra = flat->ReadRow(k);
    auto rb = tiered->ReadRow(k);
    ASSERT_TRUE(ra.ok() && rb.ok()) << k;
    EXPECT_EQ(*ra, *rb) << k;
  }
}

// A disk that fills while rows go down to SSD (here the folder vanishes, so the table's second
// SSD file cannot be made) fails the Resolve before anything changed: the index still names only
// allocated slots, so every row reads back (a snapshot) and the tiers' counts add up. Before the
// fix the swap freed the SSD slots of the rows coming up, then failed to make the file, and the
// next snapshot read unallocated slots (issue 29).
TEST(TieredTable, SsdFileThatCannotBeMadeMidTrainingChangesNothing) {
  testing::TierTestDir dir;
  const std::string folder = dir.Sub("ssd");
  TableConfig c = Tiered(26, 20, 40000, folder);
  c.dim = 1024;  // 4 KiB rows: files of 16352 rows, quick to fill
  auto t = Make(c, SparseOptimizerConfig::SGD(0.1f));
  ASSERT_NE(t, nullptr);
  constexpr int64_t kFilled = 16352 - 8;  // the first file, all but 8 slots
  std::vector<int64_t> keys(kFilled);
  for (int64_t k = 0; k < kFilled; ++k) keys[k] = k;
  ASSERT_TRUE(internal::PrefillSsd(*t, keys).ok());
  std::filesystem::remove_all(folder);  // the open file stays usable; no new file can be made
  Status failed;
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 50 && failed.ok(); ++step) {
    // Half the keys from the prefilled rows (they come up from SSD), half new.
    std::vector<int64_t> batch = Batch(rng, 6, kFilled);
    for (int64_t k : Batch(rng, 6, 1000)) batch.push_back(kFilled + 100 * step + k % 100);
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    std::vector<uint32_t> rows(batch.size());
    failed = t->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  }
  ASSERT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_NE(failed.message().find("ssd tier"), std::string_view::npos) << failed;
  EXPECT_NE(failed.message().find(folder), std::string_view::npos) << failed;
  const internal::TierStats st = internal::GetTierStats(*t);
  EXPECT_EQ(st.device_rows + st.host_rows + st.ssd_rows, t->size());
  auto snap = t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(static_cast<int64_t>(snap->keys.size()), t->size());
}

// Every descriptor of this process open on a file under `folder` now refuses writes: each is
// replaced by a read-only descriptor of the same file, so reads still work and the next
// pwritev fails with EBADF, as a disk failing writes would.
int FailWritesUnder(const std::string& folder) {
  int replaced = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target.string().rfind(folder, 0) != 0) continue;
    const int fd = std::stoi(entry.path().filename().string());
    const int ro = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
    if (ro < 0) continue;
    if (::dup2(ro, fd) == fd) ++replaced;
    ::close(ro);
  }
  return replaced;
}

TEST(TieredTable, SsdWriteFailingMidSwapMakesEveryLaterUseFailInsteadOfServingLostRows) {
  // An SSD write that fails halfway through a swap (after the rows coming up have left their
  // slots) leaves the index naming slots that never got their rows. The table must then refuse
  // every later lookup and snapshot with one error that says to restore, not serve or save them.
  testing::TierTestDir dir;
  const std::string folder = dir.Sub("ssd");
  auto t = Make(Tiered(26, 20, 4000, folder), SparseOptimizerConfig::SGD(0.1f));
  ASSERT_NE(t, nullptr);
  std::mt19937_64 rng(3);
  for (int step = 1; step <= 20; ++step) {
    std::vector<int64_t> batch = Batch(rng, 8, 400);
    std::vector<uint32_t> rows(batch.size());
    ASSERT_TRUE(t->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  }
  ASSERT_GT(internal::GetTierStats(*t).ssd_rows, 0);
  ASSERT_GT(FailWritesUnder(std::filesystem::canonical(folder).string()), 0);
  Status failed;
  for (int step = 21; step <= 60 && failed.ok(); ++step) {
    std::vector<int64_t> batch = Batch(rng, 8, 400);
    std::vector<uint32_t> rows(batch.size());
    failed = t->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  }
  ASSERT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
  EXPECT_NE(failed.message().find("restore the last checkpoint"), std::string_view::npos) << failed;
  // Later uses: the same error, whatever they touch.
  std::vector<int64_t> again = Batch(rng, 8, 400);
  std::vector<uint32_t> rows(again.size());
  EXPECT_EQ(t->Resolve(again, {}, {}, LookupMode::kEval, absl::MakeSpan(rows)), failed);
  auto snap = t->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  EXPECT_EQ(snap.status(), failed);
}

TEST(TieredTable, SnapshotsMoveBetweenFlatAndTieredTables) {
  testing::TierTestDir dir;
  const auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto flat = Make(Flat(300), opt);
  auto tiered = Make(Tiered(24, 16, 300, dir.Sub("ssd")), opt);
  std::mt19937_64 rng(5);
  for (int step = 1; step <= 40; ++step) {
    const auto keys = Batch(rng, 10, 200);
    Step(*flat, keys, step, step, false);
    Step(*tiered, keys, step, step, false);
  }
  // Tiered -> a fresh flat table, and flat -> a fresh tiered one: the same rows.
  // A streamed snapshot reads the same rows out of every tier.
  struct Sink final : SnapshotRowSink {
    std::vector<float> rows;
    Status Begin(const TableSnapshot&) override { return absl::OkStatus(); }
    Status Rows(absl::Span<const float> r) override {
      rows.insert(rows.end(), r.begin(), r.end());
      return absl::OkStatus();
    }
  } sink;
  auto streamed = tiered->SnapshotToSink(EmbeddingTable::SnapshotKind::kFullKeepTracking, sink);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  auto from_tiered = tiered->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  ASSERT_TRUE(from_tiered.ok()) << from_tiered.status();
  // The streamed one is in storage order (device, host, then SSD slots: the SSD files are read
  // front to back); key by key it holds the same rows as the key-ordered Snapshot.
  EXPECT_TRUE(streamed->storage_order);
  EXPECT_FALSE(from_tiered->storage_order);
  ASSERT_EQ(streamed->keys.size(), from_tiered->keys.size());
  ASSERT_EQ(sink.rows.size(), from_tiered->rows.size());
  EXPECT_FALSE(std::is_sorted(streamed->keys.begin(), streamed->keys.end()));
  const size_t rf = sink.rows.size() / streamed->keys.size();
  for (size_t i = 0; i < streamed->keys.size(); ++i) {
    const auto at =
        std::lower_bound(from_tiered->keys.begin(), from_tiered->keys.end(), streamed->keys[i]);
    ASSERT_TRUE(at != from_tiered->keys.end() && *at == streamed->keys[i]) << streamed->keys[i];
    const size_t j = static_cast<size_t>(at - from_tiered->keys.begin());
    EXPECT_EQ(std::memcmp(sink.rows.data() + i * rf, from_tiered->rows.data() + j * rf, rf * 4), 0)
        << "key " << streamed->keys[i];
  }
  auto flat2 = Make(Flat(300), opt);
  ASSERT_TRUE(flat2->LoadSnapshot(*from_tiered).ok());
  ExpectSameSnapshot(*flat, *flat2);
  auto from_flat = flat->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  ASSERT_TRUE(from_flat.ok());
  testing::TierTestDir dir2;
  auto tiered2 = Make(Tiered(24, 16, 300, dir2.Sub("ssd")), opt);
  const Status loaded = tiered2->LoadSnapshot(*from_flat);
  ASSERT_TRUE(loaded.ok()) << loaded;
  ExpectSameSnapshot(*flat, *tiered2);
  // Training goes on identically after the restore.
  for (int step = 41; step <= 60; ++step) {
    const auto keys = Batch(rng, 10, 200);
    const auto a = Step(*flat, keys, step, step, false);
    const auto b = Step(*tiered2, keys, step, step, false);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step;
  }
  // A delta on top of the tiered table: rows changed since the last snapshot.
  auto delta = flat->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
  ASSERT_TRUE(delta.ok());
  ASSERT_TRUE(tiered->LoadSnapshot(*from_flat).ok());
  ASSERT_TRUE(tiered->LoadSnapshot(*delta).ok());
  ExpectSameSnapshot(*flat, *tiered);
}

// Issue 30: a snapshot whose rows need SSD files the disk cannot take (here the file-size limit
// refuses them; a full disk does the same) fails before anything changes: the table keeps its
// rows. It used to be emptied first and then fail.
TEST(TieredTable, LoadSnapshotThatCannotMakeItsSsdFilesChangesNothing) {
  testing::TierTestDir dir;
  const auto opt = SparseOptimizerConfig::Adagrad(0.1f);
  auto source = Make(Flat(3000), opt);
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 100; ++step) Step(*source, Batch(rng, 10, 100000), step, step, false);
  auto big = source->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_GT(big->keys.size(), 24u + 16u);  // past the device and host tiers: SSD rows
  auto table = Make(Tiered(24, 16, 3000, dir.Sub("ssd")), opt);
  for (int step = 1; step <= 2; ++step) Step(*table, Batch(rng, 10, 1000), step, step, false);
  auto before = table->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(before.ok());

  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status loaded = table->LoadSnapshot(*big);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted) << loaded;
  EXPECT_NE(std::string(loaded.message()).find("ssd_data_path"), std::string::npos) << loaded;
  auto after = table->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->keys, before->keys);
  ASSERT_EQ(after->rows.size(), before->rows.size());
  EXPECT_EQ(std::memcmp(after->rows.data(), before->rows.data(), after->rows.size() * 4), 0);
  // With room again, the same snapshot loads.
  ASSERT_TRUE(table->LoadSnapshot(*big).ok());
  EXPECT_EQ(table->size(), static_cast<int64_t>(big->keys.size()));
}

TEST(TieredTable, ExportAndImportCoverEveryTier) {
  testing::TierTestDir dir;
  const auto opt = SparseOptimizerConfig::SGD(0.1f);
  auto flat = Make(Flat(300), opt);
  auto tiered = Make(Tiered(20, 20, 300, dir.Sub("ssd")), opt);
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 30; ++step) {
    const auto keys = Batch(rng, 8, 200);
    Step(*flat, keys, step, step, false);
    Step(*tiered, keys, step, step, false);
  }
  const std::string a = dir.Sub("a"), b = dir.Sub("b");
  ASSERT_TRUE(flat->ExportNpy(a + "/k.npy", a + "/v.npy").ok());
  ASSERT_TRUE(tiered->ExportNpy(b + "/k.npy", b + "/v.npy").ok());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(slurp(a + "/k.npy"), slurp(b + "/k.npy"));
  EXPECT_EQ(slurp(a + "/v.npy"), slurp(b + "/v.npy"));
  // Import into a tiered table too small for the device alone: rows spill to host and SSD.
  testing::TierTestDir dir2;
  auto imported = Make(Tiered(20, 20, 300, dir2.Sub("ssd")), opt);
  const Status s = imported->ImportNpy(a + "/k.npy", a + "/v.npy");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(imported->size(), flat->size());
  const std::string c = dir.Sub("c");
  ASSERT_TRUE(imported->ExportNpy(c + "/k.npy", c + "/v.npy").ok());
  EXPECT_EQ(slurp(a + "/v.npy"), slurp(c + "/v.npy"));
  EXPECT_GT(internal::GetTierStats(*imported).ssd_rows, 0);
}

TEST(TieredTable, EvictedKeysLeaveEveryTier) {
  testing::TierTestDir dir;
  auto t =
      Make(Tiered(8, 8, 100, dir.Sub("ssd"), /*evict=*/true), SparseOptimizerConfig::SGD(0.1f));
  // access_threshold 2: each key twice in its batch's counts. Keys 0..39 at time 0, then 40..47
  // at time 100, which leaves 0..39 (spread over device, host and SSD) stale.
  auto resolve = [&](std::vector<int64_t> keys, int64_t time) {
    std::vector<uint32_t> rows(keys.size()), counts(keys.size(), 2);
    std::vector<int64_t> times(keys.size(), time);
    const Status s = t->Resolve(keys, counts, times, LookupMode::kTrain, absl::MakeSpan(rows));
    EXPECT_TRUE(s.ok()) << s;
  };
  for (int64_t b = 0; b < 10; ++b) resolve({4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3}, 0);
  resolve({40, 41, 42, 43}, 100);
  resolve({44, 45, 46, 47}, 100);
  const auto before = internal::GetTierStats(*t);
  EXPECT_GT(before.ssd_rows, 0);
  EXPECT_GT(before.host_rows, 0);
  auto evicted = t->EvictStale();
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, 40);
  EXPECT_EQ(t->size(), 8);
  for (int64_t k = 0; k < 40; ++k) EXPECT_FALSE(t->ReadRow(k).ok()) << k;
  const auto after = internal::GetTierStats(*t);
  EXPECT_EQ(after.device_rows + after.host_rows + after.ssd_rows, 8);
  EXPECT_EQ(after.ssd_rows, 0);
  // The freed slots of every tier are reused.
  for (int64_t b = 0; b < 10; ++b)
    resolve({100 + 4 * b, 101 + 4 * b, 102 + 4 * b, 103 + 4 * b}, 200);
  EXPECT_EQ(t->size(), 48);
}

// The spec: with host (or SSD) tiers the device tier holds at least the unique keys of two
// consecutive batches; less is an error naming the table, the number and the setting.
TEST(TieredTable, DeviceSmallerThanTwoBatchesIsAnError) {
  auto t = Make(Tiered(10, 100, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  std::vector<uint32_t> rows(6);
  std::vector<int64_t> first = {1, 2, 3, 4, 5, 6}, second = {7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(t->Resolve(first, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  const Status s = t->Resolve(second, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("user_table"), std::string::npos) << s;
  EXPECT_NE(s.message().find("device_vocabulary_size 10"), std::string::npos) << s;
  EXPECT_NE(s.message().find("12 unique keys of two consecutive batches"), std::string::npos) << s;
  // Nothing changed: the first batch's keys are still there, the second's are not, and a batch
  // that fits still resolves.
  EXPECT_EQ(t->size(), 6);
  std::vector<uint32_t> rows4(4);
  ASSERT_TRUE(t->Resolve({7, 8, 9, 10}, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows4)).ok());
  EXPECT_EQ(t->size(), 10);
}

// Rows of the batch in flight (and the one before) never move while the next batch is resolved:
// their addresses stay valid, with the same contents.
TEST(TieredTable, RowsOfTheLastTwoBatchesStayPut) {
  testing::TierTestDir dir;
  auto t = Make(Tiered(24, 30, 200, dir.Sub("ssd")), SparseOptimizerConfig::SGD(0.1f));
  std::mt19937_64 rng(11);
  std::vector<std::pair<std::vector<int64_t>, std::vector<float*>>> last;
  for (int step = 0; step < 60; ++step) {
    const auto keys = Batch(rng, 10, 150);
    std::vector<uint32_t> rows(keys.size());
    ASSERT_TRUE(t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
    std::vector<float*> addr(rows.size());
    ASSERT_TRUE(t->RowAddresses(rows, absl::MakeSpan(addr)).ok());
    last.emplace_back(keys, addr);
    if (last.size() > 2) last.erase(last.begin());
    for (const auto& [ks, as] : last) {
      for (size_t i = 0; i < ks.size(); ++i) {
        auto row = t->ReadRow(ks[i]);
        ASSERT_TRUE(row.ok());
        ASSERT_EQ(std::memcmp(row->data(), as[i], row->size() * sizeof(float)), 0)
            << "key " << ks[i] << " moved at step " << step;
      }
    }
  }
}

// A key stage's lease: rows stay pinned until released, and a full device tells the stage to
// wait (Unavailable) while it holds batches that are not consumed yet.
TEST(TieredTable, LeasesHoldRowsUntilReleased) {
  auto t = Make(Tiered(12, 100, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  int owner = 0;
  std::vector<uint32_t> rows(4);
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<int64_t> keys = {4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3};
    ASSERT_TRUE(internal::ResolveWithLease(*t, keys, {}, {}, LookupMode::kTrain,
                                           absl::MakeSpan(rows), {&owner, b})
                    .ok());
  }
  std::vector<int64_t> next = {20, 21, 22, 23};
  Status s = internal::ResolveWithLease(*t, next, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows),
                                        {&owner, 3});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(t->size(), 12);
  internal::ReleaseLeases(*t, &owner, 1);  // batch 0 is done
  s = internal::ResolveWithLease(*t, next, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows),
                                 {&owner, 3});
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(internal::GetTierStats(*t).host_rows, 4);
  // Only batch 0's keys went down.
  for (int64_t k = 4; k < 12; ++k) {
    EXPECT_NE(t->FindRow(k), EmbeddingTable::kDefaultRow) << k;
  }
}

TEST(TieredTable, ConfigRules) {
  TableConfig c = Flat(100);
  c.use_dynamic_expansion = true;
  c.host_vocabulary_size = 10;
  Status s = c.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("device only"), std::string::npos) << s;
  c.host_vocabulary_size = 0;
  c.access_threshold = 0;
  c.eviction_threshold = 10;
  s = c.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("excludes eviction"), std::string::npos) << s;
  // A full host tier without SSD: ResourceExhausted naming the tier, and the table stays usable.
  auto t = Make(Tiered(8, 4, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  std::vector<uint32_t> rows(4);
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<int64_t> keys = {4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3};
    ASSERT_TRUE(t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  }
  std::vector<int64_t> more = {20, 21, 22, 23};
  s = t->Resolve(more, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(t->size(), 12);
  std::vector<int64_t> old = {0, 1, 2, 3};
  EXPECT_TRUE(t->Resolve(old, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
}

// FakeDeviceMemory: device tier memory in host memory whose compute fence the test completes
// (a device whose step is still running when the key stage releases its rows).
class FakeDeviceMemory final : public internal::DeviceTierMemory {
 public:
  class Fence final : public internal::Event {
   public:
    Fence(const bool* done, int* waits) : done_(done), waits_(waits) {}
    bool Done() const override { return *done_; }
    Status Wait(absl::Duration) const override {
      ++*waits_;
      return *done_ ? absl::OkStatus() : absl::DeadlineExceededError("fake fence not passed");
    }

   private:
    const bool* done_;
    int* waits_;
  };
  FakeDeviceMemory(uint32_t rows, int row_floats)
      : rows_(static_cast<size_t>(rows) * row_floats), capacity_(rows), row_floats_(row_floats) {}
  float* rows() const override { return const_cast<float*>(rows_.data()); }
  int row_floats() const override { return row_floats_; }
  uint32_t capacity() const override { return capacity_; }
  Status Read(absl::Span<const uint32_t> slots, float* out) override {
    ++reads;
    for (size_t i = 0; i < slots.size(); ++i) {
      std::memcpy(out + i * row_floats_, rows() + slots[i] * row_floats_, row_floats_ * 4);
    }
    return absl::OkStatus();
  }
  Status Write(absl::Span<const uint32_t> slots, const float* in) override {
    ++writes;
    for (size_t i = 0; i < slots.size(); ++i) {
      std::memcpy(rows() + slots[i] * row_floats_, in + i * row_floats_, row_floats_ * 4);
    }
    return absl::OkStatus();
  }
  StatusOr<std::shared_ptr<internal::Event>> ComputeFence() override {
    return std::shared_ptr<internal::Event>(std::make_shared<Fence>(&done, &waits));
  }
  bool done = false;  // whether the fences handed out have passed
  int reads = 0, writes = 0;
  int waits = 0;  // host waits for a fence that had not passed

 private:
  std::vector<float> rows_;
  uint32_t capacity_;
  int row_floats_;
};

// With device tier memory, a released lease takes effect only once the device work enqueued
// before the release has finished (its fence), and the tier's rows move only through the
// memory's Read and Write (promotions, demotions, fresh rows, single-key reads).
TEST(TieredTable, DeviceMemoryReleasesLeasesAfterTheirFence) {
  auto t = Make(Tiered(12, 100, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  const internal::DeviceTierShape shape = internal::GetDeviceTierShape(*t);
  ASSERT_EQ(shape.rows, 12);
  auto memory = std::make_unique<FakeDeviceMemory>(12, shape.row_floats);
  FakeDeviceMemory* fake = memory.get();
  ASSERT_TRUE(internal::UseDeviceTierMemory(*t, std::move(memory)).ok());
  // Once only, and only before any row exists.
  EXPECT_EQ(internal::UseDeviceTierMemory(*t, std::make_unique<FakeDeviceMemory>(12, 2)).code(),
            absl::StatusCode::kFailedPrecondition);
  int owner = 0;
  std::vector<uint32_t> rows(4);
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<int64_t> keys = {4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3};
    ASSERT_TRUE(internal::ResolveWithLease(*t, keys, {}, {}, LookupMode::kTrain,
                                           absl::MakeSpan(rows), {&owner, b})
                    .ok());
  }
  EXPECT_EQ(fake->writes, 3);  // each batch's fresh rows, initialised on the host, in one Write
  const std::vector<float> row0 = t->ReadRow(0).value();
  EXPECT_EQ(std::memcmp(row0.data(), fake->rows() + t->FindRow(0) * shape.row_floats,
                        row0.size() * sizeof(float)),
            0);
  internal::ReleaseLeases(*t, &owner, 1);  // batch 0's step is still running on the device
  std::vector<int64_t> next = {20, 21, 22, 23};
  Status s = internal::ResolveWithLease(*t, next, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows),
                                        {&owner, 3});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  fake->done = true;  // the step finished
  const int reads = fake->reads;
  s = internal::ResolveWithLease(*t, next, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows),
                                 {&owner, 3});
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(fake->reads, reads + 1);  // batch 0's rows went down in one Read
  EXPECT_EQ(internal::GetTierStats(*t).host_rows, 4);
  EXPECT_EQ(t->ReadRow(0).value(), row0);  // from the host tier now, as it left the device
}

// A release whose fence has not passed is waited for only when the batch lacks room without its
// rows: a Resolve that fits in the free rows never blocks on the device's step.
TEST(TieredTable, DeviceMemoryWaitsForReleaseFencesOnlyWhenTheBatchLacksRoom) {
  auto t = Make(Tiered(12, 100, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  const internal::DeviceTierShape shape = internal::GetDeviceTierShape(*t);
  auto memory = std::make_unique<FakeDeviceMemory>(12, shape.row_floats);
  FakeDeviceMemory* fake = memory.get();
  ASSERT_TRUE(internal::UseDeviceTierMemory(*t, std::move(memory)).ok());
  int owner = 0;
  std::vector<uint32_t> rows(4);
  auto resolve = [&](int64_t b, int64_t first_key) {
    std::vector<int64_t> keys = {first_key, first_key + 1, first_key + 2, first_key + 3};
    return internal::ResolveWithLease(*t, keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows),
                                      {&owner, b});
  };
  ASSERT_TRUE(resolve(0, 0).ok());
  ASSERT_TRUE(resolve(1, 4).ok());
  internal::ReleaseLeases(*t, &owner, 1);  // batch 0's step is still running on the device
  // Batch 2 fits in the 4 free rows: no wait for batch 0's step.
  ASSERT_TRUE(resolve(2, 8).ok());
  EXPECT_EQ(fake->waits, 0);
  // Batch 3 needs 4 victims, and only batch 0's rows could go: now the fence is waited for (it
  // has not passed: the rows stay pinned and the key stage is told to retry).
  Status s = resolve(3, 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_GE(fake->waits, 1);
  fake->done = true;
  s = resolve(3, 20);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(internal::GetTierStats(*t).host_rows, 4);
}

// The public Resolve's own lease (the rows of its call before last) is released through a
// fence too: while the device may still run a kernel that used those rows, they are no victims.
TEST(TieredTable, DeviceMemoryReleasesThePublicResolvesRowsAfterTheirFence) {
  auto t = Make(Tiered(8, 100, 0, ""), SparseOptimizerConfig::SGD(0.1f));
  const internal::DeviceTierShape shape = internal::GetDeviceTierShape(*t);
  auto memory = std::make_unique<FakeDeviceMemory>(8, shape.row_floats);
  FakeDeviceMemory* fake = memory.get();
  ASSERT_TRUE(internal::UseDeviceTierMemory(*t, std::move(memory)).ok());
  std::vector<uint32_t> rows(4);
  auto resolve = [&](int64_t first_key) {
    const std::vector<int64_t> keys = {first_key, first_key + 1, first_key + 2, first_key + 3};
    return t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  };
  ASSERT_TRUE(resolve(0).ok());
  ASSERT_TRUE(resolve(4).ok());  // the device tier is full
  // The third call may move the first call's rows, but their fence has not passed: it waits for
  // it and, the rows staying pinned, fails with nothing moved.
  Status s = resolve(8);
  EXPECT_FALSE(s.ok());
  EXPECT_GE(fake->waits, 1);
  EXPECT_EQ(internal::GetTierStats(*t).host_rows, 0);
  fake->done = true;
  s = resolve(8);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(internal::GetTierStats(*t).host_rows, 4);
}

}  // namespace
}  // namespace recsdk
