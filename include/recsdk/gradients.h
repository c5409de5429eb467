// recsdk/gradients.h: automatic differentiation by graph rewriting.
#ifndef RECSDK_GRADIENTS_H_
#define RECSDK_GRADIENTS_H_

#include <vector>

#include "recsdk/graph.h"
#include "recsdk/scope.h"

namespace recsdk {

// Gradients adds to the graph the nodes computing d(sum of ys)/d(xs) and returns one output per
// x: the gradient, or an invalid Output when x does not influence ys. `grad_ys` (optional, one
// per y) seeds the backward pass instead of ones. Backward nodes are named under
// "gradients/...". Errors (an op on the path without a registered gradient, a non-float y)
// name the op.
//
// One backward pass per loss: the graph remembers the gradient nodes built for the same ys (and
// grad_ys), so a second call, e.g. SparseMinimize(loss) after an optimizer's Minimize(loss),
// reuses every gradient the first one built (a call with the same xs returns the same Outputs)
// and adds only what is new. The memory is dropped when an ancestor of ys was rewired since.
StatusOr<std::vector<Output>> Gradients(const Scope& scope, const std::vector<Output>& ys,
                                        const std::vector<Output>& xs,
                                        const std::vector<Output>& grad_ys = {});

}  // namespace recsdk

#endif  // RECSDK_GRADIENTS_H_
