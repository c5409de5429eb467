// Sharded tables under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt): a model with a sparse
// table, trained on N ranks (each on its shard of every global batch, the table sharded over the
// ranks, dense gradients averaged by DistributedOptimizer) ends with the table rows and dense
// weights of one process trained on the full global batches, computed on every rank in the same
// test with a plain table and a plain optimizer. Admission counts add up over the ranks (a key
// seen once on each of two ranks is admitted by a threshold of 2). The key stage with sharded
// tables is mpi_key_stage_test.cc. Every wait has a deadline, and CTest a TIMEOUT.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/device/table_resource.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"
#include "src/session/passes/pass_manager.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point
#include "tests/dist/sparse_model_util.h"

namespace recsdk {
namespace {

using ::testing::HasSubstr;

using testing::sparse::ExpectClose;
using testing::sparse::GlobalBatch;
using testing::sparse::kFeatures;
using testing::sparse::kVocab;
using testing::sparse::ShardOf;
using testing::sparse::SparseBatch;
using testing::sparse::SparseNet;

using ShardedTableTest = dist::testing::RanksTest;

// IsPs: whether this rank is the job's ps (only in the _ps run). A ps trains nothing: after
// building the same model, it serves the workers until they call EndParameterServers.
bool IsPs() { return IsParameterServer().value_or(false); }

// Serve: on a ps, RunParameterServer; on a worker, nothing (the worker trains instead).
void ServeIfPs() {
  if (!IsPs()) return;
  const Status served = RunParameterServer();
  EXPECT_TRUE(served.ok()) << served;
}

// EndServing: on a worker, EndParameterServers (every worker, at the same point).
void EndServingIfWorker() {
  if (IsPs()) return;
  const Status ended = EndParameterServers();
  EXPECT_TRUE(ended.ok()) << ended;
}

// Owners: how many ranks own keys (the ps ranks, or every rank); IsOwner: whether this one does.
int Owners() {
  dist::JobLayout job;
  EXPECT_TRUE(dist::ProcessJob(&job));
  return job.owners();
}
// KeyOwner: the rank that owns `key` (ShardedTable::KeyOwner of this job's tables).
int KeyOwner(int64_t key) {
  dist::JobLayout job;
  EXPECT_TRUE(dist::ProcessJob(&job));
  return job.owner_first() + dist::ShardedTable::Owner(key, job.owners());
}
bool IsOwner() {
  dist::JobLayout job;
  EXPECT_TRUE(dist::ProcessJob(&job));
  return job.ps == 0 || job.is_ps;
}

TEST_F(ShardedTableTest, RanksTrainAShardedTableLikeOneProcessOnTheGlobalBatches) {
  constexpr int64_t kGlobalRows = 12;
  constexpr int kSteps = 15;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.3}); };
  SparseNet ranks(npu_distributed_optimizer_wrapper(sgd()), kGlobalRows / size_);
  ASSERT_NE(ranks.session, nullptr);
  EmbeddingTable* sharded = *LookupTable(*ranks.session, "emb");
  // The reference: one process's table, made while no decorator shards tables. Its dense
  // optimizer makes no collective; every rank computes the same reference.
  internal::SetTableDecorator(nullptr);
  SparseNet one(sgd(), kGlobalRows);
  ASSERT_NE(one.session, nullptr);
  EmbeddingTable* plain = *LookupTable(*one.session, "emb");
  internal::SetTableDecorator(dist::MaybeShardTable);
  ASSERT_EQ(sharded->size(), 0);
  for (int step = 0; step < kSteps; ++step) {
    const SparseBatch global = GlobalBatch(step, kGlobalRows);
    if (!IsPs()) {
      const Status a = ranks.Step(ShardOf(global, size_, rank_));
      ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a;
    }
    const Status b = one.Step(global);
    ASSERT_TRUE(b.ok()) << b;
  }
  ServeIfPs();
  EndServingIfWorker();
  const std::string who = "rank " + std::to_string(rank_) + " vs one process";
  if (!IsPs()) ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  // Each key's row lives on its owner, trained as the one process trained it; the owner holds
  // exactly the admitted keys it owns.
  int64_t owned = 0;
  for (int f = 0; f < kFeatures; ++f) {
    for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
      const StatusOr<std::vector<float>> want = plain->ReadRow(id);
      const StatusOr<std::vector<float>> got = sharded->ReadRow(id);
      if (KeyOwner(id) != rank_) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
        EXPECT_THAT(std::string(got.status().message()), HasSubstr("held by rank"));
        continue;
      }
      ASSERT_EQ(got.ok(), want.ok()) << who << ", key " << id << ": " << got.status();
      if (!want.ok()) continue;
      ++owned;
      ExpectClose(*got, *want, who + ", row of key " + std::to_string(id));
    }
  }
  EXPECT_EQ(sharded->size(), owned);
  if (IsOwner()) {
    EXPECT_GT(owned, 0);
    if (Owners() > 1) {
      EXPECT_LT(owned, plain->size()) << "the other ranks hold the rest";
    } else {
      EXPECT_EQ(owned, plain->size()) << "the one ps holds every row";
    }
  } else {
    EXPECT_EQ(owned, 0) << "a worker of a job with ps ranks owns no key";
  }
}

// order_collectives chains every node that makes a collective in id order, so two tables'
// lookups and updates and the dense all-reduce run in one order on every rank even when the
// executor runs independent nodes at once.
TEST_F(ShardedTableTest, AStepsCollectivesRunInOneOrderOnEveryRank) {
  SessionConfig parallel;
  parallel.stream_max_parallel_num = "DNN_V100:4";
  SparseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()), 4,
                /*second_table=*/true, parallel);
  ASSERT_NE(net.session, nullptr);
  for (int step = 0; step < 8; ++step) {
    const Status st = net.Step(ShardOf(GlobalBatch(step, 4 * size_), size_, rank_));
    ASSERT_TRUE(st.ok()) << "rank " << rank_ << " step " << step << ": " << st;
  }
  std::unique_ptr<Graph> copy = net.g.Copy();
  ASSERT_TRUE(internal::RunPass("order_collectives", {}, copy.get()).ok());
  std::vector<Node*> chain;
  for (Node* n : copy->nodes()) {
    const std::string& t = n->type();
    if (t == "AllReduceMean" || t == "SparseLookup" || t == "TableApply") chain.push_back(n);
  }
  ASSERT_GE(chain.size(), 5u) << "two lookups, two applies, the dense all-reduce";
  for (size_t i = 1; i < chain.size(); ++i) {
    const std::vector<Node*>& deps = chain[i]->control_inputs();
    EXPECT_NE(std::find(deps.begin(), deps.end(), chain[i - 1]), deps.end())
        << chain[i]->name() << " does not wait for " << chain[i - 1]->name();
  }
}

