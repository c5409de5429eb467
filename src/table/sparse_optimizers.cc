// sparse_optimizers.cc: SparseOptimizerConfig (factories, validation) and the per-row update
// kernels the table applies. Kernels are plain loops over dim that the compiler vectorises; they
// touch only the row they are given, so rows may be updated from many threads at once.
#include "recsdk/sparse_optimizers.h"

#include <cmath>
#include <utility>

#include "fmt/format.h"
#include "src/table/sparse_optimizers_impl.h"

namespace recsdk {

std::string_view SparseOptimizerKindName(SparseOptimizerKind kind) {
  switch (kind) {
    case SparseOptimizerKind::kSGD:
      return "SGD";
    case SparseOptimizerKind::kSGDByAddr:
      return "SGDByAddr";
    case SparseOptimizerKind::kAdagrad:
      return "Adagrad";
    case SparseOptimizerKind::kAdagradByAddress:
      return "AdagradByAddress";
    case SparseOptimizerKind::kLazyAdam:
      return "LazyAdam";
    case SparseOptimizerKind::kLazyAdamByAddress:
      return "LazyAdamByAddress";
    case SparseOptimizerKind::kFTRL:
      return "FTRL";
  }
  return "unknown";
}

SparseOptimizerConfig SparseOptimizerConfig::SGD(float learning_rate, float weight_decay) {
  SparseOptimizerConfig c;
  c.kind = SparseOptimizerKind::kSGD;
  c.learning_rate = learning_rate;
  c.weight_decay = weight_decay;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::SGDByAddr(float learning_rate, float weight_decay) {
  SparseOptimizerConfig c = SGD(learning_rate, weight_decay);
  c.kind = SparseOptimizerKind::kSGDByAddr;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::Adagrad(float learning_rate,
                                                     float initial_accumulator_value, float epsilon,
                                                     float weight_decay) {
  SparseOptimizerConfig c;
  c.kind = SparseOptimizerKind::kAdagrad;
  c.learning_rate = learning_rate;
  c.initial_accumulator_value = initial_accumulator_value;
  c.adagrad_epsilon = epsilon;
  c.weight_decay = weight_decay;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::AdagradByAddress(float learning_rate,
                                                              float initial_accumulator_value,
                                                              float epsilon, float weight_decay) {
  SparseOptimizerConfig c =
      Adagrad(learning_rate, initial_accumulator_value, epsilon, weight_decay);
  c.kind = SparseOptimizerKind::kAdagradByAddress;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::LazyAdam(float learning_rate, float beta1, float beta2,
                                                      float epsilon, float weight_decay) {
  SparseOptimizerConfig c;
  c.kind = SparseOptimizerKind::kLazyAdam;
  c.learning_rate = learning_rate;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.epsilon = epsilon;
  c.weight_decay = weight_decay;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::LazyAdamByAddress(float learning_rate, float beta1,
                                                               float beta2, float epsilon,
                                                               float weight_decay) {
  SparseOptimizerConfig c = LazyAdam(learning_rate, beta1, beta2, epsilon, weight_decay);
  c.kind = SparseOptimizerKind::kLazyAdamByAddress;
  return c;
}
SparseOptimizerConfig SparseOptimizerConfig::FTRL(float learning_rate, float learning_rate_power,
                                                  float initial_accumulator_value, float l1,
                                                  float l2, float l2_shrinkage) {
  SparseOptimizerConfig c;
  c.kind = SparseOptimizerKind::kFTRL;
  c.learning_rate = learning_rate;
  c.learning_rate_power = learning_rate_power;
  c.initial_accumulator_value = initial_accumulator_value;
  c.l1 = l1;
  c.l2 = l2;
  c.l2_shrinkage = l2_shrinkage;
  return c;
}

int SparseOptimizerConfig::SlotsPerDim() const {
  switch (kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      return 0;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      return 1;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
    case SparseOptimizerKind::kFTRL:
      return 2;
  }
  return 0;
}

bool SparseOptimizerConfig::ByAddress() const {
  return kind == SparseOptimizerKind::kSGDByAddr ||
         kind == SparseOptimizerKind::kAdagradByAddress ||
         kind == SparseOptimizerKind::kLazyAdamByAddress;
}

std::string SparseOptimizerConfig::ToString() const {
  switch (kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      return fmt::format("{}(learning_rate={}, weight_decay={})", SparseOptimizerKindName(kind),
                         learning_rate, weight_decay);
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      return fmt::format(
          "{}(learning_rate={}, initial_accumulator_value={}, epsilon={}, weight_decay={})",
          SparseOptimizerKindName(kind), learning_rate, initial_accumulator_value, adagrad_epsilon,
          weight_decay);
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      return fmt::format("{}(learning_rate={}, beta1={}, beta2={}, epsilon={}, weight_decay={})",
                         SparseOptimizerKindName(kind), learning_rate, beta1, beta2, epsilon,
                         weight_decay);
    case SparseOptimizerKind::kFTRL:
      return fmt::format(
          "FTRL(learning_rate={}, learning_rate_power={}, initial_accumulator_value={}, l1={}, "
          "l2={}, l2_shrinkage={})",
          learning_rate, learning_rate_power, initial_accumulator_value, l1, l2, l2_shrinkage);
  }
  return "unknown";
}

Status SparseOptimizerConfig::Validate() const {
  const int k = static_cast<int>(kind);
  if (k < 0 || k > 6) {
    return absl::InvalidArgumentError(
        fmt::format("sparse optimizer kind {} is unknown; use one of SGD, SGDByAddr, Adagrad, "
                    "AdagradByAddress, LazyAdam, LazyAdamByAddress, FTRL",
                    k));
  }
  auto fail = [&](std::string_view option, float value, std::string_view rule) {
    return absl::InvalidArgumentError(fmt::format("sparse optimizer {}: {} {} is invalid: {}",
                                                  SparseOptimizerKindName(kind), option, value,
                                                  rule));
  };
  if (!std::isfinite(learning_rate) || learning_rate <= 0) {
    return fail("learning_rate", learning_rate, "it must be a finite number > 0");
  }
  // Every field must be finite, also those this kind ignores: the whole config is saved with the
  // graph, where a NaN or an infinity becomes JSON null and the graph no longer loads.
  for (const auto& [option, value] : {std::pair<const char*, float>{"weight_decay", weight_decay},
                                      {"initial_accumulator_value", initial_accumulator_value},
                                      {"adagrad_epsilon", adagrad_epsilon},
                                      {"beta1", beta1},
                                      {"beta2", beta2},
                                      {"epsilon", epsilon},
                                      {"learning_rate_power", learning_rate_power},
                                      {"l1", l1},
                                      {"l2", l2},
                                      {"l2_shrinkage", l2_shrinkage}}) {
    if (!std::isfinite(value)) {
      return fail(option, value,
                  "it must be a finite number, even where this optimizer does not use it (the "
                  "config is saved with the graph); leave it at its default");
    }
  }
  if (kind == SparseOptimizerKind::kFTRL) {
    if (weight_decay != 0) {
      return fail("weight_decay", weight_decay,
                  "FTRL regularises through its own terms; set l2 (or l2_shrinkage, or l1) "
                  "instead and leave weight_decay at 0");
    }
  } else if (weight_decay < 0) {
    return fail("weight_decay", weight_decay, "it must be a finite number >= 0 (0 disables)");
  }
  switch (kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      break;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      if (!std::isfinite(initial_accumulator_value) || initial_accumulator_value < 0) {
        return fail("initial_accumulator_value", initial_accumulator_value,
                    "it must be a finite number >= 0 (the default is 0.9)");
      }
      if (!std::isfinite(adagrad_epsilon) || adagrad_epsilon < 0) {
        return fail("adagrad_epsilon", adagrad_epsilon,
                    "it must be a finite number >= 0 (the default is 0)");
      }
      if (initial_accumulator_value == 0 && adagrad_epsilon == 0) {
        return fail("initial_accumulator_value", initial_accumulator_value,
                    "with adagrad_epsilon 0 the first update of a zero gradient divides 0 by 0; "
                    "use an initial_accumulator_value > 0 or an adagrad_epsilon > 0 (PyTorch "
                    "uses 0 and 1e-10)");
      }
      break;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      if (!(beta1 >= 0 && beta1 < 1)) return fail("beta1", beta1, "it must be in [0, 1)");
      if (!(beta2 >= 0 && beta2 < 1)) return fail("beta2", beta2, "it must be in [0, 1)");
      if (!std::isfinite(epsilon) || epsilon <= 0) {
        return fail("epsilon", epsilon, "it must be a finite number > 0 (the default is 1e-8)");
      }
      break;
    case SparseOptimizerKind::kFTRL:
      if (!std::isfinite(learning_rate_power) || learning_rate_power > 0) {
        return fail("learning_rate_power", learning_rate_power,
                    "it must be a finite number <= 0 (the default is -0.5)");
      }
      if (!std::isfinite(initial_accumulator_value) || initial_accumulator_value < 0) {
        return fail("initial_accumulator_value", initial_accumulator_value,
                    "it must be a finite number >= 0 (the default is 0.1)");
      }
      if (!std::isfinite(l1) || l1 < 0) return fail("l1", l1, "it must be a finite number >= 0");
      if (!std::isfinite(l2) || l2 < 0) return fail("l2", l2, "it must be a finite number >= 0");
      if (!std::isfinite(l2_shrinkage) || l2_shrinkage < 0) {
        return fail("l2_shrinkage", l2_shrinkage, "it must be a finite number >= 0");
      }
      break;
  }
  return absl::OkStatus();
}

namespace internal {

RowUpdater::RowUpdater(const SparseOptimizerConfig& config, int dim, int64_t step)
    : config_(config), dim_(dim) {
  if (config.kind == SparseOptimizerKind::kLazyAdam ||
      config.kind == SparseOptimizerKind::kLazyAdamByAddress) {
    const double t = static_cast<double>(step < 1 ? 1 : step);
    const double b1t = std::pow(static_cast<double>(config.beta1), t);
    const double b2t = std::pow(static_cast<double>(config.beta2), t);
    adam_lr_t_ = static_cast<float>(config.learning_rate * std::sqrt(1.0 - b2t) / (1.0 - b1t));
  }
}

void InitSlots(const SparseOptimizerConfig& config, int dim, float* slots) {
  switch (config.kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      break;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      for (int i = 0; i < dim; ++i) slots[i] = config.initial_accumulator_value;
      break;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      for (int i = 0; i < 2 * dim; ++i) slots[i] = 0.0f;
      break;
    case SparseOptimizerKind::kFTRL:
      for (int i = 0; i < dim; ++i) slots[i] = config.initial_accumulator_value;
      for (int i = dim; i < 2 * dim; ++i) slots[i] = 0.0f;
      break;
  }
}

namespace {

// The kernels' sqrt arguments are never negative; without errno handling the loops vectorise
// (with it, GCC emits a scalar sqrt plus a branch per element).
#pragma GCC push_options
#pragma GCC optimize("no-math-errno")

void UpdateSGD(float* __restrict w, const float* __restrict g, int dim, float lr, float wd) {
  if (wd == 0.0f) {
    for (int i = 0; i < dim; ++i) w[i] -= lr * g[i];
  } else {
    for (int i = 0; i < dim; ++i) w[i] -= lr * (g[i] + wd * w[i]);
  }
}

// Adagrad and LazyAdam take weight decay as SGD does, coupled: the L2 term wd * w joins the
// gradient (before it enters the slots), as the gradient of (wd / 2) * |w|^2 added to the loss
// for the rows the step touches. wd == 0 keeps g itself (bitwise the rule without decay).
void UpdateAdagrad(float* __restrict w, float* __restrict acc, const float* __restrict g, int dim,
                   float lr, float eps, float wd) {
  for (int i = 0; i < dim; ++i) {
    const float gi = wd == 0.0f ? g[i] : g[i] + wd * w[i];
    const float a = acc[i] + gi * gi;
    acc[i] = a;
    w[i] -= lr * gi / (std::sqrt(a) + eps);
  }
}

void UpdateLazyAdam(float* __restrict w, float* __restrict m, float* __restrict v,
                    const float* __restrict g, int dim, float b1, float b2, float eps, float lr_t,
                    float wd) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (int i = 0; i < dim; ++i) {
    const float gi = wd == 0.0f ? g[i] : g[i] + wd * w[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr_t * mi / (std::sqrt(vi) + eps);
  }
}

void UpdateFtrl(float* __restrict w, float* __restrict acc, float* __restrict lin,
                const float* __restrict g, int dim, const SparseOptimizerConfig& c) {
  const float lr = c.learning_rate, p = c.learning_rate_power;
  const float two_l2 = 2.0f * c.l2, two_shrink = 2.0f * c.l2_shrinkage;
  const bool half = p == -0.5f;
  for (int i = 0; i < dim; ++i) {
    const float gi = g[i];
    const float gs = gi + two_shrink * w[i];
    const float a_old = acc[i];
    const float a_new = a_old + gi * gi;
    const float pow_new = half ? std::sqrt(a_new) : std::pow(a_new, -p);
    const float pow_old = half ? std::sqrt(a_old) : std::pow(a_old, -p);
    const float l = lin[i] + gs - (pow_new - pow_old) / lr * w[i];
    lin[i] = l;
    const float quadratic = pow_new / lr + two_l2;
    // Zero inside the L1 ball; written as !(|l| <= l1) so that a NaN gradient (hence a NaN l)
    // makes the weight NaN, where `|l| > l1 ? ... : 0` reset it to 0 and hid the NaN (issue 30).
    w[i] = !(std::fabs(l) <= c.l1) ? ((l > 0 ? c.l1 : -c.l1) - l) / quadratic : 0.0f;
    acc[i] = a_new;
  }
}

#pragma GCC pop_options

}  // namespace

void RowUpdater::Apply(float* row, const float* g) const {
  const int d = dim_;
  switch (config_.kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      UpdateSGD(row, g, d, config_.learning_rate, config_.weight_decay);
      break;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      UpdateAdagrad(row, row + d, g, d, config_.learning_rate, config_.adagrad_epsilon,
                    config_.weight_decay);
      break;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      UpdateLazyAdam(row, row + d, row + 2 * d, g, d, config_.beta1, config_.beta2, config_.epsilon,
                     adam_lr_t_, config_.weight_decay);
      break;
    case SparseOptimizerKind::kFTRL:
      UpdateFtrl(row, row + d, row + 2 * d, g, d, config_);
      break;
  }
}

}  // namespace internal
}  // namespace recsdk
