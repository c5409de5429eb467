// math_ops.cc: linear algebra, elementwise arithmetic, comparisons and reductions.
#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {
namespace {

using ops::Div;
using ops::Mul;
using ops::Neg;
using ops::Sub;

Status MatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  RECSDK_ASSIGN_OR_RETURN(Shape out, MatMulOutputShape(c));
  c.AddOutput(c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

Status BatchMatMulShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  RECSDK_ASSIGN_OR_RETURN(Shape out, BatchMatMulOutputShape(c));
  c.AddOutput(c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

Status BiasAddShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(0, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectRank(1, 1));
  RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
  const int64_t last = c.input_shape(0).dim_from_end(1), b = c.input_shape(1).dim(0);
  if (last >= 0 && b >= 0 && last != b) {
    return c.Error("bias {} does not match the last dimension of {}", c.InputDesc(1),
                   c.InputDesc(0));
  }
  c.AddOutput(c.input_dtype(0), c.input_shape(0));
  return absl::OkStatus();
}

Status BinaryShape(InferenceContext& c) { return BroadcastBinary(c); }
Status CompareShape(InferenceContext& c) { return BroadcastBinary(c, DType::kBool); }

Status FloatUnaryShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectFloat(0));
  return SameAsInput0(c);
}

Status ReduceShape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  auto axes = NormalizeAxes(c.IntsAttr("axes"), in.rank());
  if (!axes.ok()) return c.Error("{} ({})", axes.status().message(), c.InputDesc(0));
  const bool keep = c.BoolAttr("keep_dims");
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    const bool reduced = std::find(axes->begin(), axes->end(), i) != axes->end();
    if (!reduced) {
      out.AddDim(in.dim(i));
    } else if (keep) {
      out.AddDim(1);
    }
  }
  c.AddOutput(c.input_dtype(0), out);
  return absl::OkStatus();
}

// Gradient function shorthand.
using G = const std::vector<Output>&;
using DX = std::vector<Output>*;

Status AddGrad(const Scope& s, const Node& n, G g, DX dx) {
  (*dx)[0] = ReduceGradTo(s, g[0], n.input(0));
  (*dx)[1] = ReduceGradTo(s, g[0], n.input(1));
  return absl::OkStatus();
}
Status SubGrad(const Scope& s, const Node& n, G g, DX dx) {
  (*dx)[0] = ReduceGradTo(s, g[0], n.input(0));
  (*dx)[1] = ReduceGradTo(s, Neg(s, g[0]), n.input(1));
  return absl::OkStatus();
}
Status MulGrad(const Scope& s, const Node& n, G g, DX dx) {
  (*dx)[0] = ReduceGradTo(s, Mul(s, g[0], n.input(1)), n.input(0));
  (*dx)[1] = ReduceGradTo(s, Mul(s, g[0], n.input(0)), n.input(1));
  return absl::OkStatus();
}
Status DivGrad(const Scope& s, const Node& n, G g, DX dx) {
  const Output x = n.input(0), y = n.input(1);
  (*dx)[0] = ReduceGradTo(s, Div(s, g[0], y), x);
  (*dx)[1] = ReduceGradTo(s, Neg(s, Div(s, Mul(s, g[0], n.output(0)), y)), y);
  return absl::OkStatus();
}
Status MaxMinGrad(const Scope& s, const Node& n, G g, DX dx, bool is_max) {
  const Output x = n.input(0), y = n.input(1);
  const Output pick_x = is_max ? ops::GreaterEqual(s, x, y) : ops::LessEqual(s, x, y);
  const Output gb = Out(s.AddNode("BroadcastToShapeOf", {g[0], n.output(0)}));
  const Output zeros = ops::ZerosLike(s, gb);
  (*dx)[0] = ReduceGradTo(s, ops::Where(s, pick_x, gb, zeros), x);
  (*dx)[1] = ReduceGradTo(s, ops::Where(s, pick_x, zeros, gb), y);
  return absl::OkStatus();
}
Status PowGrad(const Scope& s, const Node& n, G g, DX dx) {
  const Output x = n.input(0), y = n.input(1), z = n.output(0);
  const Output one = ops::ScalarLike(s, y, 1.0);
  (*dx)[0] = ReduceGradTo(s, Mul(s, g[0], Mul(s, y, ops::Pow(s, x, Sub(s, y, one)))), x);
  // d/dy x^y = x^y log(x), taken as 0 where x <= 0.
  const Output zero = ops::ZerosLike(s, x);
  const Output positive = ops::Greater(s, x, zero);
  const Output safe_x = ops::Where(s, positive, x, ops::OnesLike(s, x));
  const Output logx = ops::Where(s, positive, ops::Log(s, safe_x), zero);
  (*dx)[1] = ReduceGradTo(s, Mul(s, g[0], Mul(s, z, logx)), y);
  return absl::OkStatus();
}

