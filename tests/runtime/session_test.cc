// session_test.cc: Session::Run semantics, errors, variables, the executor and memory accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "oneapi/tbb/global_control.h"
#include "recsdk/recsdk.h"
#include "src/device/kernel.h"
#include "src/graph/op_registry.h"

namespace recsdk {
namespace {

std::string Msg(const Status& s) { return std::string(s.message()); }

TEST(SessionTest, FeedsFetchesAndErrorsNameTheThing) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 2});
  ops::Mul(root.WithOpName("y"), x, ops::Const(root, 3.0f));
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run({{"x", *Tensor::FromValues<float>(Shape{1, 2}, {1, 2})}}, {"y"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[1], 6.0f);

  auto bad_dtype =
      (*session)->Run({{"x", *Tensor::FromValues<double>(Shape{1, 2}, {1, 2})}}, {"y"});
  EXPECT_EQ(bad_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(bad_dtype.status()).find("feed \"x\""), std::string::npos) << bad_dtype.status();
  auto bad_shape = (*session)->Run({{"x", *Tensor::FromValues<float>(Shape{3}, {1, 2, 3})}}, {"y"});
  EXPECT_EQ(bad_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(bad_shape.status()).find("[?,2]"), std::string::npos) << bad_shape.status();
  auto unknown = (*session)->Run({}, {"nope:0"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(unknown.status()).find("nope"), std::string::npos);
  auto unfed = (*session)->Run({}, {"y"});
  EXPECT_FALSE(unfed.ok());
  EXPECT_NE(Msg(unfed.status()).find("placeholder \"x\""), std::string::npos) << unfed.status();
}

TEST(SessionTest, SessionCopiesTheGraph) {
  Graph g;
  Scope root(&g);
  ops::Const(root.WithOpName("c"), 1.0f);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok());
  ops::Const(root.WithOpName("later"), 2.0f);
  EXPECT_FALSE((*session)->Run({}, {"later"}).ok());
  EXPECT_TRUE((*session)->Run({}, {"c"}).ok());
}

TEST(SessionTest, VariablesInitAssignAndUninitialisedError) {
  Graph g;
  Scope root(&g);
  VariableOptions o;
  o.initializer = Initializer::Constant(2.0);
  Variable v = Variable::Make(root, "v", Shape{2}, o);
  Node* add = AssignAdd(root, v, ops::Const(root, *Tensor::FromValues<float>(Shape{2}, {1, 10})));
  Node* init = GlobalVariablesInitializer(root);
  ASSERT_TRUE(g.status().ok()) << g.status();
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok());
  auto before = (*session)->Run({}, {v.value()});
  EXPECT_EQ(before.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(before.status()).find("\"v\""), std::string::npos) << before.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init}).ok());
  // A read fetched in the same step as an update keeps its value (copy on write).
  auto first = (*session)->Run({}, {v.value()});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*session)->Run({}, {}, {add}).ok());
  EXPECT_FLOAT_EQ((*first)[0].data<float>()[1], 2.0f);
  auto after = (*session)->Run({}, {v.value()});
  ASSERT_TRUE(after.ok());
  EXPECT_FLOAT_EQ((*after)[0].data<float>()[0], 3.0f);
  EXPECT_FLOAT_EQ((*after)[0].data<float>()[1], 12.0f);
  EXPECT_EQ(v.name(), "v");
  EXPECT_GT((*session)->stats().variable_bytes_in_use, 0);
  ASSERT_TRUE((*session)->Close().ok());
  EXPECT_EQ((*session)->Run({}, {v.value()}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A wide graph: parallel execution must give the same values as sequential execution.
TEST(SessionTest, ParallelExecutorMatchesSequential) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{64, 64});
  std::vector<Output> branches;
  for (int i = 0; i < 12; ++i) {
    Output b = ops::MatMul(root, x, x);
    b = ops::Tanh(root, ops::Mul(root, b, ops::Const(root, 0.01f * static_cast<float>(i + 1))));
    branches.push_back(ops::ReduceSum(root, b, {1}));
  }
  ops::AddN(root.WithOpName("y"), branches);
  Tensor xv(DType::kFloat32, Shape{64, 64});
  for (int64_t i = 0; i < xv.num_elements(); ++i)
    xv.data<float>()[i] = static_cast<float>((i * 37) % 11) / 11.0f;
  std::vector<Tensor> results;
  for (const char* streams : {"", "DNN_V100:4"}) {
    SessionConfig config;
    config.stream_max_parallel_num = streams;
    auto session = Session::Create(g, config);
    ASSERT_TRUE(session.ok()) << session.status();
    for (int rep = 0; rep < 3; ++rep) {
      auto out = (*session)->Run({{"x", xv}}, {"y"});
      ASSERT_TRUE(out.ok()) << out.status();
      results.push_back((*out)[0]);
    }
  }
  for (const Tensor& t : results) {
    for (int64_t i = 0; i < t.num_elements(); ++i)
      ASSERT_EQ(t.data<float>()[i], results[0].data<float>()[i]);
  }
}

