// recsdk/loss_scale.h: loss scaling for dense and sparse optimizers (the spec's
// DenseLossScaleOptimizer / SparseLossScaleOptimizer, `DenseLossScaleOptimizer(opt, 65536)`).
//
// Loss scaling multiplies the loss by a scale S before the backward pass, so small gradients
// survive low-precision arithmetic, and divides every gradient by S before the update. Static
// scaling uses one S for ever. Dynamic scaling (LossScaleOptions::dynamic) also checks the
// gradients each step: a step with an Inf or NaN gradient applies no update (the optimizer's
// slots and step counters stay as they were; the ControlGate op skips the update ops) and, after
// decr_every_n_nan_or_inf such steps in a row, S is multiplied by decr_ratio; after
// incr_every_n_steps finite steps in a row S is multiplied by incr_ratio. S and the two counters
// are non-trainable variables ("<name>/loss_scale", "<name>/good_steps", "<name>/bad_steps"),
// so checkpoints keep them. The global step advances on skipped steps too (the batch was used).
//
// The dense and the sparse wrapper are separate objects, as in the spec. With static scaling and
// the same S they share one scaled loss, so one backward pass serves both. With dynamic scaling
// each has its own S and its own skip decision, and each builds its own backward pass (twice the
// backward work when both wrap the same loss).
//
// Under precision_mode allow_mix_precision the products run in bfloat16, whose exponent range is
// float32's, so gradients rarely underflow and scaling is optional; it exists for the spec's
// code and for float16-like backends.
//
// Threading: build-time objects; use one from one thread, like Scope.
#ifndef RECSDK_LOSS_SCALE_H_
#define RECSDK_LOSS_SCALE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "recsdk/embedding.h"
#include "recsdk/hash_optimizers.h"
#include "recsdk/optimizers.h"

namespace recsdk {

// LossScaleOptions: how a loss-scale optimizer scales (see the file comment).
struct LossScaleOptions {
  // loss_scale: S, the initial scale (dynamic) or the only one (static). Finite, in [1, 2^64].
  // Default 65536, the spec's DCNv2 value.
  double loss_scale = 65536.0;
  // dynamic: false (default): static scaling. true: skip overflowing steps and adapt S (above).
  bool dynamic = false;
  // incr_every_n_steps: finite steps in a row before S grows; >= 1. Default 1000 (the NPU
  // ExponentialUpdateLossScaleManager's default).
  int64_t incr_every_n_steps = 1000;
  // decr_every_n_nan_or_inf: overflowing steps in a row before S shrinks; >= 1. Default 1 (every
  // overflow lowers S; TensorFlow's manager uses 2).
  int64_t decr_every_n_nan_or_inf = 1;
  // incr_ratio, decr_ratio: the factors; incr_ratio > 1 (default 2), decr_ratio in (0, 1)
  // (default 0.5).
  double incr_ratio = 2.0;
  double decr_ratio = 0.5;
  // min_loss_scale / max_loss_scale: S stays in [min, max]; 1 <= min <= loss_scale <= max.
  // Defaults 1 and 2^32.
  double min_loss_scale = 1.0;
  double max_loss_scale = 4294967296.0;
  // name: prefix of the state variables and nodes. Default "loss_scale" for the dense wrapper,
  // "sparse_loss_scale" for the sparse one (set by their constructors when left empty).
  std::string name;

  // Validate: InvalidArgument naming the option, its value, the rule and the fix. Every float
  // option must be finite, also those a static scale does not use.
  Status Validate() const;
};

// DenseLossScaleOptimizer: wraps a dense optimizer. ComputeGradients returns the gradients of
// S * loss divided by S; ApplyGradients applies them through the inner optimizer (gated when
// dynamic) and updates S. Errors from an invalid LossScaleOptions surface from those calls.
class DenseLossScaleOptimizer : public Optimizer {
 public:
  // The spec's form: static scaling by `loss_scale`.
  DenseLossScaleOptimizer(std::shared_ptr<Optimizer> inner, double loss_scale);
  // DenseLossScaleOptimizer: `inner` scaled as `options` say, statically or dynamically.
  DenseLossScaleOptimizer(std::shared_ptr<Optimizer> inner, LossScaleOptions options);
  std::string name() const override { return inner_->name(); }