Status MatMulGrad(const Scope& s, const Node& n, G g, DX dx) {
  const bool ta = n.BoolAttr("transpose_a"), tb = n.BoolAttr("transpose_b");
  const Output a = n.input(0), b = n.input(1), dy = g[0];
  using ops::MatMul;
  if (!ta && !tb) {
    (*dx)[0] = MatMul(s, dy, b, {false, true});
    (*dx)[1] = MatMul(s, a, dy, {true, false});
  } else if (!ta && tb) {
    (*dx)[0] = MatMul(s, dy, b, {false, false});
    (*dx)[1] = MatMul(s, dy, a, {true, false});
  } else if (ta && !tb) {
    (*dx)[0] = MatMul(s, b, dy, {false, true});
    (*dx)[1] = MatMul(s, a, dy, {false, false});
  } else {
    (*dx)[0] = MatMul(s, b, dy, {true, true});
    (*dx)[1] = MatMul(s, dy, a, {true, true});
  }
  return absl::OkStatus();
}

Status BatchMatMulGrad(const Scope& s, const Node& n, G g, DX dx) {
  const bool ax = n.BoolAttr("adj_x"), ay = n.BoolAttr("adj_y");
  const Output x = n.input(0), y = n.input(1), dz = g[0];
  using ops::BatchMatMul;
  if (!ax && !ay) {
    (*dx)[0] = BatchMatMul(s, dz, y, {false, true});
    (*dx)[1] = BatchMatMul(s, x, dz, {true, false});
  } else if (!ax && ay) {
    (*dx)[0] = BatchMatMul(s, dz, y, {false, false});
    (*dx)[1] = BatchMatMul(s, dz, x, {true, false});
  } else if (ax && !ay) {
    (*dx)[0] = BatchMatMul(s, y, dz, {false, true});
    (*dx)[1] = BatchMatMul(s, x, dz, {false, false});
  } else {
    (*dx)[0] = BatchMatMul(s, y, dz, {true, true});
    (*dx)[1] = BatchMatMul(s, dz, x, {true, true});
  }
  return absl::OkStatus();
}

constexpr AttrType kBool = AttrType::kBool;

// Unary ops whose gradient is a dedicated fused op taking (y or x, dy); both declare `attrs`,
// which the gradient node copies from the forward node.
void RegisterUnaryWithGradOp(OpRegistry& r, const std::string& type, const std::string& grad_type,
                             bool grad_uses_output, std::vector<AttrDef> attrs = {}) {
  std::vector<std::string> names;
  for (const AttrDef& a : attrs) names.push_back(a.name);
  r.Register(
      {.type = type,
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = attrs,
       .shape_fn = FloatUnaryShape,
       .grad_fn = [grad_type, grad_uses_output, names](const Scope& s, const Node& n, G g, DX dx) {
         const Output ref = grad_uses_output ? n.output(0) : n.input(0);
         AttrMap copied;
         for (const std::string& name : names) {
           if (const AttrValue* v = n.FindAttr(name)) copied[name] = *v;
         }
         (*dx)[0] = Out(s.AddNode(grad_type, {ref, g[0]}, copied));
         return absl::OkStatus();
       }});
  r.Register({.type = grad_type,
              .inputs = {grad_uses_output ? "y" : "x", "dy"},
              .outputs = {"dx"},
              .attrs = std::move(attrs),
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, 1));
                    return SameAsInput0(c);
                  },
              .no_gradient = true});
}

// Binary elementwise ops with broadcasting: x, y -> z.
void RegisterBinaryOp(OpRegistry& r, std::string type, GradFn grad) {
  const bool no_gradient = !grad;
  r.Register({.type = std::move(type),
              .inputs = {"x", "y"},
              .outputs = {"z"},
              .shape_fn = BinaryShape,
              .grad_fn = std::move(grad),
              .no_gradient = no_gradient});
}

// Unary elementwise ops: x -> y.
void RegisterUnaryOp(OpRegistry& r, std::string type, ShapeFn shape, GradFn grad) {
  const bool no_gradient = !grad;
  r.Register({.type = std::move(type),
              .inputs = {"x"},
              .outputs = {"y"},
              .shape_fn = std::move(shape),
              .grad_fn = std::move(grad),
              .no_gradient = no_gradient});
}

