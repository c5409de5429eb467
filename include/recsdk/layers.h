// recsdk/layers.h: convenience layers built from ops and variables.
#ifndef RECSDK_LAYERS_H_
#define RECSDK_LAYERS_H_

#include <string>
#include <vector>

#include "recsdk/initializers.h"
#include "recsdk/scope.h"
#include "recsdk/variables.h"

namespace recsdk::layers {

enum class Activation { kNone, kRelu, kSigmoid, kTanh, kGelu, kLeakyRelu };

struct DenseOptions {
  int64_t units = 0;
  Activation activation = Activation::kNone;
  bool use_bias = true;
  Initializer kernel_initializer = Initializer::GlorotUniform();
  Initializer bias_initializer = Initializer::Zeros();
  std::string name = "dense";  // the sub-scope: variables are "<name>/kernel", "<name>/bias"
};

// Dense: activation(x · kernel + bias) over the last axis of a rank-2 input.
Output Dense(const Scope& scope, Output x, const DenseOptions& options);

struct MlpOptions {
  std::vector<int64_t> hidden_units;  // one Dense layer per entry
  Activation activation = Activation::kRelu;
  // output_units > 0 adds a final linear layer "<name>/logits" without activation.
  int64_t output_units = 0;
  float dropout_rate = 0;  // applied after each hidden layer when > 0; finite, below 1
  // kernel_initializer, bias_initializer: used for every layer's kernel and bias (the logits
  // layer's too). Defaults as DenseOptions: GlorotUniform kernels, zero biases.
  Initializer kernel_initializer = Initializer::GlorotUniform();
  Initializer bias_initializer = Initializer::Zeros();
  std::string name = "mlp";
};

// MLP: layers named "<name>/dense", "<name>/dense_1", ... (and "<name>/logits"). Under a scope
// with variable reuse (Scope::WithVariableReuse), a second Mlp of the same name shares the
// first's weights: the natural way to build an eval branch beside a training one.
Output Mlp(const Scope& scope, Output x, const MlpOptions& options);

}  // namespace recsdk::layers

#endif  // RECSDK_LAYERS_H_
