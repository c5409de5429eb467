// streaming_metrics_test.cc: the streaming metrics of metrics.h: exact AUC over batches equals the
// one-shot Auc; the binned AUC stays within its documented error bound of the exact one; log
// loss, accuracy and mean agree with direct computation; bad input is rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "recsdk/metrics.h"

namespace recsdk {
namespace {

struct Data {
  std::vector<float> scores, labels;
};

// Planted: label ~ Bernoulli(sigmoid(3 z)), score = sigmoid(z + noise): an AUC well inside (0.5,
// 1).
Data Planted(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform;
  Data d;
  for (int i = 0; i < n; ++i) {
    const float z = normal(rng);
    d.labels.push_back(uniform(rng) < 1 / (1 + std::exp(-3 * z)) ? 1.0f : 0.0f);
    d.scores.push_back(1 / (1 + std::exp(-(z + normal(rng)))));
  }
  return d;
}

std::unique_ptr<StreamingMetric> Make(MetricKind kind, int bins = 10000) {
  auto m = MakeStreamingMetric(kind, bins);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

void Feed(StreamingMetric& m, const Data& d, size_t batch) {
  for (size_t i = 0; i < d.scores.size(); i += batch) {
    const size_t n = std::min(batch, d.scores.size() - i);
    ASSERT_TRUE(m.Update(absl::MakeConstSpan(d.scores).subspan(i, n),
                         absl::MakeConstSpan(d.labels).subspan(i, n))
                    .ok());
  }
}

TEST(StreamingMetricsTest, ExactAucOverBatchesEqualsOneShot) {
  const Data d = Planted(5000, 1);
  auto auc = Make(MetricKind::kAuc);
  Feed(*auc, d, 333);
  const double expected = *Auc(d.scores, d.labels);
  EXPECT_GT(expected, 0.7);
  EXPECT_DOUBLE_EQ(*auc->Result(), expected);
  EXPECT_EQ(auc->count(), 5000);
  auc->Reset();
  EXPECT_FALSE(auc->Result().ok());
}

TEST(StreamingMetricsTest, BinnedAucWithinItsErrorBound) {
  for (int bins : {10, 100, 10000}) {
    const Data d = Planted(20000, 2 + bins);
    BinnedAuc binned(bins);
    Feed(binned, d, 1000);
    const double exact = *Auc(d.scores, d.labels);
    const double approx = *binned.Result();
    const double bound = binned.ErrorBound();
    EXPECT_LE(std::abs(approx - exact), bound + 1e-12) << bins << " bins";
    EXPECT_GT(bound, 0);
    if (bins == 10000) {
      EXPECT_LT(bound, 2e-4);  // well-spread scores: about 1 / bins
    }
    if (bins == 10) {
      EXPECT_GT(std::abs(approx - exact), 1e-4);  // coarse bins do lose accuracy
    }
  }
}

TEST(StreamingMetricsTest, BinnedAucIsExactWhenScoresAreInSeparateBins) {
  BinnedAuc binned(4);
  ASSERT_TRUE(binned.Update({0.1f, 0.3f, 0.6f, 0.9f}, {0, 1, 0, 1}).ok());
  EXPECT_DOUBLE_EQ(*binned.Result(), *Auc({0.1f, 0.3f, 0.6f, 0.9f}, {0, 1, 0, 1}));
  EXPECT_EQ(binned.ErrorBound(), 0);
}

TEST(StreamingMetricsTest, LogLossAccuracyMean) {
  const Data d = Planted(1000, 9);
  auto log_loss = Make(MetricKind::kLogLoss);
  auto accuracy = Make(MetricKind::kAccuracy);
  auto mean = Make(MetricKind::kMean);
  Feed(*log_loss, d, 77);
  Feed(*accuracy, d, 77);
  ASSERT_TRUE(mean->Update(d.scores, {}).ok());
  double correct = 0, sum = 0;
  for (size_t i = 0; i < d.scores.size(); ++i) {
    correct += (d.scores[i] >= 0.5f) == (d.labels[i] == 1.0f);
    sum += d.scores[i];
  }
  EXPECT_NEAR(*log_loss->Result(), *LogLoss(d.scores, d.labels), 1e-9);
  EXPECT_NEAR(*accuracy->Result(), correct / 1000, 1e-12);
  EXPECT_NEAR(*mean->Result(), sum / 1000, 1e-9);
}

TEST(StreamingMetricsTest, BadInputIsRejectedAndAddsNothing) {
  auto auc = Make(MetricKind::kAuc);
  Status s = auc->Update({0.2f, 0.4f}, {0, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("label 2"), std::string::npos) << s;
  EXPECT_EQ(auc->count(), 0);
  EXPECT_FALSE(auc->Update({0.2f, NAN}, {0, 1}).ok());
  EXPECT_FALSE(auc->Update({0.2f}, {0, 1}).ok());
  BinnedAuc binned(100);
  EXPECT_FALSE(binned.Update({1.5f}, {1}).ok());
  EXPECT_FALSE(MakeStreamingMetric(MetricKind::kBinnedAuc, 0).ok());
  EXPECT_FALSE(BinnedAuc(0).Update({0.5f}, {1}).ok());
  auto only_positive = Make(MetricKind::kAuc);
  ASSERT_TRUE(only_positive->Update({0.5f}, {1}).ok());
  EXPECT_EQ(only_positive->Result().status().code(), absl::StatusCode::kFailedPrecondition);
}

// SaveState / MergeState: three metrics each fed a third of the pairs, merged into a fourth,
// give the metric of all the pairs (how a distributed evaluation combines its ranks).
TEST(StreamingMetricsTest, MergedStatesGiveTheMetricOfAllThePairs) {
  const Data d = Planted(3000, 5);
  for (MetricKind kind : {MetricKind::kAuc, MetricKind::kBinnedAuc, MetricKind::kLogLoss,
                          MetricKind::kAccuracy, MetricKind::kMean}) {
    auto whole = Make(kind, 500);
    Feed(*whole, d, 3000);
    auto merged = Make(kind, 500);
    for (int part = 0; part < 3; ++part) {
      Data p;
      p.scores.assign(d.scores.begin() + part * 1000, d.scores.begin() + (part + 1) * 1000);
      p.labels.assign(d.labels.begin() + part * 1000, d.labels.begin() + (part + 1) * 1000);
      auto one = Make(kind, 500);
      Feed(*one, p, 250);
      ASSERT_TRUE(merged->MergeState(one->SaveState()).ok()) << whole->name();
    }
    ASSERT_TRUE(merged->MergeState({}).ok()) << "an empty state merges as nothing";
    EXPECT_EQ(merged->count(), whole->count()) << whole->name();
    EXPECT_NEAR(*merged->Result(), *whole->Result(), 1e-12) << whole->name();
  }
}

TEST(StreamingMetricsTest, AStateOfAnotherKindIsRefusedAndChangesNothing) {
  const Data d = Planted(200, 6);
  auto auc = Make(MetricKind::kAuc);
  Feed(*auc, d, 200);
  const double before = *auc->Result();
  auto binned = Make(MetricKind::kBinnedAuc, 100);
  Feed(*binned, d, 200);
  auto other_bins = Make(MetricKind::kBinnedAuc, 50);
  const Status bins = other_bins->MergeState(binned->SaveState());
  EXPECT_EQ(bins.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bins.message().find("num_bins"), std::string::npos) << bins;
  const std::vector<double> odd = {0.5, 1, 0.25};
  EXPECT_EQ(auc->MergeState(odd).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<double> bad_label = {0.5, 2};
  EXPECT_EQ(auc->MergeState(bad_label).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*auc->Result(), before);
  auto mean = Make(MetricKind::kMean);
  const std::vector<double> not_a_count = {1.0, 0.5};
  EXPECT_EQ(mean->MergeState(not_a_count).code(), absl::StatusCode::kInvalidArgument);
  // A metric of one's own that does not override them cannot be merged, and says so.
  class Mine final : public StreamingMetric {
   public:
    std::string name() const override { return "mine"; }
    Status Update(absl::Span<const float>, absl::Span<const float>) override {
      return absl::OkStatus();
    }
    StatusOr<double> Result() const override { return 0.0; }
    void Reset() override {}
    int64_t count() const override { return 0; }
  } mine;
  const Status refused = mine.MergeState({});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("\"mine\""), std::string::npos) << refused;
}

}  // namespace
}  // namespace recsdk
