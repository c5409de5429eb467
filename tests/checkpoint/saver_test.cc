// saver_test.cc: the Saver (src/checkpoint/saver.cc) on a small model (a table with admission
// and eviction, an MLP, Adam + Adagrad): stop and resume is bitwise the same as an uninterrupted
// run (full checkpoints and delta chains), corruption of any file is DataLoss naming it and
// changes nothing, a different model is FailedPrecondition naming the table and both values,
// file-system faults leave the previous checkpoint the latest, and a process killed with SIGKILL
// in the middle of saves leaves a restorable latest checkpoint.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/env.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

constexpr int64_t kBatch = 32, kIds = 2, kDense = 3;

struct Model {
  Graph graph;
  Output ids, dense, label, loss;
  Node* train = nullptr;
  Node* init = nullptr;
  std::unique_ptr<Session> session;
};

struct ModelOptions {
  int dim = 4;
  int64_t vocab = 4096;
  SparseOptimizerConfig sparse = SparseOptimizerConfig::Adagrad(0.1f);
  bool is_save = true;
};

std::unique_ptr<Model> BuildModel(const ModelOptions& o = {}) {
  auto m = std::make_unique<Model>();
  Scope s(&m->graph);
  m->graph.set_random_seed(11);
  TableConfig tc = testing::SmallTable("user_table", o.dim, o.vocab);
  tc.access_threshold = 2;
  tc.eviction_threshold = 1000;
  tc.is_save = o.is_save;
  SparseTable table = ValueOrDie(create_table(s, tc, o.sparse));
  m->ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{kBatch, kIds});
  m->dense = ops::Placeholder(s.WithOpName("dense"), DType::kFloat32, Shape{kBatch, kDense});
  m->label = ops::Placeholder(s.WithOpName("label"), DType::kFloat32, Shape{kBatch, 1});
  Output ts = ops::Placeholder(s.WithOpName("ts"), DType::kInt64, Shape{kBatch});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  lo.timestamps = ts;
  std::vector<Output> emb = ValueOrDie(sparse_lookup(s, table, std::vector<Output>{m->ids}, lo));
  emb.push_back(m->dense);
  layers::MlpOptions mlp;
  mlp.hidden_units = {8};
  mlp.output_units = 1;
  Output logits = layers::Mlp(s, ops::Concat(s, emb, 1), mlp);
  m->loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, m->label, logits));
  AdamOptions ao;
  ao.learning_rate = 0.01;
  AdamOptimizer adam(ao);
  Node* dense_train = ValueOrDie(adam.Minimize(s, m->loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, m->loss));
  m->train = ops::Group(s, {dense_train, sparse_train});
  m->init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  SessionConfig config;
  config.deterministic = true;
  m->session = ValueOrDie(Session::Create(m->graph, config));
  return m;
}

// Feeds of step `step` (1-based): fixed data with a planted signal (label = key parity). Keys
// drift with the step so that old keys get evicted by data time.
FeedList StepFeeds(int64_t step) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919u);
  std::vector<int64_t> ids(kBatch * kIds), ts(kBatch, step * 100);
  std::vector<float> dense(kBatch * kDense), label(kBatch);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = 0; j < kIds; ++j)
      ids[b * kIds + j] = step * 3 + static_cast<int64_t>(rng() % 60);
    for (int64_t j = 0; j < kDense; ++j) {
      dense[b * kDense + j] = static_cast<float>(rng() % 1000) / 1000.0f - 0.5f;
    }
    label[b] = static_cast<float>(ids[b * kIds] % 2);
  }
  return {{"ids", ValueOrDie(Tensor::FromValues<int64_t>(Shape{kBatch, kIds}, ids))},
          {"dense", ValueOrDie(Tensor::FromValues<float>(Shape{kBatch, kDense}, dense))},
          {"label", ValueOrDie(Tensor::FromValues<float>(Shape{kBatch, 1}, label))},
          {"ts", ValueOrDie(Tensor::FromValues<int64_t>(Shape{kBatch}, ts))}};
}

float Step(Model& m, int64_t step) {
  auto out = m.session->Run(StepFeeds(step), {m.loss}, {m.train});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].data<float>()[0] : -1.0f;
}

