// norm_layers.h: LayerNorm's and BatchNorm's computation on given parameters (internal).
//
// layers::LayerNorm / layers::BatchNorm (recsdk/layers.h) make the variables and call these; the
// gradient checks call them on placeholders so the derivatives with respect to gamma and beta
// are checked by finite differences as well as those with respect to x.
// Threading: as for Graph (one builder thread).
#ifndef RECSDK_GRAPH_NORM_LAYERS_H_
#define RECSDK_GRAPH_NORM_LAYERS_H_

#include <vector>

#include "recsdk/graph.h"
#include "recsdk/scope.h"

namespace recsdk::layers::internal {

// Normalize: (x - mean) * rsqrt(variance + epsilon) * gamma + beta; gamma and beta may be
// invalid (not applied). mean and variance broadcast against x.
Output Normalize(const Scope& scope, Output x, Output mean, Output variance, double epsilon,
                 Output gamma, Output beta);

// Moments: the mean and the biased variance of x over `axes`, kept as size-1 dimensions.
void Moments(const Scope& scope, Output x, const std::vector<int64_t>& axes, Output* mean,
             Output* variance);

}  // namespace recsdk::layers::internal

#endif  // RECSDK_GRAPH_NORM_LAYERS_H_
