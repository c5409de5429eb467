// recsdk/layers.h: convenience layers built from ops and variables.
#ifndef RECSDK_LAYERS_H_
#define RECSDK_LAYERS_H_

#include <string>
#include <vector>

#include "recsdk/initializers.h"
#include "recsdk/scope.h"
#include "recsdk/status.h"
#include "recsdk/variables.h"

namespace recsdk::layers {

// Activation: the function a layer applies to its output: none, ReLU, sigmoid, tanh, GELU (exact)
// or leaky ReLU (alpha 0.2), as the ops of those names (ops.h).
enum class Activation { kNone, kRelu, kSigmoid, kTanh, kGelu, kLeakyRelu };

// DenseOptions: the options of Dense.
struct DenseOptions {
  // units: the output width; > 0 (required). activation: default none. use_bias: add "<name>/bias".
  // Default true. kernel_initializer, bias_initializer: default GlorotUniform and zeros.
  int64_t units = 0;
  Activation activation = Activation::kNone;
  bool use_bias = true;
  Initializer kernel_initializer = Initializer::GlorotUniform();
  Initializer bias_initializer = Initializer::Zeros();
  std::string name = "dense";  // the sub-scope: variables are "<name>/kernel", "<name>/bias"
};

// Dense: activation(x · kernel + bias) over the last axis of a rank-2 input.
Output Dense(const Scope& scope, Output x, const DenseOptions& options);

// MlpOptions: the options of Mlp.
struct MlpOptions {
  std::vector<int64_t> hidden_units;  // one Dense layer per entry
  // activation: applied after each hidden layer. Default ReLU.
  Activation activation = Activation::kRelu;
  // output_units > 0 adds a final linear layer "<name>/logits" without activation.
  int64_t output_units = 0;
  float dropout_rate = 0;  // applied after each hidden layer when > 0; finite, below 1
  // kernel_initializer, bias_initializer: used for every layer's kernel and bias (the logits
  // layer's too). Defaults as DenseOptions: GlorotUniform kernels, zero biases.
  Initializer kernel_initializer = Initializer::GlorotUniform();
  Initializer bias_initializer = Initializer::Zeros();
  // name: the sub-scope of the layers. Default "mlp".
  std::string name = "mlp";
};

// MLP: layers named "<name>/dense", "<name>/dense_1", ... (and "<name>/logits"). Under a scope
// with variable reuse (Scope::WithVariableReuse), a second Mlp of the same name shares the
// first's weights: the natural way to build an eval branch beside a training one.
Output Mlp(const Scope& scope, Output x, const MlpOptions& options);

// --- DCNv2 cross network (Wang et al. 2021, "DCN V2") -------------------------------------

// CrossStructure: how a cross layer parameterises its d x d weight W.
enum class CrossStructure {
  kFullRank,  // W: one [d, d] kernel "<name>/kernel". d^2 weights per layer.
  kLowRank,   // W = U V^T of rank `rank`: kernels "<name>/kernel_v" [d, r] and "kernel_u" [r, d].
  // kMixtureOfLowRank: DCN-Mix. `num_experts` low-rank experts E_i(x) = x0 * (x U_i V_i^T + b_i),
  // mixed by a softmax gate over a linear function of x_l ("<name>/gate" [d, num_experts]):
  // x_{l+1} = sum_i g_i(x_l) E_i(x_l) + x_l. The paper's optional nonlinearity inside an expert
  // is not applied (its simplest form). Expert i's variables are "<name>/expert_<i>/...".
  kMixtureOfLowRank,
};

// CrossLayerOptions: the options of CrossLayer.
struct CrossLayerOptions {
  // structure: how W is parameterised. Default kFullRank.
  CrossStructure structure = CrossStructure::kFullRank;
  // rank: r of W = U V^T for kLowRank and kMixtureOfLowRank, which need r > 0 (r well below d
  // is the point: 2dr weights instead of d^2). kFullRank needs it left at 0.
  int64_t rank = 0;
  // num_experts: kMixtureOfLowRank only, >= 1 (the paper uses 4); other structures need 0.
  int64_t num_experts = 0;
  bool use_bias = true;  // b, "<name>/bias" [d] (per expert in the mixture), zeros by default
  // kernel_initializer, bias_initializer: of every kernel (U, V, the gate) and bias. Defaults
  // GlorotUniform and zeros.
  Initializer kernel_initializer = Initializer::GlorotUniform();
  Initializer bias_initializer = Initializer::Zeros();
  std::string name = "cross";  // the sub-scope of the layer's ops and variables
};

// CrossLayer: one DCNv2 cross layer, x_{l+1} = x0 * (x_l W + b) + x_l (elementwise *; W stored
// as the [d, d] right factor of the row-vector form, i.e. the transpose of the paper's W), built
// from MatMul and one fused op for x0 * (y + b) + xl (BiasAdd, Mul and Add without a bias), each
// with its gradient, so autodiff, fusion passes and every backend apply. `x0`
// and `xl` are [batch, d] of one float dtype with d known (for the first layer xl is x0). Cost
// per sample O(d^2) full rank, O(d r) low rank, O(K d r) for K experts.
// Errors (InvalidArgument, naming the layer and the fix): inputs not rank 2, d unknown, shapes
// or dtypes that differ, rank/num_experts that do not fit the structure. Under a scope with an
// earlier graph error, returns that error. Variable reuse as for Dense.
StatusOr<Output> CrossLayer(const Scope& scope, Output x0, Output xl,
                            const CrossLayerOptions& options);

// CrossNetworkOptions: the options of CrossNetwork.
struct CrossNetworkOptions {
  int num_layers = 3;       // >= 1; layers "<name>/cross", "<name>/cross_1", ...
  CrossLayerOptions layer;  // every layer's options (its `name` is replaced as above)
  // name: the sub-scope of the layers. Default "cross_network".
  std::string name = "cross_network";
};

// CrossNetwork: num_layers CrossLayers stacked on x0 (x_1 = Cross(x0, x0), x_2 = Cross(x0, x_1),
// ...); returns the last layer's output, [batch, d]. Errors as CrossLayer, and for
// num_layers < 1.
StatusOr<Output> CrossNetwork(const Scope& scope, Output x0, const CrossNetworkOptions& options);

// --- Field interactions: FM, xDeepFM's CIN -------------------------------------------------
//
// Both take the field embeddings of a sample as [batch, F, D] (F fields of dim D, e.g. a
// sparse_lookup without a combiner, or a Concat of per-field lookups reshaped), or flattened as
// [batch, F * D] with num_fields = F. F and D must be known; the batch may be unknown.

// FmInteractionOptions: the options of FmInteraction.
struct FmInteractionOptions {
  // num_fields: F for a rank-2 input [batch, F * D] (> 0 and dividing its width). For a rank-3
  // input [batch, F, D] leave it 0 (or set it to F). Default 0.
  int64_t num_fields = 0;
  std::string name = "fm";  // the sub-scope of the layer's ops
};

// FmInteraction: the factorization machine's second-order term (Rendle 2010) of each sample,
// sum_{i<j} <v_i, v_j> = 0.5 * sum_d ((sum_f v_fd)^2 - sum_f v_fd^2), as [batch, 1]. No
// variables (the v are the field embeddings). Composed from ReduceSum, Square, Sub and Mul;
// cost O(F D) per sample, not the pairwise O(F^2 D).
// Errors (InvalidArgument naming the layer and the fix): an input not [batch, F, D] or
// [batch, F * D] with known F and D, num_fields that does not fit, a non-float dtype. Under a
// scope with an earlier graph error, returns that error.
StatusOr<Output> FmInteraction(const Scope& scope, Output fields,
                               const FmInteractionOptions& options = {});

// CinOptions: the options of Cin.
struct CinOptions {
  // layer_sizes: H_k, the feature maps of each CIN layer; at least one layer, each > 0. With
  // split_half every layer but the last must be even. Default {128, 128} (xDeepFM's Criteo
  // setting is 200-200-200).
  std::vector<int64_t> layer_sizes = {128, 128};
  // split_half: as the xDeepFM code: each layer but the last sends its first H_k / 2 maps to the
  // next layer and its other H_k / 2 to the output; false sends all H_k to both. Default true.
  bool split_half = true;
  // activation: applied to each layer's maps; the paper's CIN is linear (kNone, the default).
  Activation activation = Activation::kNone;
  int64_t num_fields = 0;  // as FmInteractionOptions::num_fields
  bool use_bias = true;    // "<name>/layer_<k>/bias" [H_k], zeros by default
  // kernel_initializer: each layer's "<name>/layer_<k>/kernel" [H_{k-1} * F, H_k].
  Initializer kernel_initializer = Initializer::GlorotUniform();
  // bias_initializer: each layer's bias. Default zeros.
  Initializer bias_initializer = Initializer::Zeros();
  std::string name = "cin";  // the sub-scope of the layer's ops and variables
};

// Cin: xDeepFM's compressed interaction network (Lian et al. 2018). With X^0 = the field
// embeddings [batch, F, D], layer k computes X^k[h, d] = act(sum_{i, j} W^k[i * F + j, h] *
// X^{k-1}[i, d] * X^0[j, d] + b^k[h]) (the outer product of the previous layer's maps with the
// fields, compressed by W^k); every layer's output maps are sum-pooled over d and concatenated:
// [batch, sum_k (H_k / 2 with split_half except the last layer, else H_k)]. Built from
// Transpose, Reshape, one fused outer-product op per layer (its rows are the GEMM's operand:
// [batch * D, H_{k-1} F]), MatMul (the GEMM, by [H_{k-1} F, H_k]), BiasAdd, Slice, ReduceSum and
// Concat. Cost per sample O(D H_{k-1} F H_k) per layer; memory O(batch D H_{k-1} F) for the
// outer product. docs/layers.md has the measurements behind the fused op.
// Errors (InvalidArgument naming the layer and the fix): as FmInteraction's input errors, and
// layer_sizes empty, not > 0, or odd where split_half needs it even. Variable reuse as for Dense.
StatusOr<Output> Cin(const Scope& scope, Output fields, const CinOptions& options = {});

// --- Multi-task: MMoE ----------------------------------------------------------------------

// MixtureOfExpertsOptions: the options of MixtureOfExperts.
struct MixtureOfExpertsOptions {
  int64_t num_experts = 4;  // >= 1: shared experts "<name>/expert_<i>"
  int64_t num_tasks = 2;    // >= 1: one gate "<name>/gate_<t>" and one output per task
  // expert: every expert's Mlp (hidden_units non-empty, each > 0; its `name` is replaced as
  // above). Its last layer's width (output_units when > 0, else the last hidden size) is the
  // width E of each task's output. Default one ReLU layer of 64.
  MlpOptions expert = {.hidden_units = {64}};
  // gate_initializer: each gate's "<name>/gate_<t>/kernel" [d, num_experts] (its bias is zeros).
  Initializer gate_initializer = Initializer::GlorotUniform();
  std::string name = "mmoe";  // the sub-scope of the layer's ops and variables
};

// MixtureOfExperts: multi-gate mixture of experts (Ma et al. 2018, "MMoE"). The experts f_i are
// Mlps on x shared by every task; task t's gate g_t(x) = softmax(x W_t + b_t) over the experts
// mixes them: output_t = sum_i g_t(x)_i f_i(x), [batch, E]. Returns num_tasks outputs in task
// order (feed each to its task tower). x is [batch, d] with d known, float. Composed from the
// Mlps, Dense gates, Softmax, Concat, Reshape, Mul (broadcast) and ReduceSum. Cost: the experts'
// Mlps once, plus O(num_tasks * num_experts * (d + E)) per sample.
// Errors (InvalidArgument naming the layer and the fix): x not [batch, d] with d known or not
// float, num_experts or num_tasks < 1, an expert Mlp without layers or with a width <= 0.
// Variable reuse as for Dense.
StatusOr<std::vector<Output>> MixtureOfExperts(const Scope& scope, Output x,
                                               const MixtureOfExpertsOptions& options = {});

// --- Normalisation -------------------------------------------------------------------------

// LayerNormOptions: the options of LayerNorm.
struct LayerNormOptions {
  // epsilon: added to the variance, > 0 and finite. Default 1e-3 (Keras' LayerNormalization).
  double epsilon = 1e-3;
  bool center = true;  // learn beta, "<name>/beta" [c], zeros at first
  bool scale = true;   // learn gamma, "<name>/gamma" [c], ones at first
  // name: the sub-scope of the layer's variables. Default "layer_norm".
  std::string name = "layer_norm";
};

// LayerNorm: per sample, normalises x over its last axis (c, known) and applies gamma and beta:
// y = (x - mean) / sqrt(var + epsilon) * gamma + beta (biased variance), for x of rank >= 2 and a
// float dtype. Composed from ReduceMean, Sub, Square, Rsqrt, Mul and Add. Errors
// (InvalidArgument naming the layer): rank < 2, unknown last dimension, non-float dtype, epsilon
// not > 0 or not finite.
StatusOr<Output> LayerNorm(const Scope& scope, Output x, const LayerNormOptions& options = {});

// NormMode: which statistics a BatchNorm uses.
enum class NormMode {
  kTraining,   // the batch's mean and variance; updates the moving averages
  kInference,  // the moving averages (evaluation, prediction, export)
};

// BatchNormOptions: the options of BatchNorm.
struct BatchNormOptions {
  // mode: which statistics to use. Default kTraining.
  NormMode mode = NormMode::kTraining;
  // momentum: moving = momentum * moving + (1 - momentum) * batch statistic; in [0, 1).
  // Default 0.99 (Keras' BatchNormalization).
  double momentum = 0.99;
  double epsilon = 1e-3;  // > 0 and finite
  bool center = true;     // beta, "<name>/beta" [c]
  bool scale = true;      // gamma, "<name>/gamma" [c]
  // name: the sub-scope of the layer's variables. Default "batch_norm".
  std::string name = "batch_norm";
};

// BatchNorm: normalises each of x's last-axis channels (c, known) over every other axis (the
// batch): y = (x - mean) / sqrt(var + epsilon) * gamma + beta, biased variance. Non-trainable
// variables "<name>/moving_mean" (zeros) and "<name>/moving_variance" (ones) hold the averages
// for kInference. In kTraining the returned output carries a control dependency on the two
// moving-average updates, so computing it (every training step) updates them: no UPDATE_OPS
// collection to remember. Build the evaluation branch under variable reuse with kInference to
// share gamma, beta and the averages (Scope::WithVariableReuse). Errors as LayerNorm, and for
// momentum outside [0, 1).
StatusOr<Output> BatchNorm(const Scope& scope, Output x, const BatchNormOptions& options = {});

}  // namespace recsdk::layers

#endif  // RECSDK_LAYERS_H_
