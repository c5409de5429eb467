// placement_test.cc: the placement pass (src/session/passes/placement.cc) and the Session's
// memory spaces: ops go to the device when it has their kernel, to the host under
// mix_compile_mode (an error naming the op otherwise), copies appear where edges cross memory
// spaces, feeds and fetches cross at the edge, and a kernel that leaves its output in the wrong
// memory is an error naming it. "partial_device" is a separate-memory device with only a few
// kernels, registered here.
#include <gtest/gtest.h>

#include <mutex>

#include "recsdk/recsdk.h"
#include "src/device/kernel.h"
#include "src/device/separate_memory/separate_memory_device.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/runtime.h"
#include "tests/session/test_models.h"

namespace recsdk {
namespace {

using internal::DeviceRegistry;
using internal::KernelRegistry;

constexpr char kPartial[] = "partial_device";

// partial_device: Placeholder, Const, MatMul and Sigmoid in float32 (the CPU's kernels on its own
// memory), the copies, and an Identity whose kernel wrongly returns a host tensor. No Relu.
void RegisterPartialDevice() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::InitializeRuntime();
    DeviceRegistry::Global().Register(
        kPartial,
        [](const SessionConfig& c) { return internal::CreateSeparateMemoryDevice(kPartial, c); },
        MemoryKind::kDevice);
    KernelRegistry& r = KernelRegistry::Global();
    for (const char* op : {"Placeholder", "Const", "MatMul", "Sigmoid"}) {
      const internal::KernelFactory* f = r.Find(op, "cpu", DType::kFloat32, "");
      ASSERT_NE(f, nullptr) << op;
      r.Register(op, kPartial, DType::kFloat32, *f);
    }
    internal::RegisterCopyKernels(r, kPartial);
    r.RegisterFn("Identity", kPartial, {DType::kFloat32},
                 [](internal::OpKernelContext& ctx) -> Status {
                   // Bypasses the context's allocation (and set_output's upload).
                   *ctx.output(0) = Tensor(DType::kFloat32, ctx.input(0).shape());
                   return absl::OkStatus();
                 });
  });
}

// y = sigmoid(relu(x w)), with x fed.
void BuildModel(Graph* g, const std::string& relu_device = "") {
  Scope root(g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  Output w = ops::Const(root.WithOpName("w"),
                        *Tensor::FromValues<float>(Shape{3, 2}, {1, -1, 0.5f, 2, -2, 1}));
  Output m = ops::MatMul(root.WithOpName("m"), x, w);
  Output r = ops::Relu(root.WithOpName("r").WithDevice(relu_device), m);
  ops::Sigmoid(root.WithOpName("y"), r);
}

FeedList Feeds() {
  return {{"x", *Tensor::FromValues<float>(Shape{2, 3}, {1, 2, 3, -1, 0.5f, 2})}};
}

std::vector<Tensor> RunOn(const Graph& g, const SessionConfig& config,
                          const std::vector<TensorName>& fetches) {
  auto session = Session::Create(g, config);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  auto out = (*session)->Run(Feeds(), fetches);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>{};
}

TEST(PlacementTest, AnOpTheDeviceLacksIsAnErrorNamingItWithoutMixCompileMode) {
  RegisterPartialDevice();
  Graph g;
  BuildModel(&g);
  SessionConfig config;
  config.device = kPartial;
  auto session = Session::Create(g, config);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(session.status().message());
  EXPECT_NE(msg.find("op \"r\" (Relu)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mix_compile_mode"), std::string::npos) << msg;
}

TEST(PlacementTest, MixCompileModeRunsTheOpOnTheHostWithCopiesAround) {
  RegisterPartialDevice();
  Graph g;
  BuildModel(&g);
  SessionConfig config;
  config.device = kPartial;
  config.mix_compile_mode = true;
  auto session = Session::Create(g, config);
  ASSERT_TRUE(session.ok()) << session.status();
  const Graph& placed = (*session)->graph();
  const Node* relu = placed.FindNode("r");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->device(), "cpu:0");
  EXPECT_EQ(relu->input(0).node->type(), "CopyDeviceToHost");
  EXPECT_EQ(relu->input(0).node->input(0).node->name(), "m");
  const Node* y = placed.FindNode("y");
  EXPECT_EQ(y->device(), std::string(kPartial) + ":0");
  EXPECT_EQ(y->input(0).node->type(), "CopyHostToDevice");
  int copies = 0;
  for (const Node* n : placed.nodes()) copies += n->type().rfind("Copy", 0) == 0 ? 1 : 0;
  EXPECT_EQ(copies, 2);
  const auto& passes = (*session)->applied_passes();
  EXPECT_NE(std::find(passes.begin(), passes.end(), "placement"), passes.end());

  // The same numbers as the host alone; fetches of device and host ops both arrive on the host.
  auto out = (*session)->Run(Feeds(), {"y", "r", "m"});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<Tensor> cpu = RunOn(g, SessionConfig{}, {"y", "r", "m"});
  ASSERT_EQ(cpu.size(), 3u);
  for (int f = 0; f < 3; ++f) {
    ASSERT_TRUE((*out)[f].on_host());
    for (int i = 0; i < 4; ++i) EXPECT_EQ((*out)[f].flat<float>()[i], cpu[f].flat<float>()[i]);
  }
  // Device ops two at a time (DNN_V100) and host ops one at a time (DNN_VM_TF): the same.
  config.stream_max_parallel_num = "DNN_V100:2,DNN_VM_TF:1";
  const std::vector<Tensor> parallel = RunOn(g, config, {"y"});
  ASSERT_EQ(parallel.size(), 1u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(parallel[0].flat<float>()[i], cpu[0].flat<float>()[i]);
}

TEST(PlacementTest, AnExplicitHostPlacementNeedsMixCompileMode) {
  RegisterPartialDevice();
  Graph g;
  BuildModel(&g, "cpu:0");
  SessionConfig config;
  config.device = "separate_memory";
  auto session = Session::Create(g, config);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("set mix_compile_mode true"), std::string::npos)
      << session.status();
  config.mix_compile_mode = true;
  const std::vector<Tensor> out = RunOn(g, config, {"y"});
  const std::vector<Tensor> cpu = RunOn(g, SessionConfig{}, {"y"});
  ASSERT_EQ(out.size(), 1u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].flat<float>()[i], cpu[0].flat<float>()[i]);
}