// group_table_exchanges: a step's lookups of both tables become one TableLookupExchange node and
// their updates one TableApplyExchange node (one exchange of keys, one of rows and one of
// gradients for both tables), and N ranks still train both tables like one process on the
// global batches.
TEST_F(ShardedTableTest, TwoTablesShareOneExchangeAndTrainLikeOneProcess) {
  constexpr int64_t kGlobalRows = 12;
  ASSERT_EQ(kGlobalRows % size_, 0);
  auto sgd = [] { return std::make_shared<SgdOptimizer>(SgdOptions{0.3}); };
  SparseNet ranks(npu_distributed_optimizer_wrapper(sgd()), kGlobalRows / size_,
                  /*second_table=*/true);
  ASSERT_NE(ranks.session, nullptr);
  internal::SetTableDecorator(nullptr);
  SparseNet one(sgd(), kGlobalRows, /*second_table=*/true);
  ASSERT_NE(one.session, nullptr);
  // Made now, while no decorator shards them (a Session makes its tables on first use).
  const std::vector<EmbeddingTable*> plain = {*LookupTable(*one.session, "emb"),
                                              *LookupTable(*one.session, "emb2")};
  internal::SetTableDecorator(dist::MaybeShardTable);
  const std::vector<EmbeddingTable*> sharded = {*LookupTable(*ranks.session, "emb"),
                                                *LookupTable(*ranks.session, "emb2")};
  for (int step = 0; step < 12; ++step) {
    const SparseBatch global = GlobalBatch(step, kGlobalRows);
    if (!IsPs()) {
      const Status a = ranks.Step(ShardOf(global, size_, rank_));
      ASSERT_TRUE(a.ok()) << "rank " << rank_ << " step " << step << ": " << a;
    }
    ASSERT_TRUE(one.Step(global).ok());
  }
  ServeIfPs();
  EndServingIfWorker();
  const std::string who = "rank " + std::to_string(rank_) + " vs one process";
  if (!IsPs()) ExpectClose(ranks.Weights(), one.Weights(), who + ", dense weights");
  for (size_t t = 0; t < 2; ++t) {
    const std::string table = t == 0 ? "emb" : "emb2";
    int64_t owned = 0;
    for (int f = 0; f < kFeatures; ++f) {
      for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
        if (KeyOwner(id) != rank_) continue;
        const StatusOr<std::vector<float>> want = plain[t]->ReadRow(id);
        const StatusOr<std::vector<float>> got = sharded[t]->ReadRow(id);
        ASSERT_EQ(got.ok(), want.ok()) << who << ", " << table << " key " << id;
        if (!want.ok()) continue;
        ++owned;
        ExpectClose(*got, *want, who + ", " + table + " row of key " + std::to_string(id));
      }
    }
    if (IsOwner()) {
      EXPECT_GT(owned, 0) << table;
    }
  }
  // The Session's passes on a copy of the graph: one exchange node each, chained in order.
  std::unique_ptr<Graph> copy = ranks.g.Copy();
  ASSERT_TRUE(internal::RunPass("group_lookups", {}, copy.get()).ok());
  ASSERT_TRUE(internal::RunPass("group_table_exchanges", {}, copy.get()).ok());
  ASSERT_TRUE(internal::RunPass("order_collectives", {}, copy.get()).ok());
  int lookups = 0, applies = 0, per_table = 0;
  Node* lookup = nullptr;
  Node* apply = nullptr;
  for (Node* n : copy->nodes()) {
    const std::string& t = n->type();
    if (t == "TableLookupExchange") lookup = n, ++lookups;
    if (t == "TableApplyExchange") apply = n, ++applies;
    if (t == "SparseLookup" || t == "TableLookupGroup" || t == "TableApply") ++per_table;
  }
  EXPECT_EQ(lookups, 1);
  EXPECT_EQ(applies, 1);
  EXPECT_EQ(per_table, 0) << "no table keeps an exchange of its own";
  ASSERT_NE(lookup, nullptr);
  ASSERT_NE(apply, nullptr);
  EXPECT_LT(lookup->id(), apply->id());
  EXPECT_EQ(lookup->StringsAttr("member_tables"), (std::vector<std::string>{"emb", "emb2"}));
}

