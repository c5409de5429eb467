// move_lookups_to_key_stage.cc: the pass "modify_graph", automatic graph modification: every
// SparseLookup built with modify_graph=true is marked moved_to_key_stage, after checking that its
// ids, mask and timestamps are dataset columns (the key stage reads them from the batch). The
// Session then prunes the lookup (the key stage feeds all of its outputs). See
// src/session/modify_graph.cc for why the graph's structure is kept.
//
// It is an explicit pass: the user calls ModifyGraph (the spec's modify_graph_and_start_emb_cache)
// on their own graph, because the key stage and BatchFeeds read that graph; Session::Create does
// not run it, so a lookup built with modify_graph=true and never moved keeps running in the graph.
//
// Threading: like Graph, single-threaded.
#include "fmt/format.h"
#include "recsdk/pipeline.h"
#include "src/common/status_macros.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {

StatusOr<ModifyGraphResult> MoveLookupsToKeyStage(Graph* graph) {
  ModifyGraphResult result;
  for (Node* n : graph->nodes()) {
    if (n->type() != kSparseLookupOp || !n->BoolAttr("modify_graph")) continue;
    for (int i = 1; i < n->num_inputs(); ++i) {
      const Node* src = n->input(i).node;
      if (src->type() != "Placeholder" || src->StringAttr(kDatasetColumnAttr).empty()) {
        return absl::InvalidArgumentError(fmt::format(
            "ModifyGraph: sparse_lookup \"{}\" (table \"{}\") has modify_graph=true but its input "
            "{} comes from \"{}\" ({}), not from a dataset column; build ids, mask and timestamps "
            "with DatasetColumn(...) or set modify_graph=false",
            n->name(), n->StringAttr("table_name"), i, src->name(), src->type()));
      }
    }
    n->SetAttr("moved_to_key_stage", true);
    result.moved_lookups.push_back(n->name());
  }
  return result;
}

namespace {

class ModifyGraphPass final : public GraphPass {
 public:
  Status Run(const PassContext&, Graph* graph) override {
    return MoveLookupsToKeyStage(graph).status();
  }
};

}  // namespace

std::unique_ptr<GraphPass> MakeModifyGraphPass() { return std::make_unique<ModifyGraphPass>(); }

}  // namespace recsdk::internal
