// state_ops.cc: variables and their update ops (including the dense optimizers' fused updates).
//
// VarHandle yields a resource handle; ReadVariable its current value; Assign* and Apply* write it.
// Apply* ops take the variable handle first, then slot handles, then the gradient (and, for Adam,
// the step count); hyper-parameters are attributes.
#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {
namespace {

constexpr AttrType kFloat = AttrType::kFloat;

ShapeFn HandleInputs(int count) {
  return [count](InferenceContext& c) {
    for (int i = 0; i < count; ++i) RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, DType::kResource));
    return absl::OkStatus();
  };
}

// An update op: `inputs` start with `handles` resource handles; it has no outputs. Each Apply* op
// may take one more input, a float64 scalar multiplier of its learning_rate
// (LearningRateSchedule, recsdk/optimizers.h).
void RegisterUpdateOp(OpRegistry& r, std::string type, std::vector<std::string> inputs, int handles,
                      std::vector<AttrDef> attrs) {
  r.Register({.type = std::move(type),
              .inputs = std::move(inputs),
              .outputs = {},
              .attrs = std::move(attrs),
              .shape_fn = HandleInputs(handles),
              .no_gradient = true,
              .stateful = true});
}

}  // namespace

void RegisterStateOps(OpRegistry& r) {
  r.Register(
      {.type = "VarHandle",
       .inputs = {},
       .outputs = {"handle"},
       .attrs = {RequiredAttr("shape", AttrType::kShape), RequiredAttr("dtype", AttrType::kDType),
                 Attr("trainable", AttrType::kBool, true)},
       .shape_fn =
           [](InferenceContext& c) {
             if (!c.ShapeAttr("shape").IsFullyDefined()) {
               return c.Error("variable shape {} must be fully defined",
                              c.ShapeAttr("shape").ToString());
             }
             if (DTypeSize(c.DTypeAttr("dtype")) == 0) return c.Error("variable needs a dtype");
             c.AddOutput(DType::kResource, Shape{});
             return absl::OkStatus();
           },
       .no_gradient = true,
       .stateful = true});
  r.Register(
      {.type = "ReadVariable",
       .inputs = {"handle"},
       .outputs = {"value"},
       .attrs = {RequiredAttr("shape", AttrType::kShape), RequiredAttr("dtype", AttrType::kDType)},
       .shape_fn =
           [](InferenceContext& c) {
             RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
             c.AddOutput(c.DTypeAttr("dtype"), c.ShapeAttr("shape"));
             return absl::OkStatus();
           },
       .no_gradient = true,
       .stateful = true});
  for (const char* type : {"Assign", "AssignAdd", "AssignSub"}) {
    RegisterUpdateOp(r, type, {"var", "value"}, 1, {});
  }
  RegisterUpdateOp(r, "ApplyGradientDescent", {"var", "grad", "lr_multiplier?"}, 1,
                   {RequiredAttr("learning_rate", kFloat)});
  RegisterUpdateOp(r, "ApplyMomentum", {"var", "accum", "grad", "lr_multiplier?"}, 2,
                   {RequiredAttr("learning_rate", kFloat), RequiredAttr("momentum", kFloat),
                    Attr("use_nesterov", AttrType::kBool, false)});
  RegisterUpdateOp(r, "ApplyAdagrad", {"var", "accum", "grad", "lr_multiplier?"}, 2,
                   {RequiredAttr("learning_rate", kFloat), Attr("epsilon", kFloat, 0.0)});
  RegisterUpdateOp(r, "ApplyAdam", {"var", "m", "v", "grad", "step", "lr_multiplier?"}, 3,
                   {RequiredAttr("learning_rate", kFloat), RequiredAttr("beta1", kFloat),
                    RequiredAttr("beta2", kFloat), RequiredAttr("epsilon", kFloat),
                    Attr("weight_decay", kFloat, 0.0)});
  RegisterUpdateOp(r, "ApplyRmsProp", {"var", "ms", "mom", "mg", "grad", "lr_multiplier?"}, 4,
                   {RequiredAttr("learning_rate", kFloat), RequiredAttr("rho", kFloat),
                    Attr("momentum", kFloat, 0.0), RequiredAttr("epsilon", kFloat),
                    Attr("centered", AttrType::kBool, false)});
  // LearningRateMultiplier: the schedule's factor (float64 scalar) at an int64 scalar step.
  r.Register({.type = "LearningRateMultiplier",
              .inputs = {"step"},
              .outputs = {"multiplier"},
              .attrs = {Attr("warmup_steps", AttrType::kInt, 0), Attr("decay", AttrType::kInt, 0),
                        Attr("decay_steps", AttrType::kInt, 0), Attr("decay_rate", kFloat, 0.96),
                        Attr("staircase", AttrType::kBool, false), Attr("alpha", kFloat, 0.0)},
              .shape_fn =
                  [](InferenceContext& c) {
                    RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kInt64));
                    c.AddOutput(DType::kFloat64, Shape{});
                    return absl::OkStatus();
                  },
              .no_gradient = true});
}

}  // namespace internal
}  // namespace recsdk
