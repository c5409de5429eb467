// graph_order.cc: ReorderByPriority (graph_order.h), Kahn's algorithm with a priority queue.
#include "src/dist/graph_order.h"

#include <queue>
#include <set>

namespace recsdk::dist {

Status ReorderByPriority(Graph* graph, const std::vector<std::pair<Node*, int64_t>>& priorities) {
  const int n = graph->num_nodes();
  const auto size = static_cast<size_t>(n);
  std::vector<int64_t> priority(size);
  for (int id = 0; id < n; ++id) priority[static_cast<size_t>(id)] = 2 * int64_t{id};
  for (const auto& [node, p] : priorities) priority[static_cast<size_t>(node->id())] = p;
  std::vector<int> pending(size, 0);
  std::vector<std::vector<Node*>> succs(size);
  for (Node* node : graph->nodes()) {
    std::set<int> preds;
    for (const Output& in : node->inputs()) preds.insert(in.node->id());
    for (const Node* c : node->control_inputs()) preds.insert(c->id());
    for (int p : preds) {
      succs[static_cast<size_t>(p)].push_back(node);
      ++pending[static_cast<size_t>(node->id())];
    }
  }
  // Ties (equal priorities) go to the lower old id, so every rank gets the same order.
  auto later = [&](const Node* a, const Node* b) {
    const int64_t pa = priority[static_cast<size_t>(a->id())];
    const int64_t pb = priority[static_cast<size_t>(b->id())];
    return pa != pb ? pa > pb : a->id() > b->id();
  };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (Node* node : graph->nodes()) {
    if (pending[static_cast<size_t>(node->id())] == 0) ready.push(node);
  }
  std::vector<Node*> order;
  order.reserve(size);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    order.push_back(node);
    for (Node* s : succs[static_cast<size_t>(node->id())]) {
      if (--pending[static_cast<size_t>(s->id())] == 0) ready.push(s);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    return absl::InternalError(
        "a distributed graph pass made the graph cyclic while adding nodes; this is a bug");
  }
  return graph->Reorder(order);
}

}  // namespace recsdk::dist
