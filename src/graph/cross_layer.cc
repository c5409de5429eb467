// cross_layer.cc: layers::CrossLayer and layers::CrossNetwork (DCNv2), composed from MatMul and
// one DcnCross op, x0 * (y + b) + xl, for a layer with a bias (BiasAdd, Mul and Add without one,
// and Softmax, Slice for the mixture). The fused tail is what the DCNv2 sample's profile asked for:
// its BiasAdd, Mul, Add and their gradients were ~0.5 ms of a 7 ms single-thread step.
#include "src/graph/cross_layer.h"

#include <algorithm>
#include <string>

#include "fmt/format.h"
#include "recsdk/layers.h"
#include "recsdk/ops.h"

namespace recsdk::layers {
namespace internal {

namespace {

Output Project(const Scope& s, Output xl, const CrossExpertWeights& w) {
  Output y = w.kernel.valid() ? ops::MatMul(s, xl, w.kernel)
                              : ops::MatMul(s, ops::MatMul(s, xl, w.kernel_v), w.kernel_u);
  if (w.bias.valid()) y = ops::BiasAdd(s, y, w.bias);
  return y;
}

}  // namespace

Output CrossFromWeights(const Scope& scope, Output x0, Output xl,
                        const std::vector<CrossExpertWeights>& experts, Output gate) {
  if (!gate.valid()) {
    const CrossExpertWeights& w = experts.at(0);
    if (w.bias.valid()) {
      // One DcnCross op for the bias, the product with x0 and the residual (and one DcnCrossGrad
      // for their gradients): the composed BiasAdd, Mul and Add were six passes over [batch, d].
      const Output y = w.kernel.valid()
                           ? ops::MatMul(scope, xl, w.kernel)
                           : ops::MatMul(scope, ops::MatMul(scope, xl, w.kernel_v), w.kernel_u);
      Node* n = scope.AddNode("DcnCross", {x0, xl, y, w.bias});
      return n == nullptr ? Output() : Output(n, 0);
    }
    return ops::Add(scope, ops::Mul(scope, x0, Project(scope, xl, w)), xl);
  }
  const Output g = ops::Softmax(scope, ops::MatMul(scope, xl, gate));  // [batch, K]
  std::vector<Output> mixed;
  for (size_t i = 0; i < experts.size(); ++i) {
    const Output e = ops::Mul(scope, x0, Project(scope, xl, experts[i]));
    const Output gi = ops::Slice(scope, g, {0, static_cast<int64_t>(i)}, {-1, 1});
    mixed.push_back(ops::Mul(scope, gi, e));
  }
  mixed.push_back(xl);
  return ops::AddN(scope, mixed);
}

}  // namespace internal

namespace {

Status CheckCrossArguments(const Scope& scope, const Output& x0, const Output& xl,
                           const CrossLayerOptions& o) {
  const std::string layer = fmt::format("CrossLayer \"{}\"", scope.FullName(o.name));
  if (!x0.valid() || !xl.valid()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: x0 or xl is an invalid Output (a failed builder upstream); check "
                    "Scope::status() for the first error",
                    layer));
  }
  for (const Output* x : {&x0, &xl}) {
    if (x->shape().rank() != 2 || x->shape().dim(1) < 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: input \"{}\" has shape {}; a cross layer takes [batch, d] with d known (reshape "
          "or concatenate the features into one rank-2 tensor first)",
          layer, x->name(), x->shape().ToString()));
    }
    if (x->dtype() != DType::kFloat32 && x->dtype() != DType::kFloat64) {
      return absl::InvalidArgumentError(
          fmt::format("{}: input \"{}\" is {}; use float32 (or float64) inputs", layer, x->name(),
                      DTypeName(x->dtype())));
    }
  }
  if (x0.shape().dim(1) != xl.shape().dim(1) || x0.dtype() != xl.dtype()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: x0 \"{}\" {} {} and xl \"{}\" {} {} differ; x_l must be the previous cross layer's "
        "output (or x0 itself for the first layer)",
        layer, x0.name(), DTypeName(x0.dtype()), x0.shape().ToString(), xl.name(),
        DTypeName(xl.dtype()), xl.shape().ToString()));
  }
  switch (o.structure) {
    case CrossStructure::kFullRank:
      if (o.rank != 0 || o.num_experts != 0) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: rank {} and num_experts {} apply to the low-rank structures; leave both 0 for "
            "kFullRank, or set structure = kLowRank / kMixtureOfLowRank",
            layer, o.rank, o.num_experts));
      }
      break;
    case CrossStructure::kLowRank:
    case CrossStructure::kMixtureOfLowRank: {
      const bool mixture = o.structure == CrossStructure::kMixtureOfLowRank;
      if (o.rank <= 0) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: rank {} must be > 0 for a low-rank cross layer (W = U V^T of rank r); use e.g. "
            "d/4 = {}, or kFullRank",
            layer, o.rank, std::max<int64_t>(1, x0.shape().dim(1) / 4)));
      }
      if (mixture && o.num_experts < 1) {
        return absl::InvalidArgumentError(
            fmt::format("{}: num_experts {} must be >= 1 for kMixtureOfLowRank (the paper uses 4)",
                        layer, o.num_experts));
      }
      if (!mixture && o.num_experts != 0) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: num_experts {} applies to kMixtureOfLowRank only; leave it 0 for kLowRank", layer,
            o.num_experts));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          fmt::format("{}: unknown structure {}; use kFullRank, kLowRank or kMixtureOfLowRank",
                      layer, static_cast<int>(o.structure)));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<Output> CrossLayer(const Scope& scope, Output x0, Output xl,
                            const CrossLayerOptions& options) {
  if (!scope.ok()) return scope.status();
  if (Status st = CheckCrossArguments(scope, x0, xl, options); !st.ok()) return st;
  const int64_t d = x0.shape().dim(1);
  const Scope s = scope.NewSubScope(options.name);
  VariableOptions kernel_options;
  kernel_options.initializer = options.kernel_initializer;
  kernel_options.dtype = x0.dtype();
  VariableOptions bias_options;
  bias_options.initializer = options.bias_initializer;
  bias_options.dtype = x0.dtype();
  auto make_expert = [&](const Scope& es) {
    internal::CrossExpertWeights w;
    if (options.structure == CrossStructure::kFullRank) {
      w.kernel = Variable::Make(es, "kernel", Shape{d, d}, kernel_options);
    } else {
      w.kernel_v = Variable::Make(es, "kernel_v", Shape{d, options.rank}, kernel_options);
      w.kernel_u = Variable::Make(es, "kernel_u", Shape{options.rank, d}, kernel_options);
    }
    if (options.use_bias) w.bias = Variable::Make(es, "bias", Shape{d}, bias_options);
    return w;
  };
  std::vector<internal::CrossExpertWeights> experts;
  Output gate;
  if (options.structure == CrossStructure::kMixtureOfLowRank) {
    gate = Variable::Make(s, "gate", Shape{d, options.num_experts}, kernel_options);
    for (int64_t i = 0; i < options.num_experts; ++i) {
      experts.push_back(make_expert(s.NewSubScope(fmt::format("expert_{}", i))));
    }
  } else {
    experts.push_back(make_expert(s));
  }
  if (!s.ok()) return s.status();
  Output y = internal::CrossFromWeights(s, x0, xl, experts, gate);
  if (!s.ok()) return s.status();
  return y;
}

StatusOr<Output> CrossNetwork(const Scope& scope, Output x0, const CrossNetworkOptions& options) {
  if (!scope.ok()) return scope.status();
  if (options.num_layers < 1) {
    return absl::InvalidArgumentError(
        fmt::format("CrossNetwork \"{}\": num_layers {} must be >= 1 (the DCNv2 guide uses 2-3)",
                    scope.FullName(options.name), options.num_layers));
  }
  const Scope s = scope.NewSubScope(options.name);
  Output x = x0;
  for (int i = 0; i < options.num_layers; ++i) {
    CrossLayerOptions layer = options.layer;
    // Named explicitly, as Mlp names its layers, so variable reuse shares the same layers.
    layer.name = i == 0 ? "cross" : fmt::format("cross_{}", i);
    auto y = CrossLayer(s, x0, x, layer);
    if (!y.ok()) return y.status();
    x = *y;
  }
  return x;
}

}  // namespace recsdk::layers