// State: every variable's bytes and the table's full snapshot, for bitwise comparisons.
struct State {
  std::map<std::string, std::string> vars;
  TableSnapshot table;
};
State Capture(Model& m) {
  State st;
  for (const Variable& v : GlobalVariables(m.session->graph())) {
    Tensor t = ValueOrDie(m.session->Run({}, {v.value()}))[0];
    st.vars[v.name()] = std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes());
  }
  EmbeddingTable* t = ValueOrDie(LookupTable(*m.session, "user_table"));
  st.table = ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking));
  return st;
}
void ExpectSameState(const State& a, const State& b) {
  EXPECT_EQ(a.vars, b.vars);
  EXPECT_EQ(a.table.keys, b.table.keys);
  EXPECT_EQ(a.table.rows, b.table.rows);
  EXPECT_EQ(a.table.timestamps, b.table.timestamps);
  EXPECT_EQ(a.table.pending_keys, b.table.pending_keys);
  EXPECT_EQ(a.table.pending_counts, b.table.pending_counts);
  EXPECT_EQ(a.table.data_time, b.table.data_time);
}

std::string FreshDir(const std::string& leaf) {
  const std::string dir = testing::TempDir() + "/saver_test_" + leaf;
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<Saver> MakeSaver(Model& m, SaverOptions o) {
  return ValueOrDie(Saver::Create(*m.session, o));
}

TEST(SaverTest, ResumeAfterFullCheckpointIsBitwiseIdentical) {
  constexpr int64_t kStop = 8, kEnd = 16;
  const std::string dir = FreshDir("resume");
  // Uninterrupted run that saves at kStop.
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  std::vector<float> losses_a;
  auto saver_a = MakeSaver(*a, {.model_dir = dir});
  for (int64_t step = 1; step <= kEnd; ++step) {
    losses_a.push_back(Step(*a, step));
    if (step == kStop) {
      auto path = saver_a->Save(step);
      ASSERT_TRUE(path.ok()) << path.status();
      EXPECT_EQ(*path, dir + "/ckpt-8");
    }
  }
  // A table eviction happened in between, and keys are pending admission: the state is rich.
  // Resumed run: a fresh process-like model, restored (no init op run), then the same steps.
  auto b = BuildModel();
  auto saver_b = MakeSaver(*b, {.model_dir = dir});
  EXPECT_EQ(ValueOrDie(saver_b->LatestCheckpoint()), dir + "/ckpt-8");
  auto restored = saver_b->Restore();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, kStop);
  for (int64_t step = kStop + 1; step <= kEnd; ++step) {
    const float loss = Step(*b, step);
    EXPECT_EQ(loss, losses_a[step - 1]) << "step " << step;
  }
  ExpectSameState(Capture(*a), Capture(*b));
  const State st = Capture(*b);
  EXPECT_GT(st.table.keys.size(), 10u);
  EXPECT_FALSE(st.table.pending_keys.empty());
}

