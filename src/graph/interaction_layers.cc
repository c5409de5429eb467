// interaction_layers.cc: layers::FmInteraction, layers::Cin (xDeepFM) and
// layers::MixtureOfExperts (MMoE), composed from ops that each have a gradient, a
// finite-difference test and CPU kernels. The expensive part of each layer is one fast kernel:
// the CIN's compression is a single GEMM per layer over [batch * D, H_prev * F]; MMoE's experts
// are Mlps. The CIN keeps its maps in a [batch, D, H] layout so the outer product of a layer with
// the fields, [batch * D, H_prev * F], is already the GEMM's row-major left operand and no
// transpose runs between layers. That outer product is the one fused op (BatchOuterProduct):
// built as a broadcast Mul it and its broadcast gradient took 8.7 of a 15.8 ms CIN step at the
// xdeepfm sample's shape against 4.3 ms for the GEMMs (benchmarks/interaction_bench.cc).
#include "src/graph/interaction_layers.h"

#include <string>

#include "fmt/format.h"
#include "recsdk/ops.h"
#include "src/graph/activation.h"

namespace recsdk::layers {
namespace internal {

Output BatchOuterProduct(const Scope& scope, Output a, Output b) {
  Node* n = scope.AddNode("BatchOuterProduct", {a, b});
  return n == nullptr ? Output() : Output(n, 0);
}

Output FmFromFields(const Scope& scope, Output fields) {
  const Output sum = ops::ReduceSum(scope, fields, {1});                                 // [B, D]
  const Output sum_of_squares = ops::ReduceSum(scope, ops::Square(scope, fields), {1});  // [B, D]
  const Output twice =
      ops::ReduceSum(scope, ops::Sub(scope, ops::Square(scope, sum), sum_of_squares), {1},
                     {.keep_dims = true});  // [B, 1]
  return ops::Mul(scope, twice, ops::ScalarLike(scope, twice, 0.5));
}

Output CinFromWeights(const Scope& scope, Output fields, const std::vector<CinLayerWeights>& layers,
                      bool split_half, Activation activation) {
  const int64_t f = fields.shape().dim(1), d = fields.shape().dim(2);
  const Output x0t = ops::Transpose(scope, fields, {0, 2, 1});  // [B, D, F]
  const Output x0_rows = ops::Reshape(scope, x0t, {-1, f});     // [B * D, F]
  Output h = x0t;                                               // [B, D, H_prev]
  int64_t h_prev = f;
  std::vector<Output> pooled;
  for (size_t k = 0; k < layers.size(); ++k) {
    const int64_t h_size = layers[k].kernel.shape().dim(1);
    // The outer product z[(b, d), i * F + j] = h[b, d, i] * x0[b, d, j], rows of the GEMM.
    const Output z = BatchOuterProduct(scope, ops::Reshape(scope, h, {-1, h_prev}), x0_rows);
    Output y = ops::MatMul(scope, z, layers[k].kernel);
    if (layers[k].bias.valid()) y = ops::BiasAdd(scope, y, layers[k].bias);
    y = ops::Reshape(scope, Activate(scope, y, activation), {-1, d, h_size});  // [B, D, H]
    Output out = y;
    if (split_half && k + 1 < layers.size()) {
      const int64_t half = h_size / 2;
      h = ops::Slice(scope, y, {0, 0, 0}, {-1, -1, half});
      out = ops::Slice(scope, y, {0, 0, half}, {-1, -1, -1});
      h_prev = half;
    } else {
      h = y;
      h_prev = h_size;
    }
    pooled.push_back(ops::ReduceSum(scope, out, {1}));  // sum over D: [B, width]
  }
  return pooled.size() == 1 ? pooled[0] : ops::Concat(scope, pooled, 1);
}

Output MixExperts(const Scope& scope, const std::vector<Output>& experts, Output gate_logits) {
  const int64_t k = static_cast<int64_t>(experts.size());
  const int64_t e = experts.at(0).shape().dim(1);
  const Output gate = ops::Reshape(scope, ops::Softmax(scope, gate_logits), {-1, k, 1});
  const Output stacked =
      ops::Reshape(scope, k == 1 ? experts[0] : ops::Concat(scope, experts, 1), {-1, k, e});
  return ops::ReduceSum(scope, ops::Mul(scope, stacked, gate), {1});  // [B, E]
}

}  // namespace internal

namespace {

Status InvalidOutput(const std::string& layer, const char* what) {
  return absl::InvalidArgumentError(
      fmt::format("{}: {} is an invalid Output (a failed builder upstream); check "
                  "Scope::status() for the first error",
                  layer, what));
}

Status CheckFloat(const std::string& layer, const Output& x) {
  if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: input \"{}\" is {}; use float32 (or float64)", layer, x.name(), DTypeName(x.dtype())));
  }
  return absl::OkStatus();
}