TEST(PlacementTest, AKernelLeavingItsOutputInHostMemoryIsNamed) {
  RegisterPartialDevice();
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  ops::Sigmoid(root.WithOpName("y"), ops::Identity(root.WithOpName("id"), x));
  SessionConfig config;
  config.device = kPartial;
  auto session = Session::Create(g, config);
  ASSERT_TRUE(session.ok()) << session.status();
  auto out = (*session)->Run(Feeds(), {"y"});
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  EXPECT_NE(msg.find("op \"id\" (Identity)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("produced output 0 in host memory"), std::string::npos) << msg;
}

// An op on a variable runs where the variable lives: on a device whose memory is not the host's,
// a variable's Assign the device has no kernel for is an error naming the op, the variable and
// the device even under mix_compile_mode (a host kernel would write device memory in place);
// ops without a variable still fall back to the host.
TEST(PlacementTest, AnOpOnAVariableTheDeviceLacksFailsEvenUnderMixCompileMode) {
  RegisterPartialDevice();
  Graph g;
  Scope root(&g);
  Variable w = Variable::Make(root, "w", Shape{3, 2}, VariableOptions{});
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  ops::Sigmoid(root.WithOpName("y"),
               ops::Relu(root.WithOpName("r"), ops::MatMul(root, x, w.value())));
  ASSERT_TRUE(root.status().ok()) << root.status();
  SessionConfig config;
  config.device = kPartial;
  config.mix_compile_mode = true;
  std::unique_ptr<Graph> copy = g.Copy();
  auto passes = internal::RunSessionPasses(config, copy.get());
  ASSERT_FALSE(passes.ok());
  EXPECT_EQ(passes.status().code(), absl::StatusCode::kFailedPrecondition) << passes.status();
  const std::string msg(passes.status().message());
  // partial_device has no ReadVariable (nor Assign): the first of them in graph order is named.
  EXPECT_NE(msg.find("reads or writes variable \"w\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory of device \"partial_device\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("has no kernel for it"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("(ReadVariable)") != std::string::npos ||
              msg.find("(Assign)") != std::string::npos)
      << msg;
}

// The same rule on the separate_memory device (every CPU kernel, so the rule never lacks one):
// an op on a variable or on a tiered table's rows (its device tier is the device's memory) placed
// on the host by the user fails naming it; the key work of a lookup (SparseLookup) may still run
// on the host; an untiered table's rows are host memory, so under mix_compile_mode its row ops run
// there, and without it on the device.
TEST(PlacementTest, AnOpOnAVariableOrTableRowsPlacedOnTheHostFails) {
  internal::InitializeRuntime();
  auto build = [](Graph* g, const std::string& host_type, bool tiered = true) {
    Scope root(g);
    TableConfig c;
    c.name = "emb";
    c.dim = 4;
    c.device_vocabulary_size = 50;
    if (tiered) c.host_vocabulary_size = 100;
    auto table = create_table(root, c, SparseOptimizerConfig::SGD(0.1f));
    ASSERT_TRUE(table.ok()) << table.status();
    Output ids = ops::Placeholder(root.WithOpName("ids"), DType::kInt64, Shape{4, 1});
    SparseLookupOptions lo;
    lo.combiner = Combiner::kSum;
    auto e = sparse_lookup(root, *table, ids, lo);
    ASSERT_TRUE(e.ok()) << e.status();
    Variable w = Variable::Make(root, "w", Shape{4, 1}, VariableOptions{});
    Output loss = ops::ReduceMean(root.WithOpName("loss"), ops::MatMul(root, *e, w.value()));
    ASSERT_TRUE(SgdOptimizer(SgdOptions{0.1}).Minimize(root, loss).ok());
    ASSERT_TRUE(SparseMinimize(root, loss).ok());
    ASSERT_TRUE(root.status().ok()) << root.status();
    for (Node* n : g->nodes()) {
      if (n->type() == host_type) n->set_device("cpu:0");
    }
  };
  SessionConfig config;
  config.device = "separate_memory";
  config.mix_compile_mode = true;
  for (const std::string type : {"TableApply", "ApplyGradientDescent", "TableGather"}) {
    Graph g;
    build(&g, type);
    if (::testing::Test::HasFatalFailure()) return;
    auto passes = internal::RunSessionPasses(config, &g);
    ASSERT_FALSE(passes.ok()) << type;
    EXPECT_EQ(passes.status().code(), absl::StatusCode::kFailedPrecondition) << passes.status();
    const std::string msg(passes.status().message());
    EXPECT_NE(msg.find("(" + type + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find(type == "ApplyGradientDescent" ? "variable \"w\"" : "table \"emb\""),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("placed on \"cpu:0\" (the host)"), std::string::npos) << msg;
  }
  Graph g;
  build(&g, "SparseLookup");
  if (::testing::Test::HasFatalFailure()) return;
  auto passes = internal::RunSessionPasses(config, &g);
  ASSERT_TRUE(passes.ok()) << passes.status();
  for (Node* n : g.nodes()) {
    if (n->type() == "SparseLookup") {
      EXPECT_EQ(n->device(), "cpu:0");
    }
    if (n->type() == "TableApply" || n->type() == "TableGather") {
      EXPECT_EQ(n->device(), "separate_memory:0") << n->name();
    }
  }
  for (const bool mix : {true, false}) {
    Graph untiered;
    build(&untiered, "", /*tiered=*/false);
    if (::testing::Test::HasFatalFailure()) return;
    SessionConfig c = config;
    c.mix_compile_mode = mix;
    auto placed = internal::RunSessionPasses(c, &untiered);
    ASSERT_TRUE(placed.ok()) << placed.status();
    int row_ops = 0;
    for (Node* n : untiered.nodes()) {
      if (n->type() == "TableApply" || n->type() == "TableGather") {
        ++row_ops;
        EXPECT_EQ(n->device(), mix ? "cpu:0" : "separate_memory:0") << n->name();
      }
      if (n->type() == "ApplyGradientDescent") {
        EXPECT_EQ(n->device(), "separate_memory:0") << n->name();
      }
    }
    EXPECT_EQ(row_ops, 2);
  }
}

TEST(PlacementTest, ATrainedModelOnSeparateMemoryMatchesTheHostBitForBit) {
  internal::InitializeRuntime();
  std::vector<float> losses[2];
  for (int run = 0; run < 2; ++run) {
    testing::LinearModel m;
    testing::BuildLinearModel(&m);
    SessionConfig config;
    if (run == 1) config.device = "separate_memory";
    auto session = Session::Create(m.graph, config);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->Run({}, {}, {m.init->name()}).ok());
    for (int step = 0; step < 5; ++step) {
      auto out = (*session)->Run(testing::LinearFeeds(2.0f + step), {m.loss}, {m.train->name()});
      ASSERT_TRUE(out.ok()) << out.status();
      losses[run].push_back((*out)[0].scalar<float>());
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(losses[1].back(), losses[1].front());
}

}  // namespace
}  // namespace recsdk
