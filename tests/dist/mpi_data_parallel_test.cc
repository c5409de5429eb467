// Data-parallel training under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt): the rank
// functions agree with the launcher; N ranks each training on their shard of every global batch
// with DistributedOptimizer end with the dense weights of one process trained on the full global
// batches (computed on every rank, in the same test, by a plain optimizer that makes no
// collective); broadcast_global_variables and BroadcastGlobalVariablesHook make ranks that
// initialised differently equal to the root; and a rank that skips the all-reduce makes the
// others' Session::Run fail with DeadlineExceeded naming the op and that rank, within the
// timeout. Every wait has a deadline, and CTest a TIMEOUT.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/common/status_macros.h"
#include "src/dist/create_communicator.h"
#include "src/dist/launch_env.h"
#include "src/dist/mpi/mpi_communicator.h"
#include "src/session/passes/pass_manager.h"
#include "tests/dist/dense_model_util.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point
#include "tests/dist/sparse_model_util.h"

namespace recsdk {
namespace {

using ::testing::AllOf;
using testing::DenseNet;
using testing::GlobalBatch;
using ::testing::HasSubstr;
using testing::ShardOf;

using DataParallelTest = dist::testing::RanksTest;

// Close: |a - b| <= 1e-5 relative to the larger, with a floor for values near 0.
void ExpectClose(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t v = 0; v < a.size(); ++v) {
    ASSERT_EQ(a[v].size(), b[v].size()) << what;
    for (size_t i = 0; i < a[v].size(); ++i) {
      const float scale = std::max({std::fabs(a[v][i]), std::fabs(b[v][i]), 1e-2f});
      EXPECT_LE(std::fabs(a[v][i] - b[v][i]), 1e-5f * scale)
          << what << ": variable " << v << " element " << i << ": " << a[v][i] << " vs " << b[v][i];
    }
  }
}

TEST_F(DataParallelTest, RankFunctionsAgreeWithTheLauncher) {
  const StatusOr<dist::LaunchEnvironment> env = dist::ReadLaunchEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(rank_, env->rank);
  EXPECT_EQ(size_, env->size);
  EXPECT_EQ(get_local_rank_id().value_or(-1), env->local_rank);
  EXPECT_EQ(get_local_rank_size().value_or(-1), env->local_size);
  EXPECT_EQ(env->local_size, size_) << "the test runs every rank on this host";
}

TEST_F(DataParallelTest, ShardsOfEveryGlobalBatchTrainLikeOneProcessOnTheGlobalBatches) {
  // 12 rows: equal shards at 2, 3, 4 and 6 ranks, so the mean over the ranks of the shards' mean
  // gradients is the global batch's mean gradient.
  constexpr int64_t kGlobalRows = 12;
  constexpr int kSteps = 20;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); };
  DenseNet ranks(npu_distributed_optimizer_wrapper(sgd()), 11, kGlobalRows / size_);
  DenseNet one(sgd(), 11, kGlobalRows);
  ASSERT_NE(ranks.session, nullptr);
  ASSERT_NE(one.session, nullptr);
  const auto initial = one.Weights();
  for (int step = 0; step < kSteps; ++step) {
    const testing::ModelBatch global = GlobalBatch(step, kGlobalRows);
    const StatusOr<float> a = ranks.Step(ShardOf(global, size_, rank_));
    ASSERT_TRUE(a.ok()) << a.status();
    const StatusOr<float> b = one.Step(global);
    ASSERT_TRUE(b.ok()) << b.status();
  }
  const auto trained = one.Weights();
  ExpectClose(ranks.Weights(), trained, "rank " + std::to_string(rank_) + " vs one process");
  // The comparison can fail: training moved the weights well beyond the tolerance.
  float moved = 0;
  for (size_t v = 0; v < trained.size(); ++v) {
    for (size_t i = 0; i < trained[v].size(); ++i) {
      moved = std::max(moved, std::fabs(trained[v][i] - initial[v][i]));
    }
  }
  EXPECT_GT(moved, 1e-2f);
}

