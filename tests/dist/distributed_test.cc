// distributed_test.cc: the distributed API at world size 1 (recsdk/distributed.h; src/dist/
// distributed.cc, collective_ops.cc, distributed_optimizer.cc, broadcast_variables.cc): the rank
// functions of a plain process and their errors, DistributedOptions' rules, AllReduceMean as the
// identity, a collective failure surfacing from Session::Run naming the op, DistributedOptimizer
// training bit for bit like the optimizer it wraps, the broadcast as a no-op, and Shard with the
// rank functions. The multi-rank behaviour is mpi_data_parallel_test.cc's; the gradient check of
// AllReduceMean is in tests/graph/op_gradients_test.cc with every other op's.
#include "recsdk/distributed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "recsdk/recsdk.h"
#include "src/dist/communicator.h"
#include "src/dist/process_communicator.h"
#include "tests/dist/dense_model_util.h"

namespace recsdk {
namespace {

using ::testing::AllOf;
using testing::DenseNet;
using testing::GlobalBatch;
using ::testing::HasSubstr;

std::string Message(const Status& s) { return std::string(s.message()); }

// Every test starts and ends without a process communicator.
class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override { ShutdownDistributed(); }
  void TearDown() override { ShutdownDistributed(); }
};

TEST_F(DistributedTest, RankFunctionsOfAPlainProcessAreZeroAndOne) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test without mpirun";
  for (int pass = 0; pass < 2; ++pass) {  // from the environment, then from the communicator
    SCOPED_TRACE(pass == 0 ? "before InitDistributed" : "after InitDistributed");
    EXPECT_EQ(get_rank_id().value_or(-1), 0);
    EXPECT_EQ(get_rank_size().value_or(-1), 1);
    EXPECT_EQ(get_local_rank_id().value_or(-1), 0);
    EXPECT_EQ(get_local_rank_size().value_or(-1), 1);
    ASSERT_TRUE(InitDistributed().ok());
  }
}

TEST_F(DistributedTest, ALauncherVariableThatDoesNotParseIsAnErrorNamingIt) {
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_SIZE", "two", 1), 0);
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_RANK", "0", 1), 0);
  const StatusOr<int> size = get_rank_size();
  const StatusOr<int> rank = get_rank_id();
  const Status init = InitDistributed();
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  ASSERT_FALSE(size.ok());
  EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(size.status()),
              AllOf(HasSubstr("OMPI_COMM_WORLD_SIZE=\"two\""), HasSubstr("not a whole number")));
  EXPECT_FALSE(rank.ok());
  EXPECT_EQ(init.code(), absl::StatusCode::kInvalidArgument) << init;
}

TEST_F(DistributedTest, CollectiveTimeoutMustBeFiniteAndPositive) {
  EXPECT_EQ(DistributedOptions().collective_timeout_s, 300.0);
  EXPECT_TRUE(DistributedOptions().Validate().ok());
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    DistributedOptions o;
    o.collective_timeout_s = bad;
    const Status s = InitDistributed(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(s), AllOf(HasSubstr("collective_timeout_s"), HasSubstr("> 0"),
                                  HasSubstr("default 300")));
  }
  int rank = 0, size = 0;
  EXPECT_FALSE(dist::ProcessWorld(&rank, &size)) << "a refused InitDistributed creates nothing";
}

TEST_F(DistributedTest, InitTwiceWithTheSameOptionsIsOkAndWithOthersAnError) {
  DistributedOptions o;
  o.collective_timeout_s = 20;
  ASSERT_TRUE(InitDistributed(o).ok());
  EXPECT_TRUE(InitDistributed(o).ok());
  o.collective_timeout_s = 30;
  const Status s = InitDistributed(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("collective_timeout_s 20"), HasSubstr("asked for 30"),
                                HasSubstr("ShutdownDistributed")));
  ShutdownDistributed();
  EXPECT_TRUE(InitDistributed(o).ok());
}

