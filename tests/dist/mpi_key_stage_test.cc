// The key stage with sharded tables under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt).
// A model whose lookups ModifyGraph moved to the key stage trains on N ranks (each on its shard of
// the rows, the stage resolving batches ahead on its own channel, the rows brought at Next) and
// ends with the table rows and dense weights of one process training the same model on the
// global batches with a key stage of its own; ranks whose inputs differ in length all end at the
// shortest, at once; a checkpoint requested at different moments on different ranks
// (Quiesce) is taken at the same step everywhere; a checkpoint CheckpointSaverHook takes while
// the stage runs ahead restores to the run that never stopped, bitwise. In a job with a ps (the
// _ps run: chief, worker and ps) the ps serves the stage, holds the rows, equal to the one
// process's, and votes again while a checkpoint holds the workers. Every wait has a deadline,
// and CTest a TIMEOUT.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
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

// kEvictThreshold: the eviction threshold of the evicting model's table, in rows of data time
// (each row's timestamp is one more than the previous row's): below the three batches a stage
// with prefetch_batches 3 holds ahead, so that keeping their keys decides what eviction leaves.
constexpr int64_t kEvictThreshold = 30;

SyntheticOptions Rows(int64_t rows, bool timestamps = false) {
  SyntheticOptions d;
  d.with_timestamps = timestamps;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, kVocab);
  d.num_dense = 2;
  d.seed = 7;
  d.ids_per_feature = 2;
  return d;
}

// Batches: the rows of `rank` of `size` (Shard's rule, row i on rank i % size) in batches of
// kGlobalBatch / size, so that batch k of every rank together is the global batch k.
std::unique_ptr<Dataset> Batches(int64_t rows, int size, int rank, bool timestamps = false) {
  std::unique_ptr<Dataset> all = *SyntheticDataset(Rows(rows, timestamps));
  if (size > 1) all = *Shard(std::move(all), size, rank);
  return *BatchRows(std::move(all), kGlobalBatch / size, {.drop_remainder = true});
}

// Model: C1..C3 -> sparse_lookup of table "emb" (Adagrad, admission at the second sighting) and
// the dense columns -> Mlp -> sigmoid cross-entropy; SGD on the dense weights, averaged over the
// ranks when `ranks` > 1. Its lookups moved to the key stage. `evict`: the table evicts
// (eviction_threshold kEvictThreshold) and the lookups carry the rows' timestamps.
struct Model {
  Graph g;
  Node* train = nullptr;
  std::unique_ptr<Session> session;

