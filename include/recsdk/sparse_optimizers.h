// recsdk/sparse_optimizers.h: the optimizers that update rows of sparse embedding tables.
//
// A SparseOptimizerConfig is a plain value: which rule (SGD, Adagrad, LazyAdam, FTRL and the
// by-address variants of the spec), its hyper-parameters with the spec's defaults, and how many
// float slots each row carries beside its embedding. The table applies it (EmbeddingTable::
// ApplyGradients); the math lives in src/table/sparse_optimizers.cc, and docs/optimizers.md
// states every rule, slot, slot order and default. Values are immutable once a
// table is created, so sharing one config between threads is safe.
#ifndef RECSDK_SPARSE_OPTIMIZERS_H_
#define RECSDK_SPARSE_OPTIMIZERS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "recsdk/status.h"

namespace recsdk {

// Pinned: the kind is recorded in table checkpoints.
enum class SparseOptimizerKind : int32_t {
  kSGD = 0,
  kSGDByAddr = 1,
  kAdagrad = 2,
  kAdagradByAddress = 3,
  kLazyAdam = 4,
  kLazyAdamByAddress = 5,
  kFTRL = 6,
};

// SparseOptimizerKindName: the spec's name of `kind` ("SGD", "SGDByAddr", "Adagrad",
// "AdagradByAddress", "LazyAdam", "LazyAdamByAddress", "FTRL").
std::string_view SparseOptimizerKindName(SparseOptimizerKind kind);

// SparseOptimizerConfig: one struct for all sparse optimizers; fields a kind does not use are
// ignored. Build one with the named factories below, which set the spec's defaults.
//
// Update rules (g is the sum of the gradients of one key in a step; t the 1-based global step).
// Only the rows whose keys appear in a step change (slots and weight decay included): the L2
// term is applied lazily, to a row when it is touched. docs/optimizers.md has every rule, slot
// and default.
//   SGD:      w -= learning_rate * (g + weight_decay * w)
//   Adagrad:  g' = g + weight_decay * w;  acc += g'*g';
//             w -= learning_rate * g' / (sqrt(acc) + adagrad_epsilon)
//   LazyAdam: g' = g + weight_decay * w;
//             m = beta1*m + (1-beta1)*g';  v = beta2*v + (1-beta2)*g'*g'
//             w -= learning_rate * sqrt(1-beta2^t) / (1-beta1^t) * m / (sqrt(v) + epsilon)
//   FTRL (FTRL-Proximal as in TensorFlow's ApplyFtrlV2):
//             gs = g + 2*l2_shrinkage*w;  acc' = acc + g*g
//             linear += gs - (acc'^(-p) - acc^(-p)) / learning_rate * w   (p = learning_rate_power)
//             w = |linear| > l1 ? (sign(linear)*l1 - linear) / (acc'^(-p)/learning_rate + 2*l2) : 0
// The by-address variants compute exactly the same update; they write through the row addresses
// a lookup produced (EmbeddingTable::RowAddresses) and are the ones a table with
// use_dynamic_expansion requires, as in the spec.
struct SparseOptimizerConfig {
  // kind: which rule. Default kSGD.
  SparseOptimizerKind kind = SparseOptimizerKind::kSGD;
  // learning_rate: step size; finite and > 0. Default 0.001 (the spec's default for Adagrad and
  // LazyAdam; the factories take it explicitly for SGD).
  float learning_rate = 0.001f;
  // weight_decay (SGD, Adagrad, LazyAdam and their by-address variants): the L2 strength, in
  // the coupled form: weight_decay * w is added to the gradient of a touched row before the rule
  // runs (the gradient of (weight_decay / 2) * |w|^2), so with Adagrad and LazyAdam it is scaled
  // by their per-element step like the gradient; not AdamW's decoupled decay. Finite and >= 0;
  // 0 (the default) disables and gives the rule without decay bit for bit. FTRL must keep 0 (its
  // L2 is l2 / l2_shrinkage); otherwise Validate refuses it.
  float weight_decay = 0.0f;
  // initial_accumulator_value (Adagrad, FTRL): first value of the accumulator slot; >= 0 (for
  // Adagrad, 0 needs adagrad_epsilon > 0). Default 0.9 for Adagrad, 0.1 for FTRL (set by the
  // factories).
  float initial_accumulator_value = 0.9f;
  // adagrad_epsilon (Adagrad, AdagradByAddress): added to sqrt(acc) in the denominator; finite
  // and >= 0. Default 0, the spec's rule; PyTorch's Adagrad is initial_accumulator_value 0 with
  // adagrad_epsilon 1e-10.
  float adagrad_epsilon = 0.0f;
  // beta1, beta2 (LazyAdam): moment decay rates, each in [0, 1). Defaults 0.9 and 0.999.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // epsilon (LazyAdam): added to sqrt(v); > 0. Default 1e-8.
  float epsilon = 1e-8f;
  // learning_rate_power (FTRL): <= 0. Default -0.5.
  float learning_rate_power = -0.5f;
  // l1, l2, l2_shrinkage (FTRL): regularisation strengths, each >= 0. Default 0.
  float l1 = 0.0f;
  float l2 = 0.0f;
  float l2_shrinkage = 0.0f;