// hcom_parallel: the dense gradients' all-reduce in buckets in backward order (bucket_all_reduce),
// reduced beside the rest of backward on 4 streams, trains as one all-reduce after backward:
// bit for bit at 2 ranks ((a + b) / 2 whatever the bucket), within rounding at more.
TEST_F(DataParallelTest, HcomParallelBucketsTrainLikeOneAllReduceAfterBackward) {
  constexpr int64_t kGlobalRows = 12;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); };
  SessionConfig overlap;
  overlap.hcom_parallel = true;
  overlap.stream_max_parallel_num = "DNN_V100:4";
  DenseNet bucketed(npu_distributed_optimizer_wrapper(sgd()), 11, kGlobalRows / size_, true,
                    overlap);
  DenseNet plain(npu_distributed_optimizer_wrapper(sgd()), 11, kGlobalRows / size_);
  ASSERT_NE(bucketed.session, nullptr);
  ASSERT_NE(plain.session, nullptr);
  const auto initial = plain.Weights();
  for (int step = 0; step < 15; ++step) {
    const testing::ModelBatch shard = ShardOf(GlobalBatch(step, kGlobalRows), size_, rank_);
    const StatusOr<float> a = bucketed.Step(shard);
    ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a.status();
    const StatusOr<float> b = plain.Step(shard);
    ASSERT_TRUE(b.ok()) << b.status();
    if (size_ == 2) {
      EXPECT_EQ(*a, *b) << "step " << step;
    }
  }
  const auto got = bucketed.Weights();
  const auto want = plain.Weights();
  if (size_ == 2) {
    EXPECT_EQ(got, want) << "rank " << rank_;
  } else {
    ExpectClose(got, want, "rank " + std::to_string(rank_) + ", buckets vs one all-reduce");
  }
  float moved = 0;
  for (size_t v = 0; v < want.size(); ++v) {
    for (size_t i = 0; i < want[v].size(); ++i) {
      moved = std::max(moved, std::fabs(want[v][i] - initial[v][i]));
    }
  }
  EXPECT_GT(moved, 1e-2f) << "training moved the weights";
  // The pass on a copy of the graph: the one AllReduceMean of 4 gradients became 4 buckets, in
  // backward order (fc2's gradients, made first by backward, in the first bucket).
  std::unique_ptr<Graph> copy = bucketed.g.Copy();
  ASSERT_TRUE(internal::RunPass("bucket_all_reduce", overlap, copy.get()).ok());
  std::vector<Node*> buckets;
  for (Node* n : copy->nodes()) {
    if (n->type() == "AllReduceMean") buckets.push_back(n);
  }
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_THAT(buckets.front()->input(0).node->name(), ::testing::HasSubstr("fc2"));
  EXPECT_THAT(buckets.back()->input(0).node->name(), ::testing::HasSubstr("fc1"));
  // hcom_parallel false: the pass leaves the graph alone.
  std::unique_ptr<Graph> untouched = plain.g.Copy();
  ASSERT_TRUE(internal::RunPass("bucket_all_reduce", {}, untouched.get()).ok());
  int reductions = 0;
  for (Node* n : untouched->nodes()) reductions += n->type() == "AllReduceMean" ? 1 : 0;
  EXPECT_EQ(reductions, 1);
}

