// session_observer_test.cc: execution observers and RunOptions, the profiler (profiling_mode)
// and RunLoop (iterations_per_loop) of src/session/session.cc and profiler.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"
#include "tests/session/test_models.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

std::string Msg(const Status& s) { return std::string(s.message()); }

class Recorder final : public ExecutionObserver {
 public:
  struct Call {
    std::string node;
    bool after;
    std::string device;
    int64_t start_ns, end_ns;
    int inputs;
    std::vector<Tensor> outputs;
  };
  void BeforeRun(int64_t step) override { runs_started.push_back(step); }
  void AfterRun(int64_t step, const Status& s) override { runs_ended.emplace_back(step, s.ok()); }
  void BeforeNode(const NodeExecution& e) override { Add(e, false); }
  void AfterNode(const NodeExecution& e) override { Add(e, true); }

  std::mutex mu;
  std::vector<Call> calls;
  std::vector<int64_t> runs_started;
  std::vector<std::pair<int64_t, bool>> runs_ended;

 private:
  // HostOutputs: the outputs as the host can read them (copies on a device with its own memory).
  static std::vector<Tensor> HostOutputs(const NodeExecution& e) {
    std::vector<Tensor> out;
    for (const Tensor& t : *e.outputs) out.push_back(e.ToHost(t).value());
    return out;
  }
  void Add(const NodeExecution& e, bool after) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back({e.node->name(), after, std::string(e.device), e.start_ns, e.end_ns,
                     static_cast<int>(e.inputs->size()),
                     after ? HostOutputs(e) : std::vector<Tensor>{}});
  }
};

TEST(SessionObserverTest, ObserverSeesEveryNodeWithInputsOutputsAndTimes) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2});
  ops::Mul(root.WithOpName("y"), x, ops::Const(root.WithOpName("three"), 3.0f));
  auto session = ValueOrDie(Session::Create(g));
  Recorder rec;
  RunOptions options;
  options.observers = {&rec};
  std::vector<Tensor> out;
  ASSERT_TRUE(
      session->Run(options, {{"x", *Tensor::FromValues<float>(Shape{2}, {1, 2})}}, {"y"}, {}, &out)
          .ok());
  ASSERT_EQ(rec.calls.size(), 4u);  // three, y: before and after each
  EXPECT_EQ(rec.calls[0].node, "three");
  EXPECT_FALSE(rec.calls[0].after);
  EXPECT_EQ(rec.calls[3].node, "y");
  EXPECT_TRUE(rec.calls[3].after);
  EXPECT_EQ(rec.calls[3].inputs, 2);
  ASSERT_EQ(rec.calls[3].outputs.size(), 1u);
  EXPECT_FLOAT_EQ(rec.calls[3].outputs[0].data<float>()[1], 6.0f);
  EXPECT_FALSE(rec.calls[3].device.empty());
  EXPECT_GE(rec.calls[3].end_ns, rec.calls[3].start_ns);
  EXPECT_GT(rec.calls[3].start_ns, 0);
  EXPECT_EQ(rec.runs_started, std::vector<int64_t>{0});
  ASSERT_EQ(rec.runs_ended.size(), 1u);
  EXPECT_TRUE(rec.runs_ended[0].second);
  // Without RunOptions nothing is observed.
  ASSERT_TRUE(session->Run({{"x", *Tensor::FromValues<float>(Shape{2}, {1, 2})}}, {"y"}).ok());
  EXPECT_EQ(rec.calls.size(), 4u);
  // A null observer is an error, not a crash.
  options.observers = {nullptr};
  EXPECT_EQ(session->Run(options, {}, {"three"}, {}, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SessionObserverTest, ObserverUnderInterOpParallelismSeesEveryNodeOnce) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{});
  std::vector<Output> branches;
  for (int i = 0; i < 8; ++i) branches.push_back(ops::Add(root, x, ops::Const(root, 1.0f * i)));
  ops::AddN(root.WithOpName("sum"), branches);
  SessionConfig c;
  c.stream_max_parallel_num = "DNN_V100:4";
  auto session = ValueOrDie(Session::Create(g, c));
  Recorder rec;
  RunOptions options;
  options.observers = {&rec};
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run(options, {{"x", Tensor::Scalar<float>(1)}}, {"sum"}, {}, &out).ok());
  EXPECT_EQ(rec.calls.size(), 2u * (8 + 8 + 1));  // consts, adds, sum
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 8 + 28);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(SessionProfilingTest, TaskAndTrainingTraceWriteOneChromeTracePerRun) {
  testing::LinearModel m;
  testing::BuildLinearModel(&m);
  ASSERT_TRUE(m.graph.status().ok()) << m.graph.status();
  ASSERT_FALSE(m.last_grad.empty());
  const std::string dir = testing::TempDir() + "/profiling_test";
  std::filesystem::remove_all(dir);
  SessionConfig c;
  c.profiling_mode = true;
  c.profiling_options = "training_trace:task_trace";
  c.fp_point = m.matmul;
  c.bp_point = m.last_grad;
  c.profiling_dir = dir;
  auto session = ValueOrDie(Session::Create(m.graph, c));
  ASSERT_TRUE(session->Run({}, {}, {m.init->name()}).ok());
  ASSERT_TRUE(session->Run(testing::LinearFeeds(2), {m.loss}, {m.train->name()}).ok());
  ASSERT_TRUE(session->Close().ok());  // profiles are written in the background until then
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 2u);
  std::sort(files.begin(), files.end());
  const nlohmann::json trace =
      ReadJson(files[1].find("_1.json") != std::string::npos ? files[1] : files[0]);
  std::set<std::string> phases, ops;
  bool has_thread_and_device = true;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "phase") phases.insert(e["name"].get<std::string>());
    if (e["cat"] == "task") {
      ops.insert(e["name"].get<std::string>());
      has_thread_and_device &= e["args"].contains("thread") && e["args"].contains("device");
    }
  }
  EXPECT_TRUE(ops.contains(m.matmul));
  EXPECT_TRUE(ops.contains(m.last_grad));
  EXPECT_TRUE(has_thread_and_device);
  for (const char* p : {"data_wait", "forward", "backward", "dense_update"}) {
    EXPECT_TRUE(phases.contains(p)) << p;
  }
  const std::string summary = trace["otherData"]["summary"];
  EXPECT_NE(summary.find("slowest ops"), std::string::npos) << summary;
  EXPECT_NE(summary.find("forward"), std::string::npos) << summary;
}

