// distributed_optimizer.cc: DistributedOptimizer (recsdk/distributed.h), the spec's
// npu_distributed_optimizer_wrapper: the inner optimizer's gradients, averaged over the ranks by
// one AllReduceMean node (marked with the options' is_tailing_optimization), applied by the
// inner optimizer.
//
// Threading: build-time only, like Scope.
#include <memory>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

Status NullInner() {
  return absl::InvalidArgumentError(
      "DistributedOptimizer: the inner optimizer is null; wrap an optimizer, e.g. "
      "DistributedOptimizer(std::make_shared<AdamOptimizer>())");
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<Optimizer> inner,
                                           DistributedOptimizerOptions options)
    : inner_(std::move(inner)), options_(options) {}

// The inner optimizer's name: slots are named after it ("<var>/Adam/m"), so a checkpoint of a
// wrapped run restores into an unwrapped one and back.
std::string DistributedOptimizer::name() const {
  return inner_ == nullptr ? "Distributed" : inner_->name();
}

StatusOr<GradsAndVars> DistributedOptimizer::ComputeGradients(
    const Scope& scope, Output loss, const std::vector<Variable>& var_list) {
  if (inner_ == nullptr) return NullInner();
  RECSDK_ASSIGN_OR_RETURN(GradsAndVars gv, inner_->ComputeGradients(scope, loss, var_list));
  std::vector<Output> grads;
  for (const auto& [grad, var] : gv) {
    if (!grad.valid()) continue;
    if (grad.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(fmt::format(
          "DistributedOptimizer: the gradient of variable \"{}\" is {}; the all-reduce averages "
          "float32 gradients: make the variable float32",
          var.name(), DTypeName(grad.dtype())));
    }
    grads.push_back(grad);
  }
  if (grads.empty()) return gv;
  const std::vector<Output> reduced = AllReduceMean(scope.NewSubScope("distributed"), grads);
  if (!scope.ok()) return scope.status();
  // The marks the session pass tailing_optimization checks against SessionConfig (the spec pairs
  // NPUOptimizer's is_tailing_optimization with the session's).
  Node* node = reduced.front().node;
  node->SetAttr("distributed_optimizer", true);
  node->SetAttr("is_tailing_optimization", options_.is_tailing_optimization);
  size_t k = 0;
  for (auto& [grad, var] : gv) {
    if (grad.valid()) grad = reduced[k++];
  }
  return gv;
}

StatusOr<Node*> DistributedOptimizer::ApplyGradients(const Scope& scope,
                                                     const GradsAndVars& grads_and_vars,
                                                     const Variable* global_step) {
  if (inner_ == nullptr) return NullInner();
  return inner_->ApplyGradients(scope, grads_and_vars, global_step);
}

StatusOr<Node*> DistributedOptimizer::ApplyDense(const Scope&, Output, const Variable& var) {
  return absl::InternalError(fmt::format(
      "DistributedOptimizer::ApplyDense(\"{}\") is never called: updates go through the inner "
      "optimizer's ApplyGradients",
      var.name()));
}

}  // namespace recsdk
