// metrics.cc: AUC and log loss, and the streaming metrics (exact and binned AUC, log loss,
// accuracy, mean) the Estimator evaluates with. Threading: see metrics.h.
#include "recsdk/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk {

StatusOr<double> Auc(absl::Span<const float> scores, absl::Span<const float> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "Auc: {} scores but {} labels; pass one score per label", scores.size(), labels.size()));
  }
  // A NaN score breaks the sort's ordering (undefined behaviour) and never equals itself, so the
  // tie loop below made no progress and Auc hung: refuse it (issue 30).
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(fmt::format(
          "Auc: score {} at position {} is not a number; check the model's output for NaN "
          "(NanTensorHook stops training at the first NaN loss)",
          scores[i], i));
    }
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double pos = 0, neg = 0, rank_sum = 0;
  size_t i = 0;
  while (i < order.size()) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = (static_cast<double>(i) + static_cast<double>(j) + 1) / 2;  // 1-based
    for (size_t k = i; k < j; ++k) {
      const float l = labels[order[k]];
      if (l != 0.0f && l != 1.0f) {
        return absl::InvalidArgumentError(
            fmt::format("Auc: label {} at {} is not 0 or 1", l, order[k]));
      }
      if (l == 1.0f) {
        pos += 1;
        rank_sum += avg_rank;
      } else {
        neg += 1;
      }
    }
    i = j;
  }
  if (pos == 0 || neg == 0) {
    return absl::InvalidArgumentError("Auc: needs both positive and negative labels");
  }
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

StatusOr<double> LogLoss(absl::Span<const float> predictions, absl::Span<const float> labels) {
  if (predictions.size() != labels.size() || predictions.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("LogLoss: {} predictions and {} labels; need equal, non-zero counts",
                    predictions.size(), labels.size()));
  }
  double sum = 0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const double p = std::clamp(static_cast<double>(predictions[i]), 1e-7, 1 - 1e-7);
    sum -= labels[i] * std::log(p) + (1 - labels[i]) * std::log(1 - p);
  }
  return sum / static_cast<double>(predictions.size());
}

}  // namespace recsdk

// ---------------------------------------------------------------------------------------------
// Streaming metrics.

namespace recsdk {
namespace {

Status CheckPairs(const std::string& metric, absl::Span<const float> values,
                  absl::Span<const float> labels, bool need_labels) {
  if (need_labels && values.size() != labels.size()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {} values but {} labels in this batch; pass one prediction per label",
                    metric, values.size(), labels.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: value {} at position {} of the batch is not finite; check the model's output "
          "(NanTensorHook stops training at the first NaN loss)",
          metric, values[i], i));
    }
    if (need_labels && labels[i] != 0.0f && labels[i] != 1.0f) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: label {} at position {} of the batch is not 0 or 1", metric, labels[i], i));
    }
  }
  return absl::OkStatus();
}

// BadState: MergeState's error for a state that is not one of the metric's kind.
Status BadState(const std::string& metric, const std::string& what) {
  return absl::InvalidArgumentError(fmt::format(
      "{}: MergeState got {}, not a state of a {} metric; merge states saved by metrics of the "
      "same kind (and the same num_bins)",
      metric, what, metric));
}