TEST(SaverTest, AsyncWriteSavesTheSnapshotMomentWhileTrainingGoesOn) {
  const std::string dir = FreshDir("async");
  internal::FaultInjectionEnv env(internal::Env::Default());
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  auto saver = MakeSaver(
      *a, {.model_dir = dir, .is_incremental_checkpoint = true, .async_write = true, .env = &env});
  std::vector<float> losses;
  for (int64_t step = 1; step <= 8; ++step) losses.push_back(Step(*a, step));
  EXPECT_EQ(ValueOrDie(saver->Save(8)), dir + "/ckpt-8");
  const State at8 = Capture(*a);
  // Training goes on while the files are written; the checkpoint still holds step 8.
  for (int64_t step = 9; step <= 12; ++step) losses.push_back(Step(*a, step));
  ASSERT_TRUE(saver->WaitForWrites().ok());
  auto b = BuildModel();
  EXPECT_EQ(ValueOrDie(MakeSaver(*b, {.model_dir = dir})->Restore()), 8);
  ExpectSameState(at8, Capture(*b));
  for (int64_t step = 9; step <= 12; ++step) EXPECT_EQ(Step(*b, step), losses[step - 1]);

  // A failed background write comes back from WaitForWrites and breaks the delta chain.
  env.fail_write_after = 2;
  EXPECT_TRUE(saver->Save(12).ok());
  const Status failed = saver->WaitForWrites();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  env.fail_write_after = -1;
  EXPECT_EQ(ValueOrDie(saver->LatestCheckpoint()), dir + "/ckpt-8");
  EXPECT_EQ(saver->SaveDelta(13).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(saver->Save(13).ok());
  ASSERT_TRUE(saver->SaveDelta(14).ok());
  EXPECT_EQ(ValueOrDie(saver->LatestCheckpoint()), dir + "/ckpt-14");
}

TEST(SaverTest, DeltaChainAndRestoreModelVersionAreBitwiseIdentical) {
  const std::string dir = FreshDir("delta");
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  auto saver_a = MakeSaver(*a, {.model_dir = dir, .is_incremental_checkpoint = true});
  EXPECT_EQ(saver_a->SaveDelta(1).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> losses;
  std::map<int64_t, State> states;
  for (int64_t step = 1; step <= 20; ++step) {
    losses.push_back(Step(*a, step));
    if (step == 4) {
      ASSERT_TRUE(saver_a->Save(step).ok());
    }
    if (step == 8 || step == 12) {
      auto p = saver_a->SaveDelta(step);
      ASSERT_TRUE(p.ok()) << p.status();
    }
    if (step == 8 || step == 12) states[step] = Capture(*a);
  }
  // The delta of 4 steps holds fewer rows than the table.
  // Latest (the delta at 12): full 4 + deltas 8, 12.
  for (int64_t version : {int64_t{-1}, int64_t{8}}) {
    auto b = BuildModel();
    auto saver_b = MakeSaver(
        *b,
        {.model_dir = dir, .is_incremental_checkpoint = true, .restore_model_version = version});
    auto restored = saver_b->Restore();
    ASSERT_TRUE(restored.ok()) << restored.status();
    const int64_t at = version < 0 ? 12 : 8;
    EXPECT_EQ(*restored, at);
    ExpectSameState(states[at], Capture(*b));
    for (int64_t step = at + 1; step <= 20; ++step) {
      EXPECT_EQ(Step(*b, step), losses[step - 1]) << "version " << version << " step " << step;
    }
    ExpectSameState(Capture(*a), Capture(*b));
  }
}

TEST(SaverTest, RetentionKeepsNewestAndTheFullCheckpointsTheirDeltasNeed) {
  const std::string dir = FreshDir("retention");
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  auto saver = MakeSaver(
      *a, {.model_dir = dir, .keep_checkpoint_max = 2, .is_incremental_checkpoint = true});
  ASSERT_TRUE(saver->Save(1).ok());
  ASSERT_TRUE(saver->Save(2).ok());
  ASSERT_TRUE(saver->Save(3).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-1"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-2"));
  ASSERT_TRUE(saver->SaveDelta(4).ok());
  ASSERT_TRUE(saver->SaveDelta(5).ok());
  // Newest two are deltas 4 and 5; both build on full 3, which stays.
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-2"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-3"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-4"));
  auto b = BuildModel();
  EXPECT_EQ(ValueOrDie(MakeSaver(*b, {.model_dir = dir})->Restore()), 5);
}

// Flips one bit of `path` at `offset` from the end.
void FlipBit(const std::string& path, std::streamoff from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(SaverTest, CorruptTruncatedOrMissingFilesAreDataLossNamingTheFile) {
  const std::string dir = FreshDir("corrupt");
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  for (int64_t step = 1; step <= 3; ++step) Step(*a, step);
  ASSERT_TRUE(MakeSaver(*a, {.model_dir = dir})->Save(3).ok());
  const std::string ckpt = dir + "/ckpt-3";
  std::vector<std::string> files = {dir + "/checkpoint"};
  for (const auto& e : std::filesystem::directory_iterator(ckpt)) files.push_back(e.path());
  ASSERT_GT(files.size(), 10u);  // index, manifest, variables, table payloads

  auto b = BuildModel();
  ASSERT_TRUE(b->session->Run({}, {}, {b->init}).ok());
  auto saver_b = MakeSaver(*b, {.model_dir = dir});
  const State before = Capture(*b);
  for (const std::string& file : files) {
    const std::string backup = file + ".bak";
    std::filesystem::copy_file(file, backup);
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(file));
    auto expect = [&](const std::string& what) {
      auto r = saver_b->Restore();
      ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss)
          << file << " " << what << ": " << r.status();
      EXPECT_NE(std::string(r.status().message()).find(file), std::string::npos) << r.status();
      ExpectSameState(before, Capture(*b));
    };
    FlipBit(file, 1);
    expect("last byte flipped");
    std::filesystem::copy_file(backup, file, std::filesystem::copy_options::overwrite_existing);
    FlipBit(file, size / 2 + 1);
    expect("middle byte flipped");
    std::filesystem::copy_file(backup, file, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(file, static_cast<uintmax_t>(size - 1));
    expect("truncated");
    std::filesystem::remove(file);
    expect("deleted");
    std::filesystem::rename(backup, file);
  }
  EXPECT_EQ(ValueOrDie(saver_b->Restore()), 3);
}

TEST(SaverTest, DifferentModelIsFailedPreconditionNamingTableAndBothValues) {
  const std::string dir = FreshDir("mismatch");
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  Step(*a, 1);
  ASSERT_TRUE(MakeSaver(*a, {.model_dir = dir})->Save(1).ok());
  auto expect = [&](ModelOptions o, const std::vector<std::string>& needles) {
    auto b = BuildModel(o);
    ASSERT_TRUE(b->session->Run({}, {}, {b->init}).ok());
    const State before = Capture(*b);
    const Status s = MakeSaver(*b, {.model_dir = dir})->Restore().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(s.message()).find(n), std::string::npos) << n << " in " << s;
    }
    ExpectSameState(before, Capture(*b));
  };
  // A different table dim changes the MLP's input too; the table is checked by name either way,
  // so keep the MLP input equal by changing only the optimizer first.
  expect({.sparse = SparseOptimizerConfig::LazyAdam()},
         {"user_table", "optimizer Adagrad", "optimizer LazyAdam"});
}

