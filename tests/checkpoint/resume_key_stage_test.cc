// resume_key_stage_test.cc: a checkpoint taken mid-training while the key stage runs ahead
// (inserting keys and counting admissions for batches the step has not reached) restores to a
// state that resumes bitwise: the same losses and final tables as an uninterrupted run. It needs
// the three things this checkpoint holds beyond variables and tables, and the test shows each
// one matters: the key stage quiesced at one consistent moment (KeyStage::Quiesce), the dataset
// position (batches consumed, KeyStageOptions::start_batch) and the RNG state (the session's run
// count, which keys Dropout's masks).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::SmallTable;
using testing::ValueOrDie;

constexpr int64_t kBatch = 32;

// Synthetic rows, shuffled with a seed (so skipping batches goes through the generic
// Dataset::SkipBatches of the transforms), in batches of kBatch: 24 steps.
std::unique_ptr<Dataset> Data() {
  SyntheticOptions d;
  d.num_rows = 24 * kBatch;
  d.vocabulary_sizes = {300, 300};
  d.ids_per_feature = 2;
  d.num_dense = 3;
  d.with_timestamps = true;
  d.seed = 7;
  d.block_rows = 100;
  auto shuffled = ValueOrDie(Shuffle(ValueOrDie(SyntheticDataset(d)), 64, 5));
  return ValueOrDie(BatchRows(std::move(shuffled), kBatch, {.drop_remainder = true}));
}

struct Model {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
  std::unique_ptr<Session> session;
};

// One table with admission (threshold 2: the key stage counts keys of batches ahead), lookups
// moved to the key stage, Dropout on the MLP's input, Adam + Adagrad.
std::unique_ptr<Model> Build() {
  auto m = std::make_unique<Model>();
  Scope s(m->graph.get());
  m->graph->set_random_seed(3);
  TableConfig tc = SmallTable("emb", 4, 4096);
  tc.access_threshold = 2;
  SparseTable t = ValueOrDie(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.05f)));
  Output c1 = DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 2});
  Output c2 = DatasetColumn(s, "C2", DType::kInt64, Shape{kBatch, 2});
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 3});
  SparseLookupOptions o;
  o.modify_graph = true;
  o.combiner = Combiner::kSum;
  std::vector<Output> parts = ValueOrDie(sparse_lookup(s, t, {c1, c2}, o));
  parts.push_back(dense);
  Output x = ops::Dropout(s, ops::Concat(s, parts, 1), 0.3f, 9);
  Output logits = layers::Mlp(s, x, {.hidden_units = {8}, .output_units = 1});
  m->loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  Node* dense_train = ValueOrDie(adam.Minimize(s, m->loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, m->loss));
  m->train = ops::Group(s, {dense_train, sparse_train});
  m->init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(ModifyGraph(m->graph.get()).ok());
  SessionConfig config;
  config.deterministic = true;
  m->session = ValueOrDie(Session::Create(*m->graph, config));
  EXPECT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  return m;
}

std::unique_ptr<KeyStage> Start(Model& m, int64_t start_batch = 0) {
  KeyStageOptions ko;
  ko.key_process_thread_num = 2;
  ko.prefetch_batches = 3;
  ko.start_batch = start_batch;
  return ValueOrDie(StartAscPipeline(*m.session, Data(), ko));
}

// Runs one step from the stage; false at the end of the data.
bool Step(Model& m, KeyStage& stage, std::vector<float>* losses) {
  FeedList feeds;
  if (!ValueOrDie(stage.Next(&feeds))) return false;
  auto out = m.session->Run(feeds, {m.loss}, {m.train});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return false;
  losses->push_back((*out)[0].scalar<float>());
  return true;
}

std::string TableBytes(Model& m) {
  EmbeddingTable* t = ValueOrDie(LookupTable(*m.session, "emb"));
  TableSnapshot s = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking));
  std::string out(reinterpret_cast<const char*>(s.keys.data()), s.keys.size() * 8);
  out.append(reinterpret_cast<const char*>(s.rows.data()), s.rows.size() * 4);
  out.append(reinterpret_cast<const char*>(s.pending_keys.data()), s.pending_keys.size() * 8);
  out.append(reinterpret_cast<const char*>(s.pending_counts.data()), s.pending_counts.size() * 4);
  return out;
}

