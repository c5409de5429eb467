// pass_manager.h: graph passes and the pass manager that runs them.
//
// Every rewrite of a Session's private copy of the graph is a pass: a named GraphPass registered
// with the PassRegistry at a fixed position ("order"). Session::Create runs the session passes in
// that order (RunSessionPasses); a pass the user invokes explicitly (ModifyGraph's
// "modify_graph") runs through RunPass. Before the first pass and after each one, ValidateGraph
// checks that the graph is in topological id order (every input and control input of a node has
// a smaller id, which the executor, Copy and Gradients rely on) and that every node matches its
// OpDef: a registered type, an input count in range and attributes that match the schema. A pass
// that breaks either is named in the error, so passes compose and a new one is a file.
//
// The documented order of the session passes (gaps leave room for the passes the next issues add:
// precision casts ~300, fusion ~400, dump instrumentation ~900):
//   100 graph_run_mode   inference (graph_run_mode 0): refuses update ops, makes lookups read-only
//   200 group_lookups    all in-graph lookups of one table in a step share one dedup and resolve
//   300 mixed_precision  low-precision modes: float32 products run in bfloat16 (mixed_precision.cc)
//   400 fuse_dense       MatMul + BiasAdd (+ Relu) -> FusedDense, when enable_scope_fusion_passes
//                        names it
//   410 fuse_gather_concat  Concat of pooled TableGathers (and dense columns) -> one
//                        TableGatherConcat, when enable_scope_fusion_passes names it
//   950 order_collectives  with several ranks, the nodes that make collectives are chained in
//                        id order: one order of collectives per step on every rank (registered
//                        by src/dist/order_collectives.cc with the collective ops)
//   990 placement        with a device other than "cpu": each op to the device or (under
//                        mix_compile_mode) the host, copies where edges cross memory spaces
//                        (placement.cc)
//
// Threading: the registry is filled once (RegisterBuiltinPasses, under a once flag) and read
// concurrently after; running passes is single-threaded per graph, like Graph itself.
#ifndef RECSDK_SESSION_PASSES_PASS_MANAGER_H_
#define RECSDK_SESSION_PASSES_PASS_MANAGER_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/graph.h"
#include "recsdk/pipeline.h"
#include "recsdk/status.h"

namespace recsdk::internal {

// PassContext: what a pass may read besides the graph.
struct PassContext {
  const SessionConfig& config;
};

// GraphPass: one rewrite. Run may change the graph in any way that leaves it valid (see above).
class GraphPass {
 public:
  virtual ~GraphPass() = default;
  // Enabled: whether the pass applies under this config (a disabled pass is recorded as skipped).
  virtual bool Enabled(const PassContext& ctx) const {
    (void)ctx;
    return true;
  }
  virtual Status Run(const PassContext& ctx, Graph* graph) = 0;
};

// PassPhase: who runs a pass.
enum class PassPhase {
  kSession,  // Session::Create, in order
  kExplicit  // only RunPass (e.g. ModifyGraph, which the user calls on their own graph)
};

struct PassInfo {
  std::string name;
  int order = 0;
  PassPhase phase = PassPhase::kSession;
  std::string description;
  std::function<std::unique_ptr<GraphPass>()> factory;
};

class PassRegistry {
 public:
  // Global: the process-wide registry with the built-in passes.
  static PassRegistry& Global();
  // Register: FailedPrecondition for a duplicate name or order.
  Status Register(PassInfo info);
  const PassInfo* Find(std::string_view name) const;
  // Passes: the passes of one phase, in order.
  std::vector<const PassInfo*> Passes(PassPhase phase) const;

 private:
  std::vector<std::unique_ptr<PassInfo>> passes_;
};

// PassRecord: what one pass did, for op_debug_level and tests.
struct PassRecord {
  std::string name;
  bool ran = false;  // false: disabled under this config
  int nodes_before = 0;
  int nodes_after = 0;
  std::vector<std::string> created;    // nodes the pass added
  std::vector<std::string> rewritten;  // nodes whose op type the pass changed
};

// ValidateGraph: the invariant every pass keeps (see the file comment). `after` names the pass
// just run ("" for the input graph), for the message.
Status ValidateGraph(const Graph& graph, std::string_view after);

// RunSessionPasses: validates the graph, then runs every enabled session pass in order,
// validating after each. Returns what ran.
StatusOr<std::vector<PassRecord>> RunSessionPasses(const SessionConfig& config, Graph* graph);

// RunPass: one registered pass by name (any phase), validated before and after.
Status RunPass(std::string_view name, const SessionConfig& config, Graph* graph);

// The built-in passes' factories (each in its own file).
std::unique_ptr<GraphPass> MakeGraphRunModePass();
std::unique_ptr<GraphPass> MakeGroupLookupsPass();
std::unique_ptr<GraphPass> MakeModifyGraphPass();
std::unique_ptr<GraphPass> MakeMixedPrecisionPass();
// MixedPrecisionEnabled: whether the config's precision mode turns the mixed_precision pass on.
bool MixedPrecisionEnabled(const SessionConfig& config);
std::unique_ptr<GraphPass> MakeFuseDensePass();
std::unique_ptr<GraphPass> MakeFuseGatherConcatPass();
std::unique_ptr<GraphPass> MakePlacementPass();

// FusionPassEnabled: whether `name` is listed in config.enable_scope_fusion_passes.
bool FusionPassEnabled(const SessionConfig& config, std::string_view name);

// MoveLookupsToKeyStage: the body of "modify_graph" (ModifyGraph reports what it moved).
StatusOr<ModifyGraphResult> MoveLookupsToKeyStage(Graph* graph);

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_PASSES_PASS_MANAGER_H_