// all2all_gradients_op: with "sum" (the default) the owner applies the sum of the ranks'
// gradients of a key; with "sum_gradients_and_div_by_ranksize" that sum divided by the number
// of ranks with data (the workers). Every worker looks up the same keys and sends gradient
// (rank + 1) * (d + 1) / 8 for each; with SGD(lr) from rows of 1, a key's row must be
// 1 - lr * sum (or sum / workers), which neither op can give for the other.
TEST_F(ShardedTableTest, TheDefaultSumOpAppliesTheSumOfTheRanksGradients) {
  constexpr int kDimension = 3;
  constexpr float kLr = 0.5f;
  const std::vector<int64_t> keys = {3, 14, 15, 92, 65, 35};
  auto make = [&](const std::string& name, const std::string& op) {
    TableConfig c;
    c.name = name;
    c.dim = kDimension;
    c.device_vocabulary_size = 64;
    c.access_threshold = 1;
    c.initializer = Initializer::Ones();
    if (!op.empty()) c.all2all_gradients_op = op;
    StatusOr<std::unique_ptr<EmbeddingTable>> plain =
        EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(kLr));
    EXPECT_TRUE(plain.ok()) << plain.status();
    StatusOr<std::unique_ptr<EmbeddingTable>> sharded = dist::MaybeShardTable(std::move(*plain));
    EXPECT_TRUE(sharded.ok()) << sharded.status();
    return std::move(*sharded);
  };
  std::unique_ptr<EmbeddingTable> sum = make("sum_op", "");  // the default
  std::unique_ptr<EmbeddingTable> div = make("div_op", "sum_gradients_and_div_by_ranksize");
  ASSERT_EQ(sum->config().all2all_gradients_op, "sum") << "the default";
  if (IsPs()) {
    ServeIfPs();
  } else {
    for (EmbeddingTable* t : {sum.get(), div.get()}) {
      std::vector<uint32_t> rows(keys.size());
      const Status r = t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
      ASSERT_TRUE(r.ok()) << r;
      std::vector<float> grads(keys.size() * kDimension);
      for (size_t i = 0; i < grads.size(); ++i) {
        grads[i] = static_cast<float>((rank_ + 1) * (i % kDimension + 1)) / 8.0f;
      }
      const Status a = t->ApplyGradients(rows, grads, 1);
      ASSERT_TRUE(a.ok()) << a;
    }
    EndServingIfWorker();
  }
  // sum over the workers r of (r + 1) = W (W + 1) / 2.
  const float ranks_sum = static_cast<float>(size_ * (size_ + 1)) / 2.0f;
  int checked = 0;
  for (int64_t key : keys) {
    if (KeyOwner(key) != rank_) continue;
    ++checked;
    const StatusOr<std::vector<float>> s_row = sum->ReadRow(key), d_row = div->ReadRow(key);
    ASSERT_TRUE(s_row.ok() && d_row.ok()) << s_row.status() << d_row.status();
    for (int d = 0; d < kDimension; ++d) {
      const float g = ranks_sum * static_cast<float>(d + 1) / 8.0f;
      EXPECT_FLOAT_EQ((*s_row)[d], 1.0f - kLr * g) << "key " << key << " \"sum\"";
      EXPECT_FLOAT_EQ((*d_row)[d], 1.0f - kLr * g / static_cast<float>(size_))
          << "key " << key << " divided by " << size_ << " workers";
    }
  }
  if (Owners() == 1 && IsOwner()) {
    EXPECT_EQ(checked, static_cast<int>(keys.size()));
  }
}

// Eviction reaches the owners of the keys: with ps ranks a worker's call is announced to the ps,
// which evicts in its shard (EvictStale by its own data time: the timestamps it received), and
// every rank gets the job's count; without them, each rank evicts its own keys.
TEST_F(ShardedTableTest, EvictionReachesTheOwnersOfEveryKey) {
  TableConfig c;
  c.name = "evicted";
  c.dim = 2;
  c.device_vocabulary_size = 64;
  c.access_threshold = 0;  // eviction needs admission; 0 admits every key
  c.eviction_threshold = 10;
  StatusOr<std::unique_ptr<EmbeddingTable>> plain =
      EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f));
  ASSERT_TRUE(plain.ok()) << plain.status();
  StatusOr<std::unique_ptr<EmbeddingTable>> made = dist::MaybeShardTable(std::move(*plain));
  ASSERT_TRUE(made.ok()) << made.status();
  EmbeddingTable& t = **made;
  // Keys 1-4 last seen at time 5, keys 5-8 at 100: EvictStale (data time 100, threshold 10)
  // evicts the first four, EvictLastAccessedAtOrBefore(100) the rest.
  const std::vector<int64_t> keys = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int64_t> times = {5, 5, 5, 5, 100, 100, 100, 100};
  auto owned = [&](size_t from, size_t to) {
    int64_t n = 0;
    for (size_t i = from; i < to; ++i) n += KeyOwner(keys[i]) == rank_ ? 1 : 0;
    return n;
  };
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  const bool ps_job = job.ps > 0;
  if (IsPs()) {
    ServeIfPs();
  } else {
    std::vector<uint32_t> rows(keys.size());
    const Status r = t.Resolve(keys, {}, times, LookupMode::kTrain, absl::MakeSpan(rows));
    ASSERT_TRUE(r.ok()) << r;
    const StatusOr<int64_t> stale = t.EvictStale();
    ASSERT_TRUE(stale.ok()) << stale.status();
    EXPECT_EQ(*stale, ps_job ? 4 : owned(0, 4)) << "keys 1-4 are stale";
    const StatusOr<int64_t> rest = t.EvictLastAccessedAtOrBefore(100);
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(*rest, ps_job ? 4 : owned(4, 8)) << "keys 5-8, last seen at 100";
    // A worker's data time is the job's, learnt in the eviction (its own shard is empty).
    if (ps_job) {
      EXPECT_EQ(t.data_time(), 100);
    }
    EndServingIfWorker();
  }
  // Every owner's shard is empty now (without eviction it would hold its keys).
  EXPECT_EQ(t.size(), 0) << "rank " << rank_ << " owned " << owned(0, 8) << " of the keys";
}

// UniqueKeys: the distinct keys of `keys` in order of first sighting, each one's count and latest
// time (what a lookup sends to Resolve).
struct UniqueKeys {
  std::vector<int64_t> keys;
  std::vector<uint32_t> counts;
  std::vector<int64_t> times;
};
UniqueKeys Unique(const std::vector<int64_t>& keys, const std::vector<int64_t>& times) {
  UniqueKeys u;
  std::map<int64_t, size_t> at;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = at.try_emplace(keys[i], u.keys.size());
    if (fresh) {
      u.keys.push_back(keys[i]);
      u.counts.push_back(0);
      u.times.push_back(times[i]);
    }
    ++u.counts[it->second];
    u.times[it->second] = std::max(u.times[it->second], times[i]);
  }
  return u;
}