struct Resumed {
  std::vector<float> losses;
  std::string table;
};

// A new process's view: build, restore the checkpoint, start the stage where it says, train on.
// `start_batch_override` >= 0 and `reset_rng` break one of the two on purpose.
// `checkpoint` names the one to restore (empty: the latest).
Resumed Resume(const std::string& model_dir, int64_t start_batch_override = -1,
               bool reset_rng = false, const std::string& checkpoint = "") {
  auto m = Build();
  SaverOptions so;
  so.model_dir = model_dir;
  auto saver = ValueOrDie(Saver::Create(*m->session, so));
  EXPECT_TRUE((checkpoint.empty() ? saver->Restore() : saver->Restore(checkpoint)).ok());
  if (reset_rng) m->session->SetRunCount(0);
  const int64_t start =
      start_batch_override >= 0 ? start_batch_override : saver->restored_dataset_batches();
  auto stage = Start(*m, start);
  Resumed r;
  while (Step(*m, *stage, &r.losses)) {
  }
  stage->Stop();
  r.table = TableBytes(*m);
  return r;
}

TEST(ResumeKeyStageTest, MidTrainingCheckpointWithTheKeyStageRunningAheadResumesBitwise) {
  // Uninterrupted.
  std::vector<float> full_losses;
  std::string full_table;
  {
    auto m = Build();
    auto stage = Start(*m);
    while (Step(*m, *stage, &full_losses)) {
    }
    stage->Stop();
    full_table = TableBytes(*m);
  }
  ASSERT_EQ(full_losses.size(), 24u);

  // Interrupted: a save is wanted after step 8, while the stage has batches 9.. resolved.
  const std::string dir = testing::TempDir() + "/resume_key_stage";
  const std::string torn_dir = testing::TempDir() + "/resume_key_stage_torn";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(torn_dir);
  std::vector<float> losses;
  int64_t saved_at = -1;
  {
    auto m = Build();
    auto stage = Start(*m);
    SaverOptions so;
    so.model_dir = dir;
    auto saver = ValueOrDie(Saver::Create(*m->session, so));
    saver->AttachKeyStage(stage.get());
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(Step(*m, *stage, &losses));
    // The stage ran ahead: saving now would mix in batches not trained on.
    auto refused = saver->Save(8);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    // What a Saver without the stage would write once the stage has resolved batches 9..10
    // (waiting on that event: 32 rows x 2 features x 2 ids per batch). The session is
    // deterministic, so batch 8 still counts in the window of 3 until the next Next: the stage
    // runs prefetch_batches - 1 ahead.
    const int64_t ahead_keys = 10 * kBatch * 2 * 2;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (stage->keys_processed() < ahead_keys && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_GE(stage->keys_processed(), ahead_keys) << "the stage never ran 2 batches ahead";
    {
      SaverOptions torn;
      torn.model_dir = torn_dir;
      ASSERT_TRUE(ValueOrDie(Saver::Create(*m->session, torn))->Save(8).ok());
    }
    stage->Quiesce();
    int64_t step = 8;
    while (!stage->Quiescent()) {
      ASSERT_TRUE(Step(*m, *stage, &losses));
      ++step;
      ASSERT_LE(step, 8 + 3) << "the stage should be quiescent within prefetch_batches steps";
    }
    EXPECT_EQ(stage->batches_consumed(), step);
    ASSERT_TRUE(saver->Save(step).ok());
    saved_at = step;
    // Training goes on after the save, unchanged by the pause.
    while (Step(*m, *stage, &losses)) {
    }
    // The input ran to its end and every batch was trained on: the tables are one consistent
    // moment without any Quiesce, so a save with the stage attached is accepted (issue 30: the
    // Estimator's final save warned after every Train to the end of its input).
    EXPECT_TRUE(stage->Quiescent());
    {
      SaverOptions end;
      end.model_dir = testing::TempDir() + "/resume_key_stage_end";
      std::filesystem::remove_all(end.model_dir);
      auto end_saver = ValueOrDie(Saver::Create(*m->session, end));
      end_saver->AttachKeyStage(stage.get());
      EXPECT_TRUE(end_saver->Save(99).ok());
    }
    stage->Stop();
    EXPECT_TRUE(TableBytes(*m) == full_table) << "quiescing changed the run";
  }
  ASSERT_EQ(losses, full_losses) << "quiescing changed the losses";

  const std::vector<float> rest(full_losses.begin() + saved_at, full_losses.end());
  Resumed resumed = Resume(dir);
  EXPECT_EQ(resumed.losses, rest);
  EXPECT_TRUE(resumed.table == full_table);

  // Each part of the state matters. Taken while the stage ran ahead, the checkpoint counts the
  // admissions of batches 9.. twice on resume:
  Resumed torn = Resume(torn_dir, /*start_batch_override=*/8);
  EXPECT_FALSE(torn.table == full_table);
  // From the first batch, or with a fresh RNG, the run differs.
  Resumed from_start = Resume(dir, /*start_batch_override=*/0);
  EXPECT_NE(from_start.losses, rest);
  Resumed fresh_rng = Resume(dir, -1, /*reset_rng=*/true);
  ASSERT_EQ(fresh_rng.losses.size(), rest.size());
  EXPECT_NE(fresh_rng.losses, rest);
}

// Trains through a MonitoredSession until step 12 with the given hooks; returns the losses and
// the final table.
Resumed TrainMonitored(Model& m, KeyStage& stage, HookList hooks) {
  hooks.push_back(std::make_shared<StopAtStepHook>(StopAtStepHook::LastStep(12)));
  auto ms = ValueOrDie(MonitoredSession::Wrap(*m.session, std::move(hooks)));
  ms->set_key_stage(&stage);
  Resumed r;
  FeedList feeds;
  while (!ms->ShouldStop() && ValueOrDie(stage.Next(&feeds))) {
    std::vector<Tensor> out;
    EXPECT_TRUE(ms->Run(feeds, {m.loss}, {m.train}, &out).ok());
    if (out.size() != 1) break;
    r.losses.push_back(out[0].scalar<float>());
  }
  EXPECT_TRUE(ms->Close().ok());
  stage.Stop();
  r.table = TableBytes(m);
  return r;
}

// CheckpointSaverHook with the key stage running ahead: saves land exactly on save_steps and on
// the last step (planned, no pause), each one consistent and with its dataset position, and the
// mid-training one resumes bitwise.
TEST(ResumeKeyStageTest, CheckpointSaverHookPlansConsistentSavesAtTheirSteps) {
  const std::string dir = testing::TempDir() + "/resume_key_stage_hook";
  std::filesystem::remove_all(dir);
  std::vector<std::string> saved;
  Resumed run;
  {
    auto m = Build();
    auto stage = Start(*m);
    CheckpointSaverOptions co;
    co.model_dir = dir;
    co.save_steps = 5;
    co.last_step = 12;
    co.keep_checkpoint_max = 0;
    auto hook = std::make_shared<CheckpointSaverHook>(co);
    run = TrainMonitored(*m, *stage, {hook});
    saved = hook->saved();
  }
  ASSERT_EQ(run.losses.size(), 12u);
  ASSERT_EQ(saved.size(), 3u);
  for (size_t i = 0; i < saved.size(); ++i) {
    const int64_t step = i == 0 ? 5 : i == 1 ? 10 : 12;
    EXPECT_EQ(std::filesystem::path(saved[i]).filename(), "ckpt-" + std::to_string(step));
    // The restored state says which batch to start from: the step's own.
    auto m = Build();
    SaverOptions so;
    so.model_dir = dir;
    auto saver = ValueOrDie(Saver::Create(*m->session, so));
    ASSERT_TRUE(saver->Restore(saved[i]).ok());
    EXPECT_EQ(saver->restored_dataset_batches(), step);
    if (step == 12) {
      EXPECT_TRUE(TableBytes(*m) == run.table) << "End saved a consistent moment";
    }
  }
  // Resuming from ckpt-5 the same way replays steps 6..12 bitwise.
  auto m = Build();
  SaverOptions so;
  so.model_dir = dir;
  auto saver = ValueOrDie(Saver::Create(*m->session, so));
  ASSERT_TRUE(saver->Restore("ckpt-5").ok());
  auto stage = Start(*m, saver->restored_dataset_batches());
  // The same saver plan as the first run: its saves (planned for steps 10 and 12) stop the stage
  // reading past the last step, so both runs end with the stage at the same point; without it
  // the deterministic window would resolve batches 13.. (and insert their keys) here only.
  CheckpointSaverOptions again;
  again.model_dir = dir + "_resumed";
  again.save_steps = 5;
  again.last_step = 12;
  std::filesystem::remove_all(again.model_dir);
  Resumed resumed = TrainMonitored(*m, *stage, {std::make_shared<CheckpointSaverHook>(again)});
  EXPECT_EQ(resumed.losses, std::vector<float>(run.losses.begin() + 5, run.losses.end()));
  EXPECT_TRUE(resumed.table == run.table);
}

// The never-stopped run: every batch of the data, no hooks, no pause.
Resumed NeverStopped() {
  auto m = Build();
  auto stage = Start(*m);
  Resumed r;
  while (Step(*m, *stage, &r.losses)) {
  }
  stage->Stop();
  r.table = TableBytes(*m);
  return r;
}

// Each checkpoint a hook saved lands at the step in `steps` (same order), records that step as
// its dataset position, and resumes to the never-stopped run: the same later losses and the same
// final table.
void ExpectSavedAtAndResumes(const std::vector<std::string>& saved,
                             const std::vector<int64_t>& steps, const std::string& dir,
                             const Resumed& never_stopped) {
  std::vector<std::string> names, want;
  for (const std::string& s : saved) names.push_back(std::filesystem::path(s).filename());
  for (int64_t step : steps) want.push_back("ckpt-" + std::to_string(step));
  ASSERT_EQ(names, want) << dir;
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(saved[i]);
    Resumed r = Resume(dir, -1, false, saved[i]);
    EXPECT_EQ(r.losses, std::vector<float>(never_stopped.losses.begin() + steps[i],
                                           never_stopped.losses.end()));
    EXPECT_TRUE(r.table == never_stopped.table);
  }
}