TEST_F(DistributedTest, AllReduceMeanIsTheIdentityOnOneRankAndChainsItsNodes) {
  Graph g;
  Scope s(&g);
  Output a = ops::Placeholder(s.WithOpName("a"), DType::kFloat32, Shape{2, 3});
  Output b = ops::Placeholder(s.WithOpName("b"), DType::kFloat32, Shape{5});
  const std::vector<Output> ab = AllReduceMean(s, {a, b});
  const std::vector<Output> again = allreduce(s, {b});  // the spec's name
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(ab.size(), 2u);
  EXPECT_EQ(ab[0].node->type(), "AllReduceMean");
  EXPECT_EQ(ab[0].node, ab[1].node) << "one node, one collective, for the whole list";
  EXPECT_EQ(ab[1].shape(), (Shape{5}));
  // The second node runs after the first, so every rank issues them in one order.
  ASSERT_EQ(again[0].node->control_inputs().size(), 1u);
  EXPECT_EQ(again[0].node->control_inputs()[0], ab[0].node);

  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<float> av = {1, -2, 3.5f, 0, 1e-30f, -7}, bv = {9, 8, 7, 6, 5};
  FeedList feeds = {{"a", *Tensor::FromValues<float>(Shape{2, 3}, av)},
                    {"b", *Tensor::FromValues<float>(Shape{5}, bv)}};
  auto out = (*session)->Run(feeds, {ab[0].name(), ab[1].name(), again[0].name()});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 6), av);
  EXPECT_EQ(std::vector<float>((*out)[1].data<float>(), (*out)[1].data<float>() + 5), bv);
  EXPECT_EQ(std::vector<float>((*out)[2].data<float>(), (*out)[2].data<float>() + 5), bv);
}

TEST_F(DistributedTest, AllReduceMeanOfANonFloatTensorIsAnErrorNamingIt) {
  Graph g;
  Scope s(&g);
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{4});
  const std::vector<Output> out = AllReduceMean(s, {ids});
  EXPECT_FALSE(out[0].valid());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s.status()), AllOf(HasSubstr("AllReduceMean"), HasSubstr("\"ids"),
                                         HasSubstr("int64"), HasSubstr("cast it to float32")));
}

// SilentPeer: a world of two whose rank 1 never answers: every all-reduce, broadcast and
// all-gather fails as MPI's does at its deadline. The test issues only those; any other
// collective reaching this fake is a failure of the test itself (OtherCollective says which fake
// refused it).
class SilentPeer final : public dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string_view name() const override { return "fake"; }

 protected:
  Status DoAllReduce(const dist::CollectiveCall& call, void*) override {
    return absl::DeadlineExceededError(
        fmt::format("{} on rank 0: rank 1 did not join it within 1.00 s", DescribeCall(call)));
  }
  Status DoBroadcast(const dist::CollectiveCall& call, void*) override {
    return DoAllReduce(call, nullptr);
  }
  // broadcast_global_variables' check that every rank runs the same program.
  Status DoAllGather(const dist::CollectiveCall& call, const void*, void*) override {
    return DoAllReduce(call, nullptr);
  }
  Status DoAllGatherV(const dist::CollectiveCall&, const void*, void*,
                      absl::Span<const int64_t>) override {
    return OtherCollective();
  }
  Status DoAllToAll(const dist::CollectiveCall&, const void*, void*) override {
    return OtherCollective();
  }
  Status DoAllToAllV(const dist::CollectiveCall&, const void*, absl::Span<const int64_t>, void*,
                     absl::Span<const int64_t>) override {
    return OtherCollective();
  }
  Status DoBarrier(const dist::CollectiveCall&) override { return OtherCollective(); }
  StatusOr<std::unique_ptr<dist::Communicator>> DoSubRange(int, int, dist::Deadline) override {
    return OtherCollective();
  }

 private:
  static Status OtherCollective() {
    return absl::FailedPreconditionError(
        "SilentPeer answers AllReduce only; the graph under test issued another collective");
  }
};