// An EvictHook's time interval in a job with ps ranks: it comes due on the job's data time (the
// latest of the ps shards', which the workers learn each step), and the stale eviction cuts at
// that data time on every ps, so the workers' hook evicts, step by step, what one process's hook
// evicts on the global batches, and each ps keeps exactly the keys, rows and pending admission
// counts of that process's table that it owns. (Without ps ranks each rank evicts its shard by
// its own data time, not a collective: not what this compares.)
TEST_F(ShardedTableTest, AnEvictHooksTimeIntervalInAPsJobEvictsLikeOneProcess) {
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  if (job.ps == 0) GTEST_SKIP() << "all-worker jobs evict each shard by its own data time";
  constexpr int kSteps = 16;
  constexpr int64_t kRows = 12;
  TableConfig c;
  c.name = "timed";
  c.dim = 2;
  c.device_vocabulary_size = 256;
  c.access_threshold = 2;  // keys seen once stay pending (counted, evicted when stale too)
  c.eviction_threshold = 12;
  c.initializer = Initializer::Uniform(-0.3, 0.3, 11);
  auto make = [&] {
    StatusOr<std::unique_ptr<EmbeddingTable>> t =
        EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f));
    EXPECT_TRUE(t.ok()) << t.status();
    return std::move(*t);
  };
  std::unique_ptr<EmbeddingTable> plain = make();
  StatusOr<std::unique_ptr<EmbeddingTable>> made = dist::MaybeShardTable(make());
  ASSERT_TRUE(made.ok()) << made.status();
  EmbeddingTable& sharded = **made;
  // Global batch `step`: row i looks up a recurring key (a stride over 40) and, every third row,
  // a key of its own (seen once: pending, then stale); its time grows 5 per step. A last row
  // brings the step's latest time with a key of ps (step mod P): each ps's own data time then
  // lags the job's every other step with 2 ps, and cutting there would keep keys that one
  // process evicts.
  auto batch = [&](int step, int workers, int worker, std::vector<int64_t>* keys,
                   std::vector<int64_t>* times) {
    for (int64_t i = worker; i <= kRows; i += workers) {
      if (i == kRows) {
        int64_t late = 5000 + 100 * step;
        while (KeyOwner(late) != job.owner_first() + step % job.ps) ++late;
        keys->push_back(late);
        times->push_back(5 * step + 4);
        continue;
      }
      const int64_t time = 5 * step + i / 6;
      keys->push_back((7 * step + 5 * i) % 40);
      times->push_back(time);
      if (i % 3 == 0) {
        keys->push_back(1000 + kRows * step + i);
        times->push_back(time);
      }
    }
  };
  // Resolve, then an update of every row, as a step does.
  auto step_on = [&](EmbeddingTable& t, const UniqueKeys& u) -> Status {
    std::vector<uint32_t> rows(u.keys.size());
    Status s = t.Resolve(u.keys, u.counts, u.times, LookupMode::kTrain, absl::MakeSpan(rows));
    if (!s.ok()) return s;
    std::vector<float> grads(u.keys.size() * c.dim, 0.25f);
    return t.ApplyGradients(rows, grads, 1);
  };
  // Begin no longer refuses the time interval in a job with ps ranks.
  EvictRunHook run_hook(EvictHook(true, 10, 0));
  const Status begun = run_hook.Begin(nullptr);
  EXPECT_TRUE(begun.ok()) << begun;
  std::vector<int64_t> evicted;
  if (IsPs()) {
    ServeIfPs();
  } else {
    EvictHook hook(true, /*evict_time_interval=*/10, /*evict_step_interval=*/0);
    EmbeddingTable* tables[] = {&sharded};
    for (int step = 0; step < kSteps; ++step) {
      std::vector<int64_t> keys, times;
      batch(step, size_, rank_, &keys, &times);
      const Status s = step_on(sharded, Unique(keys, times));
      ASSERT_TRUE(s.ok()) << "rank " << rank_ << " step " << step << ": " << s;
      const StatusOr<int64_t> n = hook.AfterStep(step, tables);
      ASSERT_TRUE(n.ok()) << "rank " << rank_ << " step " << step << ": " << n.status();
      evicted.push_back(*n);
    }
    EndServingIfWorker();
  }
  // One process on the global batches, with the same hook.
  EvictHook one_hook(true, 10, 0);
  EmbeddingTable* one_tables[] = {plain.get()};
  std::vector<int64_t> one_evicted;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int64_t> keys, times;
    batch(step, 1, 0, &keys, &times);
    ASSERT_TRUE(step_on(*plain, Unique(keys, times)).ok());
    const StatusOr<int64_t> n = one_hook.AfterStep(step, one_tables);
    ASSERT_TRUE(n.ok()) << n.status();
    one_evicted.push_back(*n);
  }
  ASSERT_GE(std::count_if(one_evicted.begin(), one_evicted.end(), [](int64_t n) { return n > 0; }),
            3)
      << "the interval comes due several times";
  const std::string who = "rank " + std::to_string(rank_) + (IsPs() ? " (ps)" : "");
  if (!IsPs()) {
    EXPECT_EQ(evicted, one_evicted) << who << ": the job's evictions per step";
    EXPECT_EQ(sharded.data_time(), plain->data_time()) << who << ": the job's data time";
    EXPECT_EQ(sharded.size(), 0);
    return;
  }
  int64_t owned = 0;
  for (int64_t id = 0; id < 5000 + 100 * kSteps; ++id) {
    if (KeyOwner(id) != rank_) continue;
    EXPECT_EQ(sharded.AdmissionCount(id), plain->AdmissionCount(id)) << who << ", key " << id;
    const StatusOr<std::vector<float>> want = plain->ReadRow(id);
    const StatusOr<std::vector<float>> got = sharded.ReadRow(id);
    ASSERT_EQ(got.ok(), want.ok()) << who << ", key " << id << ": " << got.status();
    if (!want.ok()) continue;
    ++owned;
    ExpectClose(*got, *want, who + ", row of key " + std::to_string(id));
  }
  EXPECT_EQ(sharded.size(), owned) << who;
  EXPECT_GT(owned, 0) << who;
}

