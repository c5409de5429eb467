// recsdk/optimizers.h: dense optimizers.
//
// An optimizer adds update ops to the graph: ComputeGradients (autodiff), ApplyGradients (one
// update op per variable, plus the optimizer's own state such as Adam's step count) and
// Minimize (both, and the global step increment). Slots (momentum, accumulators) are
// non-trainable variables named "<var>/<Optimizer>/<slot>", initialised by the init op, so they
// are saved with the model. Wrappers (distributed allreduce, loss scaling) subclass Optimizer and
// forward to an inner one.
#ifndef RECSDK_OPTIMIZERS_H_
#define RECSDK_OPTIMIZERS_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recsdk/scope.h"
#include "recsdk/variables.h"

namespace recsdk {

// GradsAndVars: (gradient, variable) pairs, as ComputeGradients returns them and ApplyGradients
// takes them.
using GradsAndVars = std::vector<std::pair<Output, Variable>>;

// LearningRateSchedule: a multiplier on a dense optimizer's learning_rate that changes with the
// optimizer's step (the updates it has applied, counted by a non-trainable int64 variable
// "<optimizer name>/schedule_step", saved with checkpoints, so a restored run resumes the
// schedule). The default (no warm-up, kConstant) adds nothing to the graph. With t the step
// (0 for the first update):
//   warm-up, t < warmup_steps:  (t + 1) / warmup_steps   (linear, reaching 1 at its last step)
//   then, with u = t - warmup_steps:
//     kConstant:     1
//     kExponential:  decay_rate ^ (u / decay_steps)   (exponent floored when staircase)
//     kCosine:       alpha + (1 - alpha) (1 + cos(pi min(u, decay_steps) / decay_steps)) / 2
// The multiplier is one LearningRateMultiplier op per ApplyGradients; every update reads it.
// Dense optimizers only: a table's sparse optimizer keeps the fixed rate of its
// SparseOptimizerConfig (no schedule there yet).
struct LearningRateSchedule {
  // Decay: pinned values (they are stored in the graph's op attributes).
  enum class Decay : int32_t { kConstant = 0, kExponential = 1, kCosine = 2 };
  int64_t warmup_steps = 0;  // >= 0; 0: no warm-up
  // decay: the decay after the warm-up. Default kConstant.
  Decay decay = Decay::kConstant;
  int64_t decay_steps = 0;   // > 0 for kExponential and kCosine; 0 for kConstant
  double decay_rate = 0.96;  // kExponential: in (0, 1]
  bool staircase = false;    // kExponential: decay in whole periods of decay_steps
  double alpha = 0.0;        // kCosine: the final multiplier, in [0, 1]

  // is_constant: true when the multiplier is 1 at every step (nothing is added to the graph).
  bool is_constant() const { return warmup_steps == 0 && decay == Decay::kConstant; }
  // Multiplier: the factor at step `step` (the host reference of the graph's op).
  double Multiplier(int64_t step) const;
  // Validate: InvalidArgument naming `owner` (the optimizer), the field, its value and the rule.
  Status Validate(std::string_view owner) const;
};

// Optimizer: the base of the dense optimizers (see the file comment). A subclass implements name()
// and ApplyDense, and may override the other protected hooks. Threading: build-time, like Scope.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // name: the optimizer's name, used in its slots' names ("<var>/<name()>/<slot>") and in messages.
  virtual std::string name() const = 0;

  // ComputeGradients: d loss / d var for each var (all trainable variables when empty). Pairs
  // whose gradient is invalid (var does not reach the loss) are kept with an invalid Output.
  virtual StatusOr<GradsAndVars> ComputeGradients(const Scope& scope, Output loss,
                                                  const std::vector<Variable>& var_list = {});
  // ApplyGradients: one update per pair with a valid gradient; increments `global_step` when
  // given. Returns a NoOp target that runs every update.
  virtual StatusOr<Node*> ApplyGradients(const Scope& scope, const GradsAndVars& grads_and_vars,
                                         const Variable* global_step = nullptr);
  // Minimize: ComputeGradients + ApplyGradients with the graph's global step (created if
  // missing).
  StatusOr<Node*> Minimize(const Scope& scope, Output loss,
                           const std::vector<Variable>& var_list = {});

