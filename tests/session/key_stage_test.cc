// key_stage_test.cc: tests of the key stage and automatic graph modification
// (src/session/key_stage/key_stage.cc, src/session/modify_graph.cc): both modes give identical
// results, masks, eviction never frees rows of prepared batches, errors surface in order, Stop is
// clean.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::SmallTable;
using testing::ValueOrDie;

constexpr int kFeatures = 4;
constexpr int64_t kBatch = 64;

SyntheticOptions Data(int64_t rows = 2048) {
  SyntheticOptions d;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, 500);
  d.ids_per_feature = 2;
  d.num_dense = 3;
  d.with_timestamps = true;
  d.timestamp_step = 1;
  d.seed = 3;
  d.block_rows = 300;
  return d;
}

std::unique_ptr<Dataset> Batches(const SyntheticOptions& d) {
  return ValueOrDie(BatchRows(ValueOrDie(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
}

struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

// Two tables: "shared" looked up by C1 and C2 in one sparse_lookup and by C3 in a second one
// (admission 2: a key counts its occurrences in both lookups), and "single" by C4 with
// timestamps; a small MLP on top; Adam for dense, LazyAdam/Adagrad sparse.
Built BuildModel(bool modify_graph) {
  Built b;
  Scope s(b.graph.get());
  b.graph->set_random_seed(11);
  TableConfig shared = SmallTable("shared", 4, 4096);
  shared.access_threshold = 2;
  TableConfig single = SmallTable("single", 4, 4096);
  single.access_threshold = 0;
  single.eviction_threshold = 100;
  SparseTable t1 = ValueOrDie(create_table(s, shared, SparseOptimizerConfig::LazyAdam(0.01f)));
  SparseTable t2 = ValueOrDie(create_table(s, single, SparseOptimizerConfig::Adagrad(0.05f)));
  std::vector<Output> ids;
  for (int f = 1; f <= kFeatures; ++f) {
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kBatch, 2}));
  }
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 3});
  Output ts = DatasetColumn(s, "timestamp", DType::kInt64, Shape{kBatch});
  SparseLookupOptions o1;
  o1.modify_graph = modify_graph;
  o1.combiner = Combiner::kSum;
  std::vector<Output> e1 = ValueOrDie(sparse_lookup(s, t1, {ids[0], ids[1]}, o1));
  SparseLookupOptions o1b = o1;
  o1b.name = "shared_c3";
  e1.push_back(ValueOrDie(sparse_lookup(s, t1, ids[2], o1b)));
  SparseLookupOptions o2 = o1;
  o2.combiner = std::nullopt;
  o2.timestamps = ts;
  o2.use_dynamic = false;
  o2.send_count = 2 * kBatch;
  Output e2 = ValueOrDie(sparse_lookup(s, t2, ids[3], o2));
  std::vector<Output> parts = e1;
  parts.push_back(ops::Reshape(s, e2, {kBatch, 8}));
  parts.push_back(dense);
  Output x = ops::Concat(s, parts, 1);
  Output logits = layers::Mlp(s, x, {.hidden_units = {16}, .output_units = 1});
  b.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  Node* dense_train = ValueOrDie(adam.Minimize(s, b.loss));
  Node* sparse_train = ValueOrDie(SparseMinimize(s, b.loss));
  b.train = ops::Group(s, {dense_train, sparse_train});
  b.init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (modify_graph) {
    ModifyGraphResult r = ValueOrDie(ModifyGraph(b.graph.get()));
    EXPECT_EQ(r.moved_lookups.size(), 3u);
  }
  return b;
}

SessionConfig Deterministic() {
  SessionConfig c;
  c.deterministic = true;
  return c;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  std::vector<float> losses;
  std::string shared_keys, shared_values, single_values;
  int64_t evicted = 0;
};

