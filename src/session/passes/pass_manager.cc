// pass_manager.cc: the pass registry, graph validation and the pass runner (see pass_manager.h).
#include "src/session/passes/pass_manager.h"

#include <algorithm>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"
#include "src/session/runtime.h"

namespace recsdk::internal {
namespace {

void RegisterBuiltinPasses(PassRegistry& r) {
  auto add = [&r](PassInfo info) {
    const Status s = r.Register(std::move(info));
    RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
  };
  add({"graph_run_mode", 100, PassPhase::kSession,
       "graph_run_mode 0 (inference): refuses variable and table updates, makes lookups read-only",
       MakeGraphRunModePass});
  add({"group_lookups", 200, PassPhase::kSession,
       "all in-graph lookups of one table in a step share one dedup and resolve",
       MakeGroupLookupsPass});
  add({"mixed_precision", 300, PassPhase::kSession,
       "precision_mode allow_mix_precision & co.: float32 MatMul/BatchMatMul become bfloat16 "
       "products with float32 accumulation; weights, updates and sensitive ops stay float32",
       MakeMixedPrecisionPass});
  add({"fuse_dense", 400, PassPhase::kSession,
       "MatMul + BiasAdd (+ Relu) become one FusedDense node (enable_scope_fusion_passes)",
       MakeFuseDensePass});
  add({"fuse_gather_concat", 410, PassPhase::kSession,
       "pooled TableGathers + Concat become one TableGatherConcat node that pools each table "
       "into its columns (enable_scope_fusion_passes)",
       MakeFuseGatherConcatPass});
  add({"placement", 990, PassPhase::kSession,
       "each op to the device when it has a kernel there, else to the host under "
       "mix_compile_mode; copies where an edge crosses memory spaces",
       MakePlacementPass});
  add({"modify_graph", 1000, PassPhase::kExplicit,
       "automatic graph modification: lookups built with modify_graph move to the key stage",
       MakeModifyGraphPass});
}

}  // namespace

bool FusionPassEnabled(const SessionConfig& config, std::string_view name) {
  std::string_view list = config.enable_scope_fusion_passes;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == name) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

PassRegistry& PassRegistry::Global() {
  static PassRegistry* registry = [] {
    auto* r = new PassRegistry();
    RegisterBuiltinPasses(*r);
    return r;
  }();
  return *registry;
}

Status PassRegistry::Register(PassInfo info) {
  for (const auto& p : passes_) {
    if (p->name == info.name || (p->phase == info.phase && p->order == info.order)) {
      return absl::FailedPreconditionError(
          fmt::format("pass \"{}\" (order {}) clashes with registered pass \"{}\" (order {}); "
                      "pick another name and order",
                      info.name, info.order, p->name, p->order));
    }
  }
  passes_.push_back(std::make_unique<PassInfo>(std::move(info)));
  return absl::OkStatus();
}

const PassInfo* PassRegistry::Find(std::string_view name) const {
  for (const auto& p : passes_) {
    if (p->name == name) return p.get();
  }
  return nullptr;
}

std::vector<const PassInfo*> PassRegistry::Passes(PassPhase phase) const {
  std::vector<const PassInfo*> out;
  for (const auto& p : passes_) {
    if (p->phase == phase) out.push_back(p.get());
  }
  std::sort(out.begin(), out.end(),
            [](const PassInfo* a, const PassInfo* b) { return a->order < b->order; });
  return out;
}

Status ValidateGraph(const Graph& graph, std::string_view after) {
  const std::string where =
      after.empty() ? std::string("the input graph") : fmt::format("after pass \"{}\"", after);
  const OpRegistry& ops = OpRegistry::Global();
  for (const Node* node : graph.nodes()) {
    for (const Output& in : node->inputs()) {
      if (!in.valid() || in.node->id() >= node->id()) {
        return absl::InternalError(fmt::format(
            "{}: node \"{}\" ({}) reads \"{}\", which is not earlier in the id order; the graph "
            "is not topologically ordered (a pass must call Graph::Reorder)",
            where, node->name(), node->type(), in.valid() ? in.node->name() : "<invalid>"));
      }
    }
    for (const Node* c : node->control_inputs()) {
      if (c->id() >= node->id()) {
        return absl::InternalError(fmt::format(
            "{}: node \"{}\" ({}) has control input \"{}\", which is not earlier in the "
            "id order; the graph is not topologically ordered",
            where, node->name(), node->type(), c->name()));
      }
    }
    const OpDef* def = ops.Find(node->type());
    if (def == nullptr) {
      return absl::InvalidArgumentError(fmt::format("{}: node \"{}\" has unknown op type \"{}\"",
                                                    where, node->name(), node->type()));
    }
    const int n = node->num_inputs();
    if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs)) {
      return absl::InvalidArgumentError(
          fmt::format("{}: node \"{}\" ({}) has {} inputs; the op takes {} to {}", where,
                      node->name(), node->type(), n, def->min_inputs,
                      def->max_inputs < 0 ? std::string("any") : std::to_string(def->max_inputs)));
    }
    if (Status s = ValidateAttrs(*def, node->name(), node->attrs()); !s.ok()) {
      return absl::InvalidArgumentError(fmt::format("{}: {}", where, s.message()));
    }
    // The output count: a loaded graph's nodes carry the outputs their file lists, and a kernel
    // sets the ones its declaration has.
    if (Status s = CheckOutputCount(*def, node->name(), node->num_outputs()); !s.ok()) {
      return Status(after.empty() ? absl::StatusCode::kInvalidArgument : s.code(),
                    fmt::format("{}: {}", where, s.message()));
    }
  }
  return absl::OkStatus();
}

