// session_test.cc: Session::Run semantics, errors, variables, the executor and memory accounting.
#include <gtest/gtest.h>

#include "recsdk/recsdk.h"

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
