// metrics.cc: AUC and log loss.
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
