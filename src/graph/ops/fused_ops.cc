// fused_ops.cc: ops that fusion passes create (src/session/passes/fuse_dense.cc); users may also
// build them directly. Each has a gradient like any op, checked by finite differences.
//
// FusedDense(a [m,k], w [k,n], b [n]; activation "none"|"relu") = act(a w + b): MatMul + BiasAdd
// (+ Relu) in one kernel that applies the bias and activation to each row block of the product
// while it is still in cache. With bfloat16 a and w (fuse_dense after mixed_precision) the bias is
// float32 and so is the output, as BF16MatMul's. Its gradient takes the ReLU mask from the output
// (y > 0 exactly where a w + b > 0), so the pre-activation never has to be kept.
//
// Threading: registration runs once, inside OpRegistry::Global()'s initialisation.
#include "src/graph/ops/op_util.h"

namespace recsdk::internal {
namespace {

Status FusedDenseShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(2, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  // bfloat16 operands (the mixed_precision pass's products) take a float32 bias and give float32.
  const bool bf16 = c.input_dtype(0) == DType::kBFloat16;
  if (bf16) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(2, DType::kFloat32));
  } else {
    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 2));
  }
  const std::string act = c.StringAttr("activation");
  if (!act.empty() && act != "none" && act != "relu") {
    return c.Error("activation \"{}\" is not supported; use \"none\" or \"relu\"", act);
  }
  const Shape& a = c.input_shape(0);
  const Shape& w = c.input_shape(1);
  const Shape& b = c.input_shape(2);
  if (a.dim(1) >= 0 && w.dim(0) >= 0 && a.dim(1) != w.dim(0)) {
    return c.Error("inner dimensions differ: {} and {}", c.InputDesc(0), c.InputDesc(1));
  }
  if (w.dim(1) >= 0 && b.dim(0) >= 0 && w.dim(1) != b.dim(0)) {
    return c.Error("bias {} does not match the {} columns of {}", c.InputDesc(2), w.dim(1),
                   c.InputDesc(1));
  }
  c.AddOutput(bf16 ? DType::kFloat32 : c.input_dtype(0), Shape{a.dim(0), w.dim(1)});
  return absl::OkStatus();
}

Status FusedDenseGrad(const Scope& s, const Node& n, const std::vector<Output>& g,
                      std::vector<Output>* dx) {
  const Output a = n.input(0), w = n.input(1);
  Output dz = g[0];
  if (NodeAttrs(n).String("activation") == "relu") {
    dz = Out(s.AddNode("ReluGrad", {n.output(0), g[0]}));
  }
  if (a.dtype() == DType::kBFloat16) {
    // bfloat16 operands (the output and bias are float32): the products run in float32 on the
    // operands widened exactly, and each operand's gradient is rounded to its own dtype.
    const Output af = ops::Cast(s, a, DType::kFloat32), wf = ops::Cast(s, w, DType::kFloat32);
    (*dx)[0] = ops::Cast(s, ops::MatMul(s, dz, wf, {false, true}), DType::kBFloat16);
    (*dx)[1] = ops::Cast(s, ops::MatMul(s, af, dz, {true, false}), DType::kBFloat16);
  } else {
    (*dx)[0] = ops::MatMul(s, dz, w, {false, true});
    (*dx)[1] = ops::MatMul(s, a, dz, {true, false});
  }
  (*dx)[2] = Out(s.AddNode("BiasAddGrad", {dz}));
  return absl::OkStatus();
}

}  // namespace

void RegisterFusedOps(OpRegistry& r) {
  r.Register({.type = "FusedDense",
              .inputs = {"a", "w", "bias"},
              .outputs = {"y"},
              // fused_from: set by the fuse_dense pass, the ops the node replaced
              // (src/graph/fused_from.h).
              .attrs = {Attr("activation", AttrType::kString, "none"),
                        Attr("fused_from", AttrType::kStrings, std::vector<std::string>{})},
              .shape_fn = FusedDenseShape,
              .grad_fn = FusedDenseGrad});
}

}  // namespace recsdk::internal