// AsFields: the field embeddings as [batch, F, D], reshaping a [batch, F * D] input by
// num_fields; an error naming the layer when the input or num_fields does not fit.
StatusOr<Output> AsFields(const Scope& scope, const std::string& layer, const Output& x,
                          int64_t num_fields) {
  if (!x.valid()) return InvalidOutput(layer, "the field input");
  if (Status st = CheckFloat(layer, x); !st.ok()) return st;
  const Shape& shape = x.shape();
  if (shape.rank() == 3) {
    if (shape.dim(1) <= 0 || shape.dim(2) <= 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: input \"{}\" has shape {}; the fields F and their dim D must be known and > 0",
          layer, x.name(), shape.ToString()));
    }
    if (num_fields != 0 && num_fields != shape.dim(1)) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: num_fields {} differs from the {} fields of the [batch, F, D] input \"{}\" {}; "
          "leave num_fields 0 for a rank-3 input",
          layer, num_fields, shape.dim(1), x.name(), shape.ToString()));
    }
    return x;
  }
  if (shape.rank() == 2) {
    const int64_t width = shape.dim(1);
    if (width <= 0) {
      return absl::InvalidArgumentError(
          fmt::format("{}: input \"{}\" has shape {}; the width F * D must be known", layer,
                      x.name(), shape.ToString()));
    }
    if (num_fields <= 0 || width % num_fields != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: the rank-2 input \"{}\" {} needs num_fields (F) > 0 dividing its width {}, got {}; "
          "set num_fields to the number of fields, or pass [batch, F, D]",
          layer, x.name(), shape.ToString(), width, num_fields));
    }
    return ops::Reshape(scope, x, {-1, num_fields, width / num_fields});
  }
  return absl::InvalidArgumentError(
      fmt::format("{}: input \"{}\" has shape {}; pass the field embeddings as [batch, F, D] or as "
                  "[batch, F * D] with num_fields = F",
                  layer, x.name(), shape.ToString()));
}

}  // namespace

StatusOr<Output> FmInteraction(const Scope& scope, Output fields,
                               const FmInteractionOptions& options) {
  if (!scope.ok()) return scope.status();
  const std::string layer = fmt::format("FmInteraction \"{}\"", scope.FullName(options.name));
  const Scope s = scope.NewSubScope(options.name);
  auto v = AsFields(s, layer, fields, options.num_fields);
  if (!v.ok()) return v.status();
  Output y = internal::FmFromFields(s, *v);
  if (!s.ok()) return s.status();
  return y;
}