  // SGD, SGDByAddr, Adagrad, AdagradByAddress, LazyAdam, LazyAdamByAddress, FTRL: factories, one
  // per rule, setting `kind` and the given hyper-parameters; the rest keep their defaults. The
  // arguments keep the spec's names and defaults (`epsilon` of Adagrad is adagrad_epsilon).
  // Validate() checks the values, when create_table does.
  static SparseOptimizerConfig SGD(float learning_rate, float weight_decay = 0.0f);
  static SparseOptimizerConfig SGDByAddr(float learning_rate, float weight_decay = 0.0f);
  static SparseOptimizerConfig Adagrad(float learning_rate = 0.001f,
                                       float initial_accumulator_value = 0.9f, float epsilon = 0.0f,
                                       float weight_decay = 0.0f);
  static SparseOptimizerConfig AdagradByAddress(float learning_rate = 0.001f,
                                                float initial_accumulator_value = 0.9f,
                                                float epsilon = 0.0f, float weight_decay = 0.0f);
  static SparseOptimizerConfig LazyAdam(float learning_rate = 0.001f, float beta1 = 0.9f,
                                        float beta2 = 0.999f, float epsilon = 1e-8f,
                                        float weight_decay = 0.0f);
  static SparseOptimizerConfig LazyAdamByAddress(float learning_rate = 0.001f, float beta1 = 0.9f,
                                                 float beta2 = 0.999f, float epsilon = 1e-8f,
                                                 float weight_decay = 0.0f);
  static SparseOptimizerConfig FTRL(float learning_rate = 0.001f, float learning_rate_power = -0.5f,
                                    float initial_accumulator_value = 0.1f, float l1 = 0.0f,
                                    float l2 = 0.0f, float l2_shrinkage = 0.0f);

  // SlotsPerDim: float slots per embedding element (0 SGD, 1 Adagrad, 2 LazyAdam and FTRL).
  int SlotsPerDim() const;
  // NumSlots: floats of optimizer state per row for an embedding of `dim`.
  int NumSlots(int dim) const { return SlotsPerDim() * dim; }
  // ByAddress: true for the by-address variants.
  bool ByAddress() const;
  // Validate: InvalidArgument naming the optimizer, the option, its value, the rule and the fix.
  Status Validate() const;
  // ToString: the rule and its hyper-parameters, e.g. "SGD(learning_rate=0.01, weight_decay=0)",
  // for messages and logs.
  std::string ToString() const;
};

}  // namespace recsdk

#endif  // RECSDK_SPARSE_OPTIMIZERS_H_