// With ps ranks a checkpoint is a collective of every rank: the workers' Save and Restore are
// announced to the ps loop, whose Saver joins them; each ps writes its shard (shard p of P) and
// the chief the dense variables. Restored into new Sessions, the job trains on to the rows and
// weights of the run that never stopped; a checkpoint missing a shard is refused.
TEST_F(ShardedTableTest, APsJobsCheckpointRestoresAndTrainsOnLikeTheNeverStoppedRun) {
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  if (job.ps == 0) GTEST_SKIP() << "checkpoints of all-worker jobs: mpi_reshard_test";
  constexpr int64_t kGlobalRows = 12;
  constexpr int kSaveStep = 5;
  constexpr int kEndStep = 10;
  // One directory per job, named by the chief's pid.
  int64_t chief_pid = getpid();
  ASSERT_TRUE(
      dist::WithProcessCommunicator([&](dist::Communicator& comm, const DistributedOptions& o) {
        return comm.Broadcast<int64_t>(absl::MakeSpan(&chief_pid, 1), 0,
                                       dist::DeadlineAfterSeconds(o.collective_timeout_s),
                                       {-1, "test/dir"});
      }).ok());
  const std::string dir = ::testing::TempDir() + "recsdk_ps_ckpt_" + std::to_string(chief_pid);
  auto new_net = [&] {
    auto sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.3});
    auto net =
        std::make_unique<SparseNet>(npu_distributed_optimizer_wrapper(sgd), kGlobalRows / size_);
    EXPECT_TRUE(LookupTable(*net->session, "emb").ok());  // a ps makes its tables
    return net;
  };
  auto new_saver = [&](SparseNet& net) {
    SaverOptions o;
    o.model_dir = dir;
    StatusOr<std::unique_ptr<Saver>> saver = Saver::Create(*net.session, o);
    EXPECT_TRUE(saver.ok()) << saver.status();
    return saver.ok() ? std::move(*saver) : nullptr;
  };
  auto train = [&](SparseNet& net, int from, int to) {
    for (int step = from; step < to; ++step) {
      const Status s = net.Step(ShardOf(GlobalBatch(step, kGlobalRows), size_, rank_));
      ASSERT_TRUE(s.ok()) << "rank " << rank_ << " step " << step << ": " << s;
    }
  };
  // The rows this rank holds, with their admission counts (a ps's; a worker holds none).
  using Rows = std::map<int64_t, std::pair<std::vector<float>, int64_t>>;
  auto rows_of = [&](SparseNet& net) {
    Rows rows;
    EmbeddingTable* t = *LookupTable(*net.session, "emb");
    for (int f = 0; f < kFeatures; ++f) {
      for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
        const StatusOr<std::vector<float>> row = t->ReadRow(id);
        if (row.ok() || t->AdmissionCount(id) > 0) {
          rows[id] = {row.value_or(std::vector<float>{}), t->AdmissionCount(id)};
        }
      }
    }
    return rows;
  };
  const std::string who = "rank " + std::to_string(rank_);

  // The run that never stops, saving at kSaveStep.
  std::vector<float> weights;
  Rows rows;
  {
    std::unique_ptr<SparseNet> net = new_net();
    std::unique_ptr<Saver> saver = new_saver(*net);
    ASSERT_NE(saver, nullptr);
    if (IsPs()) {
      ServeIfPs();
    } else {
      train(*net, 0, kSaveStep);
      const StatusOr<std::string> saved = saver->Save(kSaveStep);
      ASSERT_TRUE(saved.ok()) << who << ": " << saved.status();
      train(*net, kSaveStep, kEndStep);
      EndServingIfWorker();
      weights = net->Weights();
    }
    rows = rows_of(*net);
  }
  if (IsPs()) {
    EXPECT_GT(rows.size(), 0u) << who << ": a ps holds rows";
  } else {
    EXPECT_TRUE(rows.empty()) << who << ": a worker holds no rows";
  }
  // The checkpoint: one shard per ps, the shard of ps p is shard p of P.
  const std::string ckpt = dir + "/ckpt-" + std::to_string(kSaveStep);
  for (int p = 0; p < job.ps; ++p) {
    const std::string shard =
        ckpt + "/shard-" + std::to_string(p) + "-of-" + std::to_string(job.ps) + "/manifest.json";
    EXPECT_TRUE(internal::Env::Default()->FileExists(shard)) << shard;
  }

  // Restored into new Sessions, trained on to kEndStep.
  {
    std::unique_ptr<SparseNet> net = new_net();
    std::unique_ptr<Saver> saver = new_saver(*net);
    ASSERT_NE(saver, nullptr);
    if (IsPs()) {
      ServeIfPs();
    } else {
      const StatusOr<int64_t> step = saver->Restore();
      ASSERT_TRUE(step.ok()) << who << ": " << step.status();
      EXPECT_EQ(*step, kSaveStep);
      train(*net, kSaveStep, kEndStep);
      EndServingIfWorker();
      ExpectClose(net->Weights(), weights, who + ", restored: dense weights");
    }
    const Rows restored = rows_of(*net);
    ASSERT_EQ(restored.size(), rows.size()) << who;
    for (const auto& [id, row] : rows) {
      auto it = restored.find(id);
      ASSERT_NE(it, restored.end()) << who << ", key " << id;
      EXPECT_EQ(it->second.second, row.second) << who << ", admission count of key " << id;
      ExpectClose(it->second.first, row.first,
                  who + ", restored: row of key " + std::to_string(id));
    }
  }

  // A checkpoint missing the shard of ps 0: every rank refuses it.
  {
    std::unique_ptr<SparseNet> net = new_net();
    std::unique_ptr<Saver> saver = new_saver(*net);
    ASSERT_NE(saver, nullptr);
    if (IsPs()) {
      ServeIfPs();  // the ps's restore fails, logged; the ps serves on until the end
    } else {
      if (rank_ == 0) {
        ASSERT_TRUE(internal::DeleteRecursively(internal::Env::Default(),
                                                ckpt + "/shard-0-of-" + std::to_string(job.ps))
                        .ok());
      }
      const StatusOr<int64_t> step = saver->Restore();
      EXPECT_FALSE(step.ok()) << who;
      EXPECT_THAT(std::string(step.status().message()), HasSubstr("another rank failed"));
      EndServingIfWorker();
    }
    EXPECT_TRUE(rows_of(*net).empty()) << who << ": nothing was restored";
  }
  if (rank_ == 0) internal::DeleteRecursively(internal::Env::Default(), dir).IgnoreError();
}

// --- The Estimator in a job with ps ranks (and, in the np2/np3 runs, in an all-worker job).

constexpr int64_t kEstRows = 12;   // rows of a global batch
constexpr int kEstFirstSteps = 8;  // TrainAndEvaluate's max_steps; then Train to kEstSteps
constexpr int kEstSteps = 12;

// EstimatorData: a planted logistic model over one id feature "C1" (2 ids a row, 60 ids) and 2
// dense values, enough rows for kEstSteps global batches.
SyntheticOptions EstimatorData() {
  SyntheticOptions d;
  d.num_rows = kEstRows * kEstSteps;
  d.vocabulary_sizes = {60};
  d.ids_per_feature = 2;
  d.num_dense = 2;
  d.id_weight_scale = 3.0f;
  d.seed = 7;
  d.block_rows = 64;
  return d;
}