// is_tailing_optimization: the last bucket becomes AllReduceStart (in the bucket's place in the
// order of collectives) and AllReduceWait (after every node that does not need it), so the
// updates of the earlier buckets' variables run while the last bucket is reduced; training is
// bit for bit the same as with the buckets alone (the same reductions of the same bytes), on
// one stream and on four.
TEST_F(DataParallelTest, TailingOptimizationOverlapsTheLastBucketAndTrainsBitForBitTheSame) {
  constexpr int64_t kGlobalRows = 12;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); };
  const DistributedOptimizerOptions on{.is_tailing_optimization = true};
  SessionConfig buckets;
  buckets.hcom_parallel = true;
  SessionConfig tailing = buckets;
  tailing.is_tailing_optimization = true;
  SessionConfig tailing4 = tailing;
  tailing4.stream_max_parallel_num = "DNN_V100:4";
  DenseNet plain(npu_distributed_optimizer_wrapper(sgd()), 11, kGlobalRows / size_, true, buckets);
  DenseNet one_stream(npu_distributed_optimizer_wrapper(sgd(), on), 11, kGlobalRows / size_, true,
                      tailing);
  DenseNet four_streams(npu_distributed_optimizer_wrapper(sgd(), on), 11, kGlobalRows / size_, true,
                        tailing4);
  ASSERT_NE(plain.session, nullptr);
  ASSERT_NE(one_stream.session, nullptr);
  ASSERT_NE(four_streams.session, nullptr);
  const auto initial = plain.Weights();
  for (int step = 0; step < 15; ++step) {
    const testing::ModelBatch shard = ShardOf(GlobalBatch(step, kGlobalRows), size_, rank_);
    const StatusOr<float> a = one_stream.Step(shard);
    ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a.status();
    const StatusOr<float> b = four_streams.Step(shard);
    ASSERT_TRUE(b.ok()) << "rank " << rank_ << " step " << step << ": " << b.status();
    const StatusOr<float> c = plain.Step(shard);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*a, *c) << "step " << step;
    EXPECT_EQ(*b, *c) << "step " << step;
  }
  EXPECT_EQ(one_stream.Weights(), plain.Weights()) << "rank " << rank_;
  EXPECT_EQ(four_streams.Weights(), plain.Weights()) << "rank " << rank_;
  EXPECT_NE(plain.Weights(), initial) << "training moved the weights";

  // The passes on a copy: 4 buckets, the last (fc1's, made last by backward) split in two.
  std::unique_ptr<Graph> copy = one_stream.g.Copy();
  for (const char* pass : {"bucket_all_reduce", "tailing_optimization", "order_collectives"}) {
    ASSERT_TRUE(internal::RunPass(pass, tailing, copy.get()).ok()) << pass;
  }
  const Node* start = nullptr;
  const Node* wait = nullptr;
  std::vector<const Node*> reductions;
  for (const Node* n : copy->nodes()) {
    if (n->type() == "AllReduceStart") start = n;
    if (n->type() == "AllReduceWait") wait = n;
    if (n->type() == "AllReduceMean") reductions.push_back(n);
  }
  ASSERT_NE(start, nullptr);
  ASSERT_NE(wait, nullptr);
  ASSERT_EQ(reductions.size(), 3u) << "the other buckets stay AllReduceMean";
  EXPECT_THAT(start->input(0).node->name(), HasSubstr("fc1"));
  EXPECT_EQ(wait->input(0).node, start);
  // Start is the collective in the chain, right after the previous bucket.
  const std::vector<Node*>& deps = start->control_inputs();
  EXPECT_NE(std::find(deps.begin(), deps.end(), reductions.back()), deps.end());
  // Every update: of an earlier bucket's variable, between Start and Wait in the order (it runs
  // while the last bucket is reduced, and needs nothing of it); of the last bucket's, after Wait.
  int between = 0, after = 0;
  for (const Node* n : copy->nodes()) {
    if (n->type() != "ApplyGradientDescent") continue;
    bool reads_wait = false;
    for (const Output& in : n->inputs()) reads_wait |= in.node == wait;
    if (reads_wait) {
      EXPECT_GT(n->id(), wait->id()) << n->name();
      ++after;
    } else {
      EXPECT_GT(n->id(), start->id()) << n->name();
      EXPECT_LT(n->id(), wait->id()) << n->name() << " waits for the last bucket";
      ++between;
    }
  }
  EXPECT_EQ(between, 3);
  EXPECT_EQ(after, 1);
  // Without the option the last bucket is one blocking AllReduceMean before every update.
  std::unique_ptr<Graph> untouched = plain.g.Copy();
  for (const char* pass : {"bucket_all_reduce", "tailing_optimization"}) {
    ASSERT_TRUE(internal::RunPass(pass, buckets, untouched.get()).ok()) << pass;
  }
  for (const Node* n : untouched->nodes()) {
    EXPECT_NE(n->type(), "AllReduceStart");
  }
}