class ExactAuc final : public StreamingMetric {
 public:
  std::string name() const override { return "auc"; }
  Status Update(absl::Span<const float> values, absl::Span<const float> labels) override {
    RECSDK_RETURN_IF_ERROR(CheckPairs(name(), values, labels, true));
    scores_.insert(scores_.end(), values.begin(), values.end());
    labels_.insert(labels_.end(), labels.begin(), labels.end());
    return absl::OkStatus();
  }
  StatusOr<double> Result() const override {
    auto auc = Auc(scores_, labels_);
    if (!auc.ok()) {
      return absl::FailedPreconditionError(fmt::format("auc is undefined over {} pairs: {}",
                                                       scores_.size(), auc.status().message()));
    }
    return auc;
  }
  void Reset() override {
    scores_.clear();
    labels_.clear();
  }
  int64_t count() const override { return static_cast<int64_t>(scores_.size()); }
  // State: score, label, score, label, ... (float32 values, exact in doubles).
  std::vector<double> SaveState() const override {
    std::vector<double> state;
    state.reserve(2 * scores_.size());
    for (size_t i = 0; i < scores_.size(); ++i) {
      state.push_back(scores_[i]);
      state.push_back(labels_[i]);
    }
    return state;
  }
  Status MergeState(absl::Span<const double> state) override {
    if (state.size() % 2 != 0) return BadState(name(), "an odd count of numbers");
    for (size_t i = 0; i < state.size(); i += 2) {
      if (!std::isfinite(state[i]) || (state[i + 1] != 0 && state[i + 1] != 1)) {
        return BadState(name(), fmt::format("pair {} ({}, {})", i / 2, state[i], state[i + 1]));
      }
    }
    for (size_t i = 0; i < state.size(); i += 2) {
      scores_.push_back(static_cast<float>(state[i]));
      labels_.push_back(static_cast<float>(state[i + 1]));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<float> scores_, labels_;
};

class MeanMetric : public StreamingMetric {
 public:
  explicit MeanMetric(MetricKind kind) : kind_(kind) {}
  std::string name() const override {
    return kind_ == MetricKind::kLogLoss    ? "log_loss"
           : kind_ == MetricKind::kAccuracy ? "accuracy"
                                            : "mean";
  }
  Status Update(absl::Span<const float> values, absl::Span<const float> labels) override {
    RECSDK_RETURN_IF_ERROR(CheckPairs(name(), values, labels, kind_ != MetricKind::kMean));
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      if (kind_ == MetricKind::kLogLoss) {
        const double p = std::clamp(v, 1e-7, 1 - 1e-7);
        sum_ -= labels[i] * std::log(p) + (1 - labels[i]) * std::log(1 - p);
      } else if (kind_ == MetricKind::kAccuracy) {
        sum_ += ((v >= 0.5) == (labels[i] == 1.0f)) ? 1 : 0;
      } else {
        sum_ += v;
      }
    }
    count_ += static_cast<int64_t>(values.size());
    return absl::OkStatus();
  }
  StatusOr<double> Result() const override {
    if (count_ == 0) {
      return absl::FailedPreconditionError(fmt::format("{} is undefined: no values yet", name()));
    }
    return sum_ / static_cast<double>(count_);
  }
  void Reset() override {
    sum_ = 0;
    count_ = 0;
  }
  int64_t count() const override { return count_; }
  // State: sum, count.
  std::vector<double> SaveState() const override { return {sum_, static_cast<double>(count_)}; }
  Status MergeState(absl::Span<const double> state) override {
    if (state.empty()) return absl::OkStatus();
    if (state.size() != 2 || !std::isfinite(state[0]) || !(state[1] >= 0) ||
        state[1] != std::floor(state[1]) || state[1] > 9007199254740992.0) {
      return BadState(name(),
                      fmt::format("{} numbers where a sum and a count belong", state.size()));
    }
    sum_ += state[0];
    count_ += static_cast<int64_t>(state[1]);
    return absl::OkStatus();
  }

 private:
  MetricKind kind_;
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace

Status StreamingMetric::MergeState(absl::Span<const double> state) {
  return absl::FailedPreconditionError(fmt::format(
      "metric \"{}\" cannot merge a state ({} numbers): it does not override SaveState and "
      "MergeState, so a distributed evaluation cannot combine the ranks' values of it",
      name(), state.size()));
}

BinnedAuc::BinnedAuc(int num_bins)
    : pos_(num_bins >= 1 && num_bins <= kMaxAucBins ? num_bins : 0), neg_(pos_.size()) {}

Status BinnedAuc::Update(absl::Span<const float> values, absl::Span<const float> labels) {
  if (pos_.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "binned_auc: num_bins must be in [1, {}]; 10000 bins give an error bound near 1e-4 on "
        "well-spread scores",
        kMaxAucBins));
  }
  RECSDK_RETURN_IF_ERROR(CheckPairs(name(), values, labels, true));
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0.0f || values[i] > 1.0f) {
      return absl::InvalidArgumentError(fmt::format(
          "binned_auc: value {} at position {} is outside [0, 1]; pass probabilities (the "
          "sigmoid of the logits) or use the exact auc",
          values[i], i));
    }
  }
  const int bins = num_bins();
  for (size_t i = 0; i < values.size(); ++i) {
    const int b = std::min(bins - 1, static_cast<int>(values[i] * static_cast<float>(bins)));
    if (labels[i] == 1.0f) {
      ++pos_[b];
      ++positives_;
    } else {
      ++neg_[b];
      ++negatives_;
    }
  }
  return absl::OkStatus();
}

