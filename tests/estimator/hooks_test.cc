// hooks_test.cc: MonitoredSession and the built-in hooks on a small dense model: call order and
// extra fetches, StopAtStepHook stops at the exact step, LoggingTensorHook's lines, NanTensorHook
// names the step of a NaN loss, ProgressHook's terminal and plain output, SummarySaverHook writes
// an event file, and hook errors surface.
#include "recsdk/hooks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

struct Model {
  Graph graph;
  Output loss;
  Node* train = nullptr;
};

// A linear model y = x w trained with SGD; "global_step" counts steps.
void Build(Model* m) {
  Scope s(&m->graph);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 2});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{Shape::kUnknownDim, 1});
  layers::DenseOptions d;
  d.units = 1;
  Output logits = layers::Dense(s, x, d);
  m->loss = ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  SgdOptimizer sgd(SgdOptions{0.1});
  m->train = *sgd.Minimize(s, m->loss);
  GlobalVariablesInitializer(s);
  ASSERT_TRUE(m->graph.status().ok()) << m->graph.status();
}

FeedList Feeds(float x0 = 1) {
  return {{"x", *Tensor::FromValues<float>(Shape{2, 2}, {x0, 2, -1, 0.5f})},
          {"y", *Tensor::FromValues<float>(Shape{2, 1}, {1, 0})}};
}

// Recorder: records the calls it sees and fetches "loss" every step.
class Recorder : public SessionRunHook {
 public:
  explicit Recorder(std::vector<std::string>* log) : log_(log) {}
  Status Begin(Graph* graph) override {
    log_->push_back(graph->FindNode("loss") ? "begin" : "begin?");
    return absl::OkStatus();
  }
  Status AfterCreateSession(Session&) override {
    log_->push_back("created");
    return absl::OkStatus();
  }
  Status BeforeRun(SessionRunContext& c, SessionRunArgs* args) override {
    log_->push_back("before " + std::to_string(c.global_step));
    args->fetches.push_back("loss");
    return absl::OkStatus();
  }
  Status AfterRun(SessionRunContext& c, absl::Span<const Tensor> results) override {
    log_->push_back("after " + std::to_string(c.global_step) + " " +
                    std::to_string(results.size()) + " " +
                    (results.size() == 1 && results[0].num_elements() == 1 ? "scalar" : "?"));
    return absl::OkStatus();
  }
  Status End(Session&) override {
    log_->push_back("end");
    return absl::OkStatus();
  }

 private:
  std::vector<std::string>* log_;
};