TEST(SessionProfilingTest, OpTraceAndTheFpBpPointCheck) {
  testing::LinearModel m;
  testing::BuildLinearModel(&m);
  SessionConfig c;
  c.profiling_mode = true;
  c.profiling_options = "training_trace";
  c.fp_point = "no/such/node";
  c.bp_point = m.last_grad;
  auto bad = Session::Create(m.graph, c);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(bad.status()).find("fp_point: \"no/such/node\" is not a node"), std::string::npos)
      << bad.status();

  const std::string dir = testing::TempDir() + "/op_trace_test";
  std::filesystem::remove_all(dir);
  c.profiling_options = "op_trace";
  c.profiling_dir = dir;
  auto session = ValueOrDie(Session::Create(m.graph, c));
  ASSERT_TRUE(session->Run({}, {}, {m.init->name()}).ok());
  ASSERT_TRUE(session->Close().ok());
  int files = 0, op_events = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    const nlohmann::json trace = ReadJson(e.path());
    for (const auto& ev : trace["traceEvents"]) op_events += ev.value("cat", std::string()) == "op";
  }
  EXPECT_EQ(files, 1);
  EXPECT_GT(op_events, 0);
}

TEST(SessionLoopTest, RunLoopRunsIterationsPerLoopStepsPullingBatches) {
  testing::LinearModel m;
  testing::BuildLinearModel(&m);
  SessionConfig c;
  c.iterations_per_loop = 3;
  auto session = ValueOrDie(Session::Create(m.graph, c));
  ASSERT_TRUE(session->Run({}, {}, {m.init->name()}).ok());
  int pulled = 0;
  BatchSource five = [&](FeedList* feeds) -> StatusOr<bool> {
    if (pulled == 5) return false;
    *feeds = testing::LinearFeeds(static_cast<float>(++pulled));
    return true;
  };
  auto mismatch = session->RunLoop(2, five, {m.loss}, {m.train->name()});
  ASSERT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(mismatch.status()).find("iterations_per_loop 3"), std::string::npos);
  EXPECT_EQ(pulled, 0);

  const int64_t steps_before = session->stats().steps;
  auto first = ValueOrDie(session->RunLoop(3, five, {m.loss}, {m.train->name()}));
  EXPECT_EQ(first.steps, 3);
  EXPECT_EQ(pulled, 3);
  EXPECT_EQ(session->stats().steps, steps_before + 3);
  ASSERT_EQ(first.outputs.size(), 1u);
  // The fetched loss is the third step's: recompute it with a plain Run on batch 3's feeds after
  // the same updates on a fresh session.
  auto check = ValueOrDie(Session::Create(m.graph));
  ASSERT_TRUE(check->Run({}, {}, {m.init->name()}).ok());
  std::vector<Tensor> loss;
  for (int b = 1; b <= 3; ++b) {
    ASSERT_TRUE(
        check->Run(testing::LinearFeeds(static_cast<float>(b)), {m.loss}, {m.train->name()}, &loss)
            .ok());
  }
  EXPECT_EQ(first.outputs[0].data<float>()[0], loss[0].data<float>()[0]);
  auto rest = ValueOrDie(session->RunLoop(3, five, {m.loss}, {m.train->name()}));
  EXPECT_EQ(rest.steps, 2);  // the data ended
}

}  // namespace
}  // namespace recsdk