// Monitor: a thread that reads every table of a session through the pointers the Session hands
// out (SessionTables), as a user's monitoring or export thread would, until stopped.
class Monitor {
 public:
  Monitor(Session& session, const std::string& dir) {
    std::filesystem::create_directories(dir);
    thread_ = std::thread([this, &session, dir] {
      std::vector<EmbeddingTable*> tables = ValueOrDie(SessionTables(session));
      while (!stop_.load()) {
        for (EmbeddingTable* t : tables) {
          Status s = t->ExportNpy(dir + "/" + t->name() + "_keys.npy",
                                  dir + "/" + t->name() + "_values.npy");
          if (!s.ok()) errors_.push_back(s.ToString());
          for (int64_t key = 0; key < 500; key += 7) {
            if (t->FindRow(key) == EmbeddingTable::kDefaultRow) {
              (void)t->AdmissionCount(key);
              continue;
            }
            // The row may be evicted between the two calls: NotFound is an answer, not an error.
            StatusOr<std::vector<float>> row = t->ReadRow(key);
            if (!row.ok() && !absl::IsNotFound(row.status())) {
              errors_.push_back(row.status().ToString());
            } else if (row.ok() && static_cast<int>(row->size()) != t->row_floats()) {
              errors_.push_back(fmt::format("{} floats in a row of {}", row->size(), t->name()));
            }
          }
          if (t->size() > t->capacity() || t->MemoryBytes() <= 0) {
            errors_.push_back(fmt::format("table {}: size {} of capacity {}, {} bytes", t->name(),
                                          t->size(), t->capacity(), t->MemoryBytes()));
          }
          (void)t->data_time();
        }
        ++rounds_;
      }
    });
  }
  // Stop: joins the thread; the errors it saw, and how many rounds of reads it made.
  std::vector<std::string> Stop(int64_t* rounds) {
    stop_.store(true);
    thread_.join();
    *rounds = rounds_;
    return errors_;
  }

 private:
  std::atomic<bool> stop_{false};
  int64_t rounds_ = 0;
  std::vector<std::string> errors_;
  std::thread thread_;
};

RunResult Train(bool modify_graph, int threads, int prefetch, const std::string& tag,
                bool evict = false, bool monitor = false) {
  Built b = BuildModel(modify_graph);
  auto session = ValueOrDie(Session::Create(*b.graph, Deterministic()));
  EXPECT_TRUE(session->Run({}, {}, {b.init}).ok());
  std::optional<Monitor> reader;
  if (monitor) reader.emplace(*session, testing::TempDir() + "/key_stage_monitor_" + tag);
  KeyStageOptions ko;
  ko.key_process_thread_num = threads;
  ko.prefetch_batches = prefetch;
  auto stage = ValueOrDie(StartAscPipeline(*session, Batches(Data()), ko));
  RunResult r;
  FeedList feeds;
  EvictHook hook(evict, 0, 4);
  int64_t step = 0;
  while (ValueOrDie(stage->Next(&feeds))) {
    auto out = session->Run(feeds, {b.loss}, {b.train});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) break;
    r.losses.push_back((*out)[0].scalar<float>());
    r.evicted += ValueOrDie(stage->AfterStep(hook, ++step));
    // The reader gets a round in between the steps too, not only beside the key stage.
    if (monitor) std::this_thread::yield();
  }
  stage->Stop();
  if (reader) {
    int64_t rounds = 0;
    std::vector<std::string> errors = reader->Stop(&rounds);
    EXPECT_TRUE(errors.empty()) << errors.front();
    EXPECT_GT(rounds, 0);
  }
  const std::string dir = testing::TempDir() + "/key_stage_" + tag;
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(ValueOrDie(LookupTable(*session, "shared"))
                  ->ExportNpy(dir + "/shared_keys.npy", dir + "/shared_values.npy")
                  .ok());
  EXPECT_TRUE(ValueOrDie(LookupTable(*session, "single"))
                  ->ExportNpy(dir + "/single_keys.npy", dir + "/single_values.npy")
                  .ok());
  r.shared_keys = ReadFile(dir + "/shared_keys.npy");
  r.shared_values = ReadFile(dir + "/shared_values.npy");
  r.single_values = ReadFile(dir + "/single_values.npy");
  return r;
}