TEST(HooksTest, CallOrderFetchesAndExactStop) {
  Model m;
  Build(&m);
  std::vector<std::string> log;
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<Recorder>(&log),
                   std::make_shared<StopAtStepHook>(StopAtStepHook::LastStep(3))};
  auto ms = MonitoredSession::Create(&m.graph, options);
  ASSERT_TRUE(ms.ok()) << ms.status();
  int steps = 0;
  while (!(*ms)->ShouldStop()) {
    std::vector<Tensor> out;
    ASSERT_TRUE((*ms)->Run(Feeds(), {m.loss}, {m.train}, &out, 2).ok());
    ASSERT_EQ(out.size(), 1u);  // the hooks' fetches are not in the caller's outputs
    ++steps;
    ASSERT_LT(steps, 10);
  }
  ASSERT_TRUE((*ms)->Close().ok());
  ASSERT_TRUE((*ms)->Close().ok());  // End runs once
  EXPECT_EQ(steps, 3);
  EXPECT_EQ((*ms)->global_step(), 3);
  EXPECT_EQ(
      log, (std::vector<std::string>{"begin", "created", "before 0", "after 1 1 scalar", "before 1",
                                     "after 2 1 scalar", "before 2", "after 3 1 scalar", "end"}));
  EXPECT_EQ((*ms)->Run(Feeds(), {}, {m.train}, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(HooksTest, DueWithinFindsAMultipleInTheStepsOfACall) {
  EXPECT_TRUE(DueWithin(0, 1, 1));
  EXPECT_TRUE(DueWithin(1, 1, 2));    // step 2
  EXPECT_FALSE(DueWithin(0, 1, 2));   // step 1
  EXPECT_TRUE(DueWithin(3, 3, 5));    // steps 4..6 hold 5
  EXPECT_FALSE(DueWithin(5, 3, 10));  // steps 6..8
  EXPECT_TRUE(DueWithin(5, 5, 10));   // steps 6..10
  EXPECT_FALSE(DueWithin(10, 5, 0));  // no period
  EXPECT_FALSE(DueWithin(4, 0, 5));   // no steps
}

// A loop of steps (the spec's iterations_per_loop): one round of hooks per loop, the loss of its
// last step, the global step after it, every step's rows; the input may end inside a loop.
TEST(HooksTest, RunLoopRunsTheHooksOncePerLoop) {
  Model m;
  Build(&m);
  std::vector<std::string> log;
  std::vector<std::string> logged;
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<Recorder>(&log),
                   std::make_shared<LoggingTensorHook>(
                       std::vector<std::pair<std::string, TensorName>>{{"loss", m.loss}}, 4,
                       [&](const std::string& line) { logged.push_back(line); })};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  int64_t fed = 0;
  const MonitoredSession::StepSource seven = [&](FeedList* feeds, int64_t* rows) -> StatusOr<bool> {
    if (fed == 7) return false;
    ++fed;
    *feeds = Feeds();
    *rows = 2;
    return true;
  };
  std::vector<int64_t> ran;
  while (true) {
    StatusOr<int64_t> n = ms->RunLoop(3, seven, {}, {m.train}, nullptr);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    ran.push_back(*n);
  }
  EXPECT_EQ(ran, (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(ms->global_step(), 7);
  EXPECT_EQ(
      log, (std::vector<std::string>{"begin", "created", "before 0", "after 3 1 scalar", "before 3",
                                     "after 6 1 scalar", "before 6", "after 7 1 scalar"}));
  // LoggingTensorHook every 4 steps: the loop covering step 4 (steps 4..6) logs; 1..3 and 7 do not.
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("loss"), std::string::npos) << logged[0];
  // The loop computes what single steps compute: the same loss after 7 steps.
  Model single;
  Build(&single);
  auto one = *MonitoredSession::Create(&single.graph, MonitoredSessionOptions{});
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(one->Run(Feeds(), {}, {single.train}, nullptr).ok());
  std::vector<Tensor> a, b;
  ASSERT_TRUE(ms->Run(Feeds(), {m.loss}, {}, &a).ok());
  ASSERT_TRUE(one->Run(Feeds(), {single.loss}, {}, &b).ok());
  EXPECT_EQ(a[0].scalar<float>(), b[0].scalar<float>());
  EXPECT_EQ(ms->RunLoop(0, seven, {}, {m.train}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HooksTest, NumStepsCountsFromWhereTheSessionBegan) {
  Model m;
  Build(&m);
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<StopAtStepHook>(StopAtStepHook::NumSteps(2))};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  int steps = 0;
  while (!ms->ShouldStop() && steps < 10) {
    ASSERT_TRUE(ms->Run(Feeds(), {}, {m.train}, nullptr).ok());
    ++steps;
  }
  EXPECT_EQ(steps, 2);
  Model bad;
  Build(&bad);
  MonitoredSessionOptions both;
  both.hooks = {std::make_shared<StopAtStepHook>(2, 5)};
  EXPECT_EQ(MonitoredSession::Create(&bad.graph, both).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HooksTest, LoggingTensorHookLogsEveryNSteps) {
  Model m;
  Build(&m);
  std::vector<std::string> lines;
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<LoggingTensorHook>(
      std::vector<std::pair<std::string, TensorName>>{{"loss", "loss"}}, 2,
      [&](const std::string& line) { lines.push_back(line); })};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ms->Run(Feeds(), {}, {m.train}, nullptr).ok());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("step 2: loss = ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("step 4: loss = ", 0), 0u) << lines[1];
}

TEST(HooksTest, NanTensorHookStopsWithTheStep) {
  Model m;
  Build(&m);
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<NanTensorHook>("loss")};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  ASSERT_TRUE(ms->Run(Feeds(), {}, {m.train}, nullptr).ok());
  const Status s = ms->Run(Feeds(NAN), {}, {m.train}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("at step 2"), std::string::npos) << s;
  // Without fail_on_nan_loss: a stop request instead of an error.
  Model m2;
  Build(&m2);
  MonitoredSessionOptions soft;
  soft.hooks = {std::make_shared<NanTensorHook>("loss", false)};
  auto ms2 = *MonitoredSession::Create(&m2.graph, soft);
  ASSERT_TRUE(ms2->Run(Feeds(NAN), {}, {m2.train}, nullptr).ok());
  EXPECT_TRUE(ms2->ShouldStop());
}

std::string RunProgress(bool terminal, int64_t first_step = 0) {
  Model m;
  Build(&m);
  std::FILE* out = std::tmpfile();
  ProgressHookOptions p;
  p.total_steps = 4;
  p.first_step = first_step;
  p.loss = TensorName("loss");
  p.every_n_steps = 2;
  p.out = out;
  p.terminal = terminal;
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<ProgressHook>(p)};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ms->Run(Feeds(), {}, {m.train}, nullptr, 2).ok());
  EXPECT_TRUE(ms->Close().ok());
  std::rewind(out);
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), out) != nullptr) text += buf;
  std::fclose(out);
  return text;
}

