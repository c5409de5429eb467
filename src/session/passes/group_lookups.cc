// group_lookups.cc: GroupTableLookups, the pass that makes all in-graph lookups of one table in a
// step share one dedup and one resolve.
//
// Why a graph pass. Each sparse_lookup call adds its own SparseLookup node, and a node resolves
// its keys when it runs. With admission on, two lookups of one table that resolve one after the
// other disagree about a key that occurs in both: the first counts its own occurrences and may
// read the default value, the second counts again and may get a row, while the key stage
// (which deduplicates all of a table's lookups of a batch together) admits the key once for the
// whole batch. The alternatives were worse: letting the kernels of one step coordinate at run
// time needs every lookup's ids before the first lookup may finish, which the executor's order
// does not give, and would hide a per-step rendezvous in the kernels; merging at build time is
// impossible because sparse_lookup returns usable outputs right away. A pass on the Session's
// private copy of the graph sees every lookup, keeps the user's graph untouched, and leaves the
// nodes the user can name (each SparseLookup, its outputs, the gathers, gradients and applies
// that read them) where they are: only where their values come from changes.
//
// What it does: the in-graph lookups (not moved to the key stage) of one table with the same
// is_train form a group; the pass adds one TableLookupGroup node reading the inputs of all of them
// (in id order) and turns each SparseLookup into a TableLookupForward of its share of the group's
// outputs. A lookup joins a group only if that keeps the graph acyclic: when its ids depend on
// another member's embeddings (directly or through another group), it goes to another group and
// its key work stays separate, as it must. Then the nodes are renumbered so the id order is
// topological again (the group node takes the place of its first member).
//
// A consequence users see: a step that needs any lookup of a group computes the whole group, so
// it needs every member's ids fed (embedding.h says so).
//
// Registered as the session pass "group_lookups" (pass_manager.h gives the order).
//
// Threading: like Graph, single-threaded.
#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {

namespace {

// Acyclic: whether a dependency graph given by its predecessor lists has no cycle (Kahn).
bool Acyclic(const std::vector<std::vector<int>>& preds) {
  const size_t n = preds.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> succs(n);
  for (size_t v = 0; v < n; ++v) {
    for (int p : preds[v]) {
      succs[p].push_back(static_cast<int>(v));
      ++pending[v];
    }
  }
  std::vector<int> ready;
  for (size_t v = 0; v < n; ++v) {
    if (pending[v] == 0) ready.push_back(static_cast<int>(v));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    ++done;
    for (int s : succs[v]) {
      if (--pending[s] == 0) ready.push_back(s);
    }
  }
  return done == n;
}

std::vector<int> Predecessors(const Node& node) {
  std::set<int> ids;
  for (const Output& in : node.inputs()) ids.insert(in.node->id());
  for (const Node* c : node.control_inputs()) ids.insert(c->id());
  return {ids.begin(), ids.end()};
}

struct Group {
  std::vector<Node*> members;  // in id order
  int virtual_id = -1;         // its node in the dependency sketch, once it has two members
};

// TryJoin: adds `c` to `g` in the dependency sketch `preds` (the group node depends on what its
// members depend on; each member depends only on the group node) if that keeps it acyclic.
bool TryJoin(Group& g, Node* c, std::vector<std::vector<int>>& preds) {
  const int cid = c->id();
  const std::vector<int> c_preds = preds[cid];
  if (g.virtual_id < 0) {
    const int m0 = g.members.front()->id();
    const std::vector<int> m0_preds = preds[m0];
    std::set<int> merged(m0_preds.begin(), m0_preds.end());
    merged.insert(c_preds.begin(), c_preds.end());
    const int x = static_cast<int>(preds.size());
    preds.emplace_back(merged.begin(), merged.end());
    preds[m0] = {x};
    preds[cid] = {x};
    if (Acyclic(preds)) {
      g.virtual_id = x;
      g.members.push_back(c);
      return true;
    }
    preds.pop_back();
    preds[m0] = m0_preds;
    preds[cid] = c_preds;
    return false;
  }
  const int x = g.virtual_id;
  const std::vector<int> x_preds = preds[x];
  std::set<int> merged(x_preds.begin(), x_preds.end());
  merged.insert(c_preds.begin(), c_preds.end());
  preds[x].assign(merged.begin(), merged.end());
  preds[cid] = {x};
  if (Acyclic(preds)) {
    g.members.push_back(c);
    return true;
  }
  preds[x] = x_preds;
  preds[cid] = c_preds;
  return false;
}

// Materialise: adds the group's TableLookupGroup node and turns its members into forwards.
StatusOr<Node*> Materialise(Graph* graph, const Group& g) {
  Node* first = g.members.front();
  const LookupAttrs a0 = ReadLookupAttrs(*first);
  NodeSpec spec;
  spec.name = graph->UniqueName(
      fmt::format("{}/lookup_group{}", a0.table_name, a0.is_train ? "" : "_eval"));
  spec.type = kTableLookupGroupOp;
  spec.device = first->device();
  spec.inputs.push_back(first->input(0));
  std::set<Node*> control;
  std::vector<std::string> names;
  std::vector<int64_t> features, masks, times, dynamic, send, weights;
  for (Node* m : g.members) {
    const LookupAttrs a = ReadLookupAttrs(*m);
    for (int i = 1; i < m->num_inputs(); ++i) spec.inputs.push_back(m->input(i));
    control.insert(m->control_inputs().begin(), m->control_inputs().end());
    names.push_back(m->name());
    features.push_back(a.num_features);
    masks.push_back(a.has_mask ? 1 : 0);
    times.push_back(a.has_timestamps ? 1 : 0);
    dynamic.push_back(a.static_shape ? 0 : 1);
    send.push_back(a.send_count);
    for (int f = 0; f < a.num_features; ++f) {
      weights.push_back(static_cast<size_t>(f) < a.feature_weights.size() ? a.feature_weights[f]
                                                                          : 1);
    }
  }
  spec.control_inputs.assign(control.begin(), control.end());
  spec.attrs = {{"table_name", a0.table_name},
                {"is_train", a0.is_train},
                {"member_names", names},
                {"member_num_features", features},
                {"member_has_mask", masks},
                {"member_has_timestamps", times},
                {"member_use_dynamic", dynamic},
                {"member_send_count", send},
                {"member_feature_weights", weights}};
  RECSDK_ASSIGN_OR_RETURN(Node * group, graph->AddNode(std::move(spec)));
  int out = 0;
  for (Node* m : g.members) {
    std::vector<Output> inputs;
    for (int o = 0; o < m->num_outputs(); ++o) inputs.emplace_back(group, out++);
    AttrMap attrs = m->attrs();
    attrs["lookup_group"] = group->name();
    m->ReplaceOp(kTableLookupForwardOp, std::move(inputs), std::move(attrs));
  }
  return group;
}

}  // namespace