 protected:
  // ApplyDense: the update op of one variable. Called once per variable by ApplyGradients.
  virtual StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) = 0;
  // ValidateOptions: InvalidArgument naming the first option that breaks its rule (every float
  // option must be finite); ApplyGradients calls it before it builds anything.
  virtual Status ValidateOptions() const { return Status(); }
  // Prepare runs once per ApplyGradients before the updates; FinishUpdates after them, with
  // every update op (Adam advances its step count there).
  virtual Status Prepare(const Scope& /*scope*/) { return Status(); }
  // FinishUpdates: may add ops after `updates` and returns the updates the ApplyGradients target
  // waits for. The default returns `updates`.
  virtual StatusOr<std::vector<Node*>> FinishUpdates(const Scope& scope,
                                                     std::vector<Node*> updates);
  // learning_rate_schedule: the optimizer's schedule (the options' learning_rate_schedule).
  virtual const LearningRateSchedule& learning_rate_schedule() const;
  // WithLearningRate: `inputs` of an Apply* op, plus the schedule's multiplier when there is one
  // (the kernels multiply learning_rate by their optional last input).
  std::vector<Output> WithLearningRate(std::vector<Output> inputs) const;
  // Slot creates a non-trainable variable shaped like `var` named "<var>/<name()>/<slot>".
  Variable Slot(const Scope& scope, const Variable& var, const std::string& slot,
                double initial_value);

 private:
  Output lr_multiplier_;  // valid during ApplyGradients when the schedule is not constant
};

