// dense_optimizers.cc: the graph side of the dense optimizers. Each update is one fused Apply*
// op whose CPU kernel lives in src/device/cpu/kernels/training_kernels.cc.
#include <initializer_list>
#include <string>
#include <tuple>

#include "fmt/format.h"
#include "recsdk/gradients.h"
#include "recsdk/ops.h"
#include "recsdk/optimizers.h"
#include "src/common/finite_option.h"
#include "src/common/learning_rate_schedule.h"
#include "src/common/status_macros.h"

namespace recsdk {

double LearningRateSchedule::Multiplier(int64_t step) const {
  return internal::LearningRateMultiplierAt(step, warmup_steps, static_cast<int64_t>(decay),
                                            decay_steps, decay_rate, staircase, alpha);
}

Status LearningRateSchedule::Validate(std::string_view owner) const {
  auto bad = [&](std::string_view rule) {
    return absl::InvalidArgumentError(fmt::format("{}: learning_rate_schedule {}", owner, rule));
  };
  if (warmup_steps < 0) {
    return bad(fmt::format("warmup_steps {} is negative; use 0 for no warm-up", warmup_steps));
  }
  switch (decay) {
    case Decay::kConstant:
      if (decay_steps != 0) {
        return bad(fmt::format(
            "decay_steps {} is set but decay is kConstant; choose kExponential or kCosine, or "
            "leave decay_steps 0",
            decay_steps));
      }
      return absl::OkStatus();
    case Decay::kExponential:
    case Decay::kCosine:
      break;
    default:
      return bad(fmt::format("decay {} is unknown; use kConstant, kExponential or kCosine",
                             static_cast<int>(decay)));
  }
  if (decay_steps <= 0) {
    return bad(fmt::format(
        "decay_steps {} must be > 0 with a decay (the steps of one decay period)", decay_steps));
  }
  if (decay == Decay::kExponential && !(decay_rate > 0 && decay_rate <= 1)) {
    return bad(fmt::format("decay_rate {} must be in (0, 1] (e.g. 0.96)", decay_rate));
  }
  if (decay == Decay::kCosine && !(alpha >= 0 && alpha <= 1)) {
    return bad(fmt::format("alpha {} must be in [0, 1] (the final fraction of the rate)", alpha));
  }
  return absl::OkStatus();
}

const LearningRateSchedule& Optimizer::learning_rate_schedule() const {
  static const LearningRateSchedule kConstant;
  return kConstant;
}

std::vector<Output> Optimizer::WithLearningRate(std::vector<Output> inputs) const {
  if (lr_multiplier_.valid()) inputs.push_back(lr_multiplier_);
  return inputs;
}

StatusOr<GradsAndVars> Optimizer::ComputeGradients(const Scope& scope, Output loss,
                                                   const std::vector<Variable>& var_list) {
  std::vector<Variable> vars = var_list.empty() ? TrainableVariables(*scope.graph()) : var_list;
  if (vars.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: no variables to optimise; create trainable variables or pass var_list", name()));
  }
  std::vector<Output> xs;
  for (const Variable& v : vars) xs.push_back(v.value());
  auto grads = Gradients(scope, {loss}, xs);
  if (!grads.ok()) return grads.status();
  GradsAndVars out;
  for (size_t i = 0; i < vars.size(); ++i) out.emplace_back((*grads)[i], vars[i]);
  return out;
}

StatusOr<Node*> Optimizer::ApplyGradients(const Scope& scope, const GradsAndVars& grads_and_vars,
                                          const Variable* global_step) {
  if (Status st = ValidateOptions(); !st.ok()) return st;
  const LearningRateSchedule& schedule = learning_rate_schedule();
  RECSDK_RETURN_IF_ERROR(schedule.Validate(name()));
  const Scope s = scope.NewSubScope(name());
  if (Status st = Prepare(s); !st.ok()) return st;
  // The schedule's step is the optimizer's own (like Adam's): read by the multiplier before the
  // updates, advanced after all of them.
  Variable schedule_step;
  lr_multiplier_ = Output();
  if (!schedule.is_constant()) {
    VariableOptions o;
    o.initializer = Initializer::Zeros();
    o.trainable = false;
    o.dtype = DType::kInt64;
    schedule_step = Variable::Make(Scope(s.graph()), name() + "/schedule_step", Shape{}, o);
    Node* m = s.AddNode("LearningRateMultiplier", {schedule_step.value()},
                        {{"warmup_steps", schedule.warmup_steps},
                         {"decay", static_cast<int64_t>(schedule.decay)},
                         {"decay_steps", schedule.decay_steps},
                         {"decay_rate", schedule.decay_rate},
                         {"staircase", schedule.staircase},
                         {"alpha", schedule.alpha}},
                        "learning_rate_multiplier");
    if (m == nullptr) return s.status();
    lr_multiplier_ = Output(m, 0);
  }
  std::vector<Node*> updates;
  for (const auto& [grad, var] : grads_and_vars) {
    if (!grad.valid()) continue;
    if (!IsFloatingPoint(var.dtype())) {
      return absl::InvalidArgumentError(fmt::format("{}: variable \"{}\" is {}, not floating point",
                                                    name(), var.name(), DTypeName(var.dtype())));
    }
    auto update = ApplyDense(s.NewSubScope("update_" + var.name()), grad, var);
    if (!update.ok()) return update.status();
    updates.push_back(*update);
  }
  auto finished = FinishUpdates(s, std::move(updates));
  lr_multiplier_ = Output();
  if (!finished.ok()) return finished.status();
  std::vector<Node*> all = *finished;
  if (schedule_step.valid()) {
    Node* advance = AssignAdd(s.WithControlDependencies(all).WithOpName("advance_schedule_step"),
                              schedule_step, ops::Const(s, int64_t{1}));
    if (advance == nullptr) return s.status();
    all.push_back(advance);
  }
  if (global_step != nullptr && global_step->valid()) {
    Node* inc = AssignAdd(s.WithControlDependencies(all).WithOpName("increment_global_step"),
                          *global_step, ops::Const(s, int64_t{1}));
    all.push_back(inc);
  }
  Node* train = ops::Group(s.WithOpName("train_op"), all);
  if (!scope.ok()) return scope.status();
  return train;
}

StatusOr<Node*> Optimizer::Minimize(const Scope& scope, Output loss,
                                    const std::vector<Variable>& var_list) {
  auto gv = ComputeGradients(scope, loss, var_list);
  if (!gv.ok()) return gv.status();
  Variable step = GetOrCreateGlobalStep(scope);
  return ApplyGradients(scope, *gv, &step);
}

StatusOr<std::vector<Node*>> Optimizer::FinishUpdates(const Scope&, std::vector<Node*> updates) {
  return updates;
}

Variable Optimizer::Slot(const Scope& scope, const Variable& var, const std::string& slot,
                         double initial_value) {
  VariableOptions o;
  o.initializer = Initializer::Constant(initial_value);
  o.trainable = false;
  o.dtype = var.dtype();
  Scope root(scope.graph());
  return Variable::Make(root.WithDevice(var.handle().node->device()),
                        var.name() + "/" + name() + "/" + slot, var.shape(), o);
}

namespace {

// FiniteOptions: the first of `options` (name, value, default) that is not finite, as an error
// naming the optimizer; a NaN learning rate or epsilon otherwise trained the model into NaN.
Status FiniteOptions(const std::string& optimizer,
                     std::initializer_list<std::tuple<const char*, double, double>> options) {
  for (const auto& [option, value, default_value] : options) {
    RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
        optimizer, option, value, fmt::format("set a finite value (default {})", default_value)));
  }
  return absl::OkStatus();
}

