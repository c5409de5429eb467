// loss_scale.cc: DenseLossScaleOptimizer and SparseLossScaleOptimizer (recsdk/loss_scale.h).
//
// Graph shape of one dynamic step: scaled = loss * S; the gradients of `scaled` times 1/S feed
// AllFinite -> ControlGate, and the gate is a control input of every update op the inner
// optimizer built (so a step with an overflow runs none of them: the executor skips them); the
// new S and counters come from Where selects on the finite flag and are assigned after the
// updates. Every read of S in the step is an ancestor of the flag, so it sees the old value.
//
// Threading: build-time only, like Scope.
#include "recsdk/loss_scale.h"

#include <cmath>
#include <map>
#include <memory>
#include <utility>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/ops.h"
#include "src/common/status_macros.h"
#include "src/graph/graph_access.h"

namespace recsdk {
namespace {

// ScaleState: S for this graph (a constant when static), and the dynamic state variables.
struct ScaleState {
  Output scale;
  Variable scale_var, good, bad;
};

StatusOr<ScaleState> GetState(const Scope& scope, const LossScaleOptions& o) {
  RECSDK_RETURN_IF_ERROR(o.Validate());
  Graph* g = scope.graph();
  Scope root(g);
  ScaleState st;
  if (!o.dynamic) {
    st.scale = ops::Const(root.WithOpName(g->UniqueName(o.name + "/static_scale")),
                          static_cast<float>(o.loss_scale));
  } else {
    VariableOptions f;
    f.initializer = Initializer::Constant(o.loss_scale);
    f.trainable = false;
    VariableOptions i;
    i.initializer = Initializer::Zeros();
    i.trainable = false;
    i.dtype = DType::kInt64;
    st.scale_var = Variable::GetOrCreate(root, o.name + "/loss_scale", Shape{}, f);
    st.good = Variable::GetOrCreate(root, o.name + "/good_steps", Shape{}, i);
    st.bad = Variable::GetOrCreate(root, o.name + "/bad_steps", Shape{}, i);
    st.scale = st.scale_var.value();
  }
  if (!root.ok()) return root.status();
  return st;
}

// ScaledLoss: loss * S. With static scaling the product is shared by every wrapper of the same
// loss and S (dense and sparse), so the gradient cache gives them one backward pass.
StatusOr<Output> ScaledLoss(const Scope& scope, Output loss, const ScaleState& st,
                            const LossScaleOptions& o) {
  if (!loss.valid()) return absl::InvalidArgumentError("loss scaling: the loss is invalid");
  if (loss.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(
        fmt::format("loss scaling: loss \"{}\" is {}; scale a float32 loss", loss.name(),
                    DTypeName(loss.dtype())));
  }
  Graph* g = scope.graph();
  using Cache = std::map<std::string, Output>;
  std::shared_ptr<void>& slot =
      internal::GraphAccess::BuilderState(*g, "recsdk/loss_scale/static_scaled_losses");
  if (!slot) slot = std::make_shared<Cache>();
  auto* cache = static_cast<Cache*>(slot.get());
  const std::string key = fmt::format("{}@{}", loss.name(), o.loss_scale);
  if (!o.dynamic) {
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  Scope root(g);
  const Output scaled =
      ops::Mul(root.WithOpName(g->UniqueName(o.name + "/scaled_loss")), loss, st.scale);
  if (!scaled.valid()) return root.status();
  if (!o.dynamic) (*cache)[key] = scaled;
  return scaled;
}

// InverseScale: 1 / S, once per wrapper and graph.
Output InverseScale(const Scope& scope, const ScaleState& st, const LossScaleOptions& o) {
  Scope root(scope.graph());
  return ops::Div(root.WithOpName(scope.graph()->UniqueName(o.name + "/inverse_scale")),
                  ops::Const(root, 1.0f), st.scale);
}

// GateAndUpdate: builds the updates (through `build`), gated on the gradients being finite when
// dynamic, then the S update. Returns a NoOp grouping everything.
StatusOr<Node*> GateAndUpdate(const Scope& scope, const ScaleState& st, const LossScaleOptions& o,
                              const std::vector<Output>& grads,
                              const std::function<StatusOr<Node*>()>& build) {
  if (!o.dynamic) return build();
  if (grads.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: no gradients to check; the loss does not depend on the variables", o.name));
  }
  const Scope s = scope.NewSubScope(o.name);
  const Output finite = Output(s.WithOpName("all_finite").AddNode("AllFinite", grads), 0);
  Node* gate = s.WithOpName("gate").AddNode("ControlGate", {finite});
  if (gate == nullptr) return s.status();
  RECSDK_ASSIGN_OR_RETURN(Node * train, build());
  // The gate was built before the updates, so its id is smaller: the graph stays in order.
  for (Node* update : train->control_inputs()) update->AddControlInput(gate);

  // raise: finite and the run of good steps reaches incr_every_n_steps; lower: an overflow that
  // makes the run of bad steps reach decr_every_n_nan_or_inf.
  const Output one = ops::Const(s, int64_t{1}), zero = ops::Const(s, int64_t{0});
  const Output good1 = ops::Add(s, st.good.value(), one);
  const Output bad1 = ops::Add(s, st.bad.value(), one);
  // Where selects int64 counters (it has no bool kernel): an overflow zeroes the good run and a
  // finite step the bad run, so the comparisons are false where they must be (both N >= 1).
  const Output good_run = ops::Where(s, finite, good1, zero);
  const Output bad_run = ops::Where(s, finite, zero, bad1);
  const Output raise = ops::GreaterEqual(s, good_run, ops::Const(s, o.incr_every_n_steps));
  const Output lower = ops::GreaterEqual(s, bad_run, ops::Const(s, o.decr_every_n_nan_or_inf));
  const Output scale = st.scale;
  const Output raised =
      ops::Minimum(s, ops::Mul(s, scale, ops::Const(s, static_cast<float>(o.incr_ratio))),
                   ops::Const(s, static_cast<float>(o.max_loss_scale)));
  const Output lowered =
      ops::Maximum(s, ops::Mul(s, scale, ops::Const(s, static_cast<float>(o.decr_ratio))),
                   ops::Const(s, static_cast<float>(o.min_loss_scale)));
  const Output new_scale = ops::Where(s, raise, raised, ops::Where(s, lower, lowered, scale));
  const Output new_good = ops::Where(s, raise, zero, good_run);
  const Output new_bad = ops::Where(s, lower, zero, bad_run);
  const Scope after = s.WithControlDependencies({train});
  std::vector<Node*> all = {train,
                            Assign(after.WithOpName("update_scale"), st.scale_var, new_scale),
                            Assign(after.WithOpName("update_good_steps"), st.good, new_good),
                            Assign(after.WithOpName("update_bad_steps"), st.bad, new_bad)};
  Node* group = ops::Group(s.WithOpName("train_op"), all);
  if (group == nullptr) return s.status();
  return group;
}

LossScaleOptions WithName(LossScaleOptions o, const char* name) {
  if (o.name.empty()) o.name = name;
  return o;
}
LossScaleOptions StaticOptions(double loss_scale) {
  LossScaleOptions o;
  o.loss_scale = loss_scale;
  return o;
}

}  // namespace

Status LossScaleOptions::Validate() const {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(fmt::format("loss scaling \"{}\": {}", name, what));
  };
  // Every float option must be finite, also those a static scale does not use.
  for (const auto& [option, value] : {std::pair<const char*, double>{"incr_ratio", incr_ratio},
                                      {"decr_ratio", decr_ratio},
                                      {"min_loss_scale", min_loss_scale},
                                      {"max_loss_scale", max_loss_scale}}) {
    if (!std::isfinite(value)) {
      return bad(
          fmt::format("{} {} is not a finite number; leave it at its default or set a "
                      "finite value",
                      option, value));
    }
  }
  if (!std::isfinite(loss_scale) || loss_scale < 1.0 || loss_scale > 18446744073709551616.0) {
    return bad(fmt::format("loss_scale {} must be finite and in [1, 2^64]; 65536 is the spec's",
                           loss_scale));
  }
  if (!dynamic) return absl::OkStatus();
  if (incr_every_n_steps < 1) {
    return bad(fmt::format("incr_every_n_steps {} must be >= 1", incr_every_n_steps));
  }
  if (decr_every_n_nan_or_inf < 1) {
    return bad(fmt::format("decr_every_n_nan_or_inf {} must be >= 1", decr_every_n_nan_or_inf));
  }
  if (!(incr_ratio > 1.0) || !std::isfinite(incr_ratio)) {
    return bad(
        fmt::format("incr_ratio {} must be finite and > 1 (2 doubles the scale)", incr_ratio));
  }
  if (!(decr_ratio > 0.0 && decr_ratio < 1.0)) {
    return bad(fmt::format("decr_ratio {} must be in (0, 1) (0.5 halves the scale)", decr_ratio));
  }
  if (!(min_loss_scale >= 1.0 && min_loss_scale <= loss_scale && loss_scale <= max_loss_scale &&
        std::isfinite(max_loss_scale) && max_loss_scale <= 3.0e38)) {
    return bad(fmt::format(
        "need 1 <= min_loss_scale ({}) <= loss_scale ({}) <= max_loss_scale ({}) <= 3e38",
        min_loss_scale, loss_scale, max_loss_scale));
  }
  return absl::OkStatus();
}

// --- Dense ---------------------------------------------------------------------------------------

DenseLossScaleOptimizer::DenseLossScaleOptimizer(std::shared_ptr<Optimizer> inner,
                                                 double loss_scale)
    : DenseLossScaleOptimizer(std::move(inner), StaticOptions(loss_scale)) {}

DenseLossScaleOptimizer::DenseLossScaleOptimizer(std::shared_ptr<Optimizer> inner,
                                                 LossScaleOptions options)
    : inner_(std::move(inner)), options_(WithName(std::move(options), "loss_scale")) {}

StatusOr<GradsAndVars> DenseLossScaleOptimizer::ComputeGradients(
    const Scope& scope, Output loss, const std::vector<Variable>& var_list) {
  if (inner_ == nullptr) {
    return absl::InvalidArgumentError("DenseLossScaleOptimizer: the inner optimizer is null");
  }
  RECSDK_ASSIGN_OR_RETURN(ScaleState st, GetState(scope, options_));
  scale_ = st.scale;
  RECSDK_ASSIGN_OR_RETURN(Output scaled, ScaledLoss(scope, loss, st, options_));
  RECSDK_ASSIGN_OR_RETURN(GradsAndVars gv, inner_->ComputeGradients(scope, scaled, var_list));
  const Output inv = InverseScale(scope, st, options_);
  const Scope s = scope.NewSubScope(options_.name + "_unscale");
  for (auto& [grad, var] : gv) {
    if (grad.valid()) grad = ops::Mul(s, grad, inv);
  }
  if (!scope.ok()) return scope.status();
  return gv;
}

StatusOr<Node*> DenseLossScaleOptimizer::ApplyGradients(const Scope& scope,
                                                        const GradsAndVars& grads_and_vars,
                                                        const Variable* global_step) {
  if (inner_ == nullptr) {
    return absl::InvalidArgumentError("DenseLossScaleOptimizer: the inner optimizer is null");
  }
  RECSDK_ASSIGN_OR_RETURN(ScaleState st, GetState(scope, options_));
  scale_ = st.scale;
  if (!options_.dynamic) return inner_->ApplyGradients(scope, grads_and_vars, global_step);
  std::vector<Output> grads;
  for (const auto& [grad, var] : grads_and_vars) {
    if (grad.valid()) grads.push_back(grad);
  }
  RECSDK_ASSIGN_OR_RETURN(Node * train,
                          GateAndUpdate(scope, st, options_, grads, [&]() -> StatusOr<Node*> {
                            return inner_->ApplyGradients(scope, grads_and_vars, nullptr);
                          }));
  if (global_step == nullptr || !global_step->valid()) return train;
  // The step advances whether or not the update ran: the batch was consumed.
  const Scope s = scope.NewSubScope(options_.name);
  Node* inc = AssignAdd(s.WithControlDependencies({train}).WithOpName("increment_global_step"),
                        *global_step, ops::Const(s, int64_t{1}));
  Node* group = ops::Group(s.WithOpName("train_op_and_step"), {train, inc});
  if (group == nullptr) return s.status();
  return group;
}

StatusOr<Node*> DenseLossScaleOptimizer::ApplyDense(const Scope&, Output, const Variable& var) {
  return absl::InternalError(fmt::format(
      "DenseLossScaleOptimizer::ApplyDense(\"{}\") is never called: updates go through the inner "
      "optimizer's ApplyGradients",
      var.name()));
}

// --- Sparse --------------------------------------------------------------------------------------

SparseLossScaleOptimizer::SparseLossScaleOptimizer(double loss_scale)
    : SparseLossScaleOptimizer(StaticOptions(loss_scale)) {}

SparseLossScaleOptimizer::SparseLossScaleOptimizer(LossScaleOptions options)
    : options_(WithName(std::move(options), "sparse_loss_scale")) {}

SparseLossScaleOptimizer::SparseLossScaleOptimizer(const HashOptimizer& inner, double loss_scale)
    : SparseLossScaleOptimizer(StaticOptions(loss_scale)) {
  inner_ = inner;
}

SparseLossScaleOptimizer::SparseLossScaleOptimizer(const HashOptimizer& inner,
                                                   LossScaleOptions options)
    : SparseLossScaleOptimizer(std::move(options)) {
  inner_ = inner;
}

Status SparseLossScaleOptimizer::NeedInner(const char* call) const {
  if (inner_.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "SparseLossScaleOptimizer::{}: this \"{}\" wrapper has no inner sparse optimizer; build it "
      "as SparseLossScaleOptimizer(create_hash_optimizer(...), scale), or call ComputeGradients / "
      "ApplyGradients",
      call, options_.name));
}

