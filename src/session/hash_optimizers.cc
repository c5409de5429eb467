// hash_optimizers.cc: the spec's sparse optimizer objects (recsdk/hash_optimizers.h), over
// ComputeSparseGradients / ApplySparseGradients (embedding.cc): they add no op of their own, so a
// model built through them is the model built through those.
//
// Threading: graph building is single-threaded, like Graph.
#include "recsdk/hash_optimizers.h"

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "src/common/status_macros.h"
#include "src/table/table_config_json.h"

namespace recsdk {

std::string HashOptimizer::name() const {
  return std::string(SparseOptimizerKindName(config_.kind));
}

StatusOr<HashOptimizer> HashOptimizer::FromConfig(const SparseOptimizerConfig& config) {
  RECSDK_RETURN_IF_ERROR(config.Validate());
  return HashOptimizer(config);
}

Status HashOptimizer::CheckTable(const SparseTable& table, const char* call) const {
  if (!table.valid()) {
    return absl::InvalidArgumentError(fmt::format(
        "{} of {}: a sparse variable is an empty SparseTable; pass the tables create_table or "
        "get_dense_and_sparse_variable returned",
        call, name()));
  }
  if (internal::OptimizerConfigToJson(table.optimizer()) !=
      internal::OptimizerConfigToJson(config_)) {
    return absl::InvalidArgumentError(fmt::format(
        "{} of {}: table \"{}\" was created with the sparse optimizer {}, and its rows carry that "
        "one's slots, so this optimizer ({}) cannot update it; pass this optimizer to the table's "
        "create_table, or use that one's compute_gradients / apply_gradients for it",
        call, name(), table.table_name(), table.optimizer().ToString(), config_.ToString()));
  }
  return absl::OkStatus();
}

StatusOr<std::vector<SparseGradients>> HashOptimizer::compute_gradients(
    const Scope& scope, Output loss, const std::vector<SparseTable>& var_list) const {
  if (!scope.ok()) return scope.status();
  std::vector<SparseTable> tables = var_list;
  if (tables.empty()) {
    RECSDK_ASSIGN_OR_RETURN(auto variables, get_dense_and_sparse_variable(scope.graph()));
    tables = std::move(variables.second);
  }
  for (const SparseTable& t : tables) RECSDK_RETURN_IF_ERROR(CheckTable(t, "compute_gradients"));
  RECSDK_ASSIGN_OR_RETURN(std::vector<SparseGrad> grads,
                          ComputeSparseGradients(scope, loss, tables));
  return internal::GroupGradientsByTable(std::move(grads), tables);
}

std::vector<SparseGradients> internal::GroupGradientsByTable(
    std::vector<SparseGrad> grads, const std::vector<SparseTable>& tables) {
  std::vector<SparseGradients> out(tables.size());
  for (SparseGrad& g : grads) {
    for (size_t i = 0; i < tables.size(); ++i) {
      if (tables[i].table_name() == g.table_name) {
        out[i].push_back(std::move(g));
        break;
      }
    }
  }
  return out;
}

StatusOr<std::vector<SparseGrad>> internal::FlattenGradsAndVars(
    const HashOptimizer& optimizer, const SparseGradsAndVars& grads_and_vars,
    const std::string& who) {
  std::vector<SparseGrad> flat;
  for (const auto& [grads, table] : grads_and_vars) {
    RECSDK_RETURN_IF_ERROR(optimizer.CheckTable(table, who.c_str()));
    for (const SparseGrad& g : grads) {
      if (g.table_name != table.table_name()) {
        return absl::InvalidArgumentError(fmt::format(
            "{} of {}: a gradient of table \"{}\" is paired with table \"{}\"; pair each entry "
            "of compute_gradients' result with the var_list entry of the same index",
            who, optimizer.name(), g.table_name, table.table_name()));
      }
      flat.push_back(g);
    }
  }
  if (flat.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("{} of {}: grads_and_vars holds no gradient; the loss depends on no trainable "
                    "sparse_lookup of the given tables",
                    who, optimizer.name()));
  }
  return flat;
}

StatusOr<Node*> HashOptimizer::apply_gradients(const Scope& scope,
                                               const SparseGradsAndVars& grads_and_vars,
                                               const SparseApplyOptions& options) const {
  if (!scope.ok()) return scope.status();
  RECSDK_ASSIGN_OR_RETURN(std::vector<SparseGrad> flat,
                          internal::FlattenGradsAndVars(*this, grads_and_vars, "apply_gradients"));
  return ApplySparseGradients(scope, flat, options);
}

StatusOr<Node*> HashOptimizer::minimize(const Scope& scope, Output loss,
                                        const std::vector<SparseTable>& var_list,
                                        const SparseApplyOptions& options) const {
  std::vector<SparseTable> tables = var_list;
  if (tables.empty()) {
    RECSDK_ASSIGN_OR_RETURN(auto variables, get_dense_and_sparse_variable(scope.graph()));
    tables = std::move(variables.second);
  }
  RECSDK_ASSIGN_OR_RETURN(std::vector<SparseGradients> grads,
                          compute_gradients(scope, loss, tables));
  SparseGradsAndVars pairs;
  for (size_t i = 0; i < tables.size(); ++i) pairs.emplace_back(std::move(grads[i]), tables[i]);
  return apply_gradients(scope, pairs, options);
}

StatusOr<SparseTable> create_table(const Scope& scope, const TableConfig& config,
                                   const HashOptimizer& optimizer) {
  return create_table(scope, config, optimizer.config());
}

namespace optimizers {
namespace lazy_adam {
StatusOr<HashOptimizer> create_hash_optimizer(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::LazyAdam(
      o.learning_rate, o.beta1, o.beta2, o.epsilon, o.weight_decay));
}
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::LazyAdamByAddress(
      o.learning_rate, o.beta1, o.beta2, o.epsilon, o.weight_decay));
}
}  // namespace lazy_adam
namespace adagrad {
StatusOr<HashOptimizer> create_hash_optimizer(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::Adagrad(
      o.learning_rate, o.initial_accumulator_value, o.epsilon, o.weight_decay));
}
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::AdagradByAddress(
      o.learning_rate, o.initial_accumulator_value, o.epsilon, o.weight_decay));
}
}  // namespace adagrad
namespace gradient_descent {
StatusOr<HashOptimizer> create_hash_optimizer(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::SGD(o.learning_rate, o.weight_decay));
}
StatusOr<HashOptimizer> create_hash_optimizer_by_address(const Options& o) {
  return HashOptimizer::FromConfig(
      SparseOptimizerConfig::SGDByAddr(o.learning_rate, o.weight_decay));
}
}  // namespace gradient_descent
namespace ftrl {
StatusOr<HashOptimizer> create_hash_optimizer(const Options& o) {
  return HashOptimizer::FromConfig(SparseOptimizerConfig::FTRL(
      o.learning_rate, o.learning_rate_power, o.initial_accumulator_value,
      o.l1_regularization_strength, o.l2_regularization_strength,
      o.l2_shrinkage_regularization_strength));
}
}  // namespace ftrl
}  // namespace optimizers

}  // namespace recsdk
