// sharded_checkpoint_test.cc: the tables of a checkpoint written by N ranks (one shard directory
// per rank, src/checkpoint/sharded_checkpoint.h) read back by M ranks for every M from 1 to 4:
// each rank gets exactly the keys it owns under M, with their rows, timestamps and pending
// admission counts, full snapshots and deltas alike; a checkpoint of one process re-shards the
// same way; a missing or foreign shard is DataLoss naming it. The multi-process save and restore
// under mpirun is tests/dist/mpi_reshard_test.cc.
#include "src/checkpoint/sharded_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/checkpoint/session_state.h"
#include "src/common/env.h"
#include "src/table/collective_table.h"
#include "tests/session/table_test_util.h"

namespace recsdk::internal {
namespace {

using recsdk::testing::ValueOrDie;
using ::testing::HasSubstr;

constexpr int kDim = 4;

std::unique_ptr<EmbeddingTable> NewTable() {
  TableConfig c = recsdk::testing::SmallTable("emb", kDim, 4096);
  c.access_threshold = 2;
  c.eviction_threshold = 1000;
  return ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.1f)));
}

// Train: one training batch of `keys` (each seen `count` times at `time`) with a gradient of
// ones, so rows, slots, timestamps and admission counts all change.
void Train(EmbeddingTable& t, std::vector<int64_t> keys, uint32_t count, int64_t time,
           int64_t step) {
  std::sort(keys.begin(), keys.end());
  std::vector<uint32_t> counts(keys.size(), count);
  std::vector<int64_t> times(keys.size(), time);
  std::vector<uint32_t> rows(keys.size());
  ASSERT_TRUE(t.Resolve(keys, counts, times, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  std::vector<uint32_t> real;
  for (uint32_t r : rows) {
    if (r != EmbeddingTable::kPaddingRow && r != EmbeddingTable::kDefaultRow) real.push_back(r);
  }
  std::vector<float> grads(real.size() * kDim, 1.0f);
  ASSERT_TRUE(t.ApplyGradients(real, grads, step).ok());
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t k = from; k < to; ++k) v.push_back(k * 7919 + 13);
  return v;
}

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (std::filesystem::temp_directory_path() /
             ("sharded_ckpt_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // WriteSharded: `snapshot` as a checkpoint of `world` ranks named `name` in root_: each rank's
  // shard holds the keys ShardOwner gives it; world 1 writes a checkpoint of one process.
  std::string WriteSharded(const TableSnapshot& snapshot, int world, const std::string& name,
                           const std::vector<std::string>& chain = {},
                           const std::vector<std::string>& chain_ids = {}) {
    const std::string dir = root_ + "/" + name;
    std::filesystem::create_directories(dir);
    SaveJob job;
    job.step = static_cast<int64_t>(chain.size()) + 1;
    job.delta = snapshot.is_delta;
    job.chain = chain;
    job.chain_ids = chain_ids;
    if (world == 1) {
      job.tables.push_back(snapshot);
      ids_[name] = ValueOrDie(WriteCheckpointFiles(Env::Default(), dir, job));
      return dir;
    }
    ManifestParts top;
    top.tables = ManifestParts::TableSet::kWhole;
    for (int r = 0; r < world; ++r) {
      SaveJob shard = job;
      TableSnapshot copy = snapshot;
      shard.tables.push_back(FilterSnapshot(std::move(copy), TablePlacement{r, world}));
      const std::string shard_dir = dir + "/" + ShardDirName(r, world);
      std::filesystem::create_directories(shard_dir);
      ManifestParts parts;
      parts.variables = false;
      top.shard_ids.push_back(
          ValueOrDie(WriteCheckpointFiles(Env::Default(), shard_dir, shard, parts)));
    }
    ids_[name] = ValueOrDie(WriteCheckpointFiles(Env::Default(), dir, job, top));
    return dir;
  }

  static TablePlacements RankOf(int rank, int world) {
    TablePlacements p;
    p.others = {rank, world};
    p.tables["emb"] = {rank, world};
    return p;
  }

  std::string root_;
  std::map<std::string, std::string> ids_;
};

// ExpectSameKeys: `got` holds exactly the keys of `want` that `p` owns, with their rows,
// timestamps and pending entries.
void ExpectOwnedPart(const TableSnapshot& want, const TableSnapshot& got, TablePlacement p) {
  const size_t width = kDim + static_cast<size_t>(want.num_slots);
  size_t j = 0;
  for (size_t i = 0; i < want.keys.size(); ++i) {
    if (ShardOwner(want.keys[i], p.world) != p.rank) continue;
    ASSERT_LT(j, got.keys.size());
    ASSERT_EQ(got.keys[j], want.keys[i]);
    for (size_t c = 0; c < width; ++c) {
      ASSERT_EQ(got.rows[j * width + c], want.rows[i * width + c]) << "key " << want.keys[i];
    }
    ASSERT_EQ(got.timestamps[j], want.timestamps[i]);
    ++j;
  }
  EXPECT_EQ(j, got.keys.size()) << "rank " << p.rank << " of " << p.world << " got extra keys";
  std::vector<int64_t> pending;
  for (size_t i = 0; i < want.pending_keys.size(); ++i) {
    if (ShardOwner(want.pending_keys[i], p.world) == p.rank)
      pending.push_back(want.pending_keys[i]);
  }
  EXPECT_EQ(got.pending_keys, pending);
  EXPECT_EQ(got.data_time, want.data_time);
}

TEST_F(ShardedCheckpointTest, ACheckpointOfNRanksReadsBackAtEveryWorldSize) {
  std::unique_ptr<EmbeddingTable> t = NewTable();
  Train(*t, Range(0, 300), 2, 10, 1);
  Train(*t, Range(200, 400), 1, 20, 2);  // 300..399 seen once: pending, not admitted
  const TableSnapshot full = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull));
  ASSERT_GT(full.keys.size(), 200u);
  ASSERT_GT(full.pending_keys.size(), 50u);
  for (int written : {1, 2, 3}) {
    const std::string dir = WriteSharded(full, written, "ckpt-w" + std::to_string(written));
    for (int world = 1; world <= 4; ++world) {
      size_t total = 0;
      for (int rank = 0; rank < world; ++rank) {
        SCOPED_TRACE("written by " + std::to_string(written) + ", read by rank " +
                     std::to_string(rank) + " of " + std::to_string(world));
        LoadedCheckpoint ckpt =
            ValueOrDie(LoadCheckpoint(Env::Default(), dir, RankOf(rank, world)));
        EXPECT_EQ(ckpt.world_size, written);
        ASSERT_EQ(ckpt.tables["emb"].size(), 1u);
        const TableSnapshot& got = ckpt.tables["emb"][0];
        ExpectOwnedPart(full, got, {rank, world});
        total += got.keys.size();
        // The part loads into a table: what a rank's shard would hold.
        std::unique_ptr<EmbeddingTable> shard = NewTable();
        ASSERT_TRUE(shard->LoadSnapshot(got).ok());
        EXPECT_EQ(shard->size(), static_cast<int64_t>(got.keys.size()));
      }
      EXPECT_EQ(total, full.keys.size()) << "every key on exactly one rank";
    }
  }
}