TEST(KeyStageTest, PipelineAndInGraphModesGiveIdenticalResults) {
  // Eviction is off for this comparison: a stage running ahead refreshes the keys of prepared
  // batches before the training loop evicts, so with eviction the modes may keep different keys.
  RunResult in_graph = Train(/*modify_graph=*/false, 1, 1, "in_graph");
  RunResult pipeline = Train(/*modify_graph=*/true, 2, 1, "pipeline");
  ASSERT_EQ(in_graph.losses.size(), 2048u / kBatch);
  EXPECT_EQ(in_graph.losses, pipeline.losses);
  EXPECT_EQ(in_graph.shared_keys, pipeline.shared_keys);
  EXPECT_EQ(in_graph.shared_values, pipeline.shared_values);
  EXPECT_EQ(in_graph.single_values, pipeline.single_values);
}

TEST(KeyStageTest, RunningAheadWithThreadsMatchesOneThread) {
  RunResult one = Train(/*modify_graph=*/true, 1, 1, "one", /*evict=*/true);
  RunResult many = Train(/*modify_graph=*/true, 3, 4, "many", /*evict=*/true);
  EXPECT_GT(one.evicted, 0);
  EXPECT_GT(many.evicted, 0);
  // Admission and resolution are in batch order whatever the threads; only eviction may differ
  // (keys of prepared batches are protected), so compare the table without eviction effects:
  // the losses of the first steps, before the first eviction (step 4), are identical.
  ASSERT_GE(many.losses.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(one.losses[i], many.losses[i]) << i;
  EXPECT_EQ(many.losses.size(), one.losses.size());
}

// The tables a Session hands out (LookupTable, SessionTables) take their own locks
// (src/table/locked_table.h), so another thread may export and read them while the training
// loop runs steps, the key stage resolves ahead and EvictHook evicts. ThreadSanitizer (label
// tsan) checks that none of those reads races a Resolve, a row update or an eviction; here, that
// the reads change nothing: the run with a reader beside it trains exactly as the run without.
TEST(KeyStageTest, TablesHandedOutMayBeReadFromAnotherThreadWhileTraining) {
  RunResult plain = Train(/*modify_graph=*/false, 1, 1, "read_plain", /*evict=*/true);
  RunResult read = Train(/*modify_graph=*/false, 1, 1, "read_beside", /*evict=*/true,
                         /*monitor=*/true);
  EXPECT_GT(plain.evicted, 0);
  EXPECT_EQ(read.losses, plain.losses);
  EXPECT_EQ(read.evicted, plain.evicted);
  EXPECT_EQ(read.shared_keys, plain.shared_keys);
  EXPECT_EQ(read.shared_values, plain.shared_values);
  EXPECT_EQ(read.single_values, plain.single_values);
  // With the key stage resolving ahead on two workers: how far it runs ahead decides what
  // eviction keeps, so only the run's health is compared, and the steps before the first
  // eviction (step 4).
  RunResult staged = Train(/*modify_graph=*/true, 2, 3, "read_staged", /*evict=*/true,
                           /*monitor=*/true);
  ASSERT_EQ(staged.losses.size(), plain.losses.size());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(staged.losses[i], plain.losses[i]) << i;
}

TEST(KeyStageTest, EvictionNeverFreesRowsOfPreparedBatches) {
  Built b = BuildModel(/*modify_graph=*/true);
  auto session = ValueOrDie(Session::Create(*b.graph, Deterministic()));
  ASSERT_TRUE(session->Run({}, {}, {b.init}).ok());
  auto stage = ValueOrDie(StartAscPipeline(*session, Batches(Data()),
                                           {.key_process_thread_num = 2, .prefetch_batches = 3}));
  FeedList feeds;
  Batch batch;
  ASSERT_TRUE(ValueOrDie(stage->Next(&feeds, &batch)));
  ASSERT_TRUE(session->Run(feeds, {b.loss}, {b.train}).ok());
  // Give the stage time to prepare batches ahead (the check below holds however far it got; the
  // pause only makes the case harder), then evict as hard as possible.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EmbeddingTable* single = ValueOrDie(LookupTable(*session, "single"));
  EvictHook hook(true, 0, 1);
  ValueOrDie(stage->AfterStep(hook, 1));
  // Every key of the next prepared batch still has its row, and training goes on exactly.
  Batch next;
  ASSERT_TRUE(ValueOrDie(stage->Next(&feeds, &next)));
  // The workers go on resolving later batches, which writes the table: stop them before reading
  // it (ThreadSanitizer caught these reads racing with Resolve; the size() <= before check that
  // read the table while they ran is gone too, since admissions may grow it meanwhile).
  stage->Stop();
  const Tensor* c4 = next.column("C4");
  for (int64_t i = 0; i < c4->num_elements(); ++i) {
    EXPECT_NE(single->FindRow(c4->data<int64_t>()[i]), EmbeddingTable::kDefaultRow);
  }
  ASSERT_TRUE(session->Run(feeds, {b.loss}, {b.train}).ok());
}

TEST(KeyStageTest, ModifyGraphRejectsIdsThatAreNotDatasetColumns) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions o;
  o.modify_graph = true;
  ASSERT_TRUE(sparse_lookup(s, t, ops::Const(s, Ids(1, 1, {1})), o).ok());
  auto r = ModifyGraph(&g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("DatasetColumn"), std::string::npos);
}