// SgdOptions: SgdOptimizer's options. Every number must be finite (ApplyGradients checks).
struct SgdOptions {
  // learning_rate: the step size. Default 0.01.
  double learning_rate = 0.01;
  LearningRateSchedule learning_rate_schedule = {};  // default: constant
};
// SGD: var -= lr * g.
class SgdOptimizer : public Optimizer {
 public:
  // SgdOptimizer, name "SGD".
  explicit SgdOptimizer(SgdOptions options = {}) : options_(options) {}
  std::string name() const override { return "SGD"; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;
  Status ValidateOptions() const override;
  const LearningRateSchedule& learning_rate_schedule() const override {
    return options_.learning_rate_schedule;
  }

 private:
  SgdOptions options_;
};

// MomentumOptions: MomentumOptimizer's options. Every number must be finite.
struct MomentumOptions {
  // learning_rate, momentum, use_nesterov: the step size (default 0.01), the decay of the
  // accumulator (default 0.9) and the Nesterov form (default false), as the rule below uses them.
  double learning_rate = 0.01;
  double momentum = 0.9;
  bool use_nesterov = false;
  LearningRateSchedule learning_rate_schedule = {};  // default: constant
};
// Momentum: accum = momentum*accum + g; var -= lr*accum, or with Nesterov
// var -= lr*(g + momentum*accum) (TensorFlow's formulation).
class MomentumOptimizer : public Optimizer {
 public:
  // MomentumOptimizer, name "Momentum".
  explicit MomentumOptimizer(MomentumOptions options = {}) : options_(options) {}
  std::string name() const override { return "Momentum"; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;
  Status ValidateOptions() const override;
  const LearningRateSchedule& learning_rate_schedule() const override {
    return options_.learning_rate_schedule;
  }

 private:
  MomentumOptions options_;
};

// AdagradOptions: AdagradOptimizer's options. Every number must be finite.
struct AdagradOptions {
  // learning_rate, initial_accumulator_value, epsilon: the step size (default 0.001), the
  // accumulator's first value (default 0.1) and the term added to sqrt(accum) (default 1e-7).
  double learning_rate = 0.001;
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  LearningRateSchedule learning_rate_schedule = {};  // default: constant
};
// Adagrad: accum += g^2; var -= lr * g / (sqrt(accum) + epsilon).
class AdagradOptimizer : public Optimizer {
 public:
  // AdagradOptimizer, name "Adagrad".
  explicit AdagradOptimizer(AdagradOptions options = {}) : options_(options) {}
  std::string name() const override { return "Adagrad"; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;
  Status ValidateOptions() const override;
  const LearningRateSchedule& learning_rate_schedule() const override {
    return options_.learning_rate_schedule;
  }

 private:
  AdagradOptions options_;
};

// AdamOptions: the options of AdamOptimizer and AdamWOptimizer. Every number must be finite.
struct AdamOptions {
  // learning_rate, beta1, beta2, epsilon: lr (default 0.001), b1 (0.9), b2 (0.999) and eps (1e-8)
  // of the rule below.
  double learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // weight_decay: used by AdamW only (decoupled decay).
  double weight_decay = 0.0;
  // learning_rate_schedule: default constant; it scales every use of lr (lr_t, and AdamW's
  // lr * weight_decay, as PyTorch's schedulers do).
  LearningRateSchedule learning_rate_schedule = {};
};
// Adam (bias-corrected, TensorFlow's epsilon placement): with t the step (from 1),
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; lr_t = lr sqrt(1-b2^t)/(1-b1^t);
// var -= lr_t m / (sqrt(v) + eps).
class AdamOptimizer : public Optimizer {
 public:
  // AdamOptimizer, name "Adam".
  explicit AdamOptimizer(AdamOptions options = {}) : options_(options) {}
  std::string name() const override { return "Adam"; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;
  Status ValidateOptions() const override;
  const LearningRateSchedule& learning_rate_schedule() const override {
    return options_.learning_rate_schedule;
  }
  Status Prepare(const Scope& scope) override;
  StatusOr<std::vector<Node*>> FinishUpdates(const Scope& scope,
                                             std::vector<Node*> updates) override;
  // options_: the options (AdamWOptimizer reads weight_decay).
  AdamOptions options_;

 private:
  Variable step_;  // number of updates applied so far (int64, "<name()>/step")
};

// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter): before the Adam step,
// var -= lr * weight_decay * var. Default weight_decay 0.01.
class AdamWOptimizer : public AdamOptimizer {
 public:
  // AdamWOptimizer, name "AdamW"; DefaultOptions: AdamOptions with weight_decay 0.01.
  explicit AdamWOptimizer(AdamOptions options = DefaultOptions()) : AdamOptimizer(options) {}
  static AdamOptions DefaultOptions() {
    AdamOptions o;
    o.weight_decay = 0.01;
    return o;
  }
  std::string name() const override { return "AdamW"; }
};

// RmsPropOptions: RmsPropOptimizer's options. Every number must be finite.
struct RmsPropOptions {
  // learning_rate, momentum, epsilon, centered: lr (default 0.001), momentum (0), eps (1e-7) and
  // the centered form (false) of the rule below.
  double learning_rate = 0.001;
  double rho = 0.9;  // decay of the mean square
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  LearningRateSchedule learning_rate_schedule = {};  // default: constant
};
// RMSProp: ms = rho ms + (1-rho) g^2; (centered: mg = rho mg + (1-rho) g, denom = ms - mg^2);
// mom = momentum mom + lr g / sqrt(denom + eps); var -= mom.
class RmsPropOptimizer : public Optimizer {
 public:
  // RmsPropOptimizer, name "RMSProp".
  explicit RmsPropOptimizer(RmsPropOptions options = {}) : options_(options) {}
  std::string name() const override { return "RMSProp"; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;
  Status ValidateOptions() const override;
  const LearningRateSchedule& learning_rate_schedule() const override {
    return options_.learning_rate_schedule;
  }

 private:
  RmsPropOptions options_;
};

}  // namespace recsdk

#endif  // RECSDK_OPTIMIZERS_H_