// Two CheckpointSaverHooks on one key stage (like the Estimator's own, which plans its saves and
// the last step, beside one of the user's with other save_steps): each plans its next save with
// Quiesce(at), and the stage stops reading at every such step, the lowest first, so each hook's
// checkpoints land at the steps they were due, in either hook order, and resume to the
// never-stopped run. (When a later Quiesce replaced the limit, the hook listed last moved the
// other's saves to its own next step: ckpt-5 landed at 6, ckpt-3 at 5.)
TEST(ResumeKeyStageTest, TwoCheckpointSaverHooksEachSaveAtTheirOwnSteps) {
  const Resumed never_stopped = NeverStopped();
  ASSERT_EQ(never_stopped.losses.size(), 24u);
  for (const bool estimators_first : {true, false}) {
    SCOPED_TRACE(estimators_first ? "estimator's hook first" : "user's hook first");
    const std::string dir_a = testing::TempDir() + "/two_savers_estimator";
    const std::string dir_b = testing::TempDir() + "/two_savers_user";
    std::filesystem::remove_all(dir_a);
    std::filesystem::remove_all(dir_b);
    CheckpointSaverOptions a;
    a.model_dir = dir_a;
    a.save_steps = 5;
    a.last_step = 12;
    a.keep_checkpoint_max = 0;
    CheckpointSaverOptions b;
    b.model_dir = dir_b;
    b.save_steps = 3;
    b.keep_checkpoint_max = 0;
    auto hook_a = std::make_shared<CheckpointSaverHook>(a);
    auto hook_b = std::make_shared<CheckpointSaverHook>(b);
    auto m = Build();
    auto stage = Start(*m);
    const Resumed run = TrainMonitored(
        *m, *stage, estimators_first ? HookList{hook_a, hook_b} : HookList{hook_b, hook_a});
    EXPECT_EQ(run.losses,
              std::vector<float>(never_stopped.losses.begin(), never_stopped.losses.begin() + 12));
    ExpectSavedAtAndResumes(hook_a->saved(), {5, 10, 12}, dir_a, never_stopped);
    // Step 12 is due for save_steps 3 too, and the stage is quiescent there (the other hook's
    // last_step), so End has nothing left to save.
    ExpectSavedAtAndResumes(hook_b->saved(), {3, 6, 9, 12}, dir_b, never_stopped);
  }
}