// ConcurrencyProbe: what the test-only op "TestConcurrencyProbe" records while it runs.
struct ConcurrencyProbe {
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  // target: each probe holds its slot until this many probes have overlapped, so that reaching
  // the bound does not depend on how the threads happen to be scheduled.
  int target = 1;
  // gave_up: set when a probe waited 10 s in vain (the executor never let `target` ops overlap);
  // later probes stop waiting, and the peak assertion reports the failure.
  std::atomic<bool> gave_up{false};
};
ConcurrencyProbe* g_probe = nullptr;

// RegisterConcurrencyProbeOp: a stateful op with no inputs and a float32 scalar output (its
// "index" attribute), with a CPU kernel that records how many instances run at once.
void RegisterConcurrencyProbeOp() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::OpRegistry::Global().Register(
        {.type = "TestConcurrencyProbe",
         .outputs = {"value"},
         .attrs = {internal::Attr("index", internal::AttrType::kInt)},
         .shape_fn =
             [](internal::InferenceContext& c) {
               c.AddOutput(DType::kFloat32, Shape{});
               return absl::OkStatus();
             },
         .no_gradient = true,
         .stateful = true});  // stateful: never merged with its identical siblings
    internal::KernelRegistry::Global().RegisterFn(
        "TestConcurrencyProbe", "cpu", {DType::kFloat32},
        [](internal::OpKernelContext& ctx) -> Status {
          ConcurrencyProbe& p = *g_probe;
          const int now = p.running.fetch_add(1) + 1;
          int peak = p.peak.load();
          while (now > peak && !p.peak.compare_exchange_weak(peak, now)) {
          }
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (p.peak.load() < p.target && !p.gave_up.load()) {
            if (std::chrono::steady_clock::now() > deadline) p.gave_up.store(true);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
          // Linger, so that an executor ignoring the bound would start more probes meanwhile.
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          p.running.fetch_sub(1);
          auto out = ctx.allocate_output(0, Shape{});
          if (!out.ok()) return out.status();
          (*out)->data<float>()[0] = static_cast<float>(ctx.node().IntAttr("index"));
          return absl::OkStatus();
        });
  });
}