  // deterministic: SessionConfig::deterministic (a MonitoredSession then waits for the key
  // stage's full window before the hooks: KeyStage::WaitForWindow; how far the stage has run
  // ahead when a hook runs is then fixed).
  explicit Model(int ranks, bool deterministic = false, bool evict = false) {
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
    if (evict) tc.eviction_threshold = kEvictThreshold;
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
    if (evict) o.timestamps = DatasetColumn(s, "timestamp", DType::kInt64, Shape{b});
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
    SessionConfig config;
    config.deterministic = deterministic;
    session = *Session::Create(g, config);
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

  // TrainEvicting: Train with `hook` run after each step as the Estimator runs it (the step,
  // the stage's window prepared, then EvictRunHook::AfterRun, which evicts through the stage);
  // each step's evictions in `evicted`. `kept_stale`, when given: per step, how many of the table's
  // keys are older than its data time less the threshold and still there (kept for the batches in
  // flight).
  int TrainEvicting(KeyStage& stage, int steps, const EvictHook& hook,
                    std::vector<int64_t>* evicted, std::vector<int64_t>* kept_stale = nullptr) {
    EvictRunHook run_hook(hook);
    const Status begun = run_hook.Begin(nullptr);
    EXPECT_TRUE(begun.ok()) << begun;
    int ran = 0;
    for (; ran < steps; ++ran) {
      if (Train(stage, 1) != 1) break;
      if (session->config().deterministic) stage.WaitForWindow();
      SessionRunContext context;
      context.session = session.get();
      context.key_stage = &stage;
      context.run_index = ran;
      const int64_t before = run_hook.evicted();
      const Status after = run_hook.AfterRun(context, {});
      EXPECT_TRUE(after.ok()) << after;
      if (!after.ok()) break;
      evicted->push_back(run_hook.evicted() - before);
      if (kept_stale == nullptr) continue;
      StatusOr<TableSnapshot> snap =
          (*LookupTable(*session, "emb"))
              ->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
      EXPECT_TRUE(snap.ok()) << snap.status();
      if (!snap.ok()) break;
      kept_stale->push_back(
          std::count_if(snap->timestamps.begin(), snap->timestamps.end(),
                        [&](int64_t t) { return t <= snap->data_time - kEvictThreshold; }));
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

// Eviction through the key stage in a job with ps ranks: the workers' EvictHook (by its time
// interval, on the job's data time) runs KeyStage::AfterStep, and each ps evicts its keys below
// the oldest time of the batches in flight (the workers' and the ones it resolved ahead), so the
// job evicts, step by step, what one process with its key stage evicts on the global batches,
// and ends with its rows, admission counts and dense weights. The threshold is below the window
// of batches resolved ahead, so keeping their keys decides what is evicted: the one process
// keeps keys older than its data time less the threshold at some steps, and so must the ps.
// (Without ps ranks each rank evicts its shard by its own data time: not what this compares.)
TEST_F(KeyStageTest, AKeyStageEvictsLikeOneProcessInAPsJob) {
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  if (job.ps == 0) GTEST_SKIP() << "all-worker jobs evict each shard by its own data time";
  constexpr int kSteps = 12;
  KeyStageOptions ko;
  ko.prefetch_batches = 3;
  Model ranks(size_, /*deterministic=*/true, /*evict=*/true);
  internal::SetTableDecorator(nullptr);
  Model one(1, /*deterministic=*/true, /*evict=*/true);
  internal::SetTableDecorator(dist::MaybeShardTable);
  std::unique_ptr<KeyStage> one_stage =
      *StartAscPipeline(*one.session, Batches(kGlobalBatch * kSteps, 1, 0, true), ko);
  // A time interval below one batch's rows: due after every step.
  const EvictHook every_batch(true, /*evict_time_interval=*/20, /*evict_step_interval=*/0);
  std::vector<int64_t> evicted;
  if (IsPs()) {
    const Status served = RunParameterServer();
    EXPECT_TRUE(served.ok()) << served;
  } else {
    std::unique_ptr<KeyStage> stage =
        *StartAscPipeline(*ranks.session, Batches(kGlobalBatch * kSteps, size_, rank_, true), ko);
    EXPECT_EQ(ranks.TrainEvicting(*stage, kSteps + 5, every_batch, &evicted), kSteps);
    stage.reset();
    const Status ended = EndParameterServers();
    EXPECT_TRUE(ended.ok()) << ended;
  }
  std::vector<int64_t> one_evicted, kept_stale;
  EXPECT_EQ(one.TrainEvicting(*one_stage, kSteps + 5, every_batch, &one_evicted, &kept_stale),
            kSteps);
  EXPECT_GT(std::count_if(one_evicted.begin(), one_evicted.end(), [](int64_t n) { return n > 0; }),
            kSteps / 2)
      << "the interval comes due after most steps";
  ASSERT_FALSE(kept_stale.empty());
  EXPECT_GT(*std::max_element(kept_stale.begin(), kept_stale.end()), 0)
      << "keys of the batches in flight are kept though their time is past the threshold";
  const std::string who = "rank " + std::to_string(rank_) + (IsPs() ? " (ps)" : "");
  if (!IsPs()) {
    EXPECT_EQ(evicted, one_evicted) << who << ": the job's evictions per step";
    ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  }
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
  if (IsPs()) {
    EXPECT_GT(owned, 0) << who;
  }
}

// Eviction through a key stage that runs ahead freely (no deterministic mode) in a ps job, after
// every step: the stage resolves the next batches while the hook evicts, so the ps's stage thread
// is often inside an exchange with the worker's stage, holding the ps's key lock that the
// eviction needs. The worker's AfterStep holds no lock of its own tables across the eviction's
// collectives, so its stage goes on, and every step's eviction ends (a worker that held them
// would wait for the ps and the ps for its stage: DeadlineExceeded). How far the stage ran ahead
// decides what is evicted, so only that the job trains and evicts is checked here.
TEST_F(KeyStageTest, AFreeRunningKeyStageEvictsEveryStepInAPsJob) {
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  if (job.ps == 0) GTEST_SKIP() << "all-worker jobs evict each shard alone (no collective)";
  constexpr int kSteps = 40;
  KeyStageOptions ko;
  ko.prefetch_batches = 4;
  Model ranks(size_, /*deterministic=*/false, /*evict=*/true);
  if (IsPs()) {
    const Status served = RunParameterServer();
    EXPECT_TRUE(served.ok()) << served;
    return;
  }
  std::unique_ptr<KeyStage> stage =
      *StartAscPipeline(*ranks.session, Batches(kGlobalBatch * kSteps, size_, rank_, true), ko);
  std::vector<int64_t> evicted;
  EXPECT_EQ(ranks.TrainEvicting(*stage, kSteps + 5, EvictHook(true, 0, 1), &evicted), kSteps);
  EXPECT_GT(std::count_if(evicted.begin(), evicted.end(), [](int64_t n) { return n > 0; }),
            kSteps / 2);
  stage.reset();
  const Status ended = EndParameterServers();
  EXPECT_TRUE(ended.ok()) << ended;
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

// A checkpoint that CheckpointSaverHook asks for while the key stage runs ahead (a save due by
// its clock, so not planned: the stage has read and resolved batches past the step, their keys
// counted and inserted on their owners, the ps in the _ps run). The hook quiesces the stage; the
// ranks' stages hold at the same batch (with ps ranks the ps votes again while the workers are
// held), the save comes once the training loop has consumed the batches read, and training goes
// on. Restored from that checkpoint into new Sessions, the input resumed at the position it
// recorded, and trained to the end, every rank ends bitwise where the run that never stopped
// ended: the same batches in the same order through the same kernels (deterministic), and a
// checkpoint keeps the rows, slots, admission counts and dense weights exactly (.npy).
TEST_F(KeyStageTest, ACheckpointTakenWhileTheStageRunsAheadRestoresLikeTheNeverStoppedRun) {
  constexpr int kSteps = 12;
  constexpr int kAskAt = 3;  // the hook's clock makes a save due after this step
  KeyStageOptions o;
  o.prefetch_batches = 3;
  int64_t chief_pid = getpid();
  ASSERT_TRUE(
      dist::WithProcessCommunicator([&](dist::Communicator& comm, const DistributedOptions& d) {
        return comm.Broadcast<int64_t>(absl::MakeSpan(&chief_pid, 1), 0,
                                       dist::DeadlineAfterSeconds(d.collective_timeout_s),
                                       {-1, "test/dir"});
      }).ok());
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mpi_key_stage_hold_" +
                          std::to_string(chief_pid);
  const std::string who = "rank " + std::to_string(rank_) + (IsPs() ? " (ps)" : "");
  // The rows this rank owns, with their admission counts (none on a worker of a ps job).
  using Rows = std::map<int64_t, std::pair<std::vector<float>, int64_t>>;
  auto rows_of = [&](Model& m) {
    Rows rows;
    EmbeddingTable* t = *LookupTable(*m.session, "emb");
    for (int64_t id = 0; id < 3 * kVocab + 1000; ++id) {
      if (KeyOwner(id) != rank_) continue;
      const StatusOr<std::vector<float>> row = t->ReadRow(id);
      if (row.ok() || t->AdmissionCount(id) > 0) {
        rows[id] = {row.value_or(std::vector<float>{}), t->AdmissionCount(id)};
      }
    }
    return rows;
  };
  SaverOptions so;
  so.model_dir = dir;

  // The run that never stops; the hook saves once on the way.
  std::vector<float> weights;
  Rows rows;
  std::string checkpoint;
  {
    Model a(size_, /*deterministic=*/true);
    if (IsPs()) {
      // A ps joins the workers' saves through a Saver of its own.
      std::unique_ptr<Saver> saver = *Saver::Create(*a.session, so);
      const Status served = RunParameterServer();
      EXPECT_TRUE(served.ok()) << served;
    } else {
      std::unique_ptr<KeyStage> stage =
          *StartAscPipeline(*a.session, Batches(kGlobalBatch * kSteps, size_, rank_), o);
      int steps = 0;
      CheckpointSaverOptions c;
      c.model_dir = dir;
      c.save_secs = 10;
      c.clock = [&steps] { return steps >= kAskAt ? 100.0 : 0.0; };
      auto hook = std::make_shared<CheckpointSaverHook>(c);
      std::unique_ptr<MonitoredSession> ms = *MonitoredSession::Wrap(*a.session, {hook});
      ms->set_key_stage(stage.get());
      for (;;) {
        FeedList feeds;
        Batch batch;
        const StatusOr<bool> got = stage->Next(&feeds, &batch);
        ASSERT_TRUE(got.ok()) << who << ": " << got.status();
        if (!*got) break;
        ++steps;
        const Status ran = ms->Run(feeds, {}, {a.train->name()}, nullptr, batch.num_valid());
        ASSERT_TRUE(ran.ok()) << who << ", step " << steps << ": " << ran;
      }
      EXPECT_EQ(steps, kSteps) << who;
      const Status closed = ms->Close();  // End: the final checkpoint
      EXPECT_TRUE(closed.ok()) << who << ": " << closed;
      ASSERT_EQ(hook->saved().size(), 2u) << who << ": the one due on the way, and End's";
      checkpoint = hook->saved()[0];
      stage.reset();
      const Status ended = EndParameterServers();
      EXPECT_TRUE(ended.ok()) << ended;
      weights = a.Weights();
    }
    rows = rows_of(a);
  }

  // Restored from the checkpoint taken on the way, trained to the end.
  {
    Model b(size_, /*deterministic=*/true);
    std::unique_ptr<Saver> saver = *Saver::Create(*b.session, so);
    if (IsPs()) {
      const Status served = RunParameterServer();  // the restore arrives announced
      EXPECT_TRUE(served.ok()) << served;
    } else {
      const StatusOr<int64_t> step = saver->Restore(checkpoint);
      ASSERT_TRUE(step.ok()) << who << ": " << step.status();
      // The save waited for the batches read ahead when it fell due: the checkpoint's input
      // position is past the step that asked for it.
      // (deterministic: the window then held the step's batch and the next prefetch_batches - 1,
      // read ahead; so the save came at step 5, with ckpt-5.)
      const int64_t position = saver->restored_dataset_batches();
      EXPECT_GT(position, kAskAt) << who << ": the stage had read no batch ahead";
      EXPECT_EQ(position, kAskAt + o.prefetch_batches - 1) << who;
      EXPECT_EQ(*step, position) << who;
      KeyStageOptions resumed = o;
      resumed.start_batch = position;
      std::unique_ptr<KeyStage> stage =
          *StartAscPipeline(*b.session, Batches(kGlobalBatch * kSteps, size_, rank_), resumed);
      EXPECT_EQ(b.Train(*stage, kSteps), kSteps - position) << who;
      stage.reset();
      const Status ended = EndParameterServers();
      EXPECT_TRUE(ended.ok()) << ended;
      EXPECT_EQ(b.Weights(), weights) << who << ": dense weights differ from the never-stopped run";
    }
    const Rows restored = rows_of(b);
    EXPECT_EQ(restored.size(), rows.size()) << who;
    for (const auto& [id, row] : rows) {
      auto it = restored.find(id);
      ASSERT_NE(it, restored.end()) << who << ", key " << id;
      EXPECT_EQ(it->second.second, row.second) << who << ", admission count of key " << id;
      EXPECT_EQ(it->second.first, row.first) << who << ", row of key " << id;
    }
    dist::JobLayout job;
    ASSERT_TRUE(dist::ProcessJob(&job));
    if (job.ps == 0 || job.is_ps) {
      EXPECT_GT(rows.size(), 0u) << who;
    }
  }
  // Every rank's reads of the directory ended in the restore, a collective of them all.
  if (rank_ == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace recsdk
