// precision_ops.cc: the ops of mixed precision and loss scaling.
//
//   BF16MatMul(a: bfloat16, b: bfloat16) -> float32           attrs transpose_a, transpose_b
//   BF16BatchMatMul(x: bfloat16, y: bfloat16) -> float32      attrs adj_x, adj_y
//       MatMul / BatchMatMul with bfloat16 operands and float32 accumulation and result (the
//       "fp16 in, fp32 out" form). The mixed_precision pass creates them after autodiff has built
//       the backward pass in float32 (it rewrites forward and backward products alike), so they
//       have no gradient function: differentiating through one is an error naming it. They have
//       no finite-difference check for the same reason: bfloat16 rounding makes them piecewise
//       constant in their inputs; tests compare them with the float32 product instead.
//   AllFinite(x1, ..., xn: float32) -> bool scalar
//       true when no element of any input is Inf or NaN (the loss-scale overflow check).
//   ControlGate(condition: bool scalar) -> nothing
//       When the condition is false, the nodes that take a control input from this node do not run
//       in this step, nor anything that consumes their outputs (the executor skips them; see
//       session.cc). Nodes that only take a control input from a skipped node still run. Dynamic
//       loss scaling gates the optimizer updates with it.
//
// Threading: registration runs once, inside OpRegistry::Global()'s initialisation.
#include "src/common/check.h"
#include "src/graph/ops/op_util.h"

namespace recsdk::internal {
namespace {

using T = AttrValue::Type;

Status Bf16Operands(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kBFloat16));
  return c.ExpectDType(1, DType::kBFloat16);
}

Status Bf16MatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(Bf16Operands(c));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 2));
  const bool ta = c.BoolAttr("transpose_a"), tb = c.BoolAttr("transpose_b");
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  const int64_t m = ta ? a.dim(1) : a.dim(0), ka = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c.Error("inner dimensions differ: {} has k={} but {} has k={}", c.InputDesc(0), ka,
                   c.InputDesc(1), kb);
  }
  c.AddOutput(DType::kFloat32, Shape{m, n});
  return absl::OkStatus();
}

Status Bf16BatchMatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(Bf16Operands(c));
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
  c.AddOutput(DType::kFloat32, out);
  return absl::OkStatus();
}

void Declare(OpRegistry& r, const char* type, std::vector<AttrDef> attrs) {
  const Status s = r.DeclareAttrs(type, std::move(attrs));
  RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
}

}  // namespace

void RegisterPrecisionOps(OpRegistry& r) {
  r.Register(MakeOp("BF16MatMul", 2, 2, Bf16MatMulShape));
  r.Register(MakeOp("BF16BatchMatMul", 2, 2, Bf16BatchMatMulShape));
  r.Register(NoGradOp("AllFinite", 1, -1, [](InferenceContext& c) {
    for (int i = 0; i < c.num_inputs(); ++i) RECSDK_RETURN_IF_ERROR(c.ExpectFloat(i));
    c.AddOutput(DType::kBool, Shape{});
    return absl::OkStatus();
  }));
  OpDef gate = NoGradOp("ControlGate", 1, 1, [](InferenceContext& c) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kBool));
    return c.ExpectRank(0, 0);
  });
  gate.stateful = true;  // it decides what runs: never pruned or merged
  r.Register(std::move(gate));

  Declare(r, "BF16MatMul",
          {Attr("transpose_a", T::kBool, false), Attr("transpose_b", T::kBool, false)});
  Declare(r, "BF16BatchMatMul", {Attr("adj_x", T::kBool, false), Attr("adj_y", T::kBool, false)});
  Declare(r, "AllFinite", {});
  Declare(r, "ControlGate", {});
}

}  // namespace recsdk::internal