namespace {

Status RunOne(const PassInfo& info, const PassContext& ctx, Graph* graph, PassRecord* record) {
  std::unique_ptr<GraphPass> pass = info.factory();
  record->name = info.name;
  record->nodes_before = graph->num_nodes();
  record->ran = pass->Enabled(ctx);
  if (record->ran) {
    absl::flat_hash_map<std::string, std::string> types;  // name -> op type before the pass
    for (const Node* n : graph->nodes()) types[n->name()] = n->type();
    if (Status s = pass->Run(ctx, graph); !s.ok()) {
      // A pass's own error (e.g. "update op in inference mode") already names what is wrong.
      return s;
    }
    RECSDK_RETURN_IF_ERROR(ValidateGraph(*graph, info.name));
    for (const Node* n : graph->nodes()) {
      auto it = types.find(n->name());
      if (it == types.end()) {
        record->created.push_back(n->name());
      } else if (it->second != n->type()) {
        record->rewritten.push_back(n->name());
      }
    }
  }
  record->nodes_after = graph->num_nodes();
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::vector<PassRecord>> RunSessionPasses(const SessionConfig& config, Graph* graph) {
  InitializeRuntime();
  RECSDK_RETURN_IF_ERROR(ValidateGraph(*graph, ""));
  const PassContext ctx{config};
  std::vector<PassRecord> records;
  for (const PassInfo* info : PassRegistry::Global().Passes(PassPhase::kSession)) {
    PassRecord record;
    RECSDK_RETURN_IF_ERROR(RunOne(*info, ctx, graph, &record));
    records.push_back(std::move(record));
  }
  return records;
}

Status RunPass(std::string_view name, const SessionConfig& config, Graph* graph) {
  InitializeRuntime();
  const PassInfo* info = PassRegistry::Global().Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(fmt::format("graph pass \"{}\" is not registered", name));
  }
  RECSDK_RETURN_IF_ERROR(ValidateGraph(*graph, ""));
  PassRecord record;
  return RunOne(*info, PassContext{config}, graph, &record);
}

}  // namespace recsdk::internal