TEST_F(DistributedTest, ACollectiveFailureComesBackFromRunNamingTheOpAndTheRank) {
  dist::SetProcessCommunicatorForTesting(std::make_unique<SilentPeer>());
  DenseNet net(std::make_shared<DistributedOptimizer>(std::make_shared<SgdOptimizer>()), 1, 4);
  ASSERT_NE(net.session, nullptr);
  EXPECT_EQ(get_rank_size().value_or(-1), 2) << "the communicator's world, once there is one";
  const StatusOr<float> loss = net.Step(GlobalBatch(0, 4));
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(loss.status()),
              AllOf(HasSubstr("(AllReduceMean)"), HasSubstr("distributed/AllReduceMean"),
                    HasSubstr("rank 1 did not join"), HasSubstr("Session::Run #")));

  // The broadcast's failure names it too.
  const Status b = broadcast_global_variables(*net.session, 0);
  EXPECT_EQ(b.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(b), AllOf(HasSubstr("broadcast_global_variables(root_rank 0)"),
                                HasSubstr("rank 1 did not join")));
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST_F(DistributedTest, DistributedOptimizerOnOneRankTrainsBitForBitLikeTheInner) {
  using MakeOpt = std::function<std::shared_ptr<Optimizer>()>;
  const std::vector<std::pair<const char*, MakeOpt>> optimizers = {
      {"SGD", [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); }},
      {"Adam", [] { return std::make_shared<AdamOptimizer>(AdamOptions{0.01}); }},
  };
  for (const auto& [name, make] : optimizers) {
    SCOPED_TRACE(name);
    DenseNet plain(make(), 7, 8);
    DenseNet wrapped(npu_distributed_optimizer_wrapper(make()), 7, 8);
    ASSERT_NE(plain.session, nullptr);
    ASSERT_NE(wrapped.session, nullptr);
    const auto initial = plain.Weights();
    ASSERT_TRUE(SameBits(initial, wrapped.Weights()));
    for (int step = 0; step < 10; ++step) {
      const StatusOr<float> a = plain.Step(GlobalBatch(step, 8));
      const StatusOr<float> b = wrapped.Step(GlobalBatch(step, 8));
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " / " << b.status();
      ASSERT_EQ(std::memcmp(&*a, &*b, sizeof(float)), 0) << "step " << step;
    }
    EXPECT_TRUE(SameBits(plain.Weights(), wrapped.Weights()));
    EXPECT_FALSE(SameBits(initial, plain.Weights())) << "it trained";
    int reductions = 0;
    for (const Node* n : wrapped.g.nodes()) reductions += n->type() == "AllReduceMean";
    EXPECT_EQ(reductions, 1) << "all dense gradients in one collective";
  }
}

TEST_F(DistributedTest, DistributedOptimizerWithoutAnInnerOneIsAnError) {
  Graph g;
  Scope s(&g);
  Variable w = Variable::Make(s, "w", Shape{2}, {});
  DistributedOptimizer opt(nullptr);
  const StatusOr<Node*> train = opt.Minimize(s, ops::ReduceSum(s, w.value()));
  EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(train.status()), HasSubstr("inner optimizer is null"));
}