Status GroupTableLookups(Graph* graph) {
  const int n0 = graph->num_nodes();
  // Candidates by (table handle, is_train), in id order.
  std::vector<std::pair<const Node*, bool>> keys;
  std::map<std::pair<const Node*, bool>, std::vector<Node*>> candidates;
  for (Node* n : graph->nodes()) {
    if (n->type() != kSparseLookupOp || n->BoolAttr("moved_to_key_stage")) continue;
    const auto key =
        std::make_pair(static_cast<const Node*>(n->input(0).node), NodeAttrs(*n).Bool("is_train"));
    auto [it, inserted] = candidates.try_emplace(key);
    if (inserted) keys.push_back(key);
    it->second.push_back(n);
  }
  if (std::none_of(candidates.begin(), candidates.end(),
                   [](const auto& kv) { return kv.second.size() > 1; })) {
    return absl::OkStatus();
  }
  std::vector<std::vector<int>> preds(n0);
  for (int id = 0; id < n0; ++id) preds[id] = Predecessors(*graph->node(id));
  std::vector<Group> groups;
  for (const auto& key : keys) {
    const size_t first_group = groups.size();
    for (Node* c : candidates[key]) {
      bool placed = false;
      for (size_t g = first_group; g < groups.size() && !placed; ++g) {
        placed = TryJoin(groups[g], c, preds);
      }
      if (!placed) groups.push_back(Group{{c}, -1});
    }
  }

  // Apply, then renumber: each group node takes the place of its first member.
  std::map<const Node*, int> priority;  // doubled ids; a group node sorts just before its member
  for (int id = 0; id < n0; ++id) priority[graph->node(id)] = 2 * id;
  for (const Group& g : groups) {
    if (g.members.size() < 2) continue;
    RECSDK_ASSIGN_OR_RETURN(Node * node, Materialise(graph, g));
    priority[node] = 2 * g.members.front()->id() - 1;
  }
  const int n = graph->num_nodes();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<Node*>> succs(n);
  for (Node* node : graph->nodes()) {
    for (int p : Predecessors(*node)) {
      succs[p].push_back(node);
      ++pending[node->id()];
    }
  }
  auto later = [&](const Node* a, const Node* b) { return priority[a] > priority[b]; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (Node* node : graph->nodes()) {
    if (pending[node->id()] == 0) ready.push(node);
  }
  std::vector<Node*> order;
  order.reserve(n);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    order.push_back(node);
    for (Node* s : succs[node->id()]) {
      if (--pending[s->id()] == 0) ready.push(s);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    return absl::InternalError(
        "GroupTableLookups: grouping the lookups made the graph cyclic; this is a bug");
  }
  return graph->Reorder(order);
}

namespace {

class GroupLookupsPass final : public GraphPass {
 public:
  Status Run(const PassContext&, Graph* graph) override { return GroupTableLookups(graph); }
};

}  // namespace

std::unique_ptr<GraphPass> MakeGroupLookupsPass() { return std::make_unique<GroupLookupsPass>(); }

}  // namespace recsdk::internal