StatusOr<std::vector<SparseGradients>> SparseLossScaleOptimizer::compute_gradients(
    const Scope& scope, Output loss, const std::vector<SparseTable>& var_list) {
  RECSDK_RETURN_IF_ERROR(NeedInner("compute_gradients"));
  if (!scope.ok()) return scope.status();
  std::vector<SparseTable> tables = var_list;
  if (tables.empty()) {
    RECSDK_ASSIGN_OR_RETURN(auto variables, get_dense_and_sparse_variable(scope.graph()));
    tables = std::move(variables.second);
  }
  for (const SparseTable& t : tables) {
    RECSDK_RETURN_IF_ERROR(inner_->CheckTable(t, "SparseLossScaleOptimizer::compute_gradients"));
  }
  RECSDK_ASSIGN_OR_RETURN(std::vector<SparseGrad> grads, ComputeGradients(scope, loss, tables));
  return internal::GroupGradientsByTable(std::move(grads), tables);
}

StatusOr<Node*> SparseLossScaleOptimizer::apply_gradients(const Scope& scope,
                                                          const SparseGradsAndVars& grads_and_vars,
                                                          const SparseApplyOptions& options) {
  RECSDK_RETURN_IF_ERROR(NeedInner("apply_gradients"));
  RECSDK_ASSIGN_OR_RETURN(
      std::vector<SparseGrad> flat,
      internal::FlattenGradsAndVars(*inner_, grads_and_vars,
                                    "SparseLossScaleOptimizer::apply_gradients"));
  return ApplyGradients(scope, flat, options);
}