  StatusOr<GradsAndVars> ComputeGradients(const Scope& scope, Output loss,
                                          const std::vector<Variable>& var_list = {}) override;
  StatusOr<Node*> ApplyGradients(const Scope& scope, const GradsAndVars& grads_and_vars,
                                 const Variable* global_step = nullptr) override;

  // loss_scale: the scale this step uses (its variable's read, or the constant when static);
  // invalid before ComputeGradients or ApplyGradients built it.
  Output loss_scale() const { return scale_; }
  // options: the options, with name filled in.
  const LossScaleOptions& options() const { return options_; }

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;

 private:
  std::shared_ptr<Optimizer> inner_;
  LossScaleOptions options_;
  Output scale_;
};

// SparseLossScaleOptimizer: the same for the sparse tables' optimizers (which live in the tables,
// SparseOptimizerConfig): ComputeGradients / ApplyGradients / Minimize mirror
// ComputeSparseGradients / ApplySparseGradients / SparseMinimize in embedding.h.
// With an inner HashOptimizer (the guide's SparseLossScaleOptimizer(sparse_optimizer, 65536)) it
// also has the spec's compute_gradients / apply_gradients of hash_optimizers.h, scaled, and
// those check each table was created with the inner optimizer.
class SparseLossScaleOptimizer {
 public:
  // The spec's form: static scaling by `loss_scale`.
  explicit SparseLossScaleOptimizer(double loss_scale);
  // SparseLossScaleOptimizer: scaling as `options` say, statically or dynamically.
  explicit SparseLossScaleOptimizer(LossScaleOptions options);
  // The guide's form: `inner` (create_hash_optimizer) scaled statically by `loss_scale`.
  SparseLossScaleOptimizer(const HashOptimizer& inner, double loss_scale);
  // SparseLossScaleOptimizer: `inner` scaled as `options` say.
  SparseLossScaleOptimizer(const HashOptimizer& inner, LossScaleOptions options);

  // compute_gradients / apply_gradients: HashOptimizer's (one SparseGradients per table of
  // var_list, all tables when empty), with the loss scaled and the gradients unscaled as
  // ComputeGradients does, and the update gated as ApplyGradients does. FailedPrecondition when
  // built without an inner HashOptimizer (use ComputeGradients / ApplyGradients then).
  StatusOr<std::vector<SparseGradients>> compute_gradients(
      const Scope& scope, Output loss, const std::vector<SparseTable>& var_list = {});
  StatusOr<Node*> apply_gradients(const Scope& scope, const SparseGradsAndVars& grads_and_vars,
                                  const SparseApplyOptions& options = {});

  // ComputeGradients, ApplyGradients, Minimize: ComputeSparseGradients, ApplySparseGradients and
  // SparseMinimize (embedding.h) with the loss scaled by S, the gradients divided by S and, when
  // dynamic, the updates gated and S updated.
  StatusOr<std::vector<SparseGrad>> ComputeGradients(const Scope& scope, Output loss,
                                                     const std::vector<SparseTable>& tables = {});
  StatusOr<Node*> ApplyGradients(const Scope& scope, const std::vector<SparseGrad>& grads,
                                 const SparseApplyOptions& options = {});
  StatusOr<Node*> Minimize(const Scope& scope, Output loss,
                           const std::vector<SparseTable>& tables = {},
                           const SparseApplyOptions& options = {});

  // loss_scale: the scale this step uses; invalid before ComputeGradients or ApplyGradients built
  // it.
  Output loss_scale() const { return scale_; }
  // options: the options, with name filled in.
  const LossScaleOptions& options() const { return options_; }

 private:
  Status NeedInner(const char* call) const;
  LossScaleOptions options_;
  std::optional<HashOptimizer> inner_;
  Output scale_;
};

}  // namespace recsdk

#endif  // RECSDK_LOSS_SCALE_H_