StatusOr<Node*> Checked(const Scope& s, Node* n) {
  if (n == nullptr)
    return s.status().ok() ? absl::InternalError("update op was not built") : s.status();
  return n;
}
}  // namespace

StatusOr<Node*> SgdOptimizer::ApplyDense(const Scope& s, Output grad, const Variable& var) {
  return Checked(s, s.AddNode("ApplyGradientDescent", WithLearningRate({var.handle(), grad}),
                              {{"learning_rate", options_.learning_rate}}));
}

StatusOr<Node*> MomentumOptimizer::ApplyDense(const Scope& s, Output grad, const Variable& var) {
  Variable accum = Slot(s, var, "momentum", 0.0);
  return Checked(s,
                 s.AddNode("ApplyMomentum", WithLearningRate({var.handle(), accum.handle(), grad}),
                           {{"learning_rate", options_.learning_rate},
                            {"momentum", options_.momentum},
                            {"use_nesterov", options_.use_nesterov}}));
}

StatusOr<Node*> AdagradOptimizer::ApplyDense(const Scope& s, Output grad, const Variable& var) {
  Variable accum = Slot(s, var, "accumulator", options_.initial_accumulator_value);
  return Checked(
      s, s.AddNode("ApplyAdagrad", WithLearningRate({var.handle(), accum.handle(), grad}),
                   {{"learning_rate", options_.learning_rate}, {"epsilon", options_.epsilon}}));
}

