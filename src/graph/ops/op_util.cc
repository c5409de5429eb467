// op_util.cc
#include "src/graph/ops/op_util.h"

#include <algorithm>

namespace recsdk::internal {

Status SameAsInput0(InferenceContext& c) {
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

Status BroadcastBinary(InferenceContext& c, DType out_dtype) {
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  auto shape = BroadcastShapes(c.input_shape(0), c.input_shape(1));
  if (!shape.ok()) {
    return c.Error("{} and {} are incompatible: {}", c.InputDesc(0), c.InputDesc(1),
                   shape.status().message());
  }
  c.AddOutput(out_dtype == DType::kInvalid ? c.input_dtype(0) : out_dtype, *shape);
  return absl::OkStatus();
}

OpDef MakeOp(std::string type, int min_inputs, int max_inputs, ShapeFn shape_fn, GradFn grad_fn) {
  OpDef d;
  d.type = std::move(type);
  d.min_inputs = min_inputs;
  d.max_inputs = max_inputs;
  d.shape_fn = std::move(shape_fn);
  d.grad_fn = std::move(grad_fn);
  return d;
}

OpDef NoGradOp(std::string type, int min_inputs, int max_inputs, ShapeFn shape_fn) {
  OpDef d = MakeOp(std::move(type), min_inputs, max_inputs, std::move(shape_fn));
  d.no_gradient = true;
  return d;
}

Output ReduceGradTo(const Scope& scope, Output grad, Output x) {
  if (!grad.valid() || !x.valid()) return Output();
  if (grad.shape() == x.shape() && x.shape().IsFullyDefined()) return grad;
  if (grad.shape().rank() == x.shape().rank()) {
    bool same = true;
    for (int i = 0; i < x.shape().rank(); ++i) {
      // Unknown dims that match positionally are the same runtime size only when both come
      // from the same source; be safe unless every known dim is equal and not 1.
      const int64_t a = grad.shape().dim(i), b = x.shape().dim(i);
      if (a != b || b == 1) same = false;
    }
    if (same && x.shape().IsFullyDefined()) return grad;
  }
  return Out(scope.AddNode("SumToShapeOf", {grad, x}, {}, "SumToShapeOf"));
}

StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int rank) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) {
      return absl::InvalidArgumentError(
          fmt::format("axis {} is out of range for rank {}", a, rank));
    }
    out.push_back(a < 0 ? a + rank : a);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace recsdk::internal