// DNN_V100:N bounds how many ops run at once: with 16 independent ops and threads to spare, the
// peak is exactly N (never more, and N is reached).
TEST(SessionTest, StreamMaxParallelNumBoundsConcurrentOps) {
  RegisterConcurrencyProbeOp();
  constexpr int kOps = 16;
  constexpr int kThreads = 8;
  // Lets oneTBB run kThreads threads even on a machine with fewer cores (the probes sleep).
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, kThreads);
  const int available = std::min<int>(kThreads, static_cast<int>(tbb::global_control::active_value(
                                                    tbb::global_control::max_allowed_parallelism)));
  Graph g;
  Scope root(&g);
  std::vector<TensorName> fetches;
  for (int i = 0; i < kOps; ++i) {
    Node* node = root.WithOpName("probe").AddNode("TestConcurrencyProbe", {}, {{"index", i}});
    ASSERT_NE(node, nullptr) << g.status();
    fetches.push_back(node->output(0));
  }
  for (int n : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "DNN_V100:" << n);
    SessionConfig config;
    config.stream_max_parallel_num = "DNN_V100:" + std::to_string(n);
    config.intra_op_parallelism = kThreads;  // the session's arena has room for every stream
    auto session = Session::Create(g, config);
    ASSERT_TRUE(session.ok()) << session.status();
    ConcurrencyProbe probe;
    probe.target = std::min(n, available);
    g_probe = &probe;
    auto out = (*session)->Run({}, fetches);
    g_probe = nullptr;
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), static_cast<size_t>(kOps));
    for (int i = 0; i < kOps; ++i) EXPECT_EQ((*out)[i].scalar<float>(), static_cast<float>(i));
    EXPECT_EQ(probe.running.load(), 0);
    EXPECT_LE(probe.peak.load(), n);
    EXPECT_EQ(probe.peak.load(), std::min(n, available));
    if (available > 1 && n > 1) {
      EXPECT_GT(probe.peak.load(), 1);
    }
  }
}

TEST(SessionTest, BuffersAreReleasedAfterTheirLastConsumer) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{1024, 256});  // 1 MiB
  Output h = x;
  for (int i = 0; i < 20; ++i) h = ops::Relu(root, ops::Add(root, h, ops::Const(root, 0.5f)));
  ops::ReduceSum(root.WithOpName("y"), h);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok());
  Tensor xv(DType::kFloat32, Shape{1024, 256});
  auto out = (*session)->Run({{"x", xv}}, {"y"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ((*out)[0].scalar<float>(), 0.5f * 20 * 1024 * 256);
  const SessionStats stats = (*session)->stats();
  // 40 intermediate tensors of 1 MiB: the peak holds only a few at once.
  EXPECT_LE(stats.graph_peak_bytes, 3 * (1 << 20));
  EXPECT_LE(stats.graph_bytes_in_use, 64);  // only the fetched scalar (held by `out`) remains
}

TEST(SessionTest, SteadyStepsReuseBuffersInsteadOfAllocating) {
  Graph g;
  Scope root(&g);
  // 64 KiB per tensor: reuse does not depend on the size, and ThreadSanitizer (label tsan) ran
  // this test for minutes with 1 MiB tensors.
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{256, 64});
  Output h = x;
  for (int i = 0; i < 20; ++i) h = ops::Relu(root, ops::Add(root, h, ops::Const(root, 0.5f)));
  ops::ReduceSum(root.WithOpName("y"), h);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok());
  Tensor xv(DType::kFloat32, Shape{256, 64});
  ASSERT_TRUE((*session)->Run({{"x", xv}}, {"y"}).ok());
  const int64_t after_first = (*session)->stats().graph_fresh_allocations;
  EXPECT_GT(after_first, 0);
  for (int step = 0; step < 4; ++step) {
    auto out = (*session)->Run({{"x", xv}}, {"y"});
    ASSERT_TRUE(out.ok()) << out.status();
    // Reused buffers hold the previous step's values: the result must not depend on them.
    EXPECT_FLOAT_EQ((*out)[0].scalar<float>(), 0.5f * 20 * 256 * 64);
  }
  const SessionStats stats = (*session)->stats();
  EXPECT_EQ(stats.graph_fresh_allocations, after_first);
  EXPECT_GT(stats.graph_cached_bytes, 0);
  EXPECT_LE(stats.graph_cached_bytes, 2 * stats.graph_peak_bytes + (4 << 20));
}

