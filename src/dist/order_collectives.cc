// order_collectives.cc: the session pass "order_collectives" (order 950, after every pass that
// adds, groups or fuses nodes): one order of collectives per step, the same on every rank.
//
// Every node that makes a collective — AllReduceMean, and with several ranks the lookups and
// updates of sharded tables (TableLookupGroup, an in-graph SparseLookup, TableApply, and the
// nodes that make one exchange for several tables: TableLookupExchange, TableApplyExchange) — gets
// a control input from the previous such node, in the graph's id order, of each sink it leads to
// (a node nothing consumes: a train op, an evaluation's metrics, a prediction). Id order is a
// topological order (ValidateGraph), so the chains add no cycle, and every node of a sink's chain
// runs whenever the sink runs, so they add no work: one chain over the whole graph made an
// evaluation run the training branch's lookups and sparse updates (an Estimator's graph holds
// both branches). Collectives of two sinks that share none are not ordered against each other:
// fetch such sinks in separate runs (the communicators name the collectives of a mismatch). The
// ranks run the same program, so they build the same graph and chain the same nodes; the executor,
// which may run independent nodes in any order or at once (stream_max_parallel_num), then issues
// the collectives in the chain's order on every rank. The communicators check that order at run
// time (collective_header.h): a rank running a different program fails naming both collectives
// instead of hanging.
//
// Enabled when the process is one of several ranks; a world of one keeps its parallelism.
#include <algorithm>
#include <cstdint>
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
  // AllReduceStart takes the place of is_tailing_optimization's last bucket (its AllReduceWait
  // makes no collective: it waits for Start's).
  if (t == kAllReduceMeanOp || t == kAllReduceStartOp || t == internal::kTableLookupGroupOp ||
      t == internal::kTableApplyOp || t == kTableLookupExchangeOp || t == kTableApplyExchangeOp) {
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
    const auto count = static_cast<size_t>(graph->num_nodes());
    std::vector<Node*> nodes(count, nullptr);  // by id
    for (size_t i = 0; i < count; ++i) nodes[i] = graph->node(static_cast<int>(i));
    // The sinks (nodes nothing consumes: a train op, an evaluation's metrics, a prediction) each
    // node leads to, as bitsets, filled in reverse id order (a topological order).
    std::vector<std::vector<int>> consumers(count);
    std::vector<bool> consumed(count, false);
    for (const Node* n : nodes) {
      if (n == nullptr) continue;
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Node* from = n->input(i).node;
        if (from == nullptr) continue;
        consumers[static_cast<size_t>(from->id())].push_back(n->id());
        consumed[static_cast<size_t>(from->id())] = true;
      }
      for (const Node* from : n->control_inputs()) {
        consumers[static_cast<size_t>(from->id())].push_back(n->id());
        consumed[static_cast<size_t>(from->id())] = true;
      }
    }
    std::vector<size_t> sink_of(count, 0);
    size_t sinks = 0;
    for (size_t i = 0; i < count; ++i) {
      if (nodes[i] != nullptr && !consumed[i]) sink_of[i] = sinks++;
    }
    const size_t words = (sinks + 63) / 64;
    std::vector<std::vector<uint64_t>> reaches(count, std::vector<uint64_t>(words, 0));
    for (size_t i = count; i-- > 0;) {
      if (nodes[i] == nullptr) continue;
      if (!consumed[i]) reaches[i][sink_of[i] / 64] |= uint64_t{1} << (sink_of[i] % 64);
      for (const int c : consumers[i]) {
        for (size_t w = 0; w < words; ++w) reaches[i][w] |= reaches[static_cast<size_t>(c)][w];
      }
    }
    // Per sink, its collectives in id order, each waiting for the previous one. Every node of
    // such a chain runs whenever the sink runs, so the chain adds no work to a step; chaining
    // every collective of the graph instead made an evaluation (an Estimator's eval branch)
    // wait for, and so run, the training branch's lookups and sparse updates.
    std::vector<Node*> last(sinks, nullptr);
    for (size_t i = 0; i < count; ++i) {
      Node* n = nodes[i];
      if (n == nullptr || !MakesCollective(*n)) continue;
      for (size_t s = 0; s < sinks; ++s) {
        if ((reaches[i][s / 64] >> (s % 64) & 1) == 0) continue;
        if (last[s] != nullptr) {
          const std::vector<Node*>& deps = n->control_inputs();
          if (std::find(deps.begin(), deps.end(), last[s]) == deps.end()) {
            n->AddControlInput(last[s]);
          }
        }
        last[s] = n;
      }
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
