// op_util.h: shared pieces of the core op definitions (shape functions, gradient helpers).
// Internal to src/graph. Not thread-safe beyond what Graph allows.
#ifndef RECSDK_GRAPH_OPS_OP_UTIL_H_
#define RECSDK_GRAPH_OPS_OP_UTIL_H_

#include <vector>

#include "recsdk/ops.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {

// Shape function: one output with input 0's dtype and shape.
Status SameAsInput0(InferenceContext& c);
// Shape function: elementwise binary with broadcasting and equal dtypes; `out_dtype` kInvalid
// keeps the input dtype (comparisons pass kBool).
Status BroadcastBinary(InferenceContext& c, DType out_dtype = DType::kInvalid);

// MatMulOutputShape / BatchMatMulOutputShape: the product's shape from inputs 0 and 1 and the
// transpose_a/b (adj_x/y) attributes; an error names mismatched inner or batch dimensions. The
// caller checks the dtypes and adds the output.
StatusOr<Shape> MatMulOutputShape(InferenceContext& c);
StatusOr<Shape> BatchMatMulOutputShape(InferenceContext& c);

// ReduceGradTo: grad summed down to x's shape (identity when shapes already match statically).
Output ReduceGradTo(const Scope& scope, Output grad, Output x);

// Normalised reduction axes (sorted, unique, in [0, rank)); all axes when `axes` is empty.
StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int rank);

// A one-output node, or an invalid Output when building failed.
inline Output Out(Node* n, int i = 0) { return n == nullptr ? Output() : Output(n, i); }

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_OPS_OP_UTIL_H_