TEST(KeyStageTest, KeyErrorsSurfaceInBatchOrderAndStopIsClean) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions o;
  o.modify_graph = true;
  o.use_dynamic = false;
  o.send_count = 20;  // batch 64 x 2 Zipf ids over a vocabulary of 500: far more unique keys
  Output ids = DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 2});
  ASSERT_TRUE(sparse_lookup(s, t, ids, o).ok());
  ASSERT_TRUE(ModifyGraph(&g).ok());
  auto session = ValueOrDie(Session::Create(g));
  auto stage = ValueOrDie(StartAscPipeline(*session, Batches(Data())));
  FeedList feeds;
  auto first = stage->Next(&feeds);
  ASSERT_FALSE(first.ok());
  EXPECT_NE(std::string(first.status().message()).find("send_count is 20"), std::string::npos);
  EXPECT_FALSE(ValueOrDie(stage->Next(&feeds)));
  stage->Stop();

  // An endless dataset: Stop joins the workers while they wait for the consumer.
  auto endless = ValueOrDie(Repeat(Batches(Data(256)), -1));
  Graph g2;
  Scope s2(&g2);
  Output c1 = DatasetColumn(s2, "C1", DType::kInt64, Shape{kBatch, 2});
  SparseTable t2 =
      ValueOrDie(create_table(s2, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions dyn;
  dyn.modify_graph = true;
  Output e2 = ValueOrDie(sparse_lookup(s2, t2, c1, dyn));
  ASSERT_TRUE(ModifyGraph(&g2).ok());
  auto session2 = ValueOrDie(Session::Create(g2));
  auto stage2 = ValueOrDie(StartAscPipeline(*session2, std::move(endless)));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(ValueOrDie(stage2->Next(&feeds)));
    ASSERT_TRUE(session2->Run(feeds, {e2}).ok());
  }
  EXPECT_GT(stage2->keys_processed(), 0);
  stage2.reset();  // the destructor stops the stage
}