// EstimatorInput: the global batches (workers 0: one process), or this worker's shard of each.
InputFn EstimatorInput(int workers, int worker) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    StatusOr<std::unique_ptr<Dataset>> data = SyntheticDataset(EstimatorData());
    if (!data.ok()) return data.status();
    if (workers > 0) {
      data = Shard(*std::move(data), workers, worker);
      if (!data.ok()) return data.status();
    }
    return BatchRows(*std::move(data), workers > 0 ? kEstRows / workers : kEstRows,
                     {.drop_remainder = true});
  };
}

// EstimatorModel: C1 -> sparse_lookup of table "emb" (sum) beside dense -> Mlp(8) -> 1. SGD
// averaged over the workers (distributed) or plain (one process); AUC and log loss.
ModelFn EstimatorModel(bool distributed) {
  return [distributed](const Scope& s, const Features& f, const Labels& l, ModeKeys mode,
                       const Params&) -> StatusOr<EstimatorSpec> {
    TableConfig c;
    c.name = "emb";
    c.dim = 4;
    c.device_vocabulary_size = 1024;
    c.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";
    c.initializer = Initializer::Uniform(-0.3, 0.3, 17);
    StatusOr<SparseTable> table = create_table(s, c, SparseOptimizerConfig::Adagrad(1.0f));
    if (!table.ok()) return table.status();
    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.combiner = Combiner::kSum;
    lookup.is_train = mode == ModeKeys::kTrain;
    StatusOr<Output> emb = sparse_lookup(s, *table, f.at("C1"), lookup);
    if (!emb.ok()) return emb.status();
    layers::MlpOptions mlp;
    mlp.hidden_units = {8};
    mlp.output_units = 1;
    Output logits = layers::Mlp(s, ops::Concat(s, {*emb, f.at("dense")}, 1), mlp);
    Output prob = ops::Sigmoid(s, logits);
    EstimatorSpec spec;
    spec.predictions["prob"] = prob;
    if (mode == ModeKeys::kPredict) return spec;
    const Output label = l.at("label");
    spec.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
    spec.eval_metric_ops = {{"auc", MetricKind::kAuc, prob, label},
                            {"log_loss", MetricKind::kLogLoss, prob, label}};
    if (mode == ModeKeys::kTrain) {
      std::shared_ptr<Optimizer> sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.5});
      if (distributed) sgd = npu_distributed_optimizer_wrapper(sgd);
      StatusOr<Node*> dense = sgd->Minimize(s, spec.loss);
      if (!dense.ok()) return dense.status();
      StatusOr<Node*> sparse = SparseMinimize(s, spec.loss);
      if (!sparse.ok()) return sparse.status();
      spec.train_op = ops::Group(s, {*dense, *sparse});
    }
    return spec;
  };
}

// OneProcessEstimator: what one process trains on the global batches: the Estimator's graph
// built as Estimator::Impl::Build builds it (the same nodes in the same order, so the same
// initial values), with plain tables and a plain optimizer, run step by step on a Session. No
// collective: every rank (a ps too) computes it.
struct OneProcessEstimator {
  Graph g;
  std::unique_ptr<Session> session;
  EstimatorSpec train, eval, predict;

  explicit OneProcessEstimator(int64_t seed) {
    internal::SetTableDecorator(nullptr);
    g.set_random_seed(seed);
    Scope root(&g);
    Batch first;
    std::unique_ptr<Dataset> peek = *EstimatorInput(0, 0)();
    EXPECT_TRUE(*peek->GetNext(&first));
    Features f;
    Labels l;
    for (const auto& [name, t] : first.columns()) {
      std::vector<int64_t> dims = {Shape::kUnknownDim};
      for (int d = 1; d < t.shape().rank(); ++d) dims.push_back(t.shape().dim(d));
      (name == "label" ? l : f)[name] =
          DatasetColumn(root.WithOpName(name), name, t.dtype(), Shape(dims));
    }
    GetOrCreateGlobalStep(root);
    const Scope reuse = root.WithVariableReuse(VariableReuse::kAutoReuse);
    const ModelFn model = EstimatorModel(/*distributed=*/false);
    train = *model(reuse, f, l, ModeKeys::kTrain, {});
    eval = *model(reuse.NewNameScope("eval"), f, l, ModeKeys::kEval, {});
    predict = *model(reuse.NewNameScope("infer"), f, l, ModeKeys::kPredict, {});
    GlobalVariablesInitializer(root);
    EXPECT_TRUE(g.status().ok()) << g.status();
    session = *Session::Create(g);
    EXPECT_TRUE(session->Run({}, {}, {"init"}).ok());
    EXPECT_TRUE(LookupTable(*session, "emb").ok());  // made now, plain (made on first use)
    internal::SetTableDecorator(dist::MaybeShardTable);
  }

  // Train: global batches [from, to).
  void Train(int from, int to) {
    std::unique_ptr<Dataset> data = *EstimatorInput(0, 0)();
    Batch b;
    for (int step = 0; step < to && *data->GetNext(&b); ++step) {
      if (step < from) continue;
      const Status ran = session->Run(BatchFeeds(g, b), {}, {train.train_op->name()}).status();
      ASSERT_TRUE(ran.ok()) << "one process, step " << step << ": " << ran;
    }
  }

  // Auc: the AUC of the eval branch over the first `batches` global batches.
  double Auc(int batches) {
    std::unique_ptr<StreamingMetric> auc = *MakeStreamingMetric(MetricKind::kAuc);
    std::unique_ptr<Dataset> data = *EstimatorInput(0, 0)();
    Batch b;
    for (int i = 0; i < batches && *data->GetNext(&b); ++i) {
      std::vector<Tensor> out;
      const Status ran =
          session->Run(BatchFeeds(g, b),
                       {eval.eval_metric_ops[0].values, eval.eval_metric_ops[0].labels}, {}, &out);
      EXPECT_TRUE(ran.ok()) << "one process, eval: " << ran;
      if (!ran.ok()) return -1;
      EXPECT_TRUE(auc->Update(out[0].flat<float>(), out[1].flat<float>()).ok());
    }
    return *auc->Result();
  }
};

// Values: every trainable variable of `session`'s graph, in order, one vector.
std::vector<float> Values(Session& session) {
  std::vector<float> all;
  for (const Variable& v : TrainableVariables(session.graph())) {
    StatusOr<std::vector<Tensor>> out = session.Run({}, {v.name() + "/read"});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    all.insert(all.end(), (*out)[0].data<float>(),
               (*out)[0].data<float>() + (*out)[0].num_elements());
  }
  return all;
}

