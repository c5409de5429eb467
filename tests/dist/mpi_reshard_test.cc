// mpi_reshard_test.cc: checkpoints of sharded tables across world sizes. CTest runs it as a
// sequence (tests/dist/CMakeLists.txt), every run in the directory $RECSDK_RESHARD_DIR:
// - SaveAtTwoRanks, under mpirun -np 2: trains the sparse model to step 6 and saves ckpt-6 (each
//   rank its shard, rank 0 the variables and the commit), trains on to step 12 and saves ckpt-12,
//   the never-stopped run. Then a fresh model restores ckpt-6 at the same world size (each rank
//   reads only its own shard), trains the same batches to step 12 and must hold the state of the
//   never-stopped run.
// - AFailedShardFailsTheSaveOnEveryRank (in the same -np 2 run): a rank whose disk is full, or a
//   rank 0 whose commit fails, fails the save on every rank, each naming the cause or the rank,
//   and the previous checkpoint stays the latest; a checkpoint missing a shard is refused by
//   every rank and changes nothing.
// - AnExportOfShardedTablesIsOneBundle (same run): the model exported by 2 ranks is one bundle a
//   Predictor loads whole (every rank's rows), predicting exactly as a bundle of the same state
//   exported from tables each rank holds whole.
// - RestoreAndContinue, under mpirun -np 1, 3 and 4: restores ckpt-6 written by 2 ranks (the
//   tables re-sharded: each rank keeps the keys it owns among its world), trains the same global
//   batches to step 12, and compares every row this rank owns, every pending admission count and
//   every dense weight with ckpt-12 restored at its own world size. Different world sizes add the
//   ranks' gradients in different orders, hence 1e-5 relative, as mpi_sharded_table_test.cc.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/device/table_resource.h"
#include "src/dist/sharded_table.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point
#include "tests/dist/sparse_model_util.h"

namespace recsdk {
namespace {

using ::testing::HasSubstr;
using testing::sparse::ExpectClose;
using testing::sparse::GlobalBatch;
using testing::sparse::kFeatures;
using testing::sparse::kVocab;
using testing::sparse::ShardOf;
using testing::sparse::SparseNet;

constexpr int64_t kGlobalRows = 12;  // a multiple of every world size tested
constexpr int kSaveStep = 6;
constexpr int kEndStep = 12;

class Reshard : public ::testing::Test {
 protected:
  void SetUp() override {
    DistributedOptions o;
    o.collective_timeout_s = 60;
    ASSERT_TRUE(InitDistributed(o).ok());
    rank_ = get_rank_id().value_or(-1);
    size_ = get_rank_size().value_or(-1);
    ASSERT_EQ(kGlobalRows % size_, 0);
    const char* dir = std::getenv("RECSDK_RESHARD_DIR");
    ASSERT_NE(dir, nullptr) << "set RECSDK_RESHARD_DIR to the checkpoints' directory";
    dir_ = dir;
  }

  std::unique_ptr<SparseNet> NewNet() const {
    auto sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.3});
    return std::make_unique<SparseNet>(npu_distributed_optimizer_wrapper(sgd), kGlobalRows / size_);
  }

  std::unique_ptr<Saver> NewSaver(SparseNet& net, const std::string& dir = "",
                                  internal::Env* env = nullptr) const {
    SaverOptions o;
    o.model_dir = dir.empty() ? dir_ : dir;
    o.env = env;
    StatusOr<std::unique_ptr<Saver>> saver = Saver::Create(*net.session, o);
    EXPECT_TRUE(saver.ok()) << saver.status();
    return saver.ok() ? std::move(*saver) : nullptr;
  }

  void Train(SparseNet& net, int from, int to) const {
    for (int step = from; step < to; ++step) {
      const Status s = net.Step(ShardOf(GlobalBatch(step, kGlobalRows), size_, rank_));
      ASSERT_TRUE(s.ok()) << "rank " << rank_ << " step " << step << ": " << s;
    }
  }

  // ExpectSameState: `got` holds the dense weights and, of the table, the rows and pending
  // admission counts of `want` (both at this world size, so both hold this rank's keys).
  void ExpectSameState(SparseNet& got, SparseNet& want, const std::string& what) const {
    const std::string who =
        "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", " + what;
    ExpectClose(got.Weights(), want.Weights(), who + ", dense weights");
    EmbeddingTable* a = *LookupTable(*got.session, "emb");
    EmbeddingTable* b = *LookupTable(*want.session, "emb");
    EXPECT_EQ(a->size(), b->size()) << who;
    int64_t rows = 0;
    for (int f = 0; f < kFeatures; ++f) {
      for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
        const StatusOr<std::vector<float>> x = a->ReadRow(id);
        const StatusOr<std::vector<float>> y = b->ReadRow(id);
        ASSERT_EQ(x.ok(), y.ok()) << who << ", key " << id << ": " << x.status() << " / "
                                  << y.status();
        EXPECT_EQ(a->AdmissionCount(id), b->AdmissionCount(id)) << who << ", key " << id;
        if (!x.ok()) continue;
        ++rows;
        ExpectClose(*x, *y, who + ", row of key " + std::to_string(id));
      }
    }
    EXPECT_EQ(rows, a->size()) << who;
    EXPECT_GT(rows, 0) << who;
  }

  int rank_ = -1;
  int size_ = -1;
  std::string dir_;
};