// The reductions' attributes: `axes` (all when empty) and keep_dims.
std::vector<AttrDef> ReduceAttrs() {
  return {Attr("axes", AttrType::kInts, std::vector<int64_t>{}), Attr("keep_dims", kBool, false)};
}

}  // namespace

void RegisterMathOps(OpRegistry& r) {
  r.Register({.type = "MatMul",
              .inputs = {"a", "b"},
              .outputs = {"product"},
              .attrs = {Attr("transpose_a", kBool, false), Attr("transpose_b", kBool, false)},
              .shape_fn = MatMulShape,
              .grad_fn = MatMulGrad});
  r.Register({.type = "BatchMatMul",
              .inputs = {"x", "y"},
              .outputs = {"product"},
              .attrs = {Attr("adj_x", kBool, false), Attr("adj_y", kBool, false)},
              .shape_fn = BatchMatMulShape,
              .grad_fn = BatchMatMulGrad});
  r.Register({.type = "BiasAdd",
              .inputs = {"x", "bias"},
              .outputs = {"y"},
              .shape_fn = BiasAddShape,
              .grad_fn = [](const Scope& s, const Node&, G g, DX dx) {
                (*dx)[0] = g[0];
                (*dx)[1] = Out(s.AddNode("BiasAddGrad", {g[0]}));
                return absl::OkStatus();
              }});
  r.Register({.type = "BiasAddGrad",
              .inputs = {"dy"},
              .outputs = {"dbias"},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectMinRank(0, 1));
                    c.AddOutput(c.input_dtype(0), Shape{c.input_shape(0).dim_from_end(1)});
                    return absl::OkStatus();
                  },
              .no_gradient = true});
  RegisterBinaryOp(r, "Add", AddGrad);
  RegisterBinaryOp(r, "Sub", SubGrad);
  RegisterBinaryOp(r, "Mul", MulGrad);
  RegisterBinaryOp(r, "Div", DivGrad);
  RegisterBinaryOp(r, "Maximum", [](const Scope& s, const Node& n, G g, DX dx) {
    return MaxMinGrad(s, n, g, dx, true);
  });
  RegisterBinaryOp(r, "Minimum", [](const Scope& s, const Node& n, G g, DX dx) {
    return MaxMinGrad(s, n, g, dx, false);
  });
  RegisterBinaryOp(r, "Pow", PowGrad);
  r.Register({.type = "AddN",
              .inputs = {"inputs+"},
              .outputs = {"sum"},
              .shape_fn =
                  [](InferenceContext& c) {
                    for (int i = 1; i < c.num_inputs(); ++i) {
                      RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(0, i));
                      if (!c.input_shape(i).IsCompatibleWith(c.input_shape(0))) {
                        return c.Error("{} and {} differ in shape", c.InputDesc(0), c.InputDesc(i));
                      }
                    }
                    return SameAsInput0(c);
                  },
              .grad_fn =
                  [](const Scope&, const Node& n, G g, DX dx) {
                    for (int i = 0; i < n.num_inputs(); ++i) (*dx)[i] = g[0];
                    return absl::OkStatus();
                  }});
  RegisterUnaryOp(r, "Neg", SameAsInput0, [](const Scope& s, const Node&, G g, DX dx) {
    (*dx)[0] = Neg(s, g[0]);
    return absl::OkStatus();
  });
  RegisterUnaryOp(r, "Square", SameAsInput0, [](const Scope& s, const Node& n, G g, DX dx) {
    (*dx)[0] = Mul(s, g[0], Mul(s, n.input(0), ops::ScalarLike(s, n.input(0), 2.0)));
    return absl::OkStatus();
  });
  RegisterUnaryOp(r, "Exp", FloatUnaryShape, [](const Scope& s, const Node& n, G g, DX dx) {
    (*dx)[0] = Mul(s, g[0], n.output(0));
    return absl::OkStatus();
  });
  RegisterUnaryOp(r, "Log", FloatUnaryShape, [](const Scope& s, const Node& n, G g, DX dx) {
    (*dx)[0] = Div(s, g[0], n.input(0));
    return absl::OkStatus();
  });
  RegisterUnaryOp(r, "Abs", SameAsInput0, [](const Scope& s, const Node& n, G g, DX dx) {
    (*dx)[0] = Mul(s, g[0], Out(s.AddNode("Sign", {n.input(0)})));
    return absl::OkStatus();
  });
  RegisterUnaryOp(r, "Sign", SameAsInput0, nullptr);
  RegisterUnaryWithGradOp(r, "Sqrt", "SqrtGrad", true);
  RegisterUnaryWithGradOp(r, "Rsqrt", "RsqrtGrad", true);
  RegisterUnaryWithGradOp(r, "Relu", "ReluGrad", false);
  RegisterUnaryWithGradOp(r, "LeakyRelu", "LeakyReluGrad", false,
                          {Attr("alpha", AttrType::kFloat, 0.2)});
  RegisterUnaryWithGradOp(r, "Sigmoid", "SigmoidGrad", true);
  RegisterUnaryWithGradOp(r, "Tanh", "TanhGrad", true);
  RegisterUnaryWithGradOp(r, "Gelu", "GeluGrad", false, {Attr("approximate", kBool, false)});

  for (const char* cmp : {"Less", "LessEqual", "Greater", "GreaterEqual", "Equal"}) {
    r.Register({.type = cmp,
                .inputs = {"x", "y"},
                .outputs = {"z"},
                .shape_fn = CompareShape,
                .no_gradient = true});
  }
  RegisterBinaryOp(r, "FloorMod", [](const Scope& s, const Node& n, G g, DX dx) {
    // x mod y = x - floor(x / y) * y.
    (*dx)[0] = ReduceGradTo(s, g[0], n.input(0));
    if (IsFloatingPoint(n.input(1).dtype())) {
      const Output q = Out(s.AddNode("FloorDiv", {n.input(0), n.input(1)}));
      (*dx)[1] = ReduceGradTo(s, Neg(s, Mul(s, g[0], q)), n.input(1));
    }
    return absl::OkStatus();
  });
  RegisterBinaryOp(r, "FloorDiv", nullptr);
  r.Register({.type = "Where",
              .inputs = {"condition", "x", "y"},
              .outputs = {"z"},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kBool));
                    RECSDK_RETURN_IF_ERROR(c.ExpectSameDType(1, 2));
                    auto s1 = BroadcastShapes(c.input_shape(1), c.input_shape(2));
                    if (!s1.ok())
                      return c.Error("{} and {}: {}", c.InputDesc(1), c.InputDesc(2),
                                     s1.status().message());
                    auto s2 = BroadcastShapes(c.input_shape(0), *s1);
                    if (!s2.ok())
                      return c.Error("condition {}: {}", c.InputDesc(0), s2.status().message());
                    c.AddOutput(c.input_dtype(1), *s2);
                    return absl::OkStatus();
                  },
              .grad_fn =
                  [](const Scope& s, const Node& n, G g, DX dx) {
                    const Output zeros = ops::ZerosLike(s, g[0]);
                    (*dx)[1] = ReduceGradTo(s, ops::Where(s, n.input(0), g[0], zeros), n.input(1));
                    (*dx)[2] = ReduceGradTo(s, ops::Where(s, n.input(0), zeros, g[0]), n.input(2));
                    return absl::OkStatus();
                  }});

  r.Register({.type = "ReduceSum",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = ReduceAttrs(),
              .shape_fn = ReduceShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("ReduceSumGrad", {g[0], n.input(0)},
                                         {{"axes", n.IntsAttr("axes")}, {"mean", false}}));
                return absl::OkStatus();
              }});
  r.Register({.type = "ReduceMean",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = ReduceAttrs(),
              .shape_fn = ReduceShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("ReduceSumGrad", {g[0], n.input(0)},
                                         {{"axes", n.IntsAttr("axes")}, {"mean", true}}));
                return absl::OkStatus();
              }});
  r.Register({.type = "ReduceMax",
              .inputs = {"x"},
              .outputs = {"y"},
              .attrs = ReduceAttrs(),
              .shape_fn = ReduceShape,
              .grad_fn = [](const Scope& s, const Node& n, G g, DX dx) {
                (*dx)[0] = Out(s.AddNode("ReduceMaxGrad", {g[0], n.input(0), n.output(0)},
                                         {{"axes", n.IntsAttr("axes")}}));
                return absl::OkStatus();
              }});
  r.Register(
      {.type = "ReduceSumGrad",
       .inputs = {"dy", "x"},
       .outputs = {"dx"},
       .attrs = {Attr("axes", AttrType::kInts, std::vector<int64_t>{}), Attr("mean", kBool, false)},
       .shape_fn =
           [](InferenceContext& c) {
             c.AddOutput(c.input_dtype(0), c.input_shape(1));
             return absl::OkStatus();
           },
       .no_gradient = true});
  r.Register({.type = "ReduceMaxGrad",
              .inputs = {"dy", "x", "y"},
              .outputs = {"dx"},
              .attrs = {Attr("axes", AttrType::kInts, std::vector<int64_t>{})},
              .shape_fn =
                  [](InferenceContext& c) {
                    c.AddOutput(c.input_dtype(0), c.input_shape(1));
                    return absl::OkStatus();
                  },
              .no_gradient = true});
}

}  // namespace internal