StatusOr<std::vector<SparseGrad>> SparseLossScaleOptimizer::ComputeGradients(
    const Scope& scope, Output loss, const std::vector<SparseTable>& tables) {
  RECSDK_ASSIGN_OR_RETURN(ScaleState st, GetState(scope, options_));
  scale_ = st.scale;
  RECSDK_ASSIGN_OR_RETURN(Output scaled, ScaledLoss(scope, loss, st, options_));
  RECSDK_ASSIGN_OR_RETURN(std::vector<SparseGrad> grads,
                          ComputeSparseGradients(scope, scaled, tables));
  const Output inv = InverseScale(scope, st, options_);
  const Scope s = scope.NewSubScope(options_.name + "_unscale");
  for (SparseGrad& g : grads) g.summed = ops::Mul(s, g.summed, inv);
  if (!scope.ok()) return scope.status();
  return grads;
}

StatusOr<Node*> SparseLossScaleOptimizer::ApplyGradients(const Scope& scope,
                                                         const std::vector<SparseGrad>& grads,
                                                         const SparseApplyOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(ScaleState st, GetState(scope, options_));
  scale_ = st.scale;
  if (!options_.dynamic) return ApplySparseGradients(scope, grads, options);
  std::vector<Output> summed;
  for (const SparseGrad& g : grads) summed.push_back(g.summed);
  SparseApplyOptions inner = options;
  inner.increment_global_step = false;  // advanced below, outside the gate
  RECSDK_ASSIGN_OR_RETURN(Node * train,
                          GateAndUpdate(scope, st, options_, summed, [&]() -> StatusOr<Node*> {
                            return ApplySparseGradients(scope, grads, inner);
                          }));
  if (!options.increment_global_step) return train;
  const Scope s = scope.NewSubScope(options_.name);
  Variable step =
      options.global_step != nullptr ? *options.global_step : GetOrCreateGlobalStep(scope);
  Node* inc = AssignAdd(s.WithControlDependencies({train}).WithOpName("increment_global_step"),
                        step, ops::Const(s, int64_t{1}));
  Node* group = ops::Group(s.WithOpName("train_op_and_step"), {train, inc});
  if (group == nullptr) return s.status();
  return group;
}

StatusOr<Node*> SparseLossScaleOptimizer::Minimize(const Scope& scope, Output loss,
                                                   const std::vector<SparseTable>& tables,
                                                   const SparseApplyOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(auto grads, ComputeGradients(scope, loss, tables));
  return ApplyGradients(scope, grads, options);
}

}  // namespace recsdk
