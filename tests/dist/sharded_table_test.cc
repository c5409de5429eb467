// Tests of ShardedTable (src/dist/sharded_table.h) in a world of one rank, where every exchange
// is the LocalCommunicator's copy: it must behave exactly as the table it shards (the same
// admissions, sentinels, gathers and updates, bit for bit), keep the rows of its last two
// batches readable, refuse what it cannot honour with the reason, and spread skewed keys evenly
// over the ranks. The multi-rank behaviour is tests/dist/mpi_sharded_table_test.cc's. The same
// for ReplicatedTable (is_dp, replicated_table.h) at the end.
#include "src/dist/sharded_table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/table.h"
#include "src/dist/replicated_table.h"

// Large allocations of this program while `g_count_large` is set (the step's exchanges keep
// their memory: ExchangesKeepTheirMemoryAcrossSteps).
std::atomic<bool> g_count_large{false};
std::atomic<int64_t> g_large_allocations{0};
constexpr size_t kLargeAllocation = 16 << 10;

void* operator new(size_t bytes) {
  if (bytes >= kLargeAllocation && g_count_large.load(std::memory_order_relaxed)) {
    g_large_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
// Not inlined: GCC would see the free of a pointer from operator new (-Wmismatched-new-delete).
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace recsdk::dist {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kDim = 4;
constexpr uint32_t kDefaultRow = EmbeddingTable::kDefaultRow;
constexpr uint32_t kPaddingRow = EmbeddingTable::kPaddingRow;

TableConfig Config() {
  TableConfig c;
  c.name = "t";
  c.dim = kDim;
  c.device_vocabulary_size = 256;
  c.access_threshold = 2;
  c.padding_keys = {-1};
  c.serving_default_value = 0.25f;
  c.initializer = Initializer::Uniform(-0.5, 0.5, 9);
  return c;
}

std::unique_ptr<EmbeddingTable> Plain(
    const TableConfig& c = Config(),
    const SparseOptimizerConfig& o = SparseOptimizerConfig::Adagrad(0.1f)) {
  StatusOr<std::unique_ptr<EmbeddingTable>> t = EmbeddingTable::Create(c, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::unique_ptr<EmbeddingTable> Sharded(
    const TableConfig& c = Config(),
    const SparseOptimizerConfig& o = SparseOptimizerConfig::Adagrad(0.1f)) {
  StatusOr<std::unique_ptr<EmbeddingTable>> t = ShardedTable::Create(Plain(c, o), 0, 1);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Batch: unique keys, their counts, a pooled restore of 2 ids per sample over them.
struct Batch {
  std::vector<int64_t> keys;
  std::vector<uint32_t> counts;
  std::vector<uint32_t> restore;
};

Batch MakeBatch(int step) {
  Batch b;
  for (int64_t k = 0; k < 12; ++k) {
    b.keys.push_back((k * 5 + step * 3) % 20);
    b.counts.push_back(1 + static_cast<uint32_t>((k + step) % 2));
  }
  std::sort(b.keys.begin(), b.keys.end());
  b.keys.erase(std::unique(b.keys.begin(), b.keys.end()), b.keys.end());
  b.keys.push_back(-1);  // a padding key
  b.counts.resize(b.keys.size(), 1);
  for (uint32_t i = 0; i < 2 * b.keys.size(); ++i) {
    b.restore.push_back((i * 7) % static_cast<uint32_t>(b.keys.size()));
  }
  return b;
}

// ResolveGroup and ApplyGroup (one exchange for several tables) give each member what its own
// Resolve and ApplyGradients give: two tables of different dims train bit for bit like their
// plain tables, and a member with bad arguments fails the group's update on every member.
TEST(ShardedTableTest, AGroupOfTablesTrainsLikeEachTableAlone) {
  TableConfig c2 = Config();
  c2.name = "t2";
  c2.dim = 3;
  c2.access_threshold = 1;
  std::unique_ptr<EmbeddingTable> plain1 = Plain(), plain2 = Plain(c2);
  std::unique_ptr<EmbeddingTable> s1 = Sharded(), s2 = Sharded(c2);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  auto* g1 = dynamic_cast<ShardedTable*>(s1.get());
  auto* g2 = dynamic_cast<ShardedTable*>(s2.get());
  for (int step = 1; step <= 5; ++step) {
    const Batch b1 = MakeBatch(step), b2 = MakeBatch(step + 7);
    std::vector<uint32_t> p1(b1.keys.size()), p2(b2.keys.size()), r1(p1.size()), r2(p2.size());
    ASSERT_TRUE(
        plain1->Resolve(b1.keys, b1.counts, {}, LookupMode::kTrain, absl::MakeSpan(p1)).ok());
    ASSERT_TRUE(
        plain2->Resolve(b2.keys, b2.counts, {}, LookupMode::kTrain, absl::MakeSpan(p2)).ok());
    const std::vector<ShardedTable::GroupResolve> lookups = {
        {g1, b1.keys, b1.counts, {}, LookupMode::kTrain, absl::MakeSpan(r1)},
        {g2, b2.keys, b2.counts, {}, LookupMode::kTrain, absl::MakeSpan(r2)}};
    const Status s = ShardedTable::ResolveGroup(lookups);
    ASSERT_TRUE(s.ok()) << s;
    std::vector<float> gp1(p1.size() * kDim), gs1(gp1.size()), gp2(p2.size() * 3), gs2(gp2.size());
    ASSERT_TRUE(plain1->Gather(p1, absl::MakeSpan(gp1)).ok());
    ASSERT_TRUE(s1->Gather(r1, absl::MakeSpan(gs1)).ok());
    ASSERT_TRUE(plain2->Gather(p2, absl::MakeSpan(gp2)).ok());
    ASSERT_TRUE(s2->Gather(r2, absl::MakeSpan(gs2)).ok());
    EXPECT_EQ(gp1, gs1) << "step " << step;
    EXPECT_EQ(gp2, gs2) << "step " << step;
    std::vector<float> d1(gp1.size()), d2(gp2.size());
    for (size_t i = 0; i < d1.size(); ++i) d1[i] = 0.02f * static_cast<float>(i % 5) - 0.04f;
    for (size_t i = 0; i < d2.size(); ++i) d2[i] = 0.03f * static_cast<float>(i % 3) - 0.02f;
    ASSERT_TRUE(plain1->ApplyGradients(p1, d1, step).ok());
    ASSERT_TRUE(plain2->ApplyGradients(p2, d2, step).ok());
    const std::vector<ShardedTable::GroupApply> applies = {{g1, r1, d1, step}, {g2, r2, d2, step}};
    const Status a = ShardedTable::ApplyGroup(applies);
    ASSERT_TRUE(a.ok()) << a;
  }
  for (int64_t key = 0; key < 20; ++key) {
    const StatusOr<std::vector<float>> w1 = plain1->ReadRow(key), h1 = s1->ReadRow(key);
    ASSERT_EQ(w1.ok(), h1.ok()) << key;
    if (w1.ok()) {
      EXPECT_EQ(*w1, *h1) << "t, key " << key;
    }
    const StatusOr<std::vector<float>> w2 = plain2->ReadRow(key), h2 = s2->ReadRow(key);
    ASSERT_EQ(w2.ok(), h2.ok()) << key;
    if (w2.ok()) {
      EXPECT_EQ(*w2, *h2) << "t2, key " << key;
    }
  }
  // A gradient of the wrong size for one member: the group's update fails, naming it.
  const Batch b = MakeBatch(9);
  std::vector<uint32_t> r1(b.keys.size()), r2(b.keys.size());
  const std::vector<ShardedTable::GroupResolve> lookups = {
      {g1, b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(r1)},
      {g2, b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(r2)}};
  ASSERT_TRUE(ShardedTable::ResolveGroup(lookups).ok());
  const std::vector<float> good(r1.size() * kDim, 0.5f), bad(1, 0.5f);
  int64_t held = -1;
  for (int64_t k : b.keys) {
    if (held < 0 && s1->ReadRow(k).ok()) held = k;
  }
  ASSERT_GE(held, 0);
  const std::vector<float> before = *s1->ReadRow(held);
  const Status a = ShardedTable::ApplyGroup(
      std::vector<ShardedTable::GroupApply>{{g1, r1, good, 9}, {g2, r2, bad, 9}});
  EXPECT_THAT(std::string(a.message()), AllOf(HasSubstr("\"t2\""), HasSubstr("gradient floats")));
  EXPECT_EQ(*s1->ReadRow(held), before) << "no member of the group is updated";
}

// A step's exchanges keep their memory: once the batches reach their size, Resolve, ResolveGroup,
// ApplyGradients and ApplyGroup make no allocation of a batch's size (each used to allocate its
// send and receive arrays, the group's per-member copies and the owner's gradient sums and hash
// index afresh every step).
TEST(ShardedTableTest, ExchangesKeepTheirMemoryAcrossSteps) {
  TableConfig c1 = Config();
  c1.device_vocabulary_size = 1 << 14;
  c1.access_threshold = 0;
  TableConfig c2 = c1;
  c2.name = "t2";
  c2.dim = 3;
  std::unique_ptr<EmbeddingTable> s1 = Sharded(c1), s2 = Sharded(c2);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  auto* g1 = dynamic_cast<ShardedTable*>(s1.get());
  auto* g2 = dynamic_cast<ShardedTable*>(s2.get());
  // 4096 keys: each exchange's arrays are well above kLargeAllocation.
  std::vector<int64_t> keys(4096);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i * 7 + 1);
  std::vector<uint32_t> r1(keys.size()), r2(keys.size());
  std::vector<float> d1(keys.size() * kDim, 0.01f), d2(keys.size() * 3, -0.02f);
  auto step = [&](int64_t n) {
    const std::vector<ShardedTable::GroupResolve> lookups = {
        {g1, keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(r1)},
        {g2, keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(r2)}};
    Status s = ShardedTable::ResolveGroup(lookups);
    const std::vector<ShardedTable::GroupApply> applies = {{g1, r1, d1, n}, {g2, r2, d2, n}};
    if (s.ok()) s = ShardedTable::ApplyGroup(applies);
    if (s.ok()) s = s1->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(r1));
    if (s.ok()) s = s1->ApplyGradients(r1, d1, n);
    return s;
  };
  // The first steps admit the keys and size the arrays (two slots alternate).
  for (int64_t n = 1; n <= 4; ++n) ASSERT_TRUE(step(n).ok());
  g_large_allocations = 0;
  g_count_large = true;
  Status s;
  for (int64_t n = 5; n <= 8 && s.ok(); ++n) s = step(n);
  g_count_large = false;
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(g_large_allocations.load(), 0);
}

TEST(ShardedTableTest, OneRankTrainsBitForBitLikeTheTableItShards) {
  std::unique_ptr<EmbeddingTable> plain = Plain();
  std::unique_ptr<EmbeddingTable> sharded = Sharded();
  ASSERT_NE(sharded, nullptr);
  for (int step = 1; step <= 6; ++step) {
    const Batch b = MakeBatch(step);
    const size_t u = b.keys.size();
    std::vector<uint32_t> rp(u), rs(u);
    ASSERT_TRUE(plain->Resolve(b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(rp)).ok());
    const Status s = sharded->Resolve(b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(rs));
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < u; ++i) {
      // The same sentinels (padding, not yet admitted); real rows have ids of their own.
      EXPECT_EQ(rp[i] >= kDefaultRow ? rp[i] : 0u, rs[i] >= kDefaultRow ? rs[i] : 0u)
          << "step " << step << " key " << b.keys[i];
    }
    const int64_t batch = static_cast<int64_t>(b.restore.size() / 2);
    for (Combiner c : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
      std::vector<float> op(batch * kDim), os(batch * kDim);
      ASSERT_TRUE(plain->GatherPooled(rp, b.restore, batch, 2, c, absl::MakeSpan(op)).ok());
      ASSERT_TRUE(sharded->GatherPooled(rs, b.restore, batch, 2, c, absl::MakeSpan(os)).ok());
      EXPECT_EQ(op, os) << "step " << step;
    }
    std::vector<float> gp(u * kDim), gs(u * kDim);
    ASSERT_TRUE(plain->Gather(rp, absl::MakeSpan(gp)).ok());
    ASSERT_TRUE(sharded->Gather(rs, absl::MakeSpan(gs)).ok());
    EXPECT_EQ(gp, gs);
    std::vector<float> mp(b.restore.size()), ms(b.restore.size());
    ASSERT_TRUE(plain->PaddingMask(rp, b.restore, absl::MakeSpan(mp)).ok());
    ASSERT_TRUE(sharded->PaddingMask(rs, b.restore, absl::MakeSpan(ms)).ok());
    EXPECT_EQ(mp, ms);
    std::vector<float> grads(u * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    ASSERT_TRUE(plain->ApplyGradients(rp, grads, step).ok());
    const Status a = sharded->ApplyGradients(rs, grads, step);
    ASSERT_TRUE(a.ok()) << a;
  }
  EXPECT_EQ(sharded->size(), plain->size());
  EXPECT_GT(plain->size(), 0);
  for (int64_t key = 0; key < 20; ++key) {
    const StatusOr<std::vector<float>> want = plain->ReadRow(key);
    const StatusOr<std::vector<float>> got = sharded->ReadRow(key);
    ASSERT_EQ(got.ok(), want.ok()) << key;
    if (want.ok()) {
      EXPECT_EQ(*got, *want) << "key " << key;
    }
    EXPECT_EQ(sharded->AdmissionCount(key), plain->AdmissionCount(key)) << key;
  }
}

TEST(ShardedTableTest, EvaluationResolvesAdmitNothingAndReadTheServingDefault) {
  std::unique_ptr<EmbeddingTable> sharded = Sharded();
  const std::vector<int64_t> keys = {3, 4};
  std::vector<uint32_t> rows(2);
  ASSERT_TRUE(sharded->Resolve(keys, {2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  const std::vector<int64_t> eval_keys = {3, 99};
  ASSERT_TRUE(sharded->Resolve(eval_keys, {}, {}, LookupMode::kEval, absl::MakeSpan(rows)).ok());
  EXPECT_LT(rows[0], kDefaultRow);
  EXPECT_EQ(rows[1], kDefaultRow);
  std::vector<float> out(2 * kDim);
  ASSERT_TRUE(sharded->Gather(rows, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[kDim], 0.25f);
  EXPECT_EQ(sharded->size(), 2);
  EXPECT_EQ(sharded->FindRow(99), kDefaultRow);
}

TEST(ShardedTableTest, RowsOfTheLastTwoBatchesStayReadable) {
  std::unique_ptr<EmbeddingTable> sharded = Sharded();
  std::unique_ptr<EmbeddingTable> plain = Plain();
  const std::vector<int64_t> a = {1, 2}, b = {7, 8, 9};
  std::vector<uint32_t> ra(2), rb(3), pa(2), pb(3);
  ASSERT_TRUE(sharded->Resolve(a, {2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(ra)).ok());
  ASSERT_TRUE(sharded->Resolve(b, {2, 2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(rb)).ok());
  ASSERT_TRUE(plain->Resolve(a, {2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(pa)).ok());
  ASSERT_TRUE(plain->Resolve(b, {2, 2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(pb)).ok());
  std::vector<float> got(2 * kDim), want(2 * kDim);
  ASSERT_TRUE(sharded->Gather(ra, absl::MakeSpan(got)).ok());
  ASSERT_TRUE(plain->Gather(pa, absl::MakeSpan(want)).ok());
  EXPECT_EQ(got, want) << "the batch before the last one";
  // ApplyGradients belongs to the last training Resolve: rows of the one before are refused.
  const std::vector<float> g(2 * kDim, 0.1f);
  const Status s = sharded->ApplyGradients(ra, g, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a row of this rank's training batch"));
  // A row id past the batch is refused, not read.
  std::vector<uint32_t> bad = {rb[2] + 5};
  std::vector<float> one(kDim);
  EXPECT_EQ(sharded->Gather(bad, absl::MakeSpan(one)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardedTableTest, WhatItCannotHonourIsRefusedWithTheReason) {
  StatusOr<std::unique_ptr<EmbeddingTable>> by_address =
      ShardedTable::Create(Plain(Config(),
                                 [] {
                                   SparseOptimizerConfig o = SparseOptimizerConfig::Adagrad(0.1f);
                                   o.kind = SparseOptimizerKind::kAdagradByAddress;
                                   return o;
                                 }()),
                           0, 1);
  ASSERT_FALSE(by_address.ok());
  EXPECT_EQ(by_address.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(by_address.status().message()),
              AllOf(HasSubstr("AdagradByAddress"), HasSubstr("plain kind (Adagrad)")));

  TableConfig dynamic = Config();
  dynamic.use_dynamic_expansion = true;
  StatusOr<std::unique_ptr<EmbeddingTable>> expanding =
      ShardedTable::Create(Plain(dynamic,
                                 [] {
                                   SparseOptimizerConfig o = SparseOptimizerConfig::Adagrad(0.1f);
                                   o.kind = SparseOptimizerKind::kAdagradByAddress;
                                   return o;
                                 }()),
                           0, 1);
  ASSERT_FALSE(expanding.ok());
  EXPECT_THAT(std::string(expanding.status().message()), HasSubstr("use_dynamic_expansion"));

  EXPECT_EQ(ShardedTable::Create(Plain(), 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardedTable::Create(nullptr, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::unique_ptr<EmbeddingTable> sharded = Sharded();
  const Status none = sharded->ApplyGradients({}, {}, 1);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  const Status import = sharded->ImportNpy("/nonexistent/k.npy", "/nonexistent/v.npy");
  EXPECT_EQ(import.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(import.message()), HasSubstr("restore it here"));
  // Wrong spans are an error, and the exchange still completes (no rank would be left waiting).
  std::vector<uint32_t> rows(1);
  const std::vector<int64_t> keys = {1, 2};
  EXPECT_EQ(sharded->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint32_t> two(2);
  ASSERT_TRUE(sharded->Resolve(keys, {2, 2}, {}, LookupMode::kTrain, absl::MakeSpan(two)).ok());
  const std::vector<uint32_t> twice = {two[0], two[0]};
  const std::vector<float> g(2 * kDim, 0.1f);
  const Status dup = sharded->ApplyGradients(twice, g, 1);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("appears twice"));
}

// shard_balance: the most keys on one of 4 ranks over the mean, for ids that defeat `key mod N`
// (multiples of 4) and Zipf-like clusters of nearby ids.
TEST(ShardedTableTest, OwnersSpreadSkewedKeysEvenly) {
  constexpr int kRanks = 4;
  auto balance = [](const std::vector<int64_t>& keys) {
    std::vector<int64_t> per(kRanks, 0);
    for (int64_t k : keys) ++per[ShardedTable::Owner(k, kRanks)];
    const double mean = static_cast<double>(keys.size()) / kRanks;
    return static_cast<double>(*std::max_element(per.begin(), per.end())) / mean;
  };
  std::vector<int64_t> multiples, clustered;
  for (int64_t i = 0; i < 200000; ++i) multiples.push_back(4 * i);
  for (int64_t c = 0; c < 2000; ++c) {
    for (int64_t j = 0; j < 100; ++j) clustered.push_back((c << 32) + j);
  }
  EXPECT_LE(balance(multiples), 1.02);
  EXPECT_LE(balance(clustered), 1.02);
  EXPECT_EQ(ShardedTable::Owner(12345, 1), 0);
}

// ReplicatedTable in a world of one: the exchanges are copies, and the table must train exactly
// as the one it replicates (row ids included: a replica's ids are its table's).
TEST(ReplicatedTableTest, OneRankTrainsBitForBitLikeItsTable) {
  std::unique_ptr<EmbeddingTable> plain = Plain();
  StatusOr<std::unique_ptr<EmbeddingTable>> made = ReplicatedTable::Create(Plain(), 0, 1);
  ASSERT_TRUE(made.ok()) << made.status();
  EmbeddingTable& replica = **made;
  for (int step = 1; step <= 6; ++step) {
    const Batch b = MakeBatch(step);
    const size_t u = b.keys.size();
    std::vector<uint32_t> rp(u), rr(u);
    ASSERT_TRUE(plain->Resolve(b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(rp)).ok());
    const Status s = replica.Resolve(b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(rr));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(rp, rr) << "step " << step;
    std::vector<float> grads(u * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    ASSERT_TRUE(plain->ApplyGradients(rp, grads, step).ok());
    const Status a = replica.ApplyGradients(rr, grads, step);
    ASSERT_TRUE(a.ok()) << a;
  }
  EXPECT_EQ(replica.size(), plain->size());
  EXPECT_GT(plain->size(), 0);
  for (int64_t key = 0; key < 20; ++key) {
    const StatusOr<std::vector<float>> want = plain->ReadRow(key);
    const StatusOr<std::vector<float>> got = replica.ReadRow(key);
    ASSERT_EQ(got.ok(), want.ok()) << key;
    if (want.ok()) {
      EXPECT_EQ(*got, *want) << "key " << key;
    }
    EXPECT_EQ(replica.AdmissionCount(key), plain->AdmissionCount(key)) << key;
  }
  // A rank's wrong arguments fail the call (every rank's, under MPI) and change nothing.
  const Batch b = MakeBatch(7);
  std::vector<uint32_t> short_rows(1);
  const int64_t before = replica.size();
  const Status bad =
      replica.Resolve(b.keys, b.counts, {}, LookupMode::kTrain, absl::MakeSpan(short_rows));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(replica.size(), before);
  std::vector<uint32_t> one_row = {0};
  std::vector<float> wrong(kDim + 1);
  EXPECT_EQ(replica.ApplyGradients(one_row, wrong, 8).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReplicatedTableTest, WhatItCannotHonourIsRefusedWithTheReason) {
  SparseOptimizerConfig by_address = SparseOptimizerConfig::Adagrad(0.1f);
  by_address.kind = SparseOptimizerKind::kAdagradByAddress;
  StatusOr<std::unique_ptr<EmbeddingTable>> refused =
      ReplicatedTable::Create(Plain(Config(), by_address), 0, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("\"t\" is replicated"), HasSubstr("AdagradByAddress"),
                    HasSubstr("is_dp = false")));
  EXPECT_EQ(ReplicatedTable::Create(Plain(), 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplicatedTable::Create(nullptr, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace recsdk::dist
