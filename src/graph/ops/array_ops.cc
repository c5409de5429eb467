// array_ops.cc: sources, identity, casts and shape manipulation: definitions, gradients and the
// builders of recsdk/ops.h.
#include <numeric>

#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {
namespace {

Status ConcatShape(InferenceContext& c) {
  const int n = c.num_inputs();
  const int rank = c.input_shape(0).rank();
  RECSDK_ASSIGN_OR_RETURN(int axis, c.NormalizeAxis(c.IntAttr("axis"), rank));
  Shape out = c.input_shape(0);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, i));
    const Shape& s = c.input_shape(i);
    if (s.rank() != rank)
      return c.Error("{} and {} differ in rank", c.InputDesc(0), c.InputDesc(i));
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (s.dim(d) >= 0 && out.dim(d) >= 0 && s.dim(d) != out.dim(d)) {
        return c.Error("{} and {} differ in dimension {} (only axis {} may differ)", c.InputDesc(0),
                       c.InputDesc(i), d, axis);
      }
      if (out.dim(d) < 0) out.set_dim(d, s.dim(d));
    }
    total = (total < 0 || s.dim(axis) < 0) ? Shape::kUnknownDim : total + s.dim(axis);
  }
  out.set_dim(axis, total);
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

Status SplitVShape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  RECSDK_ASSIGN_OR_RETURN(int axis, c.NormalizeAxis(c.IntAttr("axis"), in.rank()));
  std::vector<int64_t> sizes = c.IntsAttr("sizes");
  if (sizes.empty()) return c.Error("needs at least one split size");
  int unknown = -1;
  int64_t known = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (unknown >= 0) return c.Error("at most one split size may be -1");
      unknown = static_cast<int>(i);
    } else if (sizes[i] < 0) {
      return c.Error("split size {} is negative", sizes[i]);
    } else {
      known += sizes[i];
    }
  }
  const int64_t dim = in.dim(axis);
  if (dim >= 0) {
    if (unknown >= 0) {
      if (known > dim)
        return c.Error("split sizes sum to {} > dimension {} of {}", known, dim, c.InputDesc(0));
      sizes[unknown] = dim - known;
    } else if (known != dim) {
      return c.Error("split sizes sum to {} but dimension {} of {} is {}", known, axis,
                     c.InputDesc(0), dim);
    }
  }
  for (int64_t s : sizes) {
    Shape o = in;
    o.set_dim(axis, s);
    c.AddOutput(c.input_dtype(0), o);
  }
  return absl::OkStatus();
}

Status SliceShape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  const auto begin = c.IntsAttr("begin");
  const auto size = c.IntsAttr("size");
  if (static_cast<int>(begin.size()) != in.rank() || static_cast<int>(size.size()) != in.rank()) {
    return c.Error("begin and size need one entry per dimension of {}", c.InputDesc(0));
  }
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    if (begin[i] < 0) return c.Error("begin[{}] = {} is negative", i, begin[i]);
    if (size[i] < -1)
      return c.Error("size[{}] = {} is invalid; use -1 for 'to the end'", i, size[i]);
    const int64_t d = in.dim(i);
    if (d >= 0 && (begin[i] > d || (size[i] >= 0 && begin[i] + size[i] > d))) {
      return c.Error("slice [{}, +{}) of dimension {} exceeds its size {} in {}", begin[i], size[i],
                     i, d, c.InputDesc(0));
    }
    out.AddDim(size[i] >= 0 ? size[i] : (d >= 0 ? d - begin[i] : Shape::kUnknownDim));
  }
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