TEST_F(Reshard, SaveAtTwoRanks) {
  ASSERT_EQ(size_, 2) << "run under mpirun -np 2";
  if (rank_ == 0) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ASSERT_TRUE(AllRanksAgree(true, "the checkpoint directory is empty").ok());
  std::unique_ptr<SparseNet> net = NewNet();
  ASSERT_NE(net->session, nullptr);
  std::unique_ptr<Saver> saver = NewSaver(*net);
  ASSERT_NE(saver, nullptr);
  Train(*net, 0, kSaveStep);
  StatusOr<std::string> saved = saver->Save(kSaveStep);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(*saved, dir_ + "/ckpt-6");
  for (int r = 0; r < size_; ++r) {
    EXPECT_TRUE(std::filesystem::exists(*saved + "/shard-" + std::to_string(r) + "-of-2"));
  }
  Train(*net, kSaveStep, kEndStep);
  ASSERT_TRUE(saver->Save(kEndStep).ok());
  ASSERT_EQ(*saver->LatestCheckpoint(), dir_ + "/ckpt-12");

  std::unique_ptr<SparseNet> resumed = NewNet();
  std::unique_ptr<Saver> again = NewSaver(*resumed);
  ASSERT_NE(again, nullptr);
  StatusOr<int64_t> step = again->Restore("ckpt-6");
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, kSaveStep);
  Train(*resumed, kSaveStep, kEndStep);
  ExpectSameState(*resumed, *net, "resumed at the same world size vs never stopped");
}

TEST_F(Reshard, AFailedShardFailsTheSaveOnEveryRank) {
  ASSERT_EQ(size_, 2) << "run under mpirun -np 2";
  const std::string dir = dir_ + "_faults";
  if (rank_ == 0) std::filesystem::remove_all(dir);
  ASSERT_TRUE(AllRanksAgree(true, "the directory is empty").ok());
  internal::FaultInjectionEnv faults(internal::Env::Default());
  std::unique_ptr<SparseNet> net = NewNet();
  ASSERT_NE(net->session, nullptr);
  std::unique_ptr<Saver> saver = NewSaver(*net, dir, &faults);
  ASSERT_NE(saver, nullptr);
  Train(*net, 0, 2);
  ASSERT_TRUE(saver->Save(2).ok());
  const std::vector<float> at_two = net->Weights();

  Train(*net, 2, 3);
  if (rank_ == 1) faults.disk_full_after_bytes = 0;
  StatusOr<std::string> full = saver->Save(3);
  faults.disk_full_after_bytes = -1;
  ASSERT_FALSE(full.ok());
  if (rank_ == 1) {
    EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  } else {
    EXPECT_EQ(full.status().code(), absl::StatusCode::kAborted) << full.status();
    EXPECT_THAT(std::string(full.status().message()), HasSubstr("rank(s) 1 of 2"));
  }
  EXPECT_EQ(*saver->LatestCheckpoint(), dir + "/ckpt-2");

  if (rank_ == 0) faults.fail_rename = true;
  StatusOr<std::string> commit = saver->Save(3);
  faults.fail_rename = false;
  ASSERT_FALSE(commit.ok());
  if (rank_ == 1) {
    EXPECT_THAT(std::string(commit.status().message()), HasSubstr("rank 0 could not commit"));
  }
  EXPECT_EQ(*saver->LatestCheckpoint(), dir + "/ckpt-2");
  ASSERT_TRUE(AllRanksAgree(true, "the failed saves are over").ok());
  if (rank_ == 0) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      EXPECT_TRUE(name == "checkpoint" || name == "ckpt-2") << "left behind: " << name;
    }
  }

  // The checkpoint that is there restores on every rank; without one of its shards, on none.
  ASSERT_TRUE(saver->Restore("ckpt-2").ok());
  ExpectClose(net->Weights(), at_two, "restored dense weights");
  Train(*net, 2, 4);
  const std::vector<float> trained = net->Weights();
  ASSERT_TRUE(AllRanksAgree(true, "trained past the checkpoint").ok());
  if (rank_ == 0) std::filesystem::remove_all(dir + "/ckpt-2/shard-1-of-2");
  ASSERT_TRUE(AllRanksAgree(true, "a shard is gone").ok());
  StatusOr<int64_t> incomplete = saver->Restore("ckpt-2");
  ASSERT_FALSE(incomplete.ok());
  if (rank_ == 1) {
    EXPECT_EQ(incomplete.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(incomplete.status().message()),
                HasSubstr("incomplete: the shard of rank 1 of 2"));
  } else {
    EXPECT_THAT(std::string(incomplete.status().message()), HasSubstr("nothing was changed"));
  }
  EXPECT_EQ(net->Weights(), trained) << "a refused restore changes nothing";
}

