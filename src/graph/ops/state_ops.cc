// state_ops.cc: variables and their update ops (including the dense optimizers' fused updates).
//
// VarHandle yields a resource handle; ReadVariable its current value; Assign* and Apply* write it.
// Apply* ops take the variable handle first, then slot handles, then the gradient (and, for Adam,
// the step count); hyper-parameters are attributes.
#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {
namespace {

Status NoOutputs(InferenceContext&) { return absl::OkStatus(); }

Status HandleInputs(InferenceContext& c, int count) {
  for (int i = 0; i < count; ++i) RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, DType::kResource));
  return absl::OkStatus();
}

// An update op: `handles` resource inputs, then the gradient / value, then `optional_inputs`
// that may be left off (the Apply* ops' learning-rate multiplier).
OpDef UpdateOp(std::string type, int handles, int extra_inputs, int optional_inputs = 0) {
  OpDef d =
      NoGradOp(std::move(type), handles + extra_inputs, handles + extra_inputs + optional_inputs,
               [handles](InferenceContext& c) { return HandleInputs(c, handles); });
  d.stateful = true;
  return d;
}

}  // namespace

void RegisterStateOps(OpRegistry& r) {
  {
    OpDef d = NoGradOp("VarHandle", 0, 0, [](InferenceContext& c) {
      if (!c.ShapeAttr("shape").IsFullyDefined()) {
        return c.Error("variable shape {} must be fully defined", c.ShapeAttr("shape").ToString());
      }
      if (DTypeSize(c.DTypeAttr("dtype")) == 0) return c.Error("variable needs a dtype");
      c.AddOutput(DType::kResource, Shape{});
      return absl::OkStatus();
    });
    d.stateful = true;
    r.Register(d);
  }
  {
    OpDef d = NoGradOp("ReadVariable", 1, 1, [](InferenceContext& c) {
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
      c.AddOutput(c.DTypeAttr("dtype"), c.ShapeAttr("shape"));
      return absl::OkStatus();
    });
    d.stateful = true;
    r.Register(d);
  }
  for (const char* type : {"Assign", "AssignAdd", "AssignSub"}) r.Register(UpdateOp(type, 1, 1));
  // Each Apply* op may take one more input, a float64 scalar multiplier of its learning_rate
  // (LearningRateSchedule, recsdk/optimizers.h).
  r.Register(UpdateOp("ApplyGradientDescent", 1, 1, 1));  // var, grad
  r.Register(UpdateOp("ApplyMomentum", 2, 1, 1));         // var, accum, grad
  r.Register(UpdateOp("ApplyAdagrad", 2, 1, 1));          // var, accum, grad
  r.Register(UpdateOp("ApplyAdam", 3, 2, 1));             // var, m, v, grad, step
  r.Register(UpdateOp("ApplyRmsProp", 4, 1, 1));          // var, ms, mom, mg, grad
  // LearningRateMultiplier: the schedule's factor (float64 scalar) at an int64 scalar step.
  r.Register(NoGradOp("LearningRateMultiplier", 1, 1, [](InferenceContext& c) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kInt64));
    c.AddOutput(DType::kFloat64, Shape{});
    return absl::OkStatus();
  }));
  (void)NoOutputs;
}

}  // namespace internal
}  // namespace recsdk
