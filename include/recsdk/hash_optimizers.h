// recsdk/hash_optimizers.h: the spec's sparse optimizer objects (mx_rec.optimizers.<rule>
// .create_hash_optimizer and create_hash_optimizer_by_address), for code ported from the spec's
// guides line by line; their var_list comes from get_dense_and_sparse_variable (estimator.h).
//
// A HashOptimizer is a SparseOptimizerConfig with the spec's methods. The rule lives in the
// table (each row carries the optimizer's slots), so the optimizer is given to create_table, as
// the spec's create_table takes its optimizer; compute_gradients and apply_gradients then build
// exactly what ComputeSparseGradients and ApplySparseGradients (embedding.h) build, and a model
// trained through these objects equals one trained through those calls bit for bit.
//
//   auto sparse_optimizer = optimizers::lazy_adam::create_hash_optimizer({.learning_rate = 1e-3});
//   auto table = create_table(scope, config, *sparse_optimizer);
//   ...
//   auto [dense_variables, sparse_variables] = *get_dense_and_sparse_variable(&graph);
//   auto sparse_grads = sparse_optimizer->compute_gradients(scope, loss, sparse_variables);
//   // zip(sparse_grads, sparse_variables) -> grads_and_vars, then
//   auto train = sparse_optimizer->apply_gradients(scope, grads_and_vars);
//
// Threading: build-time values, like Scope: use them from the thread that builds the graph.
#ifndef RECSDK_HASH_OPTIMIZERS_H_
#define RECSDK_HASH_OPTIMIZERS_H_

#include <string>
#include <utility>
#include <vector>

#include "recsdk/embedding.h"
#include "recsdk/graph.h"
#include "recsdk/scope.h"
#include "recsdk/sparse_optimizers.h"
#include "recsdk/status.h"

namespace recsdk {

// SparseGradients: the gradient of one sparse variable (table): one SparseGrad per lookup of it
// the loss depends on (empty when it depends on none).
using SparseGradients = std::vector<SparseGrad>;
// SparseGradsAndVars: the spec's grads_and_vars of a sparse optimizer: (gradient, table) pairs.
using SparseGradsAndVars = std::vector<std::pair<SparseGradients, SparseTable>>;

// HashOptimizer: the spec's sparse optimizer object. A cheap value.
class HashOptimizer {
 public:
  // config: the rule and hyper-parameters, as create_table takes them.
  const SparseOptimizerConfig& config() const { return config_; }
  // name: the spec's optimizer name ("LazyAdam", "Adagrad", "SGD", "FTRL", "LazyAdamByAddress"...).
  std::string name() const;

  // compute_gradients: d loss / d rows of each table of `var_list` (every table of the graph
  // when empty), one SparseGradients per table in var_list's order, so it zips with var_list
  // as the spec's code does. Errors as ComputeSparseGradients', and InvalidArgument naming a
  // table of var_list created with another optimizer (its rows carry that one's slots).
  StatusOr<std::vector<SparseGradients>> compute_gradients(
      const Scope& scope, Output loss, const std::vector<SparseTable>& var_list = {}) const;

  // apply_gradients: one update of every table in `grads_and_vars` (ApplySparseGradients: the
  // lookups of a table are summed per row, each touched row updated once with step
  // global_step + 1). Returns the NoOp target to run. InvalidArgument naming the table when a
  // gradient belongs to another table than its pair's, or the table was created with another
  // optimizer (pass this optimizer to create_table).
  StatusOr<Node*> apply_gradients(const Scope& scope, const SparseGradsAndVars& grads_and_vars,
                                  const SparseApplyOptions& options = {}) const;

  // minimize: compute_gradients + apply_gradients over var_list (all tables when empty).
  StatusOr<Node*> minimize(const Scope& scope, Output loss,
                           const std::vector<SparseTable>& var_list = {},
                           const SparseApplyOptions& options = {}) const;

  // FromConfig: a HashOptimizer of an existing config (Validate's errors).
  static StatusOr<HashOptimizer> FromConfig(const SparseOptimizerConfig& config);

  // CheckTable: OK when `table` was created with this optimizer (create_table fixes a table's
  // optimizer: its rows carry the slots); otherwise InvalidArgument naming the table, both
  // optimizers and `call` (the method the caller is in).
  Status CheckTable(const SparseTable& table, const char* call) const;

