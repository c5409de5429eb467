// modify_graph.cc: automatic graph modification (the spec's modify_graph_and_start_emb_cache)
// and the DatasetColumn placeholders the key stage feeds.
//
// The pass keeps the graph's structure: a SparseLookup whose key work moves to the key stage is
// marked (attribute "moved_to_key_stage") and the KeyStage feeds all of its outputs (unique rows,
// restore indices) every step. The Session prunes a node whose outputs are all fed, so the lookup
// no longer runs in the graph and everything downstream (gathers, gradients, the sparse
// optimizer) reads the key stage's results. Rewiring consumers to new placeholders would add
// nodes after their consumers and break the graph's id order, which Gradients, Copy and the
// executor rely on; feeding the node's own outputs needs no such change.
//
// Threading: like Graph, single-threaded.
#include "fmt/format.h"
#include "recsdk/pipeline.h"
#include "src/common/status_macros.h"
#include "src/session/table_ops.h"

namespace recsdk {

using internal::kDatasetColumnAttr;

Output DatasetColumn(const Scope& scope, std::string_view column, DType dtype, const Shape& shape) {
  return Output(
      scope.AddNode("Placeholder", {},
                    {{"dtype", dtype}, {"shape", shape}, {kDatasetColumnAttr, std::string(column)}},
                    column),
      0);
}

FeedList BatchFeeds(const Graph& graph, const Batch& batch) {
  FeedList feeds;
  for (const Node* n : graph.nodes()) {
    if (n->type() != "Placeholder") continue;
    const std::string column = n->StringAttr(kDatasetColumnAttr);
    if (column.empty()) continue;
    if (const Tensor* t = batch.column(column)) feeds.emplace_back(n->name(), *t);
  }
  return feeds;
}

StatusOr<ModifyGraphResult> ModifyGraph(Graph* graph) {
  internal::RegisterTableOps();
  if (!graph->status().ok()) return graph->status();
  ModifyGraphResult result;
  for (Node* n : graph->nodes()) {
    if (n->type() != internal::kSparseLookupOp || !n->BoolAttr("modify_graph")) continue;
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

}  // namespace recsdk
