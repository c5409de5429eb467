// layers.cc: Dense and MLP.
#include "recsdk/layers.h"

#include "fmt/format.h"
#include "recsdk/ops.h"
#include "src/common/finite_option.h"
#include "src/common/status_macros.h"
#include "src/graph/activation.h"

namespace recsdk::layers {
namespace internal {

Output Activate(const Scope& s, Output x, Activation a) {
  switch (a) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:
      return ops::Relu(s, x);
    case Activation::kSigmoid:
      return ops::Sigmoid(s, x);
    case Activation::kTanh:
      return ops::Tanh(s, x);
    case Activation::kGelu:
      return ops::Gelu(s, x);
    case Activation::kLeakyRelu:
      return ops::LeakyRelu(s, x);
  }
  return x;
}

}  // namespace internal

Output Dense(const Scope& scope, Output x, const DenseOptions& options) {
  if (!scope.ok() || !x.valid()) return Output();
  if (x.shape().rank() != 2 || x.shape().dim(1) < 0 || options.units <= 0) {
    scope.graph()->RecordError(absl::InvalidArgumentError(fmt::format(
        "Dense \"{}\": input \"{}\" {} must be rank 2 with a known last dimension, units {} > 0",
        scope.FullName(options.name), x.name(), x.shape().ToString(), options.units)));
    return Output();
  }
  const Scope s = scope.NewSubScope(options.name);
  VariableOptions kernel_options;
  kernel_options.initializer = options.kernel_initializer;
  kernel_options.dtype = x.dtype();
  Variable kernel =
      Variable::Make(s, "kernel", Shape{x.shape().dim(1), options.units}, kernel_options);
  Output y = ops::MatMul(s, x, kernel);
  if (options.use_bias) {
    VariableOptions bias_options;
    bias_options.initializer = options.bias_initializer;
    bias_options.dtype = x.dtype();
    Variable bias = Variable::Make(s, "bias", Shape{options.units}, bias_options);
    y = ops::BiasAdd(s, y, bias);
  }
  return internal::Activate(s, y, options.activation);
}

Output Mlp(const Scope& scope, Output x, const MlpOptions& options) {
  // NaN failed `dropout_rate > 0` and silently trained without dropout.
  if (Status st = ::recsdk::internal::CheckFiniteOption(
          fmt::format("Mlp \"{}\"", scope.FullName(options.name)), "dropout_rate",
          options.dropout_rate, "use a rate in [0, 1), 0 for no dropout");
      !st.ok()) {
    scope.graph()->RecordError(st);
    return Output();
  }
  const Scope s = scope.NewSubScope(options.name);
  Output h = x;
  for (size_t i = 0; i < options.hidden_units.size(); ++i) {
    DenseOptions d;
    d.units = options.hidden_units[i];
    // Named explicitly (what the uniquified sub-scopes would be in a fresh scope), so that under
    // variable reuse a second call names, and shares, the same layers.
    d.name = i == 0 ? "dense" : fmt::format("dense_{}", i);
    d.activation = options.activation;
    d.kernel_initializer = options.kernel_initializer;
    d.bias_initializer = options.bias_initializer;
    h = Dense(s, h, d);
    if (options.dropout_rate > 0) h = ops::Dropout(s, h, options.dropout_rate);
  }
  if (options.output_units > 0) {
    DenseOptions d;
    d.units = options.output_units;
    d.name = "logits";
    d.kernel_initializer = options.kernel_initializer;
    d.bias_initializer = options.bias_initializer;
    h = Dense(s, h, d);
  }
  return h;
}

}  // namespace recsdk::layers