namespace ops {
using internal::Out;

Output MatMul(const Scope& scope, Output a, Output b, MatMulOptions o) {
  return Out(scope.AddNode("MatMul", {a, b},
                           {{"transpose_a", o.transpose_a}, {"transpose_b", o.transpose_b}}));
}
Output BatchMatMul(const Scope& scope, Output x, Output y, BatchMatMulOptions o) {
  return Out(scope.AddNode("BatchMatMul", {x, y}, {{"adj_x", o.adj_x}, {"adj_y", o.adj_y}}));
}
Output BiasAdd(const Scope& scope, Output x, Output bias) {
  return Out(scope.AddNode("BiasAdd", {x, bias}));
}

#define RECSDK_BINARY_BUILDER(Name) \
  Output Name(const Scope& scope, Output x, Output y) { return Out(scope.AddNode(#Name, {x, y})); }
RECSDK_BINARY_BUILDER(Add)
RECSDK_BINARY_BUILDER(Sub)
RECSDK_BINARY_BUILDER(Mul)
RECSDK_BINARY_BUILDER(Div)
RECSDK_BINARY_BUILDER(Maximum)
RECSDK_BINARY_BUILDER(Minimum)
RECSDK_BINARY_BUILDER(Pow)
RECSDK_BINARY_BUILDER(Less)
RECSDK_BINARY_BUILDER(LessEqual)
RECSDK_BINARY_BUILDER(Greater)
RECSDK_BINARY_BUILDER(GreaterEqual)
RECSDK_BINARY_BUILDER(Equal)
RECSDK_BINARY_BUILDER(FloorMod)
#undef RECSDK_BINARY_BUILDER

#define RECSDK_UNARY_BUILDER(Name) \
  Output Name(const Scope& scope, Output x) { return Out(scope.AddNode(#Name, {x})); }
RECSDK_UNARY_BUILDER(Neg)
RECSDK_UNARY_BUILDER(Square)
RECSDK_UNARY_BUILDER(Sqrt)
RECSDK_UNARY_BUILDER(Rsqrt)
RECSDK_UNARY_BUILDER(Exp)
RECSDK_UNARY_BUILDER(Log)
RECSDK_UNARY_BUILDER(Abs)
RECSDK_UNARY_BUILDER(Relu)
RECSDK_UNARY_BUILDER(Sigmoid)
RECSDK_UNARY_BUILDER(Tanh)
#undef RECSDK_UNARY_BUILDER

Output LeakyRelu(const Scope& scope, Output x, float alpha) {
  return Out(scope.AddNode("LeakyRelu", {x}, {{"alpha", static_cast<double>(alpha)}}));
}
Output Gelu(const Scope& scope, Output x, bool approximate) {
  return Out(scope.AddNode("Gelu", {x}, {{"approximate", approximate}}));
}
Output AddN(const Scope& scope, const std::vector<Output>& inputs) {
  if (inputs.size() == 1) return inputs[0];
  return Out(scope.AddNode("AddN", inputs));
}
Output Where(const Scope& scope, Output condition, Output x, Output y) {
  return Out(scope.AddNode("Where", {condition, x, y}));
}
Output ReduceSum(const Scope& scope, Output x, const std::vector<int64_t>& axes, ReduceOptions o) {
  return Out(scope.AddNode("ReduceSum", {x}, {{"axes", axes}, {"keep_dims", o.keep_dims}}));
}
Output ReduceMean(const Scope& scope, Output x, const std::vector<int64_t>& axes, ReduceOptions o) {
  return Out(scope.AddNode("ReduceMean", {x}, {{"axes", axes}, {"keep_dims", o.keep_dims}}));
}
Output ReduceMax(const Scope& scope, Output x, const std::vector<int64_t>& axes, ReduceOptions o) {
  return Out(scope.AddNode("ReduceMax", {x}, {{"axes", axes}, {"keep_dims", o.keep_dims}}));
}

}  // namespace ops
}  // namespace recsdk