StatusOr<Output> Cin(const Scope& scope, Output fields, const CinOptions& options) {
  if (!scope.ok()) return scope.status();
  const std::string layer = fmt::format("Cin \"{}\"", scope.FullName(options.name));
  const std::vector<int64_t>& sizes = options.layer_sizes;
  if (sizes.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: layer_sizes is empty; give at least one layer's feature maps, e.g. {{128, 128}}",
        layer));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] <= 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: layer_sizes[{}] = {} must be > 0 (the layer's feature maps)", layer, k, sizes[k]));
    }
    if (options.split_half && k + 1 < sizes.size() && sizes[k] % 2 != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: layer_sizes[{}] = {} is odd; with split_half every layer but the last is halved "
          "between the next layer and the output, so use {} or {}, or split_half = false",
          layer, k, sizes[k], sizes[k] - 1, sizes[k] + 1));
    }
  }
  const Scope s = scope.NewSubScope(options.name);
  auto x0 = AsFields(s, layer, fields, options.num_fields);
  if (!x0.ok()) return x0.status();
  const int64_t f = x0->shape().dim(1);
  VariableOptions kernel_options;
  kernel_options.initializer = options.kernel_initializer;
  kernel_options.dtype = x0->dtype();
  VariableOptions bias_options;
  bias_options.initializer = options.bias_initializer;
  bias_options.dtype = x0->dtype();
  std::vector<internal::CinLayerWeights> weights;
  int64_t h_prev = f;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const Scope ls = s.NewSubScope(fmt::format("layer_{}", k));
    internal::CinLayerWeights w;
    w.kernel = Variable::Make(ls, "kernel", Shape{h_prev * f, sizes[k]}, kernel_options);
    if (options.use_bias) w.bias = Variable::Make(ls, "bias", Shape{sizes[k]}, bias_options);
    weights.push_back(w);
    h_prev = options.split_half && k + 1 < sizes.size() ? sizes[k] / 2 : sizes[k];
  }
  if (!s.ok()) return s.status();
  Output y = internal::CinFromWeights(s, *x0, weights, options.split_half, options.activation);
  if (!s.ok()) return s.status();
  return y;
}

StatusOr<std::vector<Output>> MixtureOfExperts(const Scope& scope, Output x,
                                               const MixtureOfExpertsOptions& options) {
  if (!scope.ok()) return scope.status();
  const std::string layer = fmt::format("MixtureOfExperts \"{}\"", scope.FullName(options.name));
  if (!x.valid()) return InvalidOutput(layer, "x");
  if (x.shape().rank() != 2 || x.shape().dim(1) <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: input \"{}\" has shape {}; the experts take [batch, d] with d known (concatenate "
        "or reshape the features into one rank-2 tensor first)",
        layer, x.name(), x.shape().ToString()));
  }
  if (Status st = CheckFloat(layer, x); !st.ok()) return st;
  if (options.num_experts < 1 || options.num_tasks < 1) {
    return absl::InvalidArgumentError(
        fmt::format("{}: num_experts {} and num_tasks {} must each be >= 1 (the MMoE paper uses "
                    "4-8 experts; one task makes it a plain mixture of experts)",
                    layer, options.num_experts, options.num_tasks));
  }
  const MlpOptions& expert = options.expert;
  bool widths_ok = !expert.hidden_units.empty() && expert.output_units >= 0;
  for (int64_t u : expert.hidden_units) widths_ok = widths_ok && u > 0;
  if (!widths_ok) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: expert.hidden_units [{}] (output_units {}) must list at least one layer, each > 0, "
        "and output_units must be >= 0; e.g. hidden_units = {{64}}",
        layer, fmt::join(expert.hidden_units, ", "), expert.output_units));
  }
  const Scope s = scope.NewSubScope(options.name);
  std::vector<Output> experts;
  for (int64_t i = 0; i < options.num_experts; ++i) {
    MlpOptions e = expert;
    e.name = fmt::format("expert_{}", i);
    experts.push_back(Mlp(s, x, e));
  }
  std::vector<Output> outputs;
  for (int64_t t = 0; t < options.num_tasks; ++t) {
    DenseOptions gate;
    gate.units = options.num_experts;
    gate.kernel_initializer = options.gate_initializer;
    gate.name = fmt::format("gate_{}", t);
    outputs.push_back(internal::MixExperts(s, experts, Dense(s, x, gate)));
  }
  if (!s.ok()) return s.status();
  return outputs;
}

}  // namespace recsdk::layers