// With sharded tables the sparse updates are collectives too (the gradient exchange): chained
// after AllReduceStart they queue behind the background reduction on the one communicator, in
// the same order on every rank, and training stays bit for bit that of the buckets alone.
TEST_F(DataParallelTest, TailingOptimizationWithShardedTablesKeepsOneOrderOfCollectives) {
  namespace sp = testing::sparse;
  constexpr int64_t kGlobalRows = 12;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.1}); };
  SessionConfig buckets;
  buckets.hcom_parallel = true;
  SessionConfig tailing = buckets;
  tailing.is_tailing_optimization = true;
  tailing.stream_max_parallel_num = "DNN_V100:3";
  sp::SparseNet plain(npu_distributed_optimizer_wrapper(sgd()), kGlobalRows / size_, true, buckets);
  sp::SparseNet tail(npu_distributed_optimizer_wrapper(sgd(), {.is_tailing_optimization = true}),
                     kGlobalRows / size_, true, tailing);
  ASSERT_NE(plain.session, nullptr);
  ASSERT_NE(tail.session, nullptr);
  for (int step = 0; step < 12; ++step) {
    const sp::SparseBatch shard = sp::ShardOf(sp::GlobalBatch(step, kGlobalRows), size_, rank_);
    const Status a = tail.Step(shard);
    ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a;
    const Status b = plain.Step(shard);
    ASSERT_TRUE(b.ok()) << b;
  }
  EXPECT_EQ(tail.Weights(), plain.Weights()) << "rank " << rank_;
}

TEST_F(DataParallelTest, BroadcastMakesRanksThatInitialisedDifferentlyEqualToTheRoot) {
  auto sgd = [] { return std::make_shared<SgdOptimizer>(); };
  // broadcast_global_variables from rank 0.
  DenseNet net(sgd(), 100 + rank_, 4);
  DenseNet root(sgd(), 100, 4);  // what rank 0 initialised, rebuilt here
  ASSERT_NE(net.session, nullptr);
  ASSERT_NE(root.session, nullptr);
  if (rank_ != 0) {
    ASSERT_NE(net.Weights(), root.Weights()) << "the seeds differ";
  }
  ASSERT_TRUE(broadcast_global_variables(*net.session, 0).ok());
  EXPECT_EQ(net.Weights(), root.Weights());

  // BroadcastGlobalVariablesHook from the last rank, after a MonitoredSession's init op.
  const int last = size_ - 1;
  DenseNet graph_only(sgd(), 200 + rank_, 4, /*create_session=*/false);
  DenseNet last_root(sgd(), 200 + last, 4);
  MonitoredSessionOptions options;
  options.hooks = {std::make_shared<BroadcastGlobalVariablesHook>(last)};
  StatusOr<std::unique_ptr<MonitoredSession>> ms =
      MonitoredSession::Create(&graph_only.g, std::move(options));
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_EQ(graph_only.Weights(&(*ms)->session()), last_root.Weights());
}

// Ranks that built different models are told so at the start, naming the first difference,
// instead of failing the broadcast on its byte count (or training on buffers of equal size that
// mean different things).
TEST_F(DataParallelTest, RanksWithDifferentProgramsAreToldTheFirstDifferenceAtTheStart) {
  const int odd = size_ - 1;
  Graph g;
  Scope s(&g);
  (void)Variable::Make(s, "w", Shape{4, rank_ == odd ? 16 : 8});
  Node* init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
  StatusOr<std::unique_ptr<Session>> session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init->name()}, nullptr).ok());
  const Status st = broadcast_global_variables(**session, 0);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("the ranks run different programs"),
                    HasSubstr("rank " + std::to_string(odd) + " has \"variable w float32 [4,16]\""),
                    HasSubstr("rank 0 has \"variable w float32 [4,8]\"")));
  // The check is itself collective and the ranks stay in step: the same program passes.
  Graph same;
  Scope s2(&same);
  (void)Variable::Make(s2, "v", Shape{3});
  Node* init2 = GlobalVariablesInitializer(s2);
  StatusOr<std::unique_ptr<Session>> ok = Session::Create(same);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE((*ok)->Run({}, {}, {init2->name()}, nullptr).ok());
  EXPECT_TRUE(broadcast_global_variables(**ok, 0).ok());
}

