// attr_schemas.cc: the attribute schema of every core op (names, types, defaults, required).
//
// Kept in one table, next to nothing else, so a reader sees at a glance what each op accepts and a
// new attribute is one line here. The defaults are the fallbacks the shape functions and kernels
// pass to Node::IntAttr & co.; a schema and its readers must agree (op_registry_test checks that
// every registered op declares one). Graph::AddNode and the pass manager check nodes against
// these schemas, so a missing or mistyped attribute is an error instead of a silent fallback.
//
// Threading: runs once, inside OpRegistry::Global()'s initialisation.
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

using T = AttrValue::Type;

}  // namespace

void DeclareCoreAttrSchemas(OpRegistry& r) {
  // Array ops. Placeholder's dataset_column marks a column the pipeline feeds (DatasetColumn).
  r.DeclareAttrsOrDie("Placeholder", {RequiredAttr("dtype", T::kDType),
                                      Attr("shape", T::kShape),  // absent: unknown shape
                                      Attr("dataset_column", T::kString, "")});
  r.DeclareAttrsOrDie("Const", {RequiredAttr("value", T::kTensor)});
  for (const char* type :
       {"Identity", "StopGradient", "NoOp", "ZerosLike", "OnesLike", "ReshapeLike", "SumToShapeOf",
        "BroadcastToShapeOf", "CopyHostToDevice", "CopyDeviceToHost"}) {
    r.DeclareAttrsOrDie(type, {});
  }
  r.DeclareAttrsOrDie("Gather", {Attr("axis", T::kInt, 0)});
  r.DeclareAttrsOrDie("GatherGrad", {Attr("axis", T::kInt, 0)});
  r.DeclareAttrsOrDie("Fill", {RequiredAttr("shape", T::kShape)});
  r.DeclareAttrsOrDie("Cast", {RequiredAttr("dtype", T::kDType)});
  r.DeclareAttrsOrDie("Concat", {Attr("axis", T::kInt, 0)});
  r.DeclareAttrsOrDie("ConcatGrad", {Attr("axis", T::kInt, 0)});
  r.DeclareAttrsOrDie("SplitV", {RequiredAttr("sizes", T::kInts), Attr("axis", T::kInt, 0)});
  r.DeclareAttrsOrDie("Slice", {RequiredAttr("begin", T::kInts), RequiredAttr("size", T::kInts)});
  r.DeclareAttrsOrDie("SliceGrad", {RequiredAttr("begin", T::kInts)});
  r.DeclareAttrsOrDie("Reshape", {RequiredAttr("shape", T::kInts)});
  r.DeclareAttrsOrDie("Transpose", {RequiredAttr("perm", T::kInts)});
  r.DeclareAttrsOrDie("Tile", {RequiredAttr("multiples", T::kInts)});
  r.DeclareAttrsOrDie("TileGrad", {RequiredAttr("multiples", T::kInts)});

  // Math ops.
  r.DeclareAttrsOrDie("MatMul",
                      {Attr("transpose_a", T::kBool, false), Attr("transpose_b", T::kBool, false)});
  r.DeclareAttrsOrDie("BatchMatMul",
                      {Attr("adj_x", T::kBool, false), Attr("adj_y", T::kBool, false)});
  for (const char* type :
       {"BiasAdd",  "BiasAddGrad",  "Add",         "Sub",      "Mul",      "Div",       "Maximum",
        "Minimum",  "Pow",          "AddN",        "Neg",      "Square",   "Exp",       "Log",
        "Abs",      "Sign",         "Sqrt",        "SqrtGrad", "Rsqrt",    "RsqrtGrad", "Relu",
        "ReluGrad", "Sigmoid",      "SigmoidGrad", "Tanh",     "TanhGrad", "Less",      "LessEqual",
        "Greater",  "GreaterEqual", "Equal",       "FloorMod", "FloorDiv", "Where"}) {
    r.DeclareAttrsOrDie(type, {});
  }
  r.DeclareAttrsOrDie("LeakyRelu", {Attr("alpha", T::kFloat, 0.2)});
  r.DeclareAttrsOrDie("LeakyReluGrad", {Attr("alpha", T::kFloat, 0.2)});
  r.DeclareAttrsOrDie("Gelu", {Attr("approximate", T::kBool, false)});
  r.DeclareAttrsOrDie("GeluGrad", {Attr("approximate", T::kBool, false)});
  for (const char* type : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    r.DeclareAttrsOrDie(
        type, {Attr("axes", T::kInts, std::vector<int64_t>{}), Attr("keep_dims", T::kBool, false)});
  }
  r.DeclareAttrsOrDie("ReduceSumGrad", {Attr("axes", T::kInts, std::vector<int64_t>{}),
                                        Attr("mean", T::kBool, false)});
  r.DeclareAttrsOrDie("ReduceMaxGrad", {Attr("axes", T::kInts, std::vector<int64_t>{})});

  // NN ops.
  r.DeclareAttrsOrDie("DcnCross", {});
  r.DeclareAttrsOrDie("DcnCrossGrad", {});
  r.DeclareAttrsOrDie("BatchOuterProduct", {});
  r.DeclareAttrsOrDie("BatchOuterProductGrad", {});
  r.DeclareAttrsOrDie("DotInteraction", {});
  r.DeclareAttrsOrDie("DotInteractionGrad", {});
  for (const char* type : {"Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"}) {
    r.DeclareAttrsOrDie(type, {Attr("axis", T::kInt, -1)});
  }
  r.DeclareAttrsOrDie("Dropout", {RequiredAttr("rate", T::kFloat), Attr("seed", T::kInt, 0)});
  r.DeclareAttrsOrDie("DotInteraction", {});
  r.DeclareAttrsOrDie("DotInteractionGrad", {});
  r.DeclareAttrsOrDie("SigmoidCrossEntropyWithLogits", {});
  r.DeclareAttrsOrDie("SoftmaxCrossEntropyWithLogits", {});

  // Random sources: a and b are (min, max) for RandomUniform, (mean, stddev) for the normals.
  for (const char* type : {"RandomUniform", "RandomNormal", "TruncatedNormal"}) {
    r.DeclareAttrsOrDie(
        type, {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType),
               Attr("a", T::kFloat, 0.0), Attr("b", T::kFloat, 0.0), Attr("seed", T::kInt, 0)});
  }

  // State ops and the dense optimizers' fused updates.
  r.DeclareAttrsOrDie("VarHandle",
                      {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType),
                       Attr("trainable", T::kBool, true)});
  r.DeclareAttrsOrDie("ReadVariable",
                      {RequiredAttr("shape", T::kShape), RequiredAttr("dtype", T::kDType)});
  for (const char* type : {"Assign", "AssignAdd", "AssignSub"}) r.DeclareAttrsOrDie(type, {});
  r.DeclareAttrsOrDie("ApplyGradientDescent", {RequiredAttr("learning_rate", T::kFloat)});
  r.DeclareAttrsOrDie("ApplyMomentum",
                      {RequiredAttr("learning_rate", T::kFloat),
                       RequiredAttr("momentum", T::kFloat), Attr("use_nesterov", T::kBool, false)});
  r.DeclareAttrsOrDie("ApplyAdagrad",
                      {RequiredAttr("learning_rate", T::kFloat), Attr("epsilon", T::kFloat, 0.0)});
  r.DeclareAttrsOrDie("ApplyAdam",
                      {RequiredAttr("learning_rate", T::kFloat), RequiredAttr("beta1", T::kFloat),
                       RequiredAttr("beta2", T::kFloat), RequiredAttr("epsilon", T::kFloat),
                       Attr("weight_decay", T::kFloat, 0.0)});
  r.DeclareAttrsOrDie("LearningRateMultiplier",
                      {Attr("warmup_steps", T::kInt, 0), Attr("decay", T::kInt, 0),
                       Attr("decay_steps", T::kInt, 0), Attr("decay_rate", T::kFloat, 0.96),
                       Attr("staircase", T::kBool, false), Attr("alpha", T::kFloat, 0.0)});
  r.DeclareAttrsOrDie("ApplyRmsProp",
                      {RequiredAttr("learning_rate", T::kFloat), RequiredAttr("rho", T::kFloat),
                       Attr("momentum", T::kFloat, 0.0), RequiredAttr("epsilon", T::kFloat),
                       Attr("centered", T::kBool, false)});
}

}  // namespace recsdk::internal