TEST(HooksTest, ProgressLineInPlaceOnATerminalPlainElsewhere) {
  const std::string plain = RunProgress(false);
  EXPECT_EQ(plain.find('\r'), std::string::npos) << plain;
  EXPECT_NE(plain.find("step 2/4"), std::string::npos) << plain;
  EXPECT_NE(plain.find("step 4/4"), std::string::npos) << plain;
  EXPECT_NE(plain.find("samples/s"), std::string::npos) << plain;
  EXPECT_NE(plain.find("loss "), std::string::npos) << plain;
  EXPECT_NE(plain.find("ETA"), std::string::npos) << plain;  // on step 2 of 4
  EXPECT_EQ(std::count(plain.begin(), plain.end(), '\n'), 2);
  const std::string tty = RunProgress(true);
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\r'), 2) << tty;
  EXPECT_EQ(std::count(tty.begin(), tty.end(), '\n'), 1) << tty;  // only the final newline
  // A loop that starts at global step 100 (train_and_evaluate's second chunk) counts global
  // steps: the run's position, not the chunk's.
  const std::string later = RunProgress(false, 100);
  EXPECT_NE(later.find("step 102/104"), std::string::npos) << later;
  EXPECT_NE(later.find("step 104/104"), std::string::npos) << later;
  EXPECT_EQ(later.find("step 2/4"), std::string::npos) << later;
}

TEST(HooksTest, SummarySaverAndStepCounterWriteEvents) {
  Model m;
  Build(&m);
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/hooks_test_summaries";
  std::filesystem::remove_all(dir);
  std::shared_ptr<SummaryWriter> writer = *SummaryWriter::Create(dir);
  auto counter = std::make_shared<StepCounterHook>(2, writer);
  MonitoredSessionOptions options;
  options.hooks = {
      std::make_shared<SummarySaverHook>(
          writer, 2, std::vector<std::pair<std::string, TensorName>>{{"loss", "loss"}}),
      counter};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ms->Run(Feeds(), {}, {m.train}, nullptr, 2).ok());
  ASSERT_TRUE(ms->Close().ok());
  EXPECT_GT(counter->steps_per_sec(), 0);
  EXPECT_NEAR(counter->samples_per_sec() / counter->steps_per_sec(), 2.0, 1e-9);
  ASSERT_TRUE(writer->Flush().ok());
  // Two loss events (steps 2 and 4) and two rate pairs: the file holds more than the header.
  EXPECT_GT(std::filesystem::file_size(writer->path()), 100u);
}