TEST(SaverTest, TablesWithIsSaveFalseAreLeftOut) {
  const std::string dir = FreshDir("is_save");
  auto a = BuildModel({.is_save = false});
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  for (int64_t step = 1; step <= 3; ++step) Step(*a, step);
  ASSERT_GT(ValueOrDie(LookupTable(*a->session, "user_table"))->size(), 0);
  ASSERT_TRUE(MakeSaver(*a, {.model_dir = dir})->Save(3).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-3/table_0_rows.npy"));
  auto b = BuildModel({.is_save = false});
  EXPECT_EQ(ValueOrDie(MakeSaver(*b, {.model_dir = dir})->Restore()), 3);
  EXPECT_EQ(ValueOrDie(LookupTable(*b->session, "user_table"))->size(), 0);
  EXPECT_EQ(Capture(*a).vars, Capture(*b).vars);
}

TEST(SaverTest, FileSystemFaultsLeaveThePreviousCheckpointLatest) {
  const std::string dir = FreshDir("faults");
  internal::FaultInjectionEnv env(internal::Env::Default());
  auto a = BuildModel();
  ASSERT_TRUE(a->session->Run({}, {}, {a->init}).ok());
  auto saver = MakeSaver(*a, {.model_dir = dir, .is_incremental_checkpoint = true, .env = &env});
  Step(*a, 1);
  ASSERT_TRUE(saver->Save(1).ok());
  const State at1 = Capture(*a);
  Step(*a, 2);
  auto expect_latest_1 = [&](const Status& s, absl::StatusCode code, const std::string& what) {
    EXPECT_EQ(s.code(), code) << what << ": " << s;
    EXPECT_EQ(ValueOrDie(saver->LatestCheckpoint()), dir + "/ckpt-1") << what;
    auto b = BuildModel();
    EXPECT_EQ(ValueOrDie(MakeSaver(*b, {.model_dir = dir})->Restore()), 1) << what;
    ExpectSameState(at1, Capture(*b));
  };
  for (int64_t nth : {0, 3, 9}) {
    env.fail_write_after = nth;
    expect_latest_1(saver->Save(2).status(), absl::StatusCode::kInternal,
                    "write " + std::to_string(nth) + " fails");
    env.fail_write_after = -1;
  }
  // A failed save breaks the delta chain.
  EXPECT_EQ(saver->SaveDelta(2).status().code(), absl::StatusCode::kFailedPrecondition);
  env.disk_full_after_bytes = 2000;
  const Status full = saver->Save(2).status();
  EXPECT_NE(std::string(full.message()).find("free disk space"), std::string::npos) << full;
  expect_latest_1(full, absl::StatusCode::kResourceExhausted, "disk full");
  env.disk_full_after_bytes = -1;
  env.fail_rename = true;
  expect_latest_1(saver->Save(2).status(), absl::StatusCode::kInternal, "rename fails");
  env.fail_rename = false;
  // Short reads are retried, not mistaken for the end of the file.
  env.short_read_bytes = 7;
  auto b = BuildModel();
  EXPECT_EQ(ValueOrDie(MakeSaver(*b, {.model_dir = dir, .env = &env})->Restore()), 1);
  env.short_read_bytes = -1;
  ASSERT_TRUE(saver->Save(2).ok());
  EXPECT_EQ(ValueOrDie(saver->LatestCheckpoint()), dir + "/ckpt-2");
}

TEST(SaverTest, OptionsAreValidated) {
  auto a = BuildModel();
  EXPECT_EQ(Saver::Create(*a->session, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Saver::Create(*a->session, {.model_dir = "x", .keep_checkpoint_max = -1}).status().code(),
      absl::StatusCode::kInvalidArgument);
  const std::string dir = FreshDir("options");
  auto saver = MakeSaver(*a, {.model_dir = dir});
  EXPECT_EQ(saver->Restore().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(saver->LatestCheckpoint().status().code(), absl::StatusCode::kNotFound);
  // Saving before the init op ran names the variable.
  const Status s = saver->Save(0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("is not initialised"), std::string::npos) << s;
  EXPECT_EQ(saver->SaveDelta(1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TableCheckpointTest, SaveTableRestoreTableRoundTripCorruptionAndMismatch) {
  TableConfig c = testing::SmallTable("t", 4, 100);
  c.access_threshold = 2;
  auto t = ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad()));
  std::vector<int64_t> keys = {1, 2, 3};
  std::vector<uint32_t> counts = {2, 2, 1}, rows(3);
  ASSERT_TRUE(t->Resolve(keys, counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  const std::string dir = FreshDir("table");
  ASSERT_TRUE(SaveTable(*t, dir).ok());
  auto u = ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad()));
  ASSERT_TRUE(RestoreTable(*u, dir).ok());
  EXPECT_EQ(*u->ReadRow(2), *t->ReadRow(2));
  EXPECT_EQ(u->AdmissionCount(3), 1.0f);
  auto w = ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)));
  const Status mismatch = RestoreTable(*w, dir);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kFailedPrecondition) << mismatch;
  FlipBit(dir + "/rows.npy", 2);
  auto v = ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad()));
  const Status corrupt = RestoreTable(*v, dir);
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss) << corrupt;
  EXPECT_NE(std::string(corrupt.message()).find("rows.npy"), std::string::npos) << corrupt;
  EXPECT_EQ(v->size(), 0);
  EXPECT_EQ(RestoreTable(*v, dir + "/missing").code(), absl::StatusCode::kDataLoss);
}

