// The key stage with sharded tables under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt).
// A model whose lookups ModifyGraph moved to the key stage trains on N ranks (each on its shard of
// the rows, the stage resolving batches ahead on its own channel, the rows brought at Next) and
// ends with the table rows and dense weights of one process training the same model on the
// global batches with a key stage of its own; ranks whose inputs differ in length all end at the
// shortest, at once; a checkpoint requested at different moments on different ranks
// (Quiesce) is taken at the same step everywhere. In a job with a ps (the _ps run: chief, worker
// and ps) the ps serves the stage and holds the rows, equal to the one process's. Every wait has
// a deadline, and CTest a TIMEOUT.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/device/table_resource.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point
#include "tests/dist/sparse_model_util.h"

namespace recsdk {
namespace {

using testing::sparse::ExpectClose;

constexpr int64_t kGlobalBatch = 24;  // a multiple of 2 and 3
constexpr int64_t kVocab = 300;
constexpr int kFeatures = 3;

SyntheticOptions Rows(int64_t rows) {
  SyntheticOptions d;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, kVocab);
  d.num_dense = 2;
  d.seed = 7;
  d.ids_per_feature = 2;
  return d;
}

// Batches: the rows of `rank` of `size` (Shard's rule, row i on rank i % size) in batches of
// kGlobalBatch / size, so that batch k of every rank together is the global batch k.
std::unique_ptr<Dataset> Batches(int64_t rows, int size, int rank) {
  std::unique_ptr<Dataset> all = *SyntheticDataset(Rows(rows));
  if (size > 1) all = *Shard(std::move(all), size, rank);
  return *BatchRows(std::move(all), kGlobalBatch / size, {.drop_remainder = true});
}

// Model: C1..C3 -> sparse_lookup of table "emb" (Adagrad, admission at the second sighting) and
// the dense columns -> Mlp -> sigmoid cross-entropy; SGD on the dense weights, averaged over the
// ranks when `ranks` > 1. Its lookups moved to the key stage.
struct Model {
  Graph g;
  Node* train = nullptr;
  std::unique_ptr<Session> session;

  explicit Model(int ranks) {
    const int64_t b = kGlobalBatch / ranks;
    Scope s(&g);
    g.set_random_seed(3);
    TableConfig tc;
    tc.name = "emb";
    tc.dim = 4;
    tc.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";  // like one process
    tc.device_vocabulary_size = 4096;
    tc.access_threshold = 2;
    tc.initializer = Initializer::Uniform(-0.2, 0.2, 5);
    SparseTable t = *create_table(s, tc, SparseOptimizerConfig::Adagrad(0.1f));
    std::vector<Output> ids;
    for (int f = 1; f <= kFeatures; ++f) {
      ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{b, 2}));
    }
    Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{b, 2});
    Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{b, 1});
    SparseLookupOptions o;
    o.combiner = Combiner::kMean;
    o.modify_graph = true;
    std::vector<Output> parts = *sparse_lookup(s, t, ids, o);
    parts.push_back(dense);
    Output logits =
        layers::Mlp(s, ops::Concat(s, parts, 1), {.hidden_units = {8}, .output_units = 1});
    Output loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
    // SGD: Adam's first steps divide by the gradients' size, which turns the ranks' different
    // order of additions (1e-7 relative) into differences of the order of the learning rate.
    auto sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.2});
    std::shared_ptr<Optimizer> opt =
        ranks > 1 ? npu_distributed_optimizer_wrapper(sgd) : std::shared_ptr<Optimizer>(sgd);
    train = ops::Group(s, {*opt->Minimize(s, loss), *SparseMinimize(s, loss)});
    Node* init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.ok()) << s.status();
    StatusOr<ModifyGraphResult> moved = ModifyGraph(&g);
    EXPECT_TRUE(moved.ok() && moved->moved_lookups.size() == 1) << moved.status();
    session = *Session::Create(g);
    EXPECT_TRUE(session->Run({}, {}, {init->name()}, nullptr).ok());
    // The table exists from here on, sharded or not as the decorator says now.
    EXPECT_TRUE(LookupTable(*session, "emb").ok());
  }

  // Train: up to `steps` steps from `stage`; the steps it ran.
  int Train(KeyStage& stage, int steps) {
    int ran = 0;
    for (; ran < steps; ++ran) {
      FeedList feeds;
      StatusOr<bool> got = stage.Next(&feeds);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok() || !*got) break;
      const Status s = session->Run(feeds, {}, {train->name()}, nullptr);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
    }
    return ran;
  }

  std::vector<float> Weights() {
    std::vector<float> all;
    for (const Variable& v : TrainableVariables(g)) {
      const Tensor t = (*session->Run({}, {v.name() + "/read"}))[0];
      all.insert(all.end(), t.data<float>(), t.data<float>() + t.num_elements());
    }
    return all;
  }
};

using KeyStageTest = dist::testing::RanksTest;

// IsPs: whether this rank is a ps of the job (only in the _ps run: chief, worker and a ps, each
// with its TF_CONFIG). A ps builds the same model and serves the workers' key stage (its channel
// and its pulls) from RunParameterServer.
bool IsPs() { return IsParameterServer().value_or(false); }

// KeyOwner: the rank that holds `key` (the ps ranks with ps, else every rank).
int KeyOwner(int64_t key) {
  dist::JobLayout job;
  EXPECT_TRUE(dist::ProcessJob(&job));
  return job.owner_first() + dist::ShardedTable::Owner(key, job.owners());
}