// An unplanned save (save_secs) beside a hook that holds the stage only at the last step: the
// unplanned save quiesces the stage at once and lands within prefetch_batches steps of its due
// time, not at the other hook's planned step (where it landed when the other hook's Quiesce(at)
// raised the limit again each step).
TEST(ResumeKeyStageTest, AnUnplannedSaveBesideAPlannedOneWaitsOnlyForTheStageToCatchUp) {
  const Resumed never_stopped = NeverStopped();
  for (const bool planned_first : {true, false}) {
    SCOPED_TRACE(planned_first ? "planned hook first" : "unplanned hook first");
    const std::string dir_a = testing::TempDir() + "/unplanned_beside_planned_a";
    const std::string dir_c = testing::TempDir() + "/unplanned_beside_planned_c";
    std::filesystem::remove_all(dir_a);
    std::filesystem::remove_all(dir_c);
    auto m = Build();
    auto stage = Start(*m);
    CheckpointSaverOptions a;
    a.model_dir = dir_a;
    a.last_step = 12;
    a.keep_checkpoint_max = 0;
    CheckpointSaverOptions c;
    c.model_dir = dir_c;
    c.save_secs = 7;
    c.keep_checkpoint_max = 0;
    // The clock counts batches, so the save falls due at step 7 exactly, however loaded the host.
    c.clock = [s = stage.get()] { return static_cast<double>(s->batches_consumed()); };
    auto hook_a = std::make_shared<CheckpointSaverHook>(a);
    auto hook_c = std::make_shared<CheckpointSaverHook>(c);
    const Resumed run = TrainMonitored(
        *m, *stage, planned_first ? HookList{hook_a, hook_c} : HookList{hook_c, hook_a});
    EXPECT_EQ(run.losses,
              std::vector<float>(never_stopped.losses.begin(), never_stopped.losses.begin() + 12));
    ExpectSavedAtAndResumes(hook_a->saved(), {12}, dir_a, never_stopped);
    const std::vector<std::string>& saved = hook_c->saved();
    ASSERT_EQ(saved.size(), 2u);
    const std::string first = std::filesystem::path(saved[0]).filename();
    ASSERT_EQ(first.rfind("ckpt-", 0), 0u) << first;
    const int64_t step = std::stoll(first.substr(5));
    EXPECT_GE(step, 7);
    EXPECT_LE(step, 7 + 3) << "at most prefetch_batches steps after it fell due";
    ExpectSavedAtAndResumes(saved, {step, 12}, dir_c, never_stopped);
  }
}