// A table with admission (threshold 3) and eviction (10 s) looked up in the graph with
// timestamps; "ids" [2,1] int64 and "ts" [2] int64 are fed per step.
struct TableModel {
  Graph graph;
  Output emb;
};
void BuildTable(TableModel* m, bool modify_graph) {
  Scope s(&m->graph);
  TableConfig c;
  c.name = "t";
  c.dim = 2;
  c.device_vocabulary_size = 64;
  c.access_threshold = 0;
  c.eviction_threshold = 10;
  SparseTable table = *create_table(s, c, SparseOptimizerConfig::SGD(0.1f));
  SparseLookupOptions o;
  o.combiner = Combiner::kSum;
  o.modify_graph = modify_graph;
  o.timestamps = DatasetColumn(s.WithOpName("ts"), "ts", DType::kInt64, Shape{Shape::kUnknownDim});
  m->emb = *sparse_lookup(
      s, table,
      DatasetColumn(s.WithOpName("ids"), "ids", DType::kInt64, Shape{Shape::kUnknownDim, 1}), o);
  ASSERT_TRUE(m->graph.status().ok()) << m->graph.status();
}
FeedList TableFeeds(std::vector<int64_t> ids, int64_t ts) {
  const int64_t n = static_cast<int64_t>(ids.size());
  return {{"ids", *Tensor::FromValues<int64_t>(Shape{n, 1}, absl::MakeConstSpan(ids))},
          {"ts", *Tensor::FromValues<int64_t>(Shape{n}, std::vector<int64_t>(ids.size(), ts))}};
}

TEST(HooksTest, EvictHookAsARunHookEvictsStaleKeys) {
  TableModel m;
  BuildTable(&m, false);
  auto evict = std::make_shared<EvictRunHook>(EvictHook(true, 0, 1));
  MonitoredSessionOptions options;
  options.hooks = {evict};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  ASSERT_TRUE(ms->Run(TableFeeds({1, 2}, 100), {m.emb}, {}, nullptr).ok());
  EmbeddingTable* t = *LookupTable(ms->session(), "t");
  EXPECT_EQ(t->size(), 2);
  ASSERT_TRUE(ms->Run(TableFeeds({3, 3}, 200), {m.emb}, {}, nullptr).ok());
  EXPECT_EQ(evict->evicted(), 2);  // 1 and 2 were last seen at 100 <= 200 - 10
  EXPECT_EQ(t->FindRow(1), EmbeddingTable::kDefaultRow);
  EXPECT_NE(t->FindRow(3), EmbeddingTable::kDefaultRow);
  // The spec's arguments are checked: enabled with both triggers off is an error.
  TableModel m2;
  BuildTable(&m2, false);
  MonitoredSessionOptions bad;
  bad.hooks = {AsSessionRunHook(EvictHook(true, 0, 0))};
  EXPECT_EQ(MonitoredSession::Create(&m2.graph, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HooksTest, GraphModifierAndSetThresholdHooks) {
  TableModel m;
  BuildTable(&m, true);
  auto threshold = std::make_shared<SetThresholdHook>("t", 5, 1);
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<GraphModifierHook>(), threshold};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  // GraphModifierHook ran ModifyGraph in Begin: the lookup is marked for the key stage.
  bool moved = false;
  for (const Node* n : ms->session().graph().nodes()) moved |= n->BoolAttr("moved_to_key_stage");
  EXPECT_TRUE(moved);
  InMemoryColumn ids{"ids", std::vector<int64_t>{1, 2, 3, 4}, 1};
  InMemoryColumn ts{"ts", std::vector<int64_t>{100, 100, 101, 101}, 0};
  auto stage = *KeyStage::Start(ms->session(), *InMemoryDataset({ids, ts}, 2));
  ms->set_key_stage(stage.get());
  EmbeddingTable* t = *LookupTable(ms->session(), "t");
  FeedList feeds;
  ASSERT_TRUE(*stage->Next(&feeds));
  EXPECT_FALSE(threshold->applied());
  ASSERT_TRUE(ms->Run(feeds, {m.emb}, {}, nullptr).ok());
  EXPECT_TRUE(threshold->applied());
  EXPECT_EQ(t->config().access_threshold, 5);
}

class Failing : public SessionRunHook {
 public:
  Status AfterRun(SessionRunContext&, absl::Span<const Tensor>) override {
    return absl::InternalError("hook failed on purpose");
  }
};

TEST(HooksTest, HookErrorsSurface) {
  Model m;
  Build(&m);
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<Failing>()};
  auto ms = *MonitoredSession::Create(&m.graph, options);
  EXPECT_EQ(ms->Run(Feeds(), {}, {m.train}, nullptr).message(), "hook failed on purpose");
  MonitoredSessionOptions null_hook;
  null_hook.hooks = {nullptr};
  Model m2;
  Build(&m2);
  EXPECT_FALSE(MonitoredSession::Create(&m2.graph, null_hook).ok());
}

}  // namespace
}  // namespace recsdk