Status ReshapeShape(InferenceContext& c) {
  const auto target = c.IntsAttr("shape");
  const Shape& in = c.input_shape(0);
  int unknown = -1;
  int64_t known = 1;
  Shape out;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (unknown >= 0) return c.Error("at most one dimension of the target shape may be -1");
      unknown = static_cast<int>(i);
    } else if (target[i] < 0) {
      return c.Error("target dimension {} is {}; use sizes >= 0 or one -1", i, target[i]);
    } else {
      known *= target[i];
    }
    out.AddDim(target[i]);
  }
  const int64_t n = in.num_elements();
  if (unknown >= 0) {
    if (n >= 0) {
      if (known == 0 || n % known != 0) {
        return c.Error("cannot reshape {} ({} elements) to [{}]", c.InputDesc(0), n,
                       fmt::join(target, ","));
      }
      out.set_dim(unknown, n / known);
    }
  } else if (n >= 0 && n != known) {
    return c.Error("cannot reshape {} ({} elements) to [{}] ({} elements)", c.InputDesc(0), n,
                   fmt::join(target, ","), known);
  }
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

Status TransposeShape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  const auto perm = c.IntsAttr("perm");
  if (static_cast<int>(perm.size()) != in.rank()) {
    return c.Error("perm [{}] needs {} entries for {}", fmt::join(perm, ","), in.rank(),
                   c.InputDesc(0));
  }
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.rank() || seen[p])
      return c.Error("perm [{}] is not a permutation", fmt::join(perm, ","));
    seen[p] = true;
    out.AddDim(in.dim(static_cast<int>(p)));
  }
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

Status TileShape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  const auto m = c.IntsAttr("multiples");
  if (static_cast<int>(m.size()) != in.rank())
    return c.Error("multiples need one entry per dimension of {}", c.InputDesc(0));
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    if (m[i] < 0) return c.Error("multiples[{}] = {} is negative", i, m[i]);
    out.AddDim(in.dim(i) < 0 ? Shape::kUnknownDim : in.dim(i) * m[i]);
  }
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

// Gather along `axis` (attr, default 0, negative counts from the end): the output is
// params.shape[:axis] + indices.shape + params.shape[axis+1:].
Status GatherShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(0, 1));
  const DType id = c.input_dtype(1);
  if (id != DType::kInt32 && id != DType::kInt64)
    return c.Error("{} must be int32 or int64 indices", c.InputDesc(1));
  const Shape& params = c.input_shape(0);
  RECSDK_ASSIGN_OR_RETURN(const int axis, c.NormalizeAxis(c.IntAttr("axis"), params.rank()));
  Shape out;
  for (int i = 0; i < axis; ++i) out.AddDim(params.dim(i));
  for (int i = 0; i < c.input_shape(1).rank(); ++i) out.AddDim(c.input_shape(1).dim(i));
  for (int i = axis + 1; i < params.rank(); ++i) out.AddDim(params.dim(i));
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

Status ShapeOfInput1(InferenceContext& c) {
  c.AddOutput(c.input_dtype(0), c.input_shape(1));
  return absl::OkStatus();
}

using G = const std::vector<Output>&;
using DX = std::vector<Output>*;

// A one-input op whose output has input 0's dtype and shape.
void RegisterSameShapeOp(OpRegistry& r, std::string type, GradFn grad) {
  const bool no_gradient = !grad;
  r.Register({.type = std::move(type),
              .inputs = {"x"},
              .outputs = {"y"},
              .shape_fn = SameAsInput0,
              .grad_fn = std::move(grad),
              .no_gradient = no_gradient});
}

// A gradient helper (x_grad, x) -> x's shape; `attrs` as declared.
void RegisterShapeOfInput1Op(OpRegistry& r, std::string type, std::vector<std::string> inputs,
                             std::vector<AttrDef> attrs, GradFn grad) {
  const bool no_gradient = !grad;
  r.Register({.type = std::move(type),
              .inputs = std::move(inputs),
              .outputs = {"y"},
              .attrs = std::move(attrs),
              .shape_fn = ShapeOfInput1,
              .grad_fn = std::move(grad),
              .no_gradient = no_gradient});
}

}  // namespace