TEST_F(KeyStageTest, AKeyStageTrainsShardedTablesLikeOneProcess) {
  constexpr int kSteps = 12;
  // size_: the workers (get_rank_size), whose batches together are the global batch.
  Model ranks(size_);
  // The reference: one process's tables and key stage (made while no decorator shards tables);
  // every rank computes the same one.
  internal::SetTableDecorator(nullptr);
  Model one(1);
  internal::SetTableDecorator(dist::MaybeShardTable);
  std::unique_ptr<KeyStage> one_stage =
      *StartAscPipeline(*one.session, Batches(kGlobalBatch * kSteps, 1, 0));
  if (IsPs()) {
    // The workers' stage resolves its keys here, ahead of their steps.
    const Status served = RunParameterServer();
    EXPECT_TRUE(served.ok()) << served;
  } else {
    std::unique_ptr<KeyStage> stage =
        *StartAscPipeline(*ranks.session, Batches(kGlobalBatch * kSteps, size_, rank_));
    EXPECT_EQ(ranks.Train(*stage, kSteps + 5), kSteps);
    stage.reset();
    // Without ps ranks, nothing.
    const Status ended = EndParameterServers();
    EXPECT_TRUE(ended.ok()) << ended;
  }
  EXPECT_EQ(one.Train(*one_stage, kSteps + 5), kSteps);
  const std::string who = "rank " + std::to_string(rank_) + (IsPs() ? " (ps)" : "");
  if (!IsPs()) ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  EmbeddingTable* sharded = *LookupTable(*ranks.session, "emb");
  EmbeddingTable* plain = *LookupTable(*one.session, "emb");
  int64_t owned = 0;
  for (int64_t id = 0; id < 3 * kVocab + 1000; ++id) {
    if (KeyOwner(id) != rank_) continue;
    const StatusOr<std::vector<float>> want = plain->ReadRow(id);
    const StatusOr<std::vector<float>> got = sharded->ReadRow(id);
    ASSERT_EQ(got.ok(), want.ok()) << who << ", key " << id;
    EXPECT_EQ(sharded->AdmissionCount(id), plain->AdmissionCount(id)) << who << ", key " << id;
    if (!want.ok()) continue;
    ++owned;
    ExpectClose(*got, *want, who + ", row of key " + std::to_string(id));
  }
  EXPECT_EQ(sharded->size(), owned);
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  if (job.ps == 0 || job.is_ps) {
    EXPECT_GT(owned, 0);
  } else {
    EXPECT_EQ(sharded->size(), 0) << who << ": a worker of a job with ps ranks owns no key";
  }
}

TEST_F(KeyStageTest, RanksWithInputsOfDifferentLengthsEndTogetherAtTheShortest) {
  Model ranks(size_);
  if (IsPs()) {
    // The ps's side of the stage ends at the workers' vote too, and the loop at their end.
    const Status served = RunParameterServer();
    EXPECT_TRUE(served.ok()) << served;
    return;
  }
  // Rank r has 4 + 2r batches: every rank ends after 4, at once, instead of waiting.
  std::unique_ptr<KeyStage> stage =
      *StartAscPipeline(*ranks.session, Batches(kGlobalBatch * (4 + 2 * rank_), size_, rank_));
  EXPECT_EQ(ranks.Train(*stage, 100), 4);
  stage.reset();
  const Status ended = EndParameterServers();
  EXPECT_TRUE(ended.ok()) << ended;
}

TEST_F(KeyStageTest, AQuiesceAtDifferentMomentsStopsEveryRankAtTheSameBatch) {
  Model ranks(size_);
  KeyStageOptions o;
  o.prefetch_batches = 3;
  std::unique_ptr<KeyStage> stage =
      *StartAscPipeline(*ranks.session, Batches(kGlobalBatch * 20, size_, rank_), o);
  // Rank 0 asks at once; the others after two steps, when their stages have read further.
  if (rank_ == 0) stage->Quiesce(4);
  ASSERT_EQ(ranks.Train(*stage, 2), 2);
  if (rank_ != 0) stage->Quiesce(4);
  int steps = 2;
  while (!stage->Quiescent() && steps < 20) steps += ranks.Train(*stage, 1);
  EXPECT_TRUE(stage->Quiescent());
  const int64_t consumed = stage->batches_consumed();
  // Every rank stops at the same batch (at least 4: batches read before the request stay).
  std::vector<int64_t> all(static_cast<size_t>(size_));
  ASSERT_TRUE(
      dist::WithProcessCommunicator([&](dist::Communicator& c, const DistributedOptions& opts) {
        return c.AllGather<int64_t>(absl::MakeConstSpan(&consumed, 1), absl::MakeSpan(all),
                                    dist::DeadlineAfterSeconds(opts.collective_timeout_s));
      }).ok());
  for (int64_t c : all) EXPECT_EQ(c, consumed) << "batches consumed differ across ranks";
  EXPECT_GE(consumed, 4);
  // A checkpoint there, and training on afterwards.
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/mpi_key_stage_" + std::to_string(size_);
  if (rank_ == 0) std::filesystem::remove_all(dir);
  ASSERT_TRUE(AllRanksAgree(true, "the directory is clean").ok());
  SaverOptions so;
  so.model_dir = dir;
  std::unique_ptr<Saver> saver = *Saver::Create(*ranks.session, so);
  saver->AttachKeyStage(stage.get());
  StatusOr<std::string> saved = saver->Save(consumed);
  EXPECT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(ranks.Train(*stage, 3), 3);
  ASSERT_TRUE(AllRanksAgree(true, "done").ok());
  if (rank_ == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace recsdk
