// modify_graph.cc: automatic graph modification (the spec's modify_graph_and_start_emb_cache,
// with get_initializer, its key stage start) and the DatasetColumn placeholders the key stage
// feeds. The rewrite itself is the pass "modify_graph" in
// src/session/passes/move_lookups_to_key_stage.cc; ModifyGraph runs it on the user's graph.
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
#include <fstream>
#include <utility>

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
  // The "modify_graph" pass (src/session/passes/move_lookups_to_key_stage.cc), validated like every
  // pass.
  RECSDK_RETURN_IF_ERROR(internal::ValidateGraph(*graph, ""));
  RECSDK_ASSIGN_OR_RETURN(ModifyGraphResult result, internal::MoveLookupsToKeyStage(graph));
  RECSDK_RETURN_IF_ERROR(internal::ValidateGraph(*graph, "modify_graph"));
  return result;
}

StatusOr<ModifyGraphResult> modify_graph_and_start_emb_cache(Graph* graph, bool dump_graph,
                                                             const std::string& dump_path) {
  RECSDK_ASSIGN_OR_RETURN(ModifyGraphResult result, ModifyGraph(graph));
  if (dump_graph) {
    std::ofstream out(dump_path, std::ios::binary | std::ios::trunc);
    out << graph->ToJson();
    out.close();
    if (!out) {
      return absl::InvalidArgumentError(fmt::format(
          "modify_graph_and_start_emb_cache: cannot write the modified graph to dump_path \"{}\"; "
          "pass a path in a writable directory, or dump_graph = false",
          dump_path));
    }
  }
  return result;
}

StatusOr<std::unique_ptr<KeyStage>> get_initializer(Session& session,
                                                    std::unique_ptr<Dataset> dataset,
                                                    bool is_training, KeyStageOptions options) {
  if (is_training) {
    const auto& collections = session.graph().collections();
    const auto it = collections.find(kVariableInitializers);
    if (it != collections.end() && !it->second.empty()) {
      std::vector<TensorName> targets(it->second.begin(), it->second.end());
      RECSDK_RETURN_IF_ERROR(session.Run({}, {}, targets).status());
    }
  }
  options.channel = is_training ? KeyStageChannel::kTrain : KeyStageChannel::kEval;
  return KeyStage::Start(session, std::move(dataset), options);
}

}  // namespace recsdk
