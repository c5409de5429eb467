// norm_layers.cc: layers::LayerNorm and layers::BatchNorm, composed from ReduceMean, Sub, Square,
// Rsqrt, Mul and Add: each has a gradient and a finite-difference test, so the norms need no
// kernel of their own. The statistics keep their reduced axes (keep_dims) so they broadcast.
#include "src/graph/norm_layers.h"

#include <string>

#include "fmt/format.h"
#include "recsdk/layers.h"
#include "recsdk/ops.h"
#include "src/common/finite_option.h"
#include "src/common/status_macros.h"

namespace recsdk::layers {
namespace internal {

Output Normalize(const Scope& scope, Output x, Output mean, Output variance, double epsilon,
                 Output gamma, Output beta) {
  Output inv = ops::Rsqrt(scope, ops::Add(scope, variance, ops::ScalarLike(scope, x, epsilon)));
  if (gamma.valid()) inv = ops::Mul(scope, inv, gamma);
  Output y = ops::Mul(scope, ops::Sub(scope, x, mean), inv);
  if (beta.valid()) y = ops::Add(scope, y, beta);
  return y;
}

void Moments(const Scope& scope, Output x, const std::vector<int64_t>& axes, Output* mean,
             Output* variance) {
  *mean = ops::ReduceMean(scope, x, axes, {.keep_dims = true});
  *variance = ops::ReduceMean(scope, ops::Square(scope, ops::Sub(scope, x, *mean)), axes,
                              {.keep_dims = true});
}

}  // namespace internal

namespace {

// CheckNormInput: x of rank >= 2, float, with a known last dimension; epsilon > 0 and finite.
Status CheckNormInput(const std::string& layer, const Output& x, double epsilon) {
  if (!x.valid()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: x is an invalid Output (a failed builder upstream); check Scope::status() for the "
        "first error",
        layer));
  }
  const int rank = x.shape().rank();
  if (rank < 2 || x.shape().dim(rank - 1) < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: input \"{}\" has shape {}; it needs rank >= 2 ([batch, ..., channels]) with the last "
        "dimension known",
        layer, x.name(), x.shape().ToString()));
  }
  if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: input \"{}\" is {}; use float32 (or float64)", layer, x.name(), DTypeName(x.dtype())));
  }
  RECSDK_RETURN_IF_ERROR(::recsdk::internal::CheckFiniteOption(
      layer, "epsilon", epsilon, "use a small positive value such as 1e-3"));
  if (!(epsilon > 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: epsilon {} must be > 0 (it keeps rsqrt finite on a constant input); use e.g. 1e-3",
        layer, epsilon));
  }
  return absl::OkStatus();
}

// ScaleAndShift: gamma (ones) and beta (zeros) of shape [c], as the options ask.
void ScaleAndShift(const Scope& s, const Output& x, bool scale, bool center, Output* gamma,
                   Output* beta) {
  const int64_t c = x.shape().dim(x.shape().rank() - 1);
  VariableOptions o;
  o.dtype = x.dtype();
  if (scale) {
    o.initializer = Initializer::Ones();
    *gamma = Variable::Make(s, "gamma", Shape{c}, o);
  }
  if (center) {
    o.initializer = Initializer::Zeros();
    *beta = Variable::Make(s, "beta", Shape{c}, o);
  }
}

}  // namespace

StatusOr<Output> LayerNorm(const Scope& scope, Output x, const LayerNormOptions& options) {
  if (!scope.ok()) return scope.status();
  RECSDK_RETURN_IF_ERROR(CheckNormInput(
      fmt::format("LayerNorm \"{}\"", scope.FullName(options.name)), x, options.epsilon));
  const Scope s = scope.NewSubScope(options.name);
  Output gamma, beta, mean, variance;
  ScaleAndShift(s, x, options.scale, options.center, &gamma, &beta);
  internal::Moments(s, x, {-1}, &mean, &variance);
  Output y = internal::Normalize(s, x, mean, variance, options.epsilon, gamma, beta);
  if (!s.ok()) return s.status();
  return y;
}

StatusOr<Output> BatchNorm(const Scope& scope, Output x, const BatchNormOptions& options) {
  if (!scope.ok()) return scope.status();
  const std::string layer = fmt::format("BatchNorm \"{}\"", scope.FullName(options.name));
  RECSDK_RETURN_IF_ERROR(CheckNormInput(layer, x, options.epsilon));
  RECSDK_RETURN_IF_ERROR(::recsdk::internal::CheckFiniteOption(
      layer, "momentum", options.momentum, "use a value in [0, 1) such as 0.99"));
  if (!(options.momentum >= 0 && options.momentum < 1)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: momentum {} must be in [0, 1) (the weight of the old moving average); use e.g. 0.99",
        layer, options.momentum));
  }
  if (options.mode != NormMode::kTraining && options.mode != NormMode::kInference) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: unknown mode {}; use kTraining or kInference", layer, static_cast<int>(options.mode)));
  }
  const Scope s = scope.NewSubScope(options.name);
  const int rank = x.shape().rank();
  const int64_t c = x.shape().dim(rank - 1);
  Output gamma, beta;
  ScaleAndShift(s, x, options.scale, options.center, &gamma, &beta);
  VariableOptions stat;
  stat.dtype = x.dtype();
  stat.trainable = false;
  stat.initializer = Initializer::Zeros();
  Variable moving_mean = Variable::Make(s, "moving_mean", Shape{c}, stat);
  stat.initializer = Initializer::Ones();
  Variable moving_variance = Variable::Make(s, "moving_variance", Shape{c}, stat);
  if (!s.ok()) return s.status();
  if (options.mode == NormMode::kInference) {
    Output y =
        internal::Normalize(s, x, moving_mean, moving_variance, options.epsilon, gamma, beta);
    if (!s.ok()) return s.status();
    return y;
  }
  std::vector<int64_t> axes;
  for (int i = 0; i < rank - 1; ++i) axes.push_back(i);
  Output mean, variance;
  internal::Moments(s, x, axes, &mean, &variance);
  Output y = internal::Normalize(s, x, mean, variance, options.epsilon, gamma, beta);
  // moving -= (1 - momentum) * (moving - batch): the statistics are not trained through.
  auto update = [&](const Variable& moving, Output batch_stat, const char* name) {
    const Output flat = ops::StopGradient(s, ops::Reshape(s, batch_stat, {c}));
    const Output delta =
        ops::Mul(s, ops::Sub(s, moving, flat), ops::ScalarLike(s, flat, 1.0 - options.momentum));
    return AssignSub(s.WithOpName(name), moving, delta);
  };
  Node* update_mean = update(moving_mean, mean, "update_moving_mean");
  Node* update_variance = update(moving_variance, variance, "update_moving_variance");
  if (!s.ok()) return s.status();
  y = ops::Identity(s.WithControlDependencies({update_mean, update_variance}), y);
  if (!s.ok()) return s.status();
  return y;
}

}  // namespace recsdk::layers