// is_tailing_optimization is one setting in two places (the spec pairs the session option with
// NPUOptimizer's argument, here DistributedOptimizerOptions): Session::Create refuses a graph
// whose DistributedOptimizer says otherwise than the SessionConfig, naming both, at any world
// size; when they agree, one process trains as without the option (nothing is in flight).
TEST_F(DistributedTest, TailingOptimizationMustAgreeBetweenSessionAndDistributedOptimizer) {
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); };
  SessionConfig tailing;
  tailing.hcom_parallel = true;
  tailing.is_tailing_optimization = true;
  const DistributedOptimizerOptions on{.is_tailing_optimization = true};
  const std::string both = "SessionConfig.is_tailing_optimization";
  const std::string optimizer = "DistributedOptimizerOptions.is_tailing_optimization";
  {
    DenseNet net(npu_distributed_optimizer_wrapper(sgd(), on), 7, 8, /*create_session=*/false);
    const StatusOr<std::unique_ptr<Session>> s = Session::Create(net.g, SessionConfig());
    ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_THAT(Message(s.status()),
                AllOf(HasSubstr(both + " is false"), HasSubstr(optimizer + " true"),
                      HasSubstr("AllReduceMean"), HasSubstr("set both to the same value")));
  }
  {
    DenseNet net(npu_distributed_optimizer_wrapper(sgd()), 7, 8, /*create_session=*/false);
    const StatusOr<std::unique_ptr<Session>> s = Session::Create(net.g, tailing);
    ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_THAT(Message(s.status()),
                AllOf(HasSubstr(both + " is true"), HasSubstr(optimizer + " false")));
  }
  DenseNet agreed(npu_distributed_optimizer_wrapper(sgd(), on), 7, 8, true, tailing);
  DenseNet plain(npu_distributed_optimizer_wrapper(sgd()), 7, 8);
  ASSERT_NE(agreed.session, nullptr);
  ASSERT_NE(plain.session, nullptr);
  for (int step = 0; step < 5; ++step) {
    const StatusOr<float> a = agreed.Step(GlobalBatch(step, 8));
    const StatusOr<float> b = plain.Step(GlobalBatch(step, 8));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " / " << b.status();
  }
  EXPECT_TRUE(SameBits(agreed.Weights(), plain.Weights()));
  // A graph without a DistributedOptimizer (an evaluation graph under the same RunConfig) has
  // nothing to pair and is accepted.
  DenseNet unwrapped(sgd(), 7, 8, true, tailing);
  EXPECT_NE(unwrapped.session, nullptr);
}

TEST_F(DistributedTest, BroadcastOnOneRankKeepsTheValuesAndChecksTheRoot) {
  DenseNet net(std::make_shared<SgdOptimizer>(), 3, 4);
  ASSERT_NE(net.session, nullptr);
  const auto before = net.Weights();
  ASSERT_TRUE(broadcast_global_variables(*net.session, 0).ok());
  BroadcastGlobalVariablesHook hook;
  ASSERT_TRUE(hook.AfterCreateSession(*net.session).ok());
  EXPECT_TRUE(SameBits(before, net.Weights()));
  const Status s = broadcast_global_variables(*net.session, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Message(s), HasSubstr("root_rank 1"));
}

TEST_F(DistributedTest, BroadcastBeforeInitialisationNamesTheVariable) {
  Graph g;
  Scope s(&g);
  ASSERT_TRUE(Variable::Make(s, "w", Shape{2}, {}).valid());
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  const Status st = broadcast_global_variables(**session, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(st), AllOf(HasSubstr("\"w\""), HasSubstr("GlobalVariablesInitializer")));
}

TEST_F(DistributedTest, ShardWithTheRankFunctionsKeepsEveryRowOnOneRank) {
  std::vector<float> values(10);
  for (int i = 0; i < 10; ++i) values[i] = static_cast<float>(i);
  auto source = InMemoryDataset({InMemoryColumn{"v", values, 1}}, 4);
  ASSERT_TRUE(source.ok()) << source.status();
  // The spec's dataset.shard(get_rank_size(), get_rank_id()).
  const StatusOr<int> size = get_rank_size(), rank = get_rank_id();
  ASSERT_TRUE(size.ok() && rank.ok());
  auto shard = Shard(std::move(*source), *size, *rank);
  ASSERT_TRUE(shard.ok()) << shard.status();
  int64_t rows = 0;
  ::recsdk::Batch batch;
  while (true) {
    const StatusOr<bool> more = (*shard)->GetNext(&batch);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    rows += batch.num_rows();
  }
  EXPECT_EQ(rows, 10);
}

}  // namespace
}  // namespace recsdk