TEST(ResumeKeyStageTest, SkipBatchesSeeksOrReads) {
  SyntheticOptions d;
  d.num_rows = 1000;
  d.vocabulary_sizes = {10};
  d.block_rows = 100;
  // Synthetic sources seek; a shuffled one reads through. Both land where GetNext would.
  for (bool shuffled : {false, true}) {
    auto make = [&] {
      std::unique_ptr<Dataset> ds = ValueOrDie(SyntheticDataset(d));
      if (shuffled) ds = ValueOrDie(Shuffle(std::move(ds), 50, 1, {.output_rows = 100}));
      return ds;
    };
    auto a = make(), b = make();
    Batch skipped, want, got;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ValueOrDie(a->GetNext(&skipped)));
    EXPECT_EQ(ValueOrDie(b->SkipBatches(3)), 3);
    ASSERT_TRUE(ValueOrDie(a->GetNext(&want)));
    ASSERT_TRUE(ValueOrDie(b->GetNext(&got)));
    EXPECT_EQ(want.DebugString(), got.DebugString());
    const Tensor* wl = want.column("label");
    const Tensor* gl = got.column("label");
    ASSERT_TRUE(wl != nullptr && gl != nullptr);
    EXPECT_EQ(std::string(static_cast<const char*>(wl->raw_data()), wl->TotalBytes()),
              std::string(static_cast<const char*>(gl->raw_data()), gl->TotalBytes()));
    EXPECT_EQ(ValueOrDie(b->SkipBatches(100)), 6) << "past the end: only what is left";
    EXPECT_EQ(b->SkipBatches(-1).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace recsdk
