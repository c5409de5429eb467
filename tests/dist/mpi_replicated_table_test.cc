// Replicated tables (TableConfig::is_dp, src/dist/replicated_table.h) under mpirun at 2 and 3
// ranks: a model with a replicated table "emb" beside a sharded table "emb2", trained on N ranks
// (each on its shard of every global batch, dense gradients averaged by DistributedOptimizer),
// ends with the rows of both tables and the dense weights of one process trained on the full
// global batches (computed on every rank in the same test with plain tables). Every rank holds
// every admitted key of the replicated table, and the replicas are bitwise equal across ranks.
// Every wait has a deadline, and CTest a TIMEOUT.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/common/hash.h"
#include "src/device/table_resource.h"
#include "src/dist/process_communicator.h"
#include "src/dist/replicated_table.h"
#include "src/dist/sharded_table.h"
#include "src/table/locked_table.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point
#include "tests/dist/sparse_model_util.h"

namespace recsdk {
namespace {

using testing::sparse::ExpectClose;
using testing::sparse::GlobalBatch;
using testing::sparse::kFeatures;
using testing::sparse::kVocab;
using testing::sparse::ShardOf;
using testing::sparse::SparseNet;

using ReplicatedTableTest = dist::testing::RanksTest;

// Fingerprint: every admitted key of the table's ids and its row's bits, in key order.
uint64_t Fingerprint(const EmbeddingTable& table) {
  uint64_t h = 0;
  for (int f = 0; f < kFeatures; ++f) {
    for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
      const StatusOr<std::vector<float>> row = table.ReadRow(id);
      if (!row.ok()) continue;
      h = internal::Mix64(h ^ static_cast<uint64_t>(id));
      for (float v : *row) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v, sizeof(bits));
        h = internal::Mix64(h ^ bits);
      }
    }
  }
  return h;
}

TEST_F(ReplicatedTableTest, RanksTrainAReplicatedTableLikeOneProcessOnTheGlobalBatches) {
  constexpr int64_t kGlobalRows = 12;
  constexpr int kSteps = 15;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.3}); };
  SparseNet ranks(npu_distributed_optimizer_wrapper(sgd()), kGlobalRows / size_,
                  /*second_table=*/true, {}, /*emb_is_dp=*/true);
  ASSERT_NE(ranks.session, nullptr);
  EmbeddingTable* replicated = *LookupTable(*ranks.session, "emb");
  EmbeddingTable* sharded = *LookupTable(*ranks.session, "emb2");
  auto* locked = dynamic_cast<internal::LockedTable*>(replicated);
  ASSERT_NE(locked, nullptr);
  ASSERT_NE(dynamic_cast<dist::ReplicatedTable*>(&locked->SelfSynchronised()), nullptr)
      << "is_dp makes the Session's table a replica";
  // The reference: one process's tables, made while no decorator wraps tables.
  internal::SetTableDecorator(nullptr);
  SparseNet one(sgd(), kGlobalRows, /*second_table=*/true, {}, /*emb_is_dp=*/true);
  ASSERT_NE(one.session, nullptr);
  EmbeddingTable* plain = *LookupTable(*one.session, "emb");
  EmbeddingTable* plain2 = *LookupTable(*one.session, "emb2");
  internal::SetTableDecorator(dist::MaybeShardTable);
  for (int step = 0; step < kSteps; ++step) {
    const testing::sparse::SparseBatch global = GlobalBatch(step, kGlobalRows);
    const Status a = ranks.Step(ShardOf(global, size_, rank_));
    ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a;
    const Status b = one.Step(global);
    ASSERT_TRUE(b.ok()) << b;
  }
  const std::string who = "rank " + std::to_string(rank_) + " vs one process";
  ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  // The replica holds every admitted key, trained as the one process trained it.
  EXPECT_EQ(replicated->size(), plain->size());
  EXPECT_GT(plain->size(), 0);
  int64_t owned2 = 0;
  for (int f = 0; f < kFeatures; ++f) {
    for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
      const StatusOr<std::vector<float>> want = plain->ReadRow(id);
      const StatusOr<std::vector<float>> got = replicated->ReadRow(id);
      ASSERT_EQ(got.ok(), want.ok()) << who << ", replicated key " << id << ": " << got.status();
      if (want.ok())
        ExpectClose(*got, *want, who + ", replicated row of key " + std::to_string(id));
      EXPECT_EQ(replicated->AdmissionCount(id), plain->AdmissionCount(id)) << who << " key " << id;
      // The sharded table beside it trains as before.
      if (dist::ShardedTable::Owner(id, size_) != rank_) continue;
      const StatusOr<std::vector<float>> want2 = plain2->ReadRow(id);
      const StatusOr<std::vector<float>> got2 = sharded->ReadRow(id);
      ASSERT_EQ(got2.ok(), want2.ok()) << who << ", sharded key " << id;
      if (!want2.ok()) continue;
      ++owned2;
      ExpectClose(*got2, *want2, who + ", sharded row of key " + std::to_string(id));
    }
  }
  EXPECT_GT(owned2, 0);
  // The replicas are bitwise equal: every rank summed the same gradients in the same order.
  const uint64_t mine = Fingerprint(*replicated);
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  const Status gathered = dist::WithProcessCommunicator(
      [&](dist::Communicator& c, const DistributedOptions& o) -> Status {
        return c.AllGather<uint64_t>(absl::MakeConstSpan(&mine, 1), absl::MakeSpan(all),
                                     dist::DeadlineAfterSeconds(o.collective_timeout_s));
      });
  ASSERT_TRUE(gathered.ok()) << gathered;
  for (int r = 0; r < size_; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s replica";
}

// The key stage resolves batches ahead on a worker thread of its own, where a replicated
// table's collectives would run beside the step's: Start refuses it on every rank, naming it.
TEST_F(ReplicatedTableTest, TheKeyStageRefusesAReplicatedTableWithTheReason) {
  constexpr int64_t kBatch = 4;
  Graph g;
  Scope s(&g);
  TableConfig tc;
  tc.name = "small";
  tc.dim = 4;
  tc.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";  // like one process
  tc.device_vocabulary_size = 256;
  tc.is_dp = true;
  SparseTable t = *create_table(s, tc, SparseOptimizerConfig::Adagrad(0.1f));
  Output ids = DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 1});
  SparseLookupOptions o;
  o.modify_graph = true;
  ASSERT_TRUE(sparse_lookup(s, t, ids, o).ok());
  ASSERT_TRUE(s.ok()) << s.status();
  StatusOr<ModifyGraphResult> moved = ModifyGraph(&g);
  ASSERT_TRUE(moved.ok()) << moved.status();
  std::unique_ptr<Session> session = *Session::Create(g);
  ASSERT_TRUE(LookupTable(*session, "small").ok());
  SyntheticOptions d;
  d.num_rows = 16;
  d.vocabulary_sizes = {50};
  d.num_dense = 1;
  std::unique_ptr<Dataset> rows = *SyntheticDataset(d);
  StatusOr<std::unique_ptr<KeyStage>> stage =
      StartAscPipeline(*session, *BatchRows(std::move(rows), kBatch, {.drop_remainder = true}));
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stage.status().message()),
              ::testing::AllOf(::testing::HasSubstr("\"small\" is replicated"),
                               ::testing::HasSubstr("is_dp = false")));
}

}  // namespace
}  // namespace recsdk
