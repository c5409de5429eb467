// interaction_layers.h: the computations of Cin, FmInteraction and MixtureOfExperts on given
// weights (internal).
//
// layers::Cin / FmInteraction / MixtureOfExperts (recsdk/layers.h) check their arguments, make
// the variables and call these; the gradient checks call them on placeholders, so the
// derivatives with respect to every weight are checked by finite differences too (the checker
// perturbs fed inputs, not variables). Shapes are the caller's to check (the ops record a graph
// error on a mismatch). Threading: as for Graph (one builder thread).
#ifndef RECSDK_GRAPH_INTERACTION_LAYERS_H_
#define RECSDK_GRAPH_INTERACTION_LAYERS_H_

#include <vector>

#include "recsdk/graph.h"
#include "recsdk/layers.h"
#include "recsdk/scope.h"

namespace recsdk::layers::internal {

// FmFromFields: 0.5 * sum_d ((sum_f v_fd)^2 - sum_f v_fd^2) of fields [batch, F, D], [batch, 1].
Output FmFromFields(const Scope& scope, Output fields);

// BatchOuterProduct: (a [N, H], b [N, F]) -> [N, H * F], row n = a_n b_n^T flattened row-major:
// the op "BatchOuterProduct" (its gradient, "BatchOuterProductGrad", reads dz once for both
// inputs). The CIN's interaction, fused because as a broadcast Mul of [B, D, H, 1] by
// [B, D, 1, F] it and its broadcast gradient were most of a CIN step
// (benchmarks/interaction_bench.cc).
Output BatchOuterProduct(const Scope& scope, Output a, Output b);

// CinLayerWeights: one CIN layer's kernel [H_prev * F, H] and optional bias [H] (invalid: none).
struct CinLayerWeights {
  Output kernel;
  Output bias;
};

// CinFromWeights: the CIN over fields [batch, F, D] (F, D known) with the given layers; returns
// the concatenated sum-pooled maps [batch, sum of the output widths] (see layers::Cin).
Output CinFromWeights(const Scope& scope, Output fields, const std::vector<CinLayerWeights>& layers,
                      bool split_half, Activation activation);

// MixExperts: sum_i softmax(gate_logits)_i * experts[i], for experts of [batch, E] each and
// gate_logits [batch, K] (K = experts.size()); [batch, E].
Output MixExperts(const Scope& scope, const std::vector<Output>& experts, Output gate_logits);

}  // namespace recsdk::layers::internal

#endif  // RECSDK_GRAPH_INTERACTION_LAYERS_H_