StatusOr<double> BinnedAuc::Result() const {
  if (positives_ == 0 || negatives_ == 0) {
    return absl::FailedPreconditionError(
        fmt::format("binned_auc is undefined with {} positives and {} negatives; it needs both",
                    positives_, negatives_));
  }
  double below = 0, sum = 0;  // negatives in lower bins
  for (size_t b = 0; b < pos_.size(); ++b) {
    sum += static_cast<double>(pos_[b]) * (below + 0.5 * static_cast<double>(neg_[b]));
    below += static_cast<double>(neg_[b]);
  }
  return sum / (static_cast<double>(positives_) * static_cast<double>(negatives_));
}

double BinnedAuc::ErrorBound() const {
  if (positives_ == 0 || negatives_ == 0) return 0;
  double same_bin = 0;
  for (size_t b = 0; b < pos_.size(); ++b) {
    same_bin += static_cast<double>(pos_[b]) * static_cast<double>(neg_[b]);
  }
  return same_bin / (2.0 * static_cast<double>(positives_) * static_cast<double>(negatives_));
}

std::vector<double> BinnedAuc::SaveState() const {
  std::vector<double> state = {static_cast<double>(pos_.size())};
  state.insert(state.end(), pos_.begin(), pos_.end());
  state.insert(state.end(), neg_.begin(), neg_.end());
  return state;
}

Status BinnedAuc::MergeState(absl::Span<const double> state) {
  if (state.empty()) return absl::OkStatus();
  const size_t bins = pos_.size();
  if (state.size() != 1 + 2 * bins || state[0] != static_cast<double>(bins)) {
    return BadState(name(), fmt::format("{} numbers (num_bins {}) for a metric of {} bins",
                                        state.size(), state[0], bins));
  }
  for (double c : state.subspan(1)) {
    if (!(c >= 0) || c != std::floor(c) || c > 9007199254740992.0) {
      return BadState(name(), fmt::format("the count {}", c));
    }
  }
  for (size_t b = 0; b < bins; ++b) {
    const auto p = static_cast<int64_t>(state[1 + b]);
    const auto n = static_cast<int64_t>(state[1 + bins + b]);
    pos_[b] += p;
    neg_[b] += n;
    positives_ += p;
    negatives_ += n;
  }
  return absl::OkStatus();
}

void BinnedAuc::Reset() {
  std::fill(pos_.begin(), pos_.end(), 0);
  std::fill(neg_.begin(), neg_.end(), 0);
  positives_ = negatives_ = 0;
}

StatusOr<std::unique_ptr<StreamingMetric>> MakeStreamingMetric(MetricKind kind, int num_bins) {
  if (kind == MetricKind::kBinnedAuc && (num_bins < 1 || num_bins > kMaxAucBins)) {
    return absl::InvalidArgumentError(
        fmt::format("binned_auc: num_bins {} is outside [1, {}]; 10000 is a good default", num_bins,
                    kMaxAucBins));
  }
  switch (kind) {
    case MetricKind::kAuc:
      return std::make_unique<ExactAuc>();
    case MetricKind::kBinnedAuc:
      return std::make_unique<BinnedAuc>(num_bins);
    case MetricKind::kLogLoss:
    case MetricKind::kAccuracy:
    case MetricKind::kMean:
      return std::make_unique<MeanMetric>(kind);
  }
  return absl::InvalidArgumentError(
      fmt::format("MakeStreamingMetric: unknown MetricKind {}", static_cast<int>(kind)));
}

}  // namespace recsdk
