// Tests of Shard, Shuffle, BatchRows (drop / pad + mask), Repeat, Map and Prefetch
// (src/pipeline/transforms.cc) over in-memory and synthetic sources.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/common/check.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Concat;
using ::recsdk::testing::Drain;
using ::recsdk::testing::TotalRows;

std::unique_ptr<Dataset> Rows(int64_t n, int64_t block = 7) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<float>(i % 2);
  std::vector<InMemoryColumn> cols;
  cols.push_back({"label", labels, 1});
  cols.push_back({"id", ids, 1});
  return *InMemoryDataset(std::move(cols), block);
}

TEST(TransformsTest, ShardsAreDisjointAndCover) {
  std::vector<int64_t> all;
  for (int rank = 0; rank < 3; ++rank) {
    auto ds = Shard(Rows(100), 3, rank);
    ASSERT_TRUE(ds.ok());
    auto ids = Concat<int64_t>(*Drain(**ds), "id");
    for (int64_t id : ids) EXPECT_EQ(id % 3, rank);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(all[i], i);
  EXPECT_FALSE(Shard(Rows(1), 2, 2).ok());
}

TEST(TransformsTest, ShuffleIsAPermutationAndDeterministic) {
  auto run = [](uint64_t seed, int epochs) {
    auto ds = Repeat(*Shuffle(Rows(500), 64, seed), epochs);
    return Concat<int64_t>(*Drain(**ds), "id");
  };
  auto a = run(7, 1), b = run(7, 1), c = run(8, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 500; ++i) ASSERT_EQ(sorted[i], i);
  std::vector<int64_t> identity(500);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
  auto two = run(7, 2);  // reshuffled per epoch
  ASSERT_EQ(two.size(), 1000u);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), two.begin()));
  EXPECT_FALSE(std::equal(a.begin(), a.end(), two.begin() + 500));
}

TEST(TransformsTest, BatchDropRemainder) {
  auto ds = BatchRows(Rows(23), 5, {.drop_remainder = true, .pad_remainder = false});
  auto batches = *Drain(**ds);
  ASSERT_EQ(batches.size(), 4u);
  for (const Batch& b : batches) {
    EXPECT_EQ(b.num_rows(), 5);
    EXPECT_EQ(b.mask(), nullptr);
  }
  EXPECT_EQ(Concat<int64_t>(batches, "id")[19], 19);
  auto keep = BatchRows(Rows(23), 5);
  auto kb = *Drain(**keep);
  ASSERT_EQ(kb.size(), 5u);
  EXPECT_EQ(kb.back().num_rows(), 3);
  EXPECT_EQ(TotalRows(kb), 23);
}

TEST(TransformsTest, BatchPadsLastWithMask) {
  auto ds = BatchRows(Rows(23, 4), 10, {.drop_remainder = false, .pad_remainder = true});
  auto batches = *Drain(**ds);
  ASSERT_EQ(batches.size(), 3u);
  const Batch& last = batches.back();
  EXPECT_EQ(last.num_rows(), 10);
  EXPECT_EQ(last.num_valid(), 3);
  ASSERT_NE(last.mask(), nullptr);
  const float* m = last.mask()->data<float>();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(m[i], i < 3 ? 1.0f : 0.0f);
  const int64_t* ids = last.column("id")->data<int64_t>();
  EXPECT_EQ(ids[2], 22);
  EXPECT_EQ(ids[3], 0);  // padding is zero
  EXPECT_EQ(batches[0].mask()->data<float>()[9], 1.0f);
  EXPECT_EQ(TotalRows(batches), 23);
  EXPECT_FALSE(BatchRows(Rows(1), 0).ok());
  EXPECT_FALSE(BatchRows(Rows(1), 2, {.drop_remainder = true, .pad_remainder = true}).ok());
}

TEST(TransformsTest, BatchIsZeroCopyInsideABlock) {
  auto ds = BatchRows(Rows(100, 100), 10);
  Batch a, b;
  ASSERT_TRUE(*(*ds)->GetNext(&a));
  ASSERT_TRUE(*(*ds)->GetNext(&b));
  EXPECT_TRUE(a.column("id")->SharesBufferWith(*b.column("id")));
  EXPECT_EQ(b.column("id")->data<int64_t>()[0], 10);
}

TEST(TransformsTest, RepeatAndMap) {
  auto ds = Map(*Repeat(Rows(10, 3), 3), [](Batch b) -> StatusOr<Batch> {
    Tensor doubled = b.column("id")->Copy();
    for (int64_t& v : doubled.flat<int64_t>()) v *= 2;
    RECSDK_CHECK(b.SetColumn("id", doubled).ok());
    return b;
  });
  auto ids = Concat<int64_t>(*Drain(**ds), "id");
  ASSERT_EQ(ids.size(), 30u);
  EXPECT_EQ(ids[29], 18);
  auto forever = Repeat(Rows(4, 4), -1);
  EXPECT_EQ(Drain(**forever, 50)->size(), 50u);
  auto failing =
      Map(Rows(4), [](Batch) -> StatusOr<Batch> { return absl::InvalidArgumentError("nope"); });
  EXPECT_EQ(Drain(**failing).status().message(), "nope");
  EXPECT_FALSE(Repeat(Rows(1), 0).ok());
}

// What a Prefetch's producer did, shared between the test and the source it runs: the calls it
// made, the batches the consumer had asked for by then, and any call beyond the bound.
struct ProducerLog {
  std::mutex mu;
  std::condition_variable cv;
  int64_t calls = 0;
  int64_t pulls = 0;  // the consumer raises it before each GetNext
  bool over_bound = false;
  bool destroyed = false;
  int64_t capacity = 0;