// The spec's PS-worker script through the Estimator (and, in the np2/np3 runs, the same script
// in an all-worker job): every rank (chief, worker, ps) makes the same calls. TrainAndEvaluate to
// step 8 (an evaluation and a checkpoint every 4 steps), then a new Estimator on the same model_dir
// restores step 8 and trains to 12, and evaluates. The workers' dense weights, the ps's rows (of
// the keys it owns) and the global AUC equal one process's on the same global batches within 1e-5,
// and the model learned the planted signal.
TEST_F(ShardedTableTest, TheEstimatorTrainsEvaluatesAndRestoresLikeOneProcess) {
  // The Estimator moves the lookups to the key stage in every job: with ps ranks the ps serves
  // the stages (train, evaluation, prediction); in the np2/np3 runs (no ps) the ranks do.
  ASSERT_EQ(kEstRows % size_, 0);
  dist::JobLayout job;
  ASSERT_TRUE(dist::ProcessJob(&job));
  // RECSDK_PS_ESTIMATOR_DIR (the _ps2 and _ps runs, in that order: tests/dist/CMakeLists.txt):
  // the job of 2 ps leaves its checkpoints in <dir>/ps2, which the job of 1 ps then restores.
  const char* shared = std::getenv("RECSDK_PS_ESTIMATOR_DIR");
  const std::string two_ps_dir = shared != nullptr ? std::string(shared) + "/ps2" : "";
  const bool keep = shared != nullptr && job.ps == 2;
  if (keep && rank_ == 0) {
    ASSERT_TRUE(internal::DeleteRecursively(internal::Env::Default(), two_ps_dir).ok());
  }
  int64_t chief_pid = getpid();
  ASSERT_TRUE(
      dist::WithProcessCommunicator([&](dist::Communicator& comm, const DistributedOptions& o) {
        return comm.Broadcast<int64_t>(absl::MakeSpan(&chief_pid, 1), 0,
                                       dist::DeadlineAfterSeconds(o.collective_timeout_s),
                                       {-1, "test/dir"});
      }).ok());
  const std::string dir =
      keep ? two_ps_dir : ::testing::TempDir() + "recsdk_ps_est_" + std::to_string(chief_pid);
  const std::string who = "rank " + std::to_string(rank_);
  RunConfig config;
  config.seed = 5;
  config.model_dir = dir;
  config.save_checkpoints_steps = 4;
  config.save_checkpoints_secs = 0;
  config.save_summary_steps = 4;
  config.log_step_count_steps = 0;
  EstimatorOptions options;
  constexpr bool kResume = true;
  options.resume_input_position = kResume;
  options.log = stderr;
  // A ps's input_fn is never called (Shard would refuse its rank): it builds from the chief's
  // columns.
  const InputFn input = EstimatorInput(size_, IsPs() ? 0 : rank_);
  OneProcessEstimator one(5);

  // check: after `est` reached global step `steps` and evaluated `eval_batches` batches with
  // the result `auc` (a ps has none), against `one`, which the caller trained as far.
  auto check = [&](Estimator& est, int steps, int eval_batches, double auc) {
    // The lookups ran in the key stage (in a job with ps ranks, served by the ps), not in the
    // step: every SparseLookup of the Estimator's graph, on every rank, was moved there (the
    // Session prunes a moved lookup, so its outputs can only come from the key stage).
    int lookups = 0;
    for (const Node* n : est.graph().nodes()) {
      if (n->type() != internal::kSparseLookupOp) continue;
      ++lookups;
      EXPECT_TRUE(n->BoolAttr("moved_to_key_stage"))
          << who << ": sparse_lookup \"" << n->name()
          << "\" runs in the graph, not in the key stage";
    }
    EXPECT_EQ(lookups, 3) << who << ": one lookup in each of train, eval and infer";
    // Every rank evaluates the reference, a ps too: its table then holds what the Estimator's
    // evaluation left in the ps's (keys the evaluation met first).
    const double one_auc = one.Auc(eval_batches);
    if (!IsPs()) {
      EXPECT_EQ(est.global_step().value_or(-1), steps) << who;
      ExpectClose(Values(*est.session()), Values(*one.session), who + ", dense weights");
      EXPECT_NEAR(auc, one_auc, 1e-5) << who;
      // Random predictions score 0.5; the planted signal is learned from the first steps on.
      EXPECT_GT(auc, 0.6) << who << ": the model learned the planted signal";
      return;
    }
    EmbeddingTable* mine = *LookupTable(*est.session(), "emb");
    EmbeddingTable* plain = *LookupTable(*one.session, "emb");
    int64_t owned = 0;
    for (int64_t id = 0; id < 60; ++id) {
      if (KeyOwner(id) != rank_) continue;
      const StatusOr<std::vector<float>> want = plain->ReadRow(id);
      const StatusOr<std::vector<float>> got = mine->ReadRow(id);
      ASSERT_EQ(got.ok(), want.ok()) << who << ", key " << id << ": " << got.status();
      if (!want.ok()) continue;
      ++owned;
      ExpectClose(*got, *want, who + ", row of key " + std::to_string(id));
    }
    EXPECT_GT(owned, 0) << who;
  };

  {
    StatusOr<std::unique_ptr<Estimator>> est =
        Estimator::Create(EstimatorModel(/*distributed=*/true), config, {}, options);
    ASSERT_TRUE(est.ok()) << est.status();
    EvalSpec eval;
    eval.input_fn = input;
    eval.steps = kEstFirstSteps;
    eval.every_n_steps = 4;
    TrainSpec train;
    train.input_fn = input;
    train.max_steps = kEstFirstSteps;
    const StatusOr<EvalResult> result = (*est)->TrainAndEvaluate(train, eval);
    ASSERT_TRUE(result.ok()) << who << ": " << result.status();
    EXPECT_EQ(result->empty(), IsPs()) << who << ": a ps reports no metrics";
    one.Train(0, kEstFirstSteps);
    check(**est, kEstFirstSteps, kEstFirstSteps, IsPs() ? 0 : result->at("auc"));
  }
  EXPECT_TRUE(internal::Env::Default()->FileExists(dir + "/ckpt-" + std::to_string(kEstFirstSteps)))
      << who;
  {
    StatusOr<std::unique_ptr<Estimator>> est =
        Estimator::Create(EstimatorModel(/*distributed=*/true), config, {}, options);
    ASSERT_TRUE(est.ok()) << est.status();
    const Status trained = (*est)->Train(input, -1, kEstSteps);
    ASSERT_TRUE(trained.ok()) << who << ": " << trained;
    const StatusOr<EvalResult> result = (*est)->Evaluate(input);
    ASSERT_TRUE(result.ok()) << who << ": " << result.status();
    // Restored at step 8, the input resumed at batch 8 (the position the chief recorded for
    // each worker), or without resume_input_position started again at batch 0.
    if (kResume) {
      one.Train(kEstFirstSteps, kEstSteps);
    } else {
      one.Train(0, kEstSteps - kEstFirstSteps);
    }
    check(**est, kEstSteps, kEstSteps, IsPs() ? 0 : result->at("auc"));

    // Predict, as the spec's PS-worker script calls it on every rank: each worker predicts its
    // shard of the rows (the ps serves the lookups), equal to one process's predictions of the
    // same rows (row j of worker r's batch k is row r + W j of global batch k).
    std::vector<float> predicted;
    const Status predict_status =
        (*est)->Predict(input, [&](const Batch&, const std::map<std::string, Tensor>& p) -> Status {
          const auto v = p.at("prob").flat<float>();
          predicted.insert(predicted.end(), v.begin(), v.end());
          return absl::OkStatus();
        });
    ASSERT_TRUE(predict_status.ok()) << who << ": " << predict_status;
    if (IsPs()) {
      EXPECT_TRUE(predicted.empty()) << who << ": a ps predicts nothing";
    } else {
      std::vector<float> want;
      std::unique_ptr<Dataset> data = *EstimatorInput(0, 0)();
      Batch b;
      while (*data->GetNext(&b)) {
        StatusOr<std::vector<Tensor>> all =
            one.session->Run(BatchFeeds(one.g, b), {one.predict.predictions.at("prob")});
        ASSERT_TRUE(all.ok()) << all.status();
        const auto w = (*all)[0].flat<float>();
        for (int64_t j = 0; j < static_cast<int64_t>(w.size()); ++j) {
          if (j % size_ == rank_) want.push_back(w[j]);
        }
      }
      EXPECT_EQ(predicted.size(), want.size()) << who;
      ExpectClose(predicted, want, who + ", Estimator::Predict's predictions");
    }

    // Export: one bundle of the chief's graph and variables and each ps's shard of the rows
    // (or, without ps, each rank's), whose predictions are one process's.
    const StatusOr<std::string> bundle = (*est)->ExportSavedModel(
        dir + "/export",
        {{"C1", DType::kInt64, Shape{-1, 2}}, {"dense", DType::kFloat32, Shape{-1, 2}}});
    ASSERT_TRUE(bundle.ok()) << who << ": " << bundle.status();
    if (IsPs()) {
      EXPECT_TRUE(bundle->empty()) << who;
    } else {
      const int shards = job.owners();
      EXPECT_TRUE(internal::Env::Default()->FileExists(
          *bundle + "/shard-" + std::to_string(shards - 1) + "-of-" + std::to_string(shards)))
          << who;
      StatusOr<std::unique_ptr<Predictor>> served = Predictor::Load(*bundle);
      ASSERT_TRUE(served.ok()) << who << ": " << served.status();
      std::unique_ptr<Dataset> data = *EstimatorInput(0, 0)();
      Batch b;
      int batches = 0;
      while (*data->GetNext(&b)) {
        ++batches;
        StatusOr<std::vector<Tensor>> got =
            (*served)->Predict({{"C1", *b.column("C1")}, {"dense", *b.column("dense")}});
        ASSERT_TRUE(got.ok()) << who << ": " << got.status();
        StatusOr<std::vector<Tensor>> want =
            one.session->Run(BatchFeeds(one.g, b), {one.predict.predictions.at("prob")});
        ASSERT_TRUE(want.ok()) << want.status();
        const auto a = (*got)[0].flat<float>();
        const auto w = (*want)[0].flat<float>();
        ExpectClose(std::vector<float>(a.begin(), a.end()), std::vector<float>(w.begin(), w.end()),
                    who + ", the bundle's predictions of batch " + std::to_string(batches));
      }
      EXPECT_EQ(batches, kEstSteps);
    }

    // A call that fails on the workers (here: nothing to evaluate) ends the ps's call at once
    // with the chief's error, not at the ps's deadline.
    const InputFn empty = [&]() -> StatusOr<std::unique_ptr<Dataset>> {
      SyntheticOptions d = EstimatorData();
      d.num_rows = 0;
      return SyntheticDataset(d);
    };
    const StatusOr<EvalResult> failed = (*est)->Evaluate(empty);
    ASSERT_FALSE(failed.ok()) << who;
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr("yielded no batch")) << who;
    if (IsPs()) {
      EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted) << failed.status();
      EXPECT_THAT(std::string(failed.status().message()),
                  HasSubstr("after an error on the chief (rank 0)"));
    }
  }
  if (!keep && rank_ == 0) internal::DeleteRecursively(internal::Env::Default(), dir).IgnoreError();
  if (shared == nullptr || job.ps != 1) return;
  // 2 -> 1 ps: the checkpoint of step 12 the job of 2 ps wrote (each ps its shard) restores
  // here, re-sharded onto 1 ps, to the state this job reached (both equal one process).
  ASSERT_TRUE(internal::Env::Default()->FileExists(two_ps_dir + "/ckpt-12/shard-1-of-2"))
      << "run dist_mpi_sharded_table_test_ps2 first (the CTest fixture does)";
  config.model_dir = two_ps_dir;
  StatusOr<std::unique_ptr<Estimator>> est =
      Estimator::Create(EstimatorModel(/*distributed=*/true), config, {}, options);
  ASSERT_TRUE(est.ok()) << est.status();
  const Status restored = (*est)->Train(input, -1, kEstSteps);  // restores step 12, trains none
  ASSERT_TRUE(restored.ok()) << who << ": " << restored;
  const StatusOr<EvalResult> result = (*est)->Evaluate(input);
  ASSERT_TRUE(result.ok()) << who << ": " << result.status();
  check(**est, kEstSteps, kEstSteps, IsPs() ? 0 : result->at("auc"));
}

}  // namespace
}  // namespace recsdk