TEST(TableCheckpointTest, StreamedPayloadsEqualThoseOfACopiedSnapshotAndFaultsStopThem) {
  // Several 4 MiB pieces of rows, with timestamps and pending admission counts.
  TableConfig c = testing::SmallTable("t", 8, 400000);
  c.access_threshold = 2;
  c.eviction_threshold = 1000;
  auto t = ValueOrDie(EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad()));
  std::vector<int64_t> keys(300000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 7919 % 300007) - 5;
  std::vector<uint32_t> counts(keys.size(), 2), rows(keys.size());
  counts[7] = 1;  // pending, not admitted
  std::vector<int64_t> ts(keys.size(), 42);
  ASSERT_TRUE(t->Resolve(keys, counts, ts, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  internal::Env* env = internal::Env::Default();
  const std::string copied = FreshDir("copied"), streamed = FreshDir("streamed");
  std::filesystem::create_directories(copied);
  std::filesystem::create_directories(streamed);
  const TableSnapshot snap =
      ValueOrDie(t->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking));
  const auto a = ValueOrDie(internal::WriteTablePayloads(env, copied, "p_", snap));
  const auto b = ValueOrDie(internal::SnapshotAndWriteTable(
      env, streamed, "p_", *t, EmbeddingTable::SnapshotKind::kFullKeepTracking));
  EXPECT_EQ(a, b);  // same files, sizes and CRC32Cs
  EXPECT_EQ(a["files"]["rows"]["shape"], nlohmann::json({299999, 16}));  // key 7 is pending
  // A failed write or a full disk while the rows stream: the error names the file.
  internal::FaultInjectionEnv faulty(env);
  faulty.fail_write_after = 2;
  const auto failed = internal::SnapshotAndWriteTable(&faulty, streamed, "q_", *t,
                                                      EmbeddingTable::SnapshotKind::kFull);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  faulty.fail_write_after = -1;
  faulty.disk_full_after_bytes = 6 << 20;
  const auto full = internal::SnapshotAndWriteTable(&faulty, streamed, "q_", *t,
                                                    EmbeddingTable::SnapshotKind::kFull);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_NE(std::string(full.status().message()).find("q_rows.npy"), std::string::npos)
      << full.status();
}

