// activation.h: layers::Activation applied to an Output (internal), shared by Dense and the
// layers that take an activation option (Cin). Threading: as for Graph (one builder thread).
#ifndef RECSDK_GRAPH_ACTIVATION_H_
#define RECSDK_GRAPH_ACTIVATION_H_

#include "recsdk/graph.h"
#include "recsdk/layers.h"
#include "recsdk/scope.h"

namespace recsdk::layers::internal {

// Activate: x itself for kNone, else the activation's op on x.
Output Activate(const Scope& scope, Output x, Activation activation);

}  // namespace recsdk::layers::internal

#endif  // RECSDK_GRAPH_ACTIVATION_H_
