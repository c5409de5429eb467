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
#include "src/graph/ops/op_util.h"

namespace recsdk::internal {
namespace {

Status Bf16Operands(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kBFloat16));
  return c.ExpectDType(1, DType::kBFloat16);
}

Status Bf16MatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(Bf16Operands(c));
  RECSDK_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c));
  c.AddOutput(DType::kFloat32, std::move(out));
  return absl::OkStatus();
}

Status Bf16BatchMatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(Bf16Operands(c));
  RECSDK_ASSIGN_OR_RETURN(Shape out, BatchMatMulOutputShape(c));
  c.AddOutput(DType::kFloat32, std::move(out));
  return absl::OkStatus();
}

}  // namespace

void RegisterPrecisionOps(OpRegistry& r) {
  r.Register({.type = "BF16MatMul",
              .inputs = {"a", "b"},
              .outputs = {"product"},
              .attrs = {Attr("transpose_a", AttrType::kBool, false),
                        Attr("transpose_b", AttrType::kBool, false)},
              .shape_fn = Bf16MatMulShape});
  r.Register(
      {.type = "BF16BatchMatMul",
       .inputs = {"x", "y"},
       .outputs = {"product"},
       .attrs = {Attr("adj_x", AttrType::kBool, false), Attr("adj_y", AttrType::kBool, false)},
       .shape_fn = Bf16BatchMatMulShape});
  r.Register({.type = "AllFinite",
              .inputs = {"x+"},
              .outputs = {"all_finite"},
              .shape_fn =
                  [](InferenceContext& c) {
                    for (int i = 0; i < c.num_inputs(); ++i)
                      RECSDK_RETURN_IF_ERROR(c.ExpectFloat(i));
                    c.AddOutput(DType::kBool, Shape{});
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  r.Register({.type = "ControlGate",
              .inputs = {"condition"},
              .outputs = {},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kBool));
                    return c.ExpectRank(0, 0);
                  },
              .no_gradient = true,
              .stateful = true});  // it decides what runs: never pruned or merged
}

}  // namespace recsdk::internal