// DenseEstimatorModel: dense features -> Mlp(8) -> 1, the distributed optimizer; AUC, binned AUC
// and log loss as eval metrics.
ModelFn DenseEstimatorModel() {
  return [](const Scope& s, const Features& f, const Labels& l, ModeKeys mode,
            const Params&) -> StatusOr<EstimatorSpec> {
    layers::MlpOptions mlp;
    mlp.hidden_units = {8};
    mlp.output_units = 1;
    Output logits = layers::Mlp(s, f.at("dense"), mlp);
    EstimatorSpec spec;
    Output prob = ops::Sigmoid(s, logits);
    spec.predictions["prob"] = prob;
    if (mode == ModeKeys::kPredict) return spec;
    spec.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, l.at("label"), logits));
    spec.eval_metric_ops = {{"auc", MetricKind::kAuc, prob, l.at("label")},
                            {"binned_auc", MetricKind::kBinnedAuc, prob, l.at("label")},
                            {"log_loss", MetricKind::kLogLoss, prob, l.at("label")}};
    if (mode == ModeKeys::kTrain) {
      auto opt = npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>(SgdOptions{0.1}));
      RECSDK_ASSIGN_OR_RETURN(spec.train_op, opt->Minimize(s, spec.loss));
    }
    return spec;
  };
}

// DenseInput: 48 synthetic rows with a planted signal, this rank's shard of them (or all): whole
// batches of 8 at 1, 2 and 3 ranks, so no rank drops rows.
InputFn DenseInput(int size, int rank, bool shard = true) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    SyntheticOptions d;
    d.num_rows = 48;
    d.vocabulary_sizes = {};
    d.num_dense = 4;
    d.seed = 3;
    RECSDK_ASSIGN_OR_RETURN(auto data, SyntheticDataset(d));
    if (shard) {
      RECSDK_ASSIGN_OR_RETURN(data, Shard(std::move(data), size, rank));
    }
    return BatchRows(std::move(data), 8, {.drop_remainder = true});
  };
}

// The spec: the Estimator adds the broadcast hook by itself when the model uses the distributed
// optimizer, so ranks whose graphs were seeded differently start (and so stay) equal.
TEST_F(DataParallelTest, TheEstimatorBroadcastsTheInitialValuesByItself) {
  RunConfig config;
  config.seed = 1000 + rank_;  // every rank initialises differently
  config.log_step_count_steps = 0;
  StatusOr<std::unique_ptr<Estimator>> est = Estimator::Create(DenseEstimatorModel(), config);
  ASSERT_TRUE(est.ok()) << est.status();
  const Status trained = (*est)->Train(DenseInput(size_, rank_), /*steps=*/2);
  ASSERT_TRUE(trained.ok()) << trained;
  // The weights after training, gathered from every rank: equal to rank 0's.
  std::vector<float> mine;
  for (const Variable& v : TrainableVariables((*est)->session()->graph())) {
    StatusOr<std::vector<Tensor>> out = (*est)->session()->Run({}, {v.name() + "/read"});
    ASSERT_TRUE(out.ok()) << out.status();
    mine.insert(mine.end(), (*out)[0].data<float>(),
                (*out)[0].data<float>() + (*out)[0].num_elements());
  }
  ASSERT_FALSE(mine.empty());
  std::vector<float> root = mine;
  StatusOr<std::unique_ptr<dist::Communicator>> comm =
      dist::CreateCommunicator(dist::DeadlineAfterSeconds(kGenerousS));
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE((*comm)
                  ->Broadcast(absl::MakeSpan(root), 0, dist::DeadlineAfterSeconds(kGenerousS),
                              {-1, "check"})
                  .ok());
  EXPECT_EQ(mine, root) << "rank " << rank_ << " differs from rank 0";
}