// The child side of the SIGKILL test: saves again and again until killed.
TEST(SaverKillTest, ChildSavesUntilKilled) {
  const char* dir = std::getenv("RECSDK_SAVER_KILL_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by SaverKillTest.KilledMidSave only";
  auto m = BuildModel({.vocab = 1 << 16});
  auto saver = MakeSaver(*m, {.model_dir = dir, .keep_checkpoint_max = 3});
  int64_t step = 0;
  auto restored = saver->Restore();
  if (restored.ok()) {
    step = *restored;
  } else {
    ASSERT_TRUE(m->session->Run({}, {}, {m->init}).ok());
  }
  // Grow the table so a save takes a while (tens of thousands of rows).
  EmbeddingTable* t = ValueOrDie(LookupTable(*m->session, "user_table"));
  std::vector<int64_t> keys(40000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000000 + static_cast<int64_t>(i);
  std::vector<uint32_t> counts(keys.size(), 5), rows(keys.size());
  ASSERT_TRUE(t->Resolve(keys, counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  for (;;) {
    ++step;
    Step(*m, step);
    ASSERT_TRUE(saver->Save(step).ok());
  }
}

// LatestInIndex: the "latest" the index file names now ("" when there is none or it is being
// replaced; the rename is atomic, so a reader sees the old or the new file).
std::string LatestInIndex(const std::string& dir) {
  std::ifstream in(dir + "/checkpoint");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t at = text.find("\"latest\": \"");
  if (at == std::string::npos) return "";
  const size_t begin = at + 11;
  return text.substr(begin, text.find('"', begin) - begin);
}

TEST(SaverKillTest, KilledMidSaveLeavesTheLatestCheckpointRestorable) {
  const std::string dir = FreshDir("kill");
  std::mt19937 rng(3);
  int64_t last_step = 0;
  int restored_after_kill = 0;
  std::set<std::string> leftovers;  // temporary directories of saves a kill interrupted
  for (int round = 0; round < 5; ++round) {
    const std::string before = LatestInIndex(dir);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("RECSDK_SAVER_KILL_CHILD_DIR", dir.c_str(), 1);
      execl("/proc/self/exe", "saver_child", "--gtest_filter=SaverKillTest.ChildSavesUntilKilled",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    // Wait for the child's first save of this round (it saves back to back from then on), then
    // kill it at a random point of a later one.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (LatestInIndex(dir) == before && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself with " << status;
    ASSERT_NE(LatestInIndex(dir), before) << "round " << round << ": the child never saved";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".tmp-ckpt-", 0) == 0) leftovers.insert(name);
    }
    auto m = BuildModel({.vocab = 1 << 16});
    auto saver = MakeSaver(*m, {.model_dir = dir});
    auto restored = saver->Restore();
    ASSERT_TRUE(restored.ok()) << "round " << round << ": " << restored.status();
    EXPECT_GE(*restored, last_step);
    EXPECT_EQ(dir + "/ckpt-" + std::to_string(*restored), ValueOrDie(saver->LatestCheckpoint()));
    last_step = *restored;
    ++restored_after_kill;
  }
  EXPECT_EQ(restored_after_kill, 5);
  // A kill landed in the middle of a save at least once (its temporary directory stayed).
  EXPECT_GE(leftovers.size(), 1u);
}

}  // namespace
}  // namespace recsdk
