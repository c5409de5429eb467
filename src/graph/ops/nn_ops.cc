// nn_ops.cc: softmax, dropout and the losses.
#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {
namespace {

using G = const std::vector<Output>&;
using DX = std::vector<Output>*;

Status SoftmaxShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(0, 1));
  RECSDK_RETURN_IF_ERROR(c.NormalizeAxis(c.IntAttr("axis"), c.input_shape(0).rank()).status());
  return SameAsInput0(c);
}

// DotInteraction: x [B, F, D] -> [B, F(F-1)/2], the dots of every pair i > j in the order
// (1,0), (2,0), (2,1), (3,0), ... (DLRM's order).
Status DotInteractionShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 3));
  const Shape& x = c.input_shape(0);
  if (x.dim(1) < 0) {
    return c.Error(
        "{}: the number of features (dimension 1) must be known; give the input a "
        "static feature dimension (e.g. Reshape to [-1, F, D])",
        c.InputDesc(0));
  }
  const int64_t f = x.dim(1);
  c.AddOutput(c.input_dtype(0), Shape{x.dim(0), f * (f - 1) / 2});
  return absl::OkStatus();
}

// DotInteractionGrad: (x [B, F, D], dy [B, F(F-1)/2]) -> dx [B, F, D].
Status DotInteractionGradShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 3));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 2));
  const int64_t f = c.input_shape(0).dim(1);
  if (f >= 0 && c.input_shape(1).dim(1) >= 0 && c.input_shape(1).dim(1) != f * (f - 1) / 2) {
    return c.Error("{} must have F(F-1)/2 = {} columns for the F = {} features of {}",
                   c.InputDesc(1), f * (f - 1) / 2, f, c.InputDesc(0));
  }
  return SameAsInput0(c);
}

// BatchOuterProduct: (a [N, H], b [N, F]) -> [N, H * F], row n the outer product a_n b_n^T
// flattened row-major (the CIN's interaction, already the left operand of its GEMM).
Status BatchOuterProductShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 2));
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  if (a.dim(0) >= 0 && b.dim(0) >= 0 && a.dim(0) != b.dim(0)) {
    return c.Error("{} and {} must have the same number of rows", c.InputDesc(0), c.InputDesc(1));
  }
  const int64_t rows = a.dim(0) >= 0 ? a.dim(0) : b.dim(0);
  const int64_t cols = a.dim(1) >= 0 && b.dim(1) >= 0 ? a.dim(1) * b.dim(1) : Shape::kUnknownDim;
  c.AddOutput(c.input_dtype(0), Shape{rows, cols});
  return absl::OkStatus();
}

// BatchOuterProductGrad: (a, b, dz [N, H * F]) -> (da [N, H], db [N, F]).
Status BatchOuterProductGradShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(2, 2));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  c.AddOutput(c.input_dtype(1), c.input_shape(1));
  return absl::OkStatus();
}

// DcnCross: (x0, xl, y, bias) -> x0 * (y + bias) + xl, the DCNv2 cross layer after its product
// y = xl W: x0, xl, y [batch, d], bias [d].
Status DcnCrossShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  for (int i = 1; i < 4; ++i) RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, i));
  for (int i = 0; i < 3; ++i) RECSDK_RETURN_IF_ERROR(c.ExpectRank(i, 2));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(3, 1));
  for (int i = 1; i < 3; ++i) {
    if (!c.input_shape(i).IsCompatibleWith(c.input_shape(0))) {
      return c.Error("{} must have the shape of {}", c.InputDesc(i), c.InputDesc(0));
    }
  }
  const int64_t d = c.input_shape(0).dim(1), b = c.input_shape(3).dim(0);
  if (d >= 0 && b >= 0 && d != b) {
    return c.Error("{} must have the {} columns of {}", c.InputDesc(3), d, c.InputDesc(0));
  }
  return SameAsInput0(c);
}

