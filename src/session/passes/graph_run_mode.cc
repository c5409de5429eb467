// graph_run_mode.cc: the session pass "graph_run_mode": with graph_run_mode 0 (online inference)
// the session must not train, so the pass refuses every gradient and update op and makes every
// table lookup read-only.
//
// What counts: updates are the dense optimizers' Apply* ops and TableApply (they write variables
// and table rows from gradients); gradient ops are the op types autodiff adds (those ending in
// "Grad", and TableGradAggregate). Assign stays allowed: initialising or restoring variables is
// part of serving. Lookups (SparseLookup and its grouped form) get is_train=false, so an unseen
// key reads the table's default value and neither inserts a row nor counts towards admission.
// With graph_run_mode 1 (training, the default) the pass is disabled.
//
// Threading: like Graph, single-threaded.
#include <string>

#include "absl/strings/match.h"
#include "fmt/format.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {
namespace {

bool IsUpdate(const std::string& type) {
  return absl::StartsWith(type, "Apply") || type == kTableApplyOp;
}
bool IsGradient(const std::string& type) {
  return absl::EndsWith(type, "Grad") || type == kTableGradAggregateOp;
}

class GraphRunModePass final : public GraphPass {
 public:
  bool Enabled(const PassContext& ctx) const override { return ctx.config.graph_run_mode == 0; }

  Status Run(const PassContext&, Graph* graph) override {
    for (Node* n : graph->nodes()) {
      if (IsUpdate(n->type()) || IsGradient(n->type())) {
        return absl::FailedPreconditionError(fmt::format(
            "graph_run_mode 0 (inference): node \"{}\" ({}) is a {} op, which inference does not "
            "run; build the serving graph without the optimizer or set graph_run_mode 1",
            n->name(), n->type(), IsUpdate(n->type()) ? "variable/table update" : "gradient"));
      }
      if (n->type() == kSparseLookupOp || n->type() == kTableLookupGroupOp ||
          n->type() == kTableLookupForwardOp) {
        n->SetAttr("is_train", false);
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<GraphPass> MakeGraphRunModePass() { return std::make_unique<GraphRunModePass>(); }

}  // namespace recsdk::internal
