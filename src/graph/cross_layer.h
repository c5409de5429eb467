// cross_layer.h: the DCNv2 cross layer's computation on given weights (internal).
//
// layers::CrossLayer (recsdk/layers.h) makes the variables and calls CrossFromWeights; the
// gradient checks call it on placeholders, so the derivative with respect to every weight is
// checked by finite differences too (the checker perturbs fed inputs, not variables).
// Threading: as for Graph (one builder thread).
#ifndef RECSDK_GRAPH_CROSS_LAYER_H_
#define RECSDK_GRAPH_CROSS_LAYER_H_

#include <vector>

#include "recsdk/graph.h"
#include "recsdk/scope.h"

namespace recsdk::layers::internal {

// CrossExpertWeights: one W (either `kernel` [d, d], or `kernel_v` [d, r] and `kernel_u` [r, d]
// for W = V U in the row-vector form) and an optional bias [d] (invalid Output: none).
struct CrossExpertWeights {
  Output kernel;
  Output kernel_v;
  Output kernel_u;
  Output bias;
};

// CrossFromWeights: with one expert and no gate, x0 * (xl W + b) + xl; with a gate [d, K] and K
// experts, sum_i softmax(xl gate)_i * x0 * (xl W_i + b_i) + xl. Shapes are the caller's to check
// (the ops record a graph error on a mismatch).
Output CrossFromWeights(const Scope& scope, Output x0, Output xl,
                        const std::vector<CrossExpertWeights>& experts, Output gate);

}  // namespace recsdk::layers::internal

#endif  // RECSDK_GRAPH_CROSS_LAYER_H_