// DcnCrossGrad: (x0, y, bias, g) -> (dx0 [batch, d], dy [batch, d], dbias [d]).
Status DcnCrossGradShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  for (int i = 1; i < 4; ++i) RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, i));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  c.AddOutput(c.input_dtype(0), c.input_shape(2));
  return absl::OkStatus();
}

// Softmax and LogSoftmax (and their gradients) normalise along `axis`, the last by default.
std::vector<AttrDef> SoftmaxAttrs() { return {Attr("axis", AttrType::kInt, -1)}; }

GradFn SoftmaxGradFn(std::string grad_type) {
  return [grad_type](const Scope& s, const Node& n, G g, DX dx) {
    (*dx)[0] = Out(s.AddNode(grad_type, {n.output(0), g[0]}, {{"axis", NodeAttrs(n).Int("axis")}}));
    return absl::OkStatus();
  };
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  r.Register({.type = "DcnCross",
              .inputs = {"x0", "xl", "y", "bias"},
              .outputs = {"z"},
              .shape_fn = DcnCrossShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                Node* grad = s.AddNode("DcnCrossGrad", {n.input(0), n.input(2), n.input(3), g[0]});
                (*dx)[0] = Out(grad, 0);
                (*dx)[1] = g[0];
                (*dx)[2] = Out(grad, 1);
                (*dx)[3] = Out(grad, 2);
                return absl::OkStatus();
              }});
  r.Register({.type = "DcnCrossGrad",
              .inputs = {"x0", "y", "bias", "dz"},
              .outputs = {"dx0", "dy", "dbias"},
              .shape_fn = DcnCrossGradShape,
              .no_gradient = true});
  r.Register({.type = "BatchOuterProduct",
              .inputs = {"a", "b"},
              .outputs = {"z"},
              .shape_fn = BatchOuterProductShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                Node* grad = s.AddNode("BatchOuterProductGrad", {n.input(0), n.input(1), g[0]});
                (*dx)[0] = Out(grad, 0);
                (*dx)[1] = Out(grad, 1);
                return absl::OkStatus();
              }});
  r.Register({.type = "BatchOuterProductGrad",
              .inputs = {"a", "b", "dz"},
              .outputs = {"da", "db"},
              .shape_fn = BatchOuterProductGradShape,
              .no_gradient = true});
  r.Register({.type = "DotInteraction",
              .inputs = {"features"},
              .outputs = {"dots"},
              .shape_fn = DotInteractionShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("DotInteractionGrad", {n.input(0), g[0]}));
                return absl::OkStatus();
              }});
  r.Register({.type = "DotInteractionGrad",
              .inputs = {"features", "ddots"},
              .outputs = {"dfeatures"},
              .shape_fn = DotInteractionGradShape,
              .no_gradient = true});
  r.Register({.type = "Softmax",
              .inputs = {"logits"},
              .outputs = {"y"},
              .attrs = SoftmaxAttrs(),
              .shape_fn = SoftmaxShape,
              .grad_fn = SoftmaxGradFn("SoftmaxGrad")});
  r.Register({.type = "LogSoftmax",
              .inputs = {"logits"},
              .outputs = {"y"},
              .attrs = SoftmaxAttrs(),
              .shape_fn = SoftmaxShape,
              .grad_fn = SoftmaxGradFn("LogSoftmaxGrad")});
  for (const char* type : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    r.Register({.type = type,
                .inputs = {"y", "dy"},
                .outputs = {"dlogits"},
                .attrs = SoftmaxAttrs(),
                .shape_fn = SameAsInput0,
                .no_gradient = true});
  }

  // Dropout outputs (y, mask) where mask holds 0 or 1/(1-rate); the gradient is dy * mask.
  r.Register({.type = "Dropout",
              .inputs = {"x"},
              .outputs = {"y", "mask"},
              .attrs = {RequiredAttr("rate", AttrType::kFloat), Attr("seed", AttrType::kInt, 0)},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
                    const double rate = c.FloatAttr("rate");
                    if (!(rate >= 0 && rate < 1)) return c.Error("rate {} must be in [0, 1)", rate);
                    c.AddOutput(c.input_dtype(0), c.input_shape(0));
                    c.AddOutput(c.input_dtype(0), c.input_shape(0));
                    return absl::OkStatus();
                  },
              .grad_fn =
                  [](const Scope& s, const Node& n, G g, DX dx) {
                    (*dx)[0] = ops::Mul(s, g[0], n.output(1));
                    return absl::OkStatus();
                  },
              .stateful = true});

  r.Register({.type = "SigmoidCrossEntropyWithLogits",
              .inputs = {"labels", "logits"},
              .outputs = {"loss"},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectFloat(1));
                    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
                    if (!c.input_shape(0).IsCompatibleWith(c.input_shape(1))) {
                      return c.Error("labels {} and logits {} must have the same shape",
                                     c.InputDesc(0), c.InputDesc(1));
                    }
                    c.AddOutput(c.input_dtype(1), c.input_shape(1));
                    return absl::OkStatus();
                  },
              .grad_fn =
                  [](const Scope& s, const Node& n, G g, DX dx) {
                    // loss = max(x,0) - x z + log(1 + exp(-|x|)); d/dx = sigmoid(x) - z; d/dz = -x.
                    const Output z = n.input(0), x = n.input(1);
                    (*dx)[1] = ops::Mul(s, g[0], ops::Sub(s, ops::Sigmoid(s, x), z));
                    (*dx)[0] = ops::Mul(s, g[0], ops::Neg(s, x));
                    return absl::OkStatus();
                  }});
  r.Register({.type = "SoftmaxCrossEntropyWithLogits",
              .inputs = {"labels", "logits"},
              // Output 1: softmax(logits) - labels, the gradient per unit of loss.
              .outputs = {"loss", "backprop"},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectFloat(1));
                    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
                    RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(1, 1));
                    if (!c.input_shape(0).IsCompatibleWith(c.input_shape(1))) {
                      return c.Error("labels {} and logits {} must have the same shape",
                                     c.InputDesc(0), c.InputDesc(1));
                    }
                    Shape loss = c.input_shape(1);
                    loss.RemoveDim(loss.rank() - 1);
                    c.AddOutput(c.input_dtype(1), loss);
                    c.AddOutput(c.input_dtype(1), c.input_shape(1));
                    return absl::OkStatus();
                  },
              .grad_fn =
                  [](const Scope& s, const Node& n, G g, DX dx) {
                    if (!g[0].valid()) return absl::OkStatus();
                    const Output dl = ops::ExpandDims(s, g[0], -1);
                    (*dx)[1] = ops::Mul(s, dl, n.output(1));
                    (*dx)[0] = ops::Mul(s, dl, ops::Neg(s, ops::LogSoftmax(s, n.input(1))));
                    return absl::OkStatus();
                  }});
}

}  // namespace internal

namespace ops {
using internal::Out;

Output DotInteraction(const Scope& scope, Output features) {
  return Out(scope.AddNode("DotInteraction", {features}));
}

Output Softmax(const Scope& scope, Output logits, int axis) {
  return Out(scope.AddNode("Softmax", {logits}, {{"axis", axis}}));
}
Output LogSoftmax(const Scope& scope, Output logits, int axis) {
  return Out(scope.AddNode("LogSoftmax", {logits}, {{"axis", axis}}));
}
Output Dropout(const Scope& scope, Output x, float rate, int64_t seed) {
  return Out(scope.AddNode("Dropout", {x}, {{"rate", static_cast<double>(rate)}, {"seed", seed}}));
}
Output SigmoidCrossEntropyWithLogits(const Scope& scope, Output labels, Output logits) {
  return Out(scope.AddNode("SigmoidCrossEntropyWithLogits", {labels, logits}));
}
Output SoftmaxCrossEntropyWithLogits(const Scope& scope, Output labels, Output logits) {
  return Out(scope.AddNode("SoftmaxCrossEntropyWithLogits", {labels, logits}));
}

}  // namespace ops
}  // namespace recsdk