// ScopedEnv: sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(old_ ? old_->c_str() : nullptr); }
  void Set(const char* value) {
    if (value == nullptr) {
      unsetenv(name_);
    } else {
      setenv(name_, value, /*overwrite=*/1);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A session whose graph has one sparse_lookup (table "t", column "C1") moved to the key stage.
std::unique_ptr<Session> OneKeyStageLookupSession() {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions o;
  o.modify_graph = true;
  EXPECT_TRUE(sparse_lookup(s, t, DatasetColumn(s, "C1", DType::kInt64, Shape{kBatch, 2}), o).ok());
  EXPECT_TRUE(ModifyGraph(&g).ok());
  return ValueOrDie(Session::Create(g));
}

TEST(KeyStageTest, KeyProcessThreadNumDefaultsToTheEnvironmentVariable) {
  auto session = OneKeyStageLookupSession();
  auto threads = [&](const KeyStageOptions& options) -> StatusOr<int> {
    auto stage = StartAscPipeline(*session, Batches(Data(256)), options);
    if (!stage.ok()) return stage.status();
    FeedList feeds;
    EXPECT_TRUE(ValueOrDie((*stage)->Next(&feeds)));  // the stage works with that many threads
    return (*stage)->key_process_thread_num();
  };
  ScopedEnv env(kKeyProcessThreadNumEnv, nullptr);
  EXPECT_EQ(ValueOrDie(threads({})), 2);
  env.Set("3");
  EXPECT_EQ(ValueOrDie(threads({})), 3);
  env.Set(" 5");
  EXPECT_EQ(threads({}).status().code(), absl::StatusCode::kInvalidArgument);
  // An explicit option wins over the variable.
  env.Set("3");
  EXPECT_EQ(ValueOrDie(threads({.key_process_thread_num = 1})), 1);
  for (const char* bad : {"abc", "0", "-2", "2x", "", "99999999999"}) {
    env.Set(bad);
    const Status st = threads({}).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("KEY_PROCESS_THREAD_NUM"), std::string_view::npos) << st;
    EXPECT_NE(st.message().find(std::string("\"") + bad + "\""), std::string_view::npos) << st;
  }
  env.Set(nullptr);
  const Status zero = threads({.key_process_thread_num = 0}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("key_process_thread_num 0"), std::string_view::npos) << zero;
}

// Quiesce from several callers (two checkpoint savers on one stage): every stop holds, the lowest
// first, whatever the order of the calls; a later call never lifts an earlier one's stop. (When a
// call replaced the limit, Quiesce(6) after Quiesce(3) made the stage read on to 6.)
TEST(KeyStageTest, QuiesceStopsAtEveryCallersStepLowestFirst) {
  auto session = OneKeyStageLookupSession();
  for (const bool lower_first : {true, false}) {
    SCOPED_TRACE(lower_first ? "Quiesce(3) first" : "Quiesce(6) first");
    KeyStageOptions ko;
    ko.prefetch_batches = 3;
    auto stage = ValueOrDie(StartAscPipeline(*session, Batches(Data()), ko));
    stage->Quiesce(lower_first ? 3 : 6);
    stage->Quiesce(lower_first ? 6 : 3);
    std::vector<int64_t> quiescent_at;
    FeedList feeds;
    for (int i = 0; i < 10; ++i) {
      if (stage->Quiescent()) quiescent_at.push_back(stage->batches_consumed());
      ASSERT_TRUE(ValueOrDie(stage->Next(&feeds)));
    }
    EXPECT_EQ(quiescent_at, (std::vector<int64_t>{3, 6}));
    // A stop the stage has read past holds at once, beside a later one.
    stage->Quiesce(14);
    stage->Quiesce();
    const int64_t now = stage->batches_consumed();
    quiescent_at.clear();
    for (int i = 0; i < 8; ++i) {
      if (stage->Quiescent()) quiescent_at.push_back(stage->batches_consumed());
      ASSERT_TRUE(ValueOrDie(stage->Next(&feeds)));
    }
    ASSERT_FALSE(quiescent_at.empty());
    EXPECT_LE(quiescent_at.front(), now + 3) << "within prefetch_batches of Quiesce()";
    EXPECT_EQ(quiescent_at.back(), 14);
    stage->Stop();
  }
}

// The nice values of this process's threads, from /proc (Linux).
std::vector<int> ThreadNiceValues() {
  std::vector<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Fields after the command name, which is in parentheses: state is field 3, nice field 19.
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i) {
      if (i == 19) out.push_back(std::stoi(field));
    }
  }
  return out;
}