void RegisterArrayOps(OpRegistry& r) {
  // Placeholder's dataset_column marks a column the pipeline feeds (DatasetColumn).
  r.Register({.type = "Placeholder",
              .inputs = {},
              .outputs = {"value"},
              .attrs = {RequiredAttr("dtype", AttrType::kDType),
                        Attr("shape", AttrType::kShape),  // absent: unknown shape
                        Attr("dataset_column", AttrType::kString, "")},
              .shape_fn =
                  [](InferenceContext& c) {
                    if (c.DTypeAttr("dtype") == DType::kInvalid) return c.Error("needs a dtype");
                    c.AddOutput(c.DTypeAttr("dtype"), c.ShapeAttr("shape"));
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  r.Register({.type = "Const",
              .inputs = {},
              .outputs = {"value"},
              .attrs = {RequiredAttr("value", AttrType::kTensor)},
              .shape_fn =
                  [](InferenceContext& c) {
                    const AttrValue* v = c.attr("value");
                    const Tensor* t = v ? v->get_if<Tensor>() : nullptr;
                    if (t == nullptr || !t->IsInitialized())
                      return c.Error("needs a tensor attribute \"value\"");
                    c.AddOutput(t->dtype(), t->shape());
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  RegisterSameShapeOp(r, "Identity", [](const Scope&, const Node&, G g, DX dx) {
    (*dx)[0] = g[0];
    return absl::OkStatus();
  });
  RegisterSameShapeOp(r, "StopGradient", nullptr);
  // The copies the placement pass inserts where an edge crosses memory spaces (after autodiff, so
  // they need no gradient).
  RegisterSameShapeOp(r, "CopyHostToDevice", nullptr);
  RegisterSameShapeOp(r, "CopyDeviceToHost", nullptr);
  r.Register({.type = "NoOp",
              .inputs = {},
              .outputs = {},
              .shape_fn = [](InferenceContext&) { return absl::OkStatus(); },
              .no_gradient = true});
  RegisterSameShapeOp(r, "ZerosLike", nullptr);
  RegisterSameShapeOp(r, "OnesLike", nullptr);
  r.Register({.type = "Fill",
              .inputs = {"value"},
              .outputs = {"filled"},
              .attrs = {RequiredAttr("shape", AttrType::kShape)},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectRank(0, 0));
                    const Shape s = c.ShapeAttr("shape");
                    if (!s.IsFullyDefined())
                      return c.Error("shape {} must be fully defined", s.ToString());
                    c.AddOutput(c.input_dtype(0), s);
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  r.Register({.type = "Cast",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = {RequiredAttr("dtype", AttrType::kDType)},
              .shape_fn =
                  [](InferenceContext& c) {
                    const DType to = c.DTypeAttr("dtype");
                    if (DTypeSize(to) == 0 || to == DType::kResource)
                      return c.Error("cannot cast to {}", DTypeName(to));
                    c.AddOutput(to, c.input_shape(0));
                    return absl::OkStatus();
                  },
              .grad_fn =
                  [](const Scope& s, const Node& n, G g, DX dx) {
                    const DType from = n.input(0).dtype();
                    if (IsFloatingPoint(from) && IsFloatingPoint(n.output_dtype(0))) {
                      (*dx)[0] = ops::Cast(s, g[0], from);
                    }
                    return absl::OkStatus();
                  }});
  r.Register({.type = "Concat",
              .inputs = {"values+"},
              .outputs = {"concat"},
              .attrs = {Attr("axis", AttrType::kInt, 0)},
              .shape_fn = ConcatShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                std::vector<Output> ins = {g[0]};
                for (const Output& in : n.inputs()) ins.push_back(in);
                Node* cg = s.AddNode("ConcatGrad", ins, {{"axis", NodeAttrs(n).Int("axis")}});
                for (int i = 0; i < n.num_inputs(); ++i) (*dx)[i] = Out(cg, i);
                return absl::OkStatus();
              }});
  r.Register({.type = "ConcatGrad",
              .inputs = {"dconcat", "values+"},
              .outputs = {"dvalues+"},
              .attrs = {Attr("axis", AttrType::kInt, 0)},
              .shape_fn =
                  [](InferenceContext& c) {
                    for (int i = 1; i < c.num_inputs(); ++i)
                      c.AddOutput(c.input_dtype(0), c.input_shape(i));
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  r.Register({.type = "SplitV",
              .inputs = {"value"},
              .outputs = {"parts+"},
              .attrs = {RequiredAttr("sizes", AttrType::kInts), Attr("axis", AttrType::kInt, 0)},
              .shape_fn = SplitVShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                std::vector<Output> parts;
                for (int i = 0; i < n.num_outputs(); ++i) {
                  parts.push_back(g[i].valid() ? g[i] : ops::ZerosLike(s, n.output(i)));
                }
                (*dx)[0] = ops::Concat(s, parts, static_cast<int>(NodeAttrs(n).Int("axis")));
                return absl::OkStatus();
              }});
  r.Register(
      {.type = "Slice",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {RequiredAttr("begin", AttrType::kInts), RequiredAttr("size", AttrType::kInts)},
       .shape_fn = SliceShape,
       .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
         (*dx)[0] =
             Out(s.AddNode("SliceGrad", {g[0], n.input(0)}, {{"begin", n.IntsAttr("begin")}}));
         return absl::OkStatus();
       }});
  RegisterShapeOfInput1Op(r, "SliceGrad", {"dy", "x"}, {RequiredAttr("begin", AttrType::kInts)},
                          nullptr);
  r.Register({.type = "Reshape",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = {RequiredAttr("shape", AttrType::kInts)},
              .shape_fn = ReshapeShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("ReshapeLike", {g[0], n.input(0)}));
                return absl::OkStatus();
              }});
  RegisterShapeOfInput1Op(r, "ReshapeLike", {"x", "like"}, {},
                          [](const Scope& s, const Node& n, G g, DX dx) {
                            (*dx)[0] = Out(s.AddNode("ReshapeLike", {g[0], n.input(0)}));
                            return absl::OkStatus();
                          });
  r.Register({.type = "Transpose",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = {RequiredAttr("perm", AttrType::kInts)},
              .shape_fn = TransposeShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                const auto perm = n.IntsAttr("perm");
                std::vector<int64_t> inv(perm.size());
                for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
                (*dx)[0] = ops::Transpose(s, g[0], inv);
                return absl::OkStatus();
              }});
  r.Register({.type = "Tile",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = {RequiredAttr("multiples", AttrType::kInts)},
              .shape_fn = TileShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("TileGrad", {g[0], n.input(0)},
                                         {{"multiples", n.IntsAttr("multiples")}}));
                return absl::OkStatus();
              }});
  RegisterShapeOfInput1Op(r, "TileGrad", {"dy", "x"}, {RequiredAttr("multiples", AttrType::kInts)},
                          nullptr);
  r.Register({.type = "Gather",
              .inputs = {"params", "indices"},
              .outputs = {"y"},
              .attrs = {Attr("axis", AttrType::kInt, 0)},
              .shape_fn = GatherShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("GatherGrad", {g[0], n.input(1), n.input(0)},
                                         {{"axis", NodeAttrs(n).Int("axis")}}));
                return absl::OkStatus();
              }});
  r.Register({.type = "GatherGrad",
              .inputs = {"dy", "indices", "params"},
              .outputs = {"dparams"},
              .attrs = {Attr("axis", AttrType::kInt, 0)},
              .shape_fn =
                  [](InferenceContext& c) {
                    c.AddOutput(c.input_dtype(0), c.input_shape(2));
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  RegisterShapeOfInput1Op(r, "SumToShapeOf", {"x", "like"}, {},
                          [](const Scope& s, const Node& n, G g, DX dx) {
                            (*dx)[0] = Out(s.AddNode("BroadcastToShapeOf", {g[0], n.input(0)}));
                            return absl::OkStatus();
                          });
  RegisterShapeOfInput1Op(r, "BroadcastToShapeOf", {"x", "like"}, {},
                          [](const Scope& s, const Node& n, G g, DX dx) {
                            (*dx)[0] = Out(s.AddNode("SumToShapeOf", {g[0], n.input(0)}));
                            return absl::OkStatus();
                          });
}

}  // namespace internal

namespace ops {
using internal::Out;

Output Placeholder(const Scope& scope, DType dtype, const Shape& shape) {
  return Out(scope.AddNode("Placeholder", {}, {{"dtype", dtype}, {"shape", shape}}));
}
Output Const(const Scope& scope, const Tensor& value) {
  return Out(scope.AddNode("Const", {}, {{"value", value}}));
}
Output Const(const Scope& scope, float value) { return Const(scope, Tensor::Scalar<float>(value)); }
Output Const(const Scope& scope, double value) {
  return Const(scope, Tensor::Scalar<double>(value));
}
Output Const(const Scope& scope, int32_t value) {
  return Const(scope, Tensor::Scalar<int32_t>(value));
}
Output Const(const Scope& scope, int64_t value) {
  return Const(scope, Tensor::Scalar<int64_t>(value));
}

Output ScalarLike(const Scope& scope, Output x, double value) {
  if (!x.valid()) return Output();
  switch (x.dtype()) {
    case DType::kFloat64:
      return Const(scope, value);
    case DType::kInt32:
      return Const(scope, static_cast<int32_t>(value));
    case DType::kInt64:
      return Const(scope, static_cast<int64_t>(value));
    case DType::kFloat32:
      return Const(scope, static_cast<float>(value));
    default:
      return Cast(scope, Const(scope, static_cast<float>(value)), x.dtype());
  }
}
Output Identity(const Scope& scope, Output x) { return Out(scope.AddNode("Identity", {x})); }
Output StopGradient(const Scope& scope, Output x) {
  return Out(scope.AddNode("StopGradient", {x}));
}
Node* NoOp(const Scope& scope) { return scope.AddNode("NoOp", {}); }
Node* Group(const Scope& scope, const std::vector<Node*>& nodes) {
  for (Node* n : nodes) {
    if (n == nullptr) {
      scope.graph()->RecordError(
          absl::InvalidArgumentError("Group: a grouped node is null (an earlier op failed?)"));
      return nullptr;
    }
  }
  return scope.WithControlDependencies(nodes).AddNode("NoOp", {}, {}, "group");
}
Output Cast(const Scope& scope, Output x, DType dtype) {
  return Out(scope.AddNode("Cast", {x}, {{"dtype", dtype}}));
}
Output ZerosLike(const Scope& scope, Output x) { return Out(scope.AddNode("ZerosLike", {x})); }
Output OnesLike(const Scope& scope, Output x) { return Out(scope.AddNode("OnesLike", {x})); }
Output Fill(const Scope& scope, const Shape& shape, Output value) {
  return Out(scope.AddNode("Fill", {value}, {{"shape", shape}}));
}
Output Concat(const Scope& scope, const std::vector<Output>& values, int axis) {
  return Out(scope.AddNode("Concat", values, {{"axis", axis}}));
}
std::vector<Output> SplitV(const Scope& scope, Output value, const std::vector<int64_t>& sizes,
                           int axis) {
  Node* n = scope.AddNode("SplitV", {value}, {{"sizes", sizes}, {"axis", axis}});
  std::vector<Output> outs;
  for (size_t i = 0; i < sizes.size(); ++i) outs.push_back(internal::Out(n, static_cast<int>(i)));
  return outs;
}
std::vector<Output> Split(const Scope& scope, Output value, int num_split, int axis) {
  if (!value.valid()) return std::vector<Output>(std::max(num_split, 0));
  const int rank = value.shape().rank();
  const int a = axis < 0 ? axis + rank : axis;
  if (num_split <= 0 || a < 0 || a >= rank) {
    scope.graph()->RecordError(absl::InvalidArgumentError(
        fmt::format("Split of \"{}\" {}: num_split {} must be > 0 and axis {} in range",
                    value.name(), value.shape().ToString(), num_split, axis)));
    return std::vector<Output>(std::max(num_split, 0));
  }
  const int64_t d = value.shape().dim(a);
  if (d < 0 || d % num_split != 0) {
    scope.graph()->RecordError(absl::InvalidArgumentError(fmt::format(
        "Split of \"{}\" {}: dimension {} ({}) must be known and divisible by num_split {}",
        value.name(), value.shape().ToString(), a, d, num_split)));
    return std::vector<Output>(num_split);
  }
  return SplitV(scope.NewSubScope("Split"), value, std::vector<int64_t>(num_split, d / num_split),
                a);
}
Output Slice(const Scope& scope, Output x, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& size) {
  return Out(scope.AddNode("Slice", {x}, {{"begin", begin}, {"size", size}}));
}
Output Reshape(const Scope& scope, Output x, const std::vector<int64_t>& shape) {
  return Out(scope.AddNode("Reshape", {x}, {{"shape", shape}}));
}
Output Transpose(const Scope& scope, Output x, const std::vector<int64_t>& perm) {
  return Out(scope.AddNode("Transpose", {x}, {{"perm", perm}}));
}
Output ExpandDims(const Scope& scope, Output x, int axis) {
  if (!x.valid()) return Output();
  const int rank = x.shape().rank();
  if (axis < -rank - 1 || axis > rank) {
    scope.graph()->RecordError(absl::InvalidArgumentError(
        fmt::format("ExpandDims of \"{}\" {}: axis {} out of range [{}, {}]", x.name(),
                    x.shape().ToString(), axis, -rank - 1, rank)));
    return Output();
  }
  const int a = axis < 0 ? axis + rank + 1 : axis;
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
  dims.insert(dims.begin() + a, 1);
  if (x.shape().num_elements() < 0) {
    int unknown = 0;
    for (int64_t d : dims) unknown += d < 0;
    if (unknown > 1) {
      scope.graph()->RecordError(absl::InvalidArgumentError(
          fmt::format("ExpandDims of \"{}\" {}: more than one unknown dimension", x.name(),
                      x.shape().ToString())));
      return Output();
    }
  }
  return Out(scope.AddNode("Reshape", {x}, {{"shape", dims}}, "ExpandDims"));
}
Output Squeeze(const Scope& scope, Output x, const std::vector<int64_t>& axes) {
  if (!x.valid()) return Output();
  const Shape& s = x.shape();
  auto norm = internal::NormalizeAxes(axes, s.rank());
  if (!norm.ok()) {
    scope.graph()->RecordError(absl::InvalidArgumentError(
        fmt::format("Squeeze of \"{}\": {}", x.name(), norm.status().message())));
    return Output();
  }
  std::vector<int64_t> dims;
  for (int i = 0; i < s.rank(); ++i) {
    const bool listed =
        axes.empty() ? s.dim(i) == 1 : std::find(norm->begin(), norm->end(), i) != norm->end();
    if (listed) {
      if (s.dim(i) != 1) {
        scope.graph()->RecordError(absl::InvalidArgumentError(
            fmt::format("Squeeze of \"{}\" {}: dimension {} is not 1", x.name(), s.ToString(), i)));
        return Output();
      }
      continue;
    }
    dims.push_back(s.dim(i));
  }
  int unknown = 0;
  for (int64_t d : dims) unknown += d < 0;
  if (unknown > 1) {
    scope.graph()->RecordError(absl::InvalidArgumentError(fmt::format(
        "Squeeze of \"{}\" {}: more than one unknown dimension", x.name(), s.ToString())));
    return Output();
  }
  return Out(scope.AddNode("Reshape", {x}, {{"shape", dims}}, "Squeeze"));
}
Output Tile(const Scope& scope, Output x, const std::vector<int64_t>& multiples) {
  return Out(scope.AddNode("Tile", {x}, {{"multiples", multiples}}));
}
Output Gather(const Scope& scope, Output params, Output indices, int axis) {
  if (axis == 0) return Out(scope.AddNode("Gather", {params, indices}));
  return Out(scope.AddNode("Gather", {params, indices}, {{"axis", int64_t{axis}}}));
}

}  // namespace ops
}  // namespace recsdk
