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

StatusOr<Shape> MatMulOutputShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 2));
  const bool ta = c.BoolAttr("transpose_a"), tb = c.BoolAttr("transpose_b");
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  const int64_t m = ta ? a.dim(1) : a.dim(0), ka = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c.Error(
        "inner dimensions differ: {} (transpose_a={}) has k={} but {} (transpose_b={}) has k={}",
        c.InputDesc(0), ta, ka, c.InputDesc(1), tb, kb);
  }
  return Shape{m, n};
}

StatusOr<Shape> BatchMatMulOutputShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(0, 2));
  const Shape& x = c.input_shape(0);
  const Shape& y = c.input_shape(1);
  if (x.rank() != y.rank())
    return c.Error("{} and {} differ in rank", c.InputDesc(0), c.InputDesc(1));
  const int r = x.rank();
  const bool ax = c.BoolAttr("adj_x"), ay = c.BoolAttr("adj_y");
  Shape out;
  for (int i = 0; i < r - 2; ++i) {
    if (x.dim(i) >= 0 && y.dim(i) >= 0 && x.dim(i) != y.dim(i)) {
      return c.Error("batch dimension {} differs: {} vs {}", i, c.InputDesc(0), c.InputDesc(1));
    }
    out.AddDim(x.dim(i) >= 0 ? x.dim(i) : y.dim(i));
  }
  const int64_t m = ax ? x.dim(r - 1) : x.dim(r - 2), kx = ax ? x.dim(r - 2) : x.dim(r - 1);
  const int64_t ky = ay ? y.dim(r - 1) : y.dim(r - 2), n = ay ? y.dim(r - 2) : y.dim(r - 1);
  if (kx >= 0 && ky >= 0 && kx != ky) {
    return c.Error("inner dimensions differ: {} has k={} but {} has k={}", c.InputDesc(0), kx,
                   c.InputDesc(1), ky);
  }
  out.AddDim(m);
  out.AddDim(n);
  return out;
}

}  // namespace recsdk::internal