TEST_F(Reshard, AnExportOfShardedTablesIsOneBundle) {
  ASSERT_EQ(size_, 2) << "run under mpirun -np 2";
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/ckpt-12")) << "SaveAtTwoRanks runs first";
  const std::string sharded_dir = dir_ + "_export_sharded", whole_dir = dir_ + "_export_whole";
  if (rank_ == 0) {
    std::filesystem::remove_all(sharded_dir);
    std::filesystem::remove_all(whole_dir);
  }
  ASSERT_TRUE(AllRanksAgree(true, "the export directories are empty").ok());
  std::unique_ptr<SparseNet> sharded = NewNet();
  std::unique_ptr<Saver> saver = NewSaver(*sharded);
  ASSERT_TRUE(saver->Restore("ckpt-12").ok());
  const ServingSignature signature{{"ids", "x"}, {sharded->logits.name()}};
  const Status exported = ExportSavedModel(*sharded->session, sharded_dir, signature);
  ASSERT_TRUE(exported.ok()) << exported;
  EXPECT_TRUE(std::filesystem::exists(sharded_dir + "/shard-1-of-2"));
  // The same state in tables every rank holds whole (made while no decorator shards tables).
  internal::SetTableDecorator(nullptr);
  std::unique_ptr<SparseNet> whole = NewNet();
  internal::SetTableDecorator(dist::MaybeShardTable);
  std::unique_ptr<Saver> whole_saver = NewSaver(*whole);
  ASSERT_TRUE(whole_saver->Restore("ckpt-12").ok());
  ASSERT_TRUE(ExportSavedModel(*whole->session, whole_dir, signature).ok());

  StatusOr<std::unique_ptr<Predictor>> a = Predictor::Load(sharded_dir);
  StatusOr<std::unique_ptr<Predictor>> b = Predictor::Load(whole_dir);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " / " << b.status();
  for (int step : {3, 11}) {
    const testing::sparse::SparseBatch g = GlobalBatch(step, kGlobalRows / size_);
    const FeedList feeds = {{"ids", *Tensor::FromValues<int64_t>(Shape{g.rows, kFeatures}, g.ids)},
                            {"x", *Tensor::FromValues<float>(Shape{g.rows, 2}, g.x)}};
    StatusOr<std::vector<Tensor>> pa = (*a)->Predict(feeds);
    StatusOr<std::vector<Tensor>> pb = (*b)->Predict(feeds);
    ASSERT_TRUE(pa.ok() && pb.ok()) << pa.status() << " / " << pb.status();
    const Tensor& ta = (*pa)[0];
    const Tensor& tb = (*pb)[0];
    ASSERT_EQ(ta.num_elements(), tb.num_elements());
    for (int64_t i = 0; i < ta.num_elements(); ++i) {
      EXPECT_EQ(ta.data<float>()[i], tb.data<float>()[i]) << "step " << step << " row " << i;
    }
  }
}

TEST_F(Reshard, RestoreAndContinue) {
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/ckpt-6/shard-1-of-2"))
      << "SaveAtTwoRanks runs first (CTest fixture)";
  std::unique_ptr<SparseNet> net = NewNet();
  ASSERT_NE(net->session, nullptr);
  std::unique_ptr<Saver> saver = NewSaver(*net);
  ASSERT_NE(saver, nullptr);
  StatusOr<int64_t> step = saver->Restore("ckpt-6");
  ASSERT_TRUE(step.ok()) << step.status();
  Train(*net, kSaveStep, kEndStep);
  std::unique_ptr<SparseNet> end = NewNet();
  std::unique_ptr<Saver> end_saver = NewSaver(*end);
  ASSERT_NE(end_saver, nullptr);
  ASSERT_TRUE(end_saver->Restore("ckpt-12").ok());
  ExpectSameState(*net, *end, "re-sharded from 2 ranks and trained on vs never stopped");
}

}  // namespace
}  // namespace recsdk
