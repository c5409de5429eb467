// modify_graph.cc: automatic graph modification (the spec's modify_graph_and_start_emb_cache)
// and the DatasetColumn placeholders the key stage feeds. The rewrite itself is the pass
// "modify_graph" in src/session/passes/modify_graph.cc; ModifyGraph runs it on the user's graph.
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
#include "src/session/passes/pass_manager.h"
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
  // The "modify_graph" pass (src/session/passes/modify_graph.cc), validated like every pass.
  RECSDK_RETURN_IF_ERROR(internal::ValidateGraph(*graph, ""));
  RECSDK_ASSIGN_OR_RETURN(ModifyGraphResult result, internal::MoveLookupsToKeyStage(graph));
  RECSDK_RETURN_IF_ERROR(internal::ValidateGraph(*graph, "modify_graph"));
  return result;
}

}  // namespace recsdk