TEST(SessionTest, MemoryLimitIsResourceExhaustedNamingTheOption) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{1024, 1024});
  ops::Relu(root.WithOpName("y"), x);
  SessionConfig config;
  config.graph_memory_max_size = 1 << 20;  // 1 MiB: the 4 MiB output cannot fit
  auto session = Session::Create(g, config);
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run({{"x", Tensor(DType::kFloat32, Shape{1024, 1024})}}, {"y"});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(Msg(out.status()).find("graph_memory_max_size"), std::string::npos) << out.status();
  EXPECT_NE(Msg(out.status()).find("\"y\""), std::string::npos) << out.status();
}

TEST(SessionTest, ConfigValidationNamesTheOption) {
  SessionConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.stream_max_parallel_num = "DNN_V100:14";
  EXPECT_NE(Msg(c.Validate()).find("stream_max_parallel_num"), std::string::npos);
  c.stream_max_parallel_num = "GPU:2";
  EXPECT_NE(Msg(c.Validate()).find("GPU"), std::string::npos);
  c = SessionConfig();
  c.graph_memory_max_size = 30 * kGiB;
  EXPECT_NE(Msg(c.Validate()).find("31 GiB"), std::string::npos);
  c = SessionConfig();
  c.op_select_implmode = "fast";
  EXPECT_NE(Msg(c.Validate()).find("op_select_implmode"), std::string::npos);
  c = SessionConfig();
  c.device = "npu";
  Graph g;
  auto s = Session::Create(g, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(Msg(s.status()).find("npu"), std::string::npos);
}

TEST(SessionTest, MissingKernelNamesOpDeviceAndDType) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root, DType::kInt32, Shape{2, 2});
  ops::MatMul(root.WithOpName("int_matmul"), a, a);
  auto s = Session::Create(g);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(Msg(s.status()).find("int_matmul"), std::string::npos) << s.status();
  EXPECT_NE(Msg(s.status()).find("cpu"), std::string::npos);
  EXPECT_NE(Msg(s.status()).find("int32"), std::string::npos);

  Graph g2;
  Scope r2(&g2);
  ops::Const(r2.WithDevice("npu:0").WithOpName("placed"), 1.0f);
  auto s2 = Session::Create(g2);
  EXPECT_FALSE(s2.ok());
  EXPECT_NE(Msg(s2.status()).find("placed"), std::string::npos);
}

TEST(SessionTest, RuntimeKernelErrorNamesTheOp) {
  Graph g;
  Scope root(&g);
  Output p = ops::Placeholder(root.WithOpName("params"), DType::kFloat32, Shape{3, 2});
  Output i = ops::Placeholder(root.WithOpName("ids"), DType::kInt64, Shape{2});
  ops::Gather(root.WithOpName("lookup"), p, i);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok());
  auto out = (*session)->Run(
      {{"params", Tensor(DType::kFloat32, Shape{3, 2})}, {"ids", Tensor::Vector<int64_t>({1, 7})}},
      {"lookup"});
  EXPECT_FALSE(out.ok());
  EXPECT_NE(Msg(out.status()).find("\"lookup\""), std::string::npos) << out.status();
  EXPECT_NE(Msg(out.status()).find("7"), std::string::npos);
}

TEST(SessionTest, InitializersAreSeededAndReproducible) {
  auto values = [](int64_t graph_seed) {
    Graph g;
    g.set_random_seed(graph_seed);
    Scope root(&g);
    VariableOptions o;
    o.initializer = Initializer::TruncatedNormal(0.0, 1.0);
    Variable v = Variable::Make(root, "w", Shape{100}, o);
    Node* init = GlobalVariablesInitializer(root);
    auto s = Session::Create(g);
    EXPECT_TRUE((*s)->Run({}, {}, {init}).ok());
    return (*(*s)->Run({}, {v.value()}))[0];
  };
  const Tensor a = values(1), b = values(1), c = values(2);
  int same = 0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]);
    EXPECT_LE(std::abs(a.data<float>()[i]), 2.0f);  // truncated at two standard deviations
    same += a.data<float>()[i] == c.data<float>()[i];
  }
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace recsdk