// Uneven data never hangs: rank r's input holds 3 + 2r batches; every rank stops after 3 steps,
// the shortest input, without an error (the others would otherwise wait in the all-reduce of a
// step the short rank never runs).
TEST_F(DataParallelTest, RanksWhoseInputsEndAtDifferentStepsStopTogetherAtTheShortest) {
  RunConfig config;
  config.log_step_count_steps = 0;
  StatusOr<std::unique_ptr<Estimator>> est = Estimator::Create(DenseEstimatorModel(), config);
  ASSERT_TRUE(est.ok()) << est.status();
  const int64_t my_batches = 3 + 2 * rank_;
  InputFn uneven = [my_batches]() -> StatusOr<std::unique_ptr<Dataset>> {
    SyntheticOptions d;
    d.num_rows = 8 * my_batches;
    d.vocabulary_sizes = {};
    d.num_dense = 4;
    d.seed = 5;
    RECSDK_ASSIGN_OR_RETURN(auto data, SyntheticDataset(d));
    return BatchRows(std::move(data), 8, {.drop_remainder = true});
  };
  const Status trained = (*est)->Train(uneven);
  ASSERT_TRUE(trained.ok()) << "rank " << rank_ << ": " << trained;
  EXPECT_EQ((*est)->global_step().value_or(-1), 3) << "rank " << rank_;
}

// Each rank evaluates its shard; the Estimator reports the metrics of all the rows: what every
// rank evaluating all the rows reports (their pairs merged N times over leave AUC, binned AUC
// and the means unchanged), and not the rank's own shard's values.
TEST_F(DataParallelTest, EvaluationReportsTheExactGlobalMetricsOnEveryRank) {
  RunConfig config;
  config.log_step_count_steps = 0;
  StatusOr<std::unique_ptr<Estimator>> est = Estimator::Create(DenseEstimatorModel(), config);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_TRUE((*est)->Train(DenseInput(size_, rank_), /*steps=*/4).ok());
  StatusOr<EvalResult> global = (*est)->Evaluate(DenseInput(size_, rank_));
  ASSERT_TRUE(global.ok()) << global.status();
  StatusOr<EvalResult> all = (*est)->Evaluate(DenseInput(size_, rank_, /*shard=*/false));
  ASSERT_TRUE(all.ok()) << all.status();
  for (const char* k : {"auc", "binned_auc", "log_loss"}) {
    EXPECT_NEAR(global->at(k), all->at(k), 1e-9) << k << " on rank " << rank_;
  }
  // The loss is a mean of float32 batch losses over other batches: equal to float rounding.
  EXPECT_NEAR(global->at("loss"), all->at("loss"), 1e-6) << "rank " << rank_;
  // A rank's own shard gives other values: the comparison above can fail.
  StatusOr<std::unique_ptr<StreamingMetric>> own = MakeStreamingMetric(MetricKind::kAuc);
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE(MergeMetricOverRanks(**own).ok()) << "an empty metric merges to an empty one";
  EXPECT_EQ((*own)->count(), 0);
}