Status AdamOptimizer::Prepare(const Scope& s) {
  VariableOptions o;
  o.initializer = Initializer::Zeros();
  o.trainable = false;
  o.dtype = DType::kInt64;
  Scope root(s.graph());
  step_ = Variable::Make(root, name() + "/step", Shape{}, o);
  return s.status();
}

StatusOr<Node*> AdamOptimizer::ApplyDense(const Scope& s, Output grad, const Variable& var) {
  Variable m = Slot(s, var, "m", 0.0);
  Variable v = Slot(s, var, "v", 0.0);
  return Checked(
      s, s.AddNode("ApplyAdam",
                   WithLearningRate({var.handle(), m.handle(), v.handle(), grad, step_.value()}),
                   {{"learning_rate", options_.learning_rate},
                    {"beta1", options_.beta1},
                    {"beta2", options_.beta2},
                    {"epsilon", options_.epsilon},
                    {"weight_decay", options_.weight_decay}}));
}

StatusOr<std::vector<Node*>> AdamOptimizer::FinishUpdates(const Scope& s,
                                                          std::vector<Node*> updates) {
  // The step advances after every update of this step has read it.
  Node* inc = AssignAdd(s.WithControlDependencies(updates).WithOpName("advance_step"), step_,
                        ops::Const(s, int64_t{1}));
  if (inc == nullptr) return s.status();
  updates.push_back(inc);
  return updates;
}

StatusOr<Node*> RmsPropOptimizer::ApplyDense(const Scope& s, Output grad, const Variable& var) {
  Variable ms = Slot(s, var, "rms", 1.0);
  Variable mom = Slot(s, var, "momentum", 0.0);
  Variable mg = Slot(s, var, "mg", 0.0);
  return Checked(
      s, s.AddNode("ApplyRmsProp",
                   WithLearningRate({var.handle(), ms.handle(), mom.handle(), mg.handle(), grad}),
                   {{"learning_rate", options_.learning_rate},
                    {"rho", options_.rho},
                    {"momentum", options_.momentum},
                    {"epsilon", options_.epsilon},
                    {"centered", options_.centered}}));
}

Status SgdOptimizer::ValidateOptions() const {
  const SgdOptions d;
  return FiniteOptions(name(), {{"learning_rate", options_.learning_rate, d.learning_rate}});
}

Status MomentumOptimizer::ValidateOptions() const {
  const MomentumOptions d;
  return FiniteOptions(name(), {{"learning_rate", options_.learning_rate, d.learning_rate},
                                {"momentum", options_.momentum, d.momentum}});
}

Status AdagradOptimizer::ValidateOptions() const {
  const AdagradOptions d;
  return FiniteOptions(name(), {{"learning_rate", options_.learning_rate, d.learning_rate},
                                {"initial_accumulator_value", options_.initial_accumulator_value,
                                 d.initial_accumulator_value},
                                {"epsilon", options_.epsilon, d.epsilon}});
}

Status AdamOptimizer::ValidateOptions() const {
  const AdamOptions d = name() == "AdamW" ? AdamWOptimizer::DefaultOptions() : AdamOptions{};
  return FiniteOptions(name(), {{"learning_rate", options_.learning_rate, d.learning_rate},
                                {"beta1", options_.beta1, d.beta1},
                                {"beta2", options_.beta2, d.beta2},
                                {"epsilon", options_.epsilon, d.epsilon},
                                {"weight_decay", options_.weight_decay, d.weight_decay}});
}

Status RmsPropOptimizer::ValidateOptions() const {
  const RmsPropOptions d;
  return FiniteOptions(name(), {{"learning_rate", options_.learning_rate, d.learning_rate},
                                {"rho", options_.rho, d.rho},
                                {"momentum", options_.momentum, d.momentum},
                                {"epsilon", options_.epsilon, d.epsilon}});
}

}  // namespace recsdk
