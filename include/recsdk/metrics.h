// recsdk/metrics.h: evaluation metrics computed on the host: one-shot functions (Auc, LogLoss)
// and streaming metrics that accumulate over the batches of an evaluation (the Estimator's
// eval_metric_ops, one set per head of a multi-task model).
//
// Threading: the functions are thread-safe; a StreamingMetric is not (one evaluation loop).
#ifndef RECSDK_METRICS_H_
#define RECSDK_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "recsdk/status.h"

namespace recsdk {

// Auc: area under the ROC curve of `scores` against binary `labels` (0 or 1), with ties
// counted as half (the Mann-Whitney statistic). O(n log n). InvalidArgument when the sizes
// differ, a score is NaN, a label is not 0/1, or only one class is present.
StatusOr<double> Auc(absl::Span<const float> scores, absl::Span<const float> labels);

// LogLoss: mean binary cross-entropy of probabilities `predictions` (clipped to [1e-7, 1-1e-7]).
StatusOr<double> LogLoss(absl::Span<const float> predictions, absl::Span<const float> labels);

// StreamingMetric: accumulates (value, label) pairs batch by batch; Result is the metric of all
// pairs seen since construction or Reset.
class StreamingMetric {
 public:
  virtual ~StreamingMetric() = default;
  // name: "auc", "binned_auc", "log_loss", "accuracy", "mean".
  virtual std::string name() const = 0;
  // Update: adds one batch. `values` are the predictions (probabilities for auc, log_loss and
  // accuracy; any number for mean); `labels` (0 or 1) must have the same size, except for mean,
  // which ignores them (may be empty). InvalidArgument naming the metric, the position and the
  // value for a bad label, a non-finite value or a size mismatch; nothing is added then.
  virtual Status Update(absl::Span<const float> values, absl::Span<const float> labels) = 0;
  // Result: the metric so far. FailedPrecondition when it is undefined (no pairs; AUC with one
  // class only), naming the metric and the counts.
  virtual StatusOr<double> Result() const = 0;
  // Reset: forget everything accumulated (count() becomes 0).
  virtual void Reset() = 0;
  // count: pairs (or values) accumulated.
  virtual int64_t count() const = 0;

  // SaveState / MergeState: what the metric has accumulated, as numbers (auc: its pairs;
  // binned_auc: its histograms; the means: their sum and count), and adding such a state saved by
  // a metric of the same kind elsewhere, as if its pairs had been Updated here. A distributed
  // evaluation merges the ranks' metrics this way (MergeMetricOverRanks, recsdk/distributed.h),
  // so it reports the metric of all the rows, not an average of per-rank values. An empty state
  // is a metric with nothing accumulated: merging it changes nothing. MergeState: InvalidArgument
  // naming the metric for a state that is not one of its kind (nothing changes then). The
  // defaults refuse (FailedPrecondition naming the metric); a metric of your own that can be
  // merged overrides both.
  virtual std::vector<double> SaveState() const { return {}; }
  virtual Status MergeState(absl::Span<const double> state);
};

// MetricKind: the built-in streaming metrics.
enum class MetricKind {
  kAuc,        // exact AUC (Mann-Whitney, ties half); keeps every pair: O(n) memory, O(n log n)
  kBinnedAuc,  // AUC from score histograms: O(bins) memory; error bound below
  kLogLoss,    // mean binary cross-entropy, probabilities clipped to [1e-7, 1 - 1e-7]
  kAccuracy,   // fraction with (value >= 0.5) == label
  kMean,       // mean of the values (labels ignored), e.g. of a loss tensor
};

// kMaxAucBins: the most bins a BinnedAuc may have.
inline constexpr int kMaxAucBins = 1 << 24;

// MakeStreamingMetric: a new metric of `kind`. `num_bins` is BinnedAuc's, in [1, kMaxAucBins]
// (InvalidArgument otherwise; ignored for the other kinds).
StatusOr<std::unique_ptr<StreamingMetric>> MakeStreamingMetric(MetricKind kind,
                                                               int num_bins = 10000);

// BinnedAuc: AUC of probabilities in [0, 1] counted in `num_bins` equal-width score bins
// (a value outside [0, 1] is an InvalidArgument). Pairs whose scores fall in different bins are
// ordered exactly; a positive and a negative in the same bin count as a tie (1/2), where the
// exact AUC counts 1, 0 or 1/2. Hence the documented error bound, which ErrorBound() returns
// from the histograms:
//   |BinnedAuc - exact AUC| <= sum_b pos_b * neg_b / (2 * P * N)
// (pos_b, neg_b: positives and negatives in bin b; P, N: their totals). With well-spread scores
// it shrinks like 1 / num_bins. tests/session/streaming_metrics_test.cc checks it against the
// exact AUC.
class BinnedAuc final : public StreamingMetric {
 public:
  // num_bins: in [1, kMaxAucBins]; with another value every Update is an InvalidArgument.
  explicit BinnedAuc(int num_bins = 10000);
  std::string name() const override { return "binned_auc"; }
  Status Update(absl::Span<const float> values, absl::Span<const float> labels) override;
  StatusOr<double> Result() const override;
  void Reset() override;
  int64_t count() const override { return positives_ + negatives_; }
  // State: num_bins, then the positives of every bin, then the negatives.
  std::vector<double> SaveState() const override;
  Status MergeState(absl::Span<const double> state) override;
  // ErrorBound: the bound above for the pairs seen so far (0 before any).
  double ErrorBound() const;
  // num_bins: the histogram's bins per class.
  int num_bins() const { return static_cast<int>(pos_.size()); }

 private:
  std::vector<int64_t> pos_, neg_;
  int64_t positives_ = 0, negatives_ = 0;
};

}  // namespace recsdk

#endif  // RECSDK_METRICS_H_