TEST(KeyStageTest, WorkersRunAtTheRequestedNicenessAndBadOptionsAreErrors) {
  auto session = OneKeyStageLookupSession();
#if defined(__linux__)
  {
    // An endless dataset: the workers never run out of data and exit while the test looks.
    auto stage = ValueOrDie(StartAscPipeline(*session, ValueOrDie(Repeat(Batches(Data(256)), -1)),
                                             {.key_process_thread_num = 2, .worker_nice = 7}));
    FeedList feeds;
    ASSERT_TRUE(ValueOrDie(stage->Next(&feeds)));
    // Each worker sets its niceness when it starts, which may be after the first batches (one
    // worker can prepare them all): wait for both, up to a generous bound.
    std::vector<int> nice;
    for (int tries = 0; tries < 1000; ++tries) {
      nice = ThreadNiceValues();
      if (std::count(nice.begin(), nice.end(), 7) == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(std::count(nice.begin(), nice.end(), 7), 2);
    // The other threads keep the niceness the process started with (0, or more under `nice`).
    const int inherited = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::getpid()));
    EXPECT_EQ(std::count(nice.begin(), nice.end(), inherited),
              static_cast<int64_t>(nice.size()) - 2)
        << "only the stage's workers are niced";
  }
#endif
  for (int bad : {-1, 20}) {
    KeyStageOptions options;
    options.worker_nice = bad;
    auto stage = StartAscPipeline(*session, Batches(Data(256)), options);
    ASSERT_FALSE(stage.ok());
    EXPECT_EQ(stage.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(stage.status().message().find("worker_nice " + std::to_string(bad)),
              std::string_view::npos)
        << stage.status();
  }
  KeyStageOptions no_prefetch_options;
  no_prefetch_options.prefetch_batches = 0;
  auto no_prefetch = StartAscPipeline(*session, Batches(Data(256)), no_prefetch_options);
  EXPECT_EQ(no_prefetch.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KeyStageTest, FeatureSpecLookupsRunInTheKeyStage) {
  Graph g;
  Scope s(&g);
  SparseTable t =
      ValueOrDie(create_table(s, SmallTable("ids", 2), SparseOptimizerConfig::SGD(0.1f)));
  std::vector<FeatureSpec> specs(2);
  specs[0].name = "C1";
  specs[1].name = "C2";
  for (FeatureSpec& f : specs) f.table_name = "ids";
  FeatureSpec ts;
  ts.name = "timestamp";
  ts.is_timestamp = true;
  std::vector<Output> e = ValueOrDie(sparse_lookup(s, t, specs, kBatch, 2, &ts));
  ASSERT_EQ(e.size(), 2u);
  ASSERT_EQ(ValueOrDie(ModifyGraph(&g)).moved_lookups.size(), 1u);
  auto session = ValueOrDie(Session::Create(g));
  auto stage = ValueOrDie(StartAscPipeline(*session, Batches(Data(256))));
  FeedList feeds;
  Batch batch;
  int steps = 0;
  // The stage's workers insert the keys of later batches while a step runs, so the table is
  // read only after Stop (nothing trains here: rows do not change once inserted).
  std::vector<std::pair<int64_t, float>> looked_up;  // (first C2 key, its first value)
  while (ValueOrDie(stage->Next(&feeds, &batch))) {
    auto out = ValueOrDie(session->Run(feeds, {e[1]}));
    looked_up.emplace_back(batch.column("C2")->data<int64_t>()[0], out[0].data<float>()[0]);
    ++steps;
  }
  EXPECT_EQ(steps, 4);
  stage->Stop();
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "ids"));
  for (const auto& [key, value] : looked_up) {
    EXPECT_EQ(value, ValueOrDie(table->ReadRow(key))[0]) << "key " << key;
  }
}

}  // namespace
}  // namespace recsdk
