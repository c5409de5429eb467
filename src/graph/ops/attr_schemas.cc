// attr_schemas.cc: the attribute schema of every core op (names, types, defaults, required).
//
// Kept in one table, next to nothing else, so a reader sees at a glance what each op accepts and a
// new attribute is one line here. The defaults are the fallbacks the shape functions and kernels
// pass to Node::IntAttr & co.; a schema and its readers must agree (op_registry_test checks that
// every registered op declares one). Graph::AddNode and the pass manager check nodes against
// these schemas, so a missing or mistyped attribute is an error instead of a silent fallback.
//
// Threading: runs once, inside OpRegistry::Global()'s initialisation.
#include "src/common/check.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

using T = AttrValue::Type;

void Declare(OpRegistry& r, const char* type, std::vector<AttrDef> attrs) {
  const Status s = r.DeclareAttrs(type, std::move(attrs));
  RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
}

}  // namespace

void DeclareCoreAttrSchemas(OpRegistry& r) {
  // Array ops. Placeholder's dataset_column marks a column the pipeline feeds (DatasetColumn).
  Declare(r, "Placeholder",
          {RequiredAttr("dtype", T::kDType), Attr("shape", T::kShape),  // absent: unknown shape
           Attr("dataset_column", T::kString, "")});
  Declare(r, "Const", {RequiredAttr("value", T::kTensor)});
  for (const char* type : {"Identity", "StopGradient", "NoOp", "ZerosLike", "OnesLike",
                           "ReshapeLike", "SumToShapeOf", "BroadcastToShapeOf"}) {
    Declare(r, type, {});
  }
  Declare(r, "Gather", {Attr("axis", T::kInt, 0)});
  Declare(r, "GatherGrad", {Attr("axis", T::kInt, 0)});
  Declare(r, "Fill", {RequiredAttr("shape", T::kShape)});
  Declare(r, "Cast", {RequiredAttr("dtype", T::kDType)});
  Declare(r, "Concat", {Attr("axis", T::kInt, 0)});
  Declare(r, "ConcatGrad", {Attr("axis", T::kInt, 0)});
  Declare(r, "SplitV", {RequiredAttr("sizes", T::kInts), Attr("axis", T::kInt, 0)});
  Declare(r, "Slice", {RequiredAttr("begin", T::kInts), RequiredAttr("size", T::kInts)});
  Declare(r, "SliceGrad", {RequiredAttr("begin", T::kInts)});
  Declare(r, "Reshape", {RequiredAttr("shape", T::kInts)});
  Declare(r, "Transpose", {RequiredAttr("perm", T::kInts)});
  Declare(r, "Tile", {RequiredAttr("multiples", T::kInts)});
  Declare(r, "TileGrad", {RequiredAttr("multiples", T::kInts)});

  // Math ops.
  Declare(r, "MatMul",
          {Attr("transpose_a", T::kBool, false), Attr("transpose_b", T::kBool, false)});
  Declare(r, "BatchMatMul", {Attr("adj_x", T::kBool, false), Attr("adj_y", T::kBool, false)});
  for (const char* type :
       {"BiasAdd",  "BiasAddGrad",  "Add",         "Sub",      "Mul",      "Div",       "Maximum",
        "Minimum",  "Pow",          "AddN",        "Neg",      "Square",   "Exp",       "Log",
        "Abs",      "Sign",         "Sqrt",        "SqrtGrad", "Rsqrt",    "RsqrtGrad", "Relu",
        "ReluGrad", "Sigmoid",      "SigmoidGrad", "Tanh",     "TanhGrad", "Less",      "LessEqual",
        "Greater",  "GreaterEqual", "Equal",       "FloorMod", "FloorDiv", "Where"}) {
    Declare(r, type, {});
  }
  Declare(r, "LeakyRelu", {Attr("alpha", T::kFloat, 0.2)});
  Declare(r, "LeakyReluGrad", {Attr("alpha", T::kFloat, 0.2)});
  Declare(r, "Gelu", {Attr("approximate", T::kBool, false)});
  Declare(r, "GeluGrad", {Attr("approximate", T::kBool, false)});
  for (const char* type : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    Declare(r, type,
            {Attr("axes", T::kInts, std::vector<int64_t>{}), Attr("keep_dims", T::kBool, false)});
  }
  Declare(r, "ReduceSumGrad",
          {Attr("axes", T::kInts, std::vector<int64_t>{}), Attr("mean", T::kBool, false)});
  Declare(r, "ReduceMaxGrad", {Attr("axes", T::kInts, std::vector<int64_t>{})});

  // NN ops.
  Declare(r, "DotInteraction", {});
  Declare(r, "DotInteractionGrad", {});
  for (const char* type : {"Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"}) {
    Declare(r, type, {Attr("axis", T::kInt, -1)});
  }
  Declare(r, "Dropout", {RequiredAttr("rate", T::kFloat), Attr("seed", T::kInt, 0)});
  Declare(r, "DotInteraction", {});
  Declare(r, "DotInteractionGrad", {});
  Declare(r, "SigmoidCrossEntropyWithLogits", {});
  Declare(r, "SoftmaxCrossEntropyWithLogits", {});

  // Random sources: a and b are (min, max) for RandomUniform, (mean, stddev) for the normals.
  for (const char* type : {"RandomUniform", "RandomNormal", "TruncatedNormal"}) {
    Declare(r, type,
            {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType),
             Attr("a", T::kFloat, 0.0), Attr("b", T::kFloat, 0.0), Attr("seed", T::kInt, 0)});
  }

  // State ops and the dense optimizers' fused updates.
  Declare(r, "VarHandle",
          {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType),
           Attr("trainable", T::kBool, true)});
  Declare(r, "ReadVariable", {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType)});
  for (const char* type : {"Assign", "AssignAdd", "AssignSub"}) Declare(r, type, {});
  Declare(r, "ApplyGradientDescent", {RequiredAttr("learning_rate", T::kFloat)});
  Declare(r, "ApplyMomentum",
          {RequiredAttr("learning_rate", T::kFloat), RequiredAttr("momentum", T::kFloat),
           Attr("use_nesterov", T::kBool, false)});
  Declare(r, "ApplyAdagrad",
          {RequiredAttr("learning_rate", T::kFloat), Attr("epsilon", T::kFloat, 0.0)});
  Declare(r, "ApplyAdam",
          {RequiredAttr("learning_rate", T::kFloat), RequiredAttr("beta1", T::kFloat),
           RequiredAttr("beta2", T::kFloat), RequiredAttr("epsilon", T::kFloat),
           Attr("weight_decay", T::kFloat, 0.0)});
  Declare(r, "ApplyRmsProp",
          {RequiredAttr("learning_rate", T::kFloat), RequiredAttr("rho", T::kFloat),
           Attr("momentum", T::kFloat, 0.0), RequiredAttr("epsilon", T::kFloat),
           Attr("centered", T::kBool, false)});
}

}  // namespace recsdk::internal