TEST_F(ShardedCheckpointTest, ADeltaChainReshardsLinkByLink) {
  std::unique_ptr<EmbeddingTable> t = NewTable();
  Train(*t, Range(0, 200), 2, 10, 1);
  const TableSnapshot full = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull));
  Train(*t, Range(150, 260), 2, 5000, 2);     // new rows and updates
  ASSERT_GT(ValueOrDie(t->EvictStale()), 0);  // keys last seen at 10 are evicted: removed keys
  const TableSnapshot delta = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kDelta));
  ASSERT_FALSE(delta.removed_keys.empty());
  const TableSnapshot now = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull));
  WriteSharded(full, 2, "ckpt-1");
  const std::string dir = WriteSharded(delta, 2, "ckpt-2", {"ckpt-1"}, {ids_["ckpt-1"]});
  for (int world : {1, 3}) {
    size_t total = 0;
    for (int rank = 0; rank < world; ++rank) {
      LoadedCheckpoint ckpt = ValueOrDie(LoadCheckpoint(Env::Default(), dir, RankOf(rank, world)));
      ASSERT_EQ(ckpt.tables["emb"].size(), 2u);
      std::unique_ptr<EmbeddingTable> shard = NewTable();
      ASSERT_TRUE(shard->CheckSnapshots(ckpt.tables["emb"]).ok());
      for (const TableSnapshot& s : ckpt.tables["emb"]) ASSERT_TRUE(shard->LoadSnapshot(s).ok());
      const TableSnapshot got = ValueOrDie(shard->Snapshot(EmbeddingTable::SnapshotKind::kFull));
      ExpectOwnedPart(now, got, {rank, world});
      total += got.keys.size();
    }
    EXPECT_EQ(total, now.keys.size());
  }
}

TEST_F(ShardedCheckpointTest, AMissingOrForeignShardIsDataLossNamingIt) {
  std::unique_ptr<EmbeddingTable> t = NewTable();
  Train(*t, Range(0, 100), 2, 10, 1);
  const TableSnapshot full = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull));
  const std::string a = WriteSharded(full, 2, "ckpt-a");
  Train(*t, Range(0, 100), 2, 20, 2);
  const std::string b =
      WriteSharded(ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull)), 2, "ckpt-b");
  // A shard of another save put in place of this one's.
  std::filesystem::remove_all(a + "/shard-1-of-2");
  std::filesystem::copy(b + "/shard-1-of-2", a + "/shard-1-of-2");
  StatusOr<LoadedCheckpoint> foreign = LoadCheckpoint(Env::Default(), a, RankOf(0, 1));
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(foreign.status().message()), HasSubstr("shard of rank 1"));
  // At the same world size rank 0 reads only its own shard, so it still restores.
  EXPECT_TRUE(LoadCheckpoint(Env::Default(), a, RankOf(0, 2)).ok());
  std::filesystem::remove_all(a + "/shard-1-of-2");
  for (int world : {1, 2}) {
    StatusOr<LoadedCheckpoint> missing =
        LoadCheckpoint(Env::Default(), a, RankOf(world - 1, world));
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(missing.status().message()),
                HasSubstr("incomplete: the shard of rank 1 of 2"));
  }
}

TEST_F(ShardedCheckpointTest, MergingRefusesOverlappingOrMismatchedParts) {
  std::unique_ptr<EmbeddingTable> t = NewTable();
  Train(*t, Range(0, 50), 2, 10, 1);
  const TableSnapshot full = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFull));
  std::vector<TableSnapshot> twice = {full, full};
  StatusOr<TableSnapshot> overlap = MergeShardSnapshots(twice, "test");
  EXPECT_EQ(overlap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(overlap.status().message()), HasSubstr("disjoint"));
  TableSnapshot other = FilterSnapshot(TableSnapshot(full), {1, 2});
  other.dim = kDim + 1;
  std::vector<TableSnapshot> mixed = {FilterSnapshot(TableSnapshot(full), {0, 2}), other};
  EXPECT_EQ(MergeShardSnapshots(mixed, "test").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace recsdk::internal