  // WaitForCalls: waits (at most 10 s) until the producer made `n` calls; whether it did.
  bool WaitForCalls(int64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return calls >= n; });
  }
};

// A source that records each call in the log. At call n, the consumer has taken at most `pulls`
// batches, so a bounded Prefetch holds at most `capacity` of the others queued and one in hand:
// n <= pulls + capacity + 1, checked on the producer's own thread at the moment of the call.
class CountingSource final : public Dataset {
 public:
  explicit CountingSource(ProducerLog* log) : log_(log) {}
  ~CountingSource() override {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->destroyed = true;
  }
  StatusOr<bool> GetNext(Batch* batch) override {
    Batch b;
    RECSDK_CHECK(b.AddColumn("x", Tensor(DType::kFloat32, Shape{2})).ok());
    *batch = b;
    std::lock_guard<std::mutex> lock(log_->mu);
    ++log_->calls;
    if (log_->calls > log_->pulls + log_->capacity + 1) log_->over_bound = true;
    log_->cv.notify_all();
    return true;
  }
  Status Reset() override { return absl::OkStatus(); }
  MalformedCounts malformed_counts() const override { return {}; }

 private:
  ProducerLog* log_;
};

TEST(TransformsTest, PrefetchIsBoundedAndStopsCleanly) {
  ProducerLog log;
  log.capacity = 3;
  auto ds = Prefetch(std::make_unique<CountingSource>(&log), log.capacity);
  ASSERT_TRUE(ds.ok());
  auto pull = [&] {
    {
      std::lock_guard<std::mutex> lock(log.mu);
      ++log.pulls;
    }
    Batch b;
    StatusOr<bool> more = (*ds)->GetNext(&b);
    return more.ok() && *more;
  };
  ASSERT_TRUE(pull());
  // A consumer that stops pulling: the producer fills the queue (3) and holds one more, then
  // waits. Wait for exactly that, and the source checks it never runs further ahead.
  EXPECT_TRUE(log.WaitForCalls(1 + 3 + 1)) << "the producer did not fill the queue";
  // One more pull frees one slot: the producer makes exactly one more call.
  ASSERT_TRUE(pull());
  EXPECT_TRUE(log.WaitForCalls(1 + 3 + 2)) << "the producer did not refill the freed slot";
  // Destruction joins the producer: the source is gone when the dataset is.
  ds->reset();
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_TRUE(log.destroyed);
  EXPECT_FALSE(log.over_bound) << "the producer ran more than capacity + 1 batches ahead";
}

TEST(TransformsTest, PrefetchPassesDataAndErrors) {
  auto ds = Prefetch(*BatchRows(Rows(50), 8), 2);
  auto ids = Concat<int64_t>(*Drain(**ds), "id");
  ASSERT_EQ(ids.size(), 50u);
  EXPECT_EQ(ids[49], 49);
  ASSERT_TRUE((*ds)->Reset().ok());
  EXPECT_EQ(Concat<int64_t>(*Drain(**ds), "id"), ids);
  auto failing = Prefetch(
      *Map(Rows(4), [](Batch) -> StatusOr<Batch> { return absl::InternalError("bad"); }), 2);
  EXPECT_EQ(Drain(**failing).status().code(), absl::StatusCode::kInternal);
}

TEST(TransformsTest, SyntheticIsReproducibleZipfAndLearnable) {
  SyntheticOptions o;
  o.num_rows = 20000;
  o.vocabulary_sizes = {1000, 50};
  o.num_dense = 2;
  o.with_timestamps = true;
  o.block_rows = 3000;
  auto a = *Drain(**SyntheticDataset(o));
  auto b = *Drain(**SyntheticDataset(o));
  EXPECT_EQ(Concat<int64_t>(a, "C1"), Concat<int64_t>(b, "C1"));
  EXPECT_EQ(Concat<float>(a, "label"), Concat<float>(b, "label"));
  auto ids = Concat<int64_t>(a, "C1");
  std::vector<int64_t> freq(1000);
  for (int64_t id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 1000);
    ++freq[id];
  }
  // Zipf(1.05): rank 1 about 2^1.05 = 2.07 times as frequent as rank 2.
  EXPECT_NEAR(static_cast<double>(freq[0]) / freq[1], 2.07, 0.35);
  EXPECT_GT(freq[0], freq[10]);
  auto ts = Concat<int64_t>(a, "timestamp");
  EXPECT_EQ(ts[5], o.start_timestamp + 5);
  // The planted signal: rows with high true logit are positive more often.
  auto labels = Concat<float>(a, "label");
  auto c2 = Concat<int64_t>(a, "C2");
  auto dense = Concat<float>(a, "dense");
  double pos_hi = 0, n_hi = 0, pos_lo = 0, n_lo = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t row_ids[2] = {ids[i], c2[i]};
    const double logit = SyntheticTrueLogit(o, row_ids, absl::MakeSpan(&dense[2 * i], 2));
    if (logit > 0) {
      pos_hi += labels[i];
      ++n_hi;
    } else {
      pos_lo += labels[i];
      ++n_lo;
    }
  }
  EXPECT_GT(pos_hi / n_hi, pos_lo / n_lo + 0.2);
  o.vocabulary_sizes = {0};
  EXPECT_FALSE(SyntheticDataset(o).ok());
}

}  // namespace
}  // namespace recsdk
