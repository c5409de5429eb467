// order_collectives.cc: the session pass "order_collectives" (order 950, after every pass that
// adds, groups or fuses nodes): one order of collectives per step, the same on every rank.
//
// Every node that makes a collective — AllReduceMean, and with several ranks the lookups and
// updates of sharded tables (TableLookupGroup, an in-graph SparseLookup, TableApply, and the
// nodes that make one exchange for several tables: TableLookupExchange, TableApplyExchange) — gets
// a control input from the previous such node in the graph's id order, which is a topological order
// (ValidateGraph), so the chain adds no cycle. The ranks run the same program, so they build the
// same graph and chain the same nodes; the executor, which may run independent nodes in any order
// or at once (stream_max_parallel_num), then issues the collectives in the chain's order on every
// rank. The communicators check that order at run time (collective_header.h): a rank running a
// different program fails naming both collectives instead of hanging.
//
// Enabled when the process is one of several ranks; a world of one keeps its parallelism.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/distributed.h"
#include "src/common/check.h"
#include "src/device/table_resource.h"
#include "src/dist/collective_ops.h"
#include "src/dist/process_communicator.h"
#include "src/session/passes/pass_manager.h"

namespace recsdk::dist {
namespace {

bool MakesCollective(const Node& n) {
  const std::string& t = n.type();
  if (t == kAllReduceMeanOp || t == internal::kTableLookupGroupOp || t == internal::kTableApplyOp ||
      t == kTableLookupExchangeOp || t == kTableApplyExchangeOp) {
    return true;
  }
  // A lookup moved to the key stage runs no key work in the graph.
  return t == internal::kSparseLookupOp && !n.BoolAttr("moved_to_key_stage");
}

class OrderCollectivesPass final : public internal::GraphPass {
 public:
  bool Enabled(const internal::PassContext&) const override {
    // Every rank of the world, ps ranks included (their table exchanges need one order too).
    const absl::StatusOr<JobLayout> job = CurrentJobLayout();
    return job.ok() && job->world() > 1;
  }

  Status Run(const internal::PassContext&, Graph* graph) override {
    Node* last = nullptr;
    for (Node* n : graph->nodes()) {
      if (n == nullptr || !MakesCollective(*n)) continue;
      if (last != nullptr) {
        const std::vector<Node*>& deps = n->control_inputs();
        if (std::find(deps.begin(), deps.end(), last) == deps.end()) n->AddControlInput(last);
      }
      last = n;
    }
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterOrderCollectivesPass() {
  const Status s = internal::PassRegistry::Global().Register(
      {"order_collectives", 950, internal::PassPhase::kSession,
       "with several ranks, every node that makes a collective (AllReduceMean, the lookups and "
       "updates of sharded tables) waits for the previous one: one order of collectives per "
       "step on every rank",
       [] { return std::unique_ptr<internal::GraphPass>(new OrderCollectivesPass); }});
  RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
}

}  // namespace recsdk::dist