// An export is one bundle that every rank writes its part of: the ranks must name the same
// version even when their clocks read different seconds. Rank 0 exports just after a second
// begins; the others more than a second later, so each reading its own clock would name the
// next second's bundle and rank 0 could not commit.
TEST_F(DataParallelTest, RanksExportOneBundleWhenTheyReachTheExportSecondsApart) {
  RunConfig config;
  config.log_step_count_steps = 0;
  StatusOr<std::unique_ptr<Estimator>> est = Estimator::Create(DenseEstimatorModel(), config);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_TRUE((*est)->Train(DenseInput(size_, rank_), /*steps=*/2).ok());
  StatusOr<std::unique_ptr<dist::Communicator>> comm =
      dist::CreateCommunicator(dist::DeadlineAfterSeconds(kGenerousS));
  ASSERT_TRUE(comm.ok()) << comm.status();
  // One directory for every rank: rank 0's.
  std::vector<char> base(256, '\0');
  if (rank_ == 0) {
    std::string tmp = ::testing::TempDir() + "recsdk_export_seconds_XXXXXX";
    ASSERT_NE(mkdtemp(tmp.data()), nullptr);
    ASSERT_LT(tmp.size(), base.size());
    std::copy(tmp.begin(), tmp.end(), base.begin());
  }
  ASSERT_TRUE((*comm)
                  ->Broadcast(absl::MakeSpan(base), 0, dist::DeadlineAfterSeconds(kGenerousS),
                              {-1, "export base"})
                  .ok());
  const auto fraction = [] {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return now - std::chrono::duration_cast<std::chrono::seconds>(now);
  };
  if (rank_ == 0) {
    while (fraction() > std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  }
  StatusOr<std::string> dir =
      (*est)->ExportSavedModel(base.data(), {{"dense", DType::kFloat32, Shape{-1, 4}}});
  ASSERT_TRUE(dir.ok()) << "rank " << rank_ << ": " << dir.status();
  // Every rank returns rank 0's directory, and a Predictor loads it.
  std::vector<char> root(256, '\0');
  ASSERT_LT(dir->size(), root.size());
  std::copy(dir->begin(), dir->end(), root.begin());
  ASSERT_TRUE((*comm)
                  ->Broadcast(absl::MakeSpan(root), 0, dist::DeadlineAfterSeconds(kGenerousS),
                              {-1, "export dir"})
                  .ok());
  EXPECT_EQ(*dir, std::string(root.data())) << "rank " << rank_;
  EXPECT_TRUE(Predictor::Load(*dir).ok()) << "rank " << rank_;
  ASSERT_TRUE((*comm)->Barrier(dist::DeadlineAfterSeconds(kGenerousS), {-1, "loaded"}).ok());
  if (rank_ == 0) std::filesystem::remove_all(base.data());
}

// Last: it leaves the process communicator unusable (MPI cannot cancel a collective).
TEST_F(DataParallelTest, ARankThatSkipsTheAllReduceIsNamedAtTheDeadline) {
  // A communicator of its own to meet on after the process one is left unusable.
  StatusOr<std::unique_ptr<dist::Communicator>> after =
      dist::CreateCommunicator(dist::DeadlineAfterSeconds(kGenerousS));
  ASSERT_TRUE(after.ok()) << after.status();
  ShutdownDistributed();
  DistributedOptions o;
  o.collective_timeout_s = 1;
  ASSERT_TRUE(InitDistributed(o).ok());
  DenseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()), 5, 4);
  ASSERT_NE(net.session, nullptr);
  const int silent = size_ - 1;
  if (rank_ != silent) {
    const auto start = std::chrono::steady_clock::now();
    const StatusOr<float> loss = net.Step(GlobalBatch(0, 4));
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(loss.ok());
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kDeadlineExceeded) << loss.status();
    EXPECT_THAT(std::string(loss.status().message()),
                AllOf(HasSubstr("distributed/AllReduceMean"), HasSubstr("(AllReduceMean)"),
                      HasSubstr("rank " + std::to_string(silent) + " did not join"),
                      HasSubstr("Session::Run #")));
    // Bounds, not a timing: the run waits for the deadline and returns soon after it.
    EXPECT_GE(waited, 1.0);
    EXPECT_LT(waited, 11.0);
  }
  // The silent rank meets the others here, after their deadline.
  ASSERT_TRUE((*after)->Barrier(dist::DeadlineAfterSeconds(kGenerousS), {-1, "after"}).ok());
  ShutdownDistributed();
}

}  // namespace
}  // namespace recsdk
