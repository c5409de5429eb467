// recsdk/metrics.h: evaluation metrics computed on the host.
#ifndef RECSDK_METRICS_H_
#define RECSDK_METRICS_H_

#include "absl/types/span.h"
#include "recsdk/status.h"

namespace recsdk {

// Auc: area under the ROC curve of `scores` against binary `labels` (0 or 1), with ties
// counted as half (the Mann-Whitney statistic). O(n log n). InvalidArgument when the sizes
// differ, a label is not 0/1, or only one class is present.
StatusOr<double> Auc(absl::Span<const float> scores, absl::Span<const float> labels);

// LogLoss: mean binary cross-entropy of probabilities `predictions` (clipped to [1e-7, 1-1e-7]).
StatusOr<double> LogLoss(absl::Span<const float> predictions, absl::Span<const float> labels);

}  // namespace recsdk

#endif  // RECSDK_METRICS_H_