 private:
  explicit HashOptimizer(SparseOptimizerConfig config) : config_(config) {}
  SparseOptimizerConfig config_;
};

namespace internal {
// GroupGradientsByTable: `grads` (one per lookup) as one SparseGradients per table of `tables`.
std::vector<SparseGradients> GroupGradientsByTable(std::vector<SparseGrad> grads,
                                                   const std::vector<SparseTable>& tables);
// FlattenGradsAndVars: the SparseGrads of `grads_and_vars`, checked against `optimizer`
// (CheckTable) and their pairing; InvalidArgument naming `who` and the table otherwise, or when
// no gradient is left.
StatusOr<std::vector<SparseGrad>> FlattenGradsAndVars(const HashOptimizer& optimizer,
                                                      const SparseGradsAndVars& grads_and_vars,
                                                      const std::string& who);
}  // namespace internal

// create_table with a HashOptimizer: create_table(scope, config, optimizer.config()).
StatusOr<SparseTable> create_table(const Scope& scope, const TableConfig& config,
                                   const HashOptimizer& optimizer);

// The spec's create_hash_optimizer of each mx_rec.optimizers module, with its parameters and
// defaults (SparseOptimizerConfig documents each rule). Each returns InvalidArgument (Validate's,
// naming the option) for an invalid value.
namespace optimizers {
namespace lazy_adam {
// Options: create_hash_optimizer's arguments, with the spec's names and defaults.
struct Options {
  // learning_rate, beta1, beta2, epsilon, weight_decay: SparseOptimizerConfig's fields of the same
  // names.
  float learning_rate = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
};
// create_hash_optimizer: LazyAdam (SparseOptimizerConfig::LazyAdam).
StatusOr<HashOptimizer> create_hash_optimizer(const Options& options = {});
// create_hash_optimizer_by_address: LazyAdamByAddress, for use_dynamic_expansion tables.
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& options = {});
}  // namespace lazy_adam
namespace adagrad {
// Options: create_hash_optimizer's arguments, with the spec's names and defaults.
struct Options {
  // learning_rate, initial_accumulator_value, epsilon, weight_decay: SparseOptimizerConfig's
  // learning_rate, initial_accumulator_value, adagrad_epsilon and weight_decay.
  float learning_rate = 0.001f;
  float initial_accumulator_value = 0.9f;
  float epsilon = 0.0f;
  float weight_decay = 0.0f;
};
// create_hash_optimizer: Adagrad (SparseOptimizerConfig::Adagrad).
StatusOr<HashOptimizer> create_hash_optimizer(const Options& options = {});
// create_hash_optimizer_by_address: AdagradByAddress.
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& options = {});
}  // namespace adagrad
namespace gradient_descent {
// Options: create_hash_optimizer's arguments, with the spec's names.
struct Options {
  // learning_rate: no default in the spec; required (> 0).
  float learning_rate = 0.0f;
  // weight_decay: SparseOptimizerConfig::weight_decay. Default 0.
  float weight_decay = 0.0f;
};
// create_hash_optimizer: SGD (SparseOptimizerConfig::SGD).
StatusOr<HashOptimizer> create_hash_optimizer(const Options& options);
// create_hash_optimizer_by_address: SGDByAddr.
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& options);
}  // namespace gradient_descent
namespace ftrl {
// Options: create_hash_optimizer's arguments, with the spec's names and defaults.
struct Options {
  // learning_rate, learning_rate_power, initial_accumulator_value, l1_regularization_strength,
  // l2_regularization_strength, l2_shrinkage_regularization_strength: SparseOptimizerConfig's
  // learning_rate, learning_rate_power, initial_accumulator_value, l1, l2 and l2_shrinkage.
  float learning_rate = 0.001f;
  float learning_rate_power = -0.5f;
  float initial_accumulator_value = 0.1f;
  float l1_regularization_strength = 0.0f;
  float l2_regularization_strength = 0.0f;
  float l2_shrinkage_regularization_strength = 0.0f;
};
// create_hash_optimizer: FTRL (SparseOptimizerConfig::FTRL).
StatusOr<HashOptimizer> create_hash_optimizer(const Options& options = {});
}  // namespace ftrl
}  // namespace optimizers

}  // namespace recsdk

#endif  // RECSDK_HASH_OPTIMIZERS_H_
