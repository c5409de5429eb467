// gradients.cc: reverse-mode automatic differentiation by adding nodes to the graph.
//
// Node ids are a topological order (a node's inputs always exist before it), so the backward pass
// walks ids downwards over the nodes that lie on a path from some x to some y.
//
// One backward pass per loss. Users ask for gradients of one loss several times: the dense
// optimizer's Minimize for the variables, then SparseMinimize for the lookups' outputs (the pattern
// of the spec's guide and of every sample). Built apart, the two passes duplicated every gradient
// node between the loss and the point where the two sets of xs part (the whole top MLP: 24 MatMul
// nodes instead of 18 in the DLRM race model, 12-16% of a step). So each Graph keeps a gradient
// cache per (ys, grad_ys): for every node a pass processed, the gradients of its outputs and what
// its gradient function returned. A node processed once is reachable from that pass's xs, hence so
// are all of its consumers, so its output gradients were complete (every contribution from the
// loss was summed); a later pass reuses them and the gradient function's results instead of adding
// nodes. The cache is discarded when the loss's ancestors changed since (a pass rewired an input
// or replaced an op), since then a node may have gained a consumer on the path to the loss.
#include "recsdk/gradients.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "recsdk/ops.h"
#include "src/common/status_macros.h"
#include "src/graph/graph_access.h"
#include "src/graph/op_registry.h"

namespace recsdk {
namespace {

// GradCache: the backward work done so far for one (ys, grad_ys) of a graph.
struct GradCache {
  struct Entry {
    std::vector<Output> out_grads;  // complete d(sum ys)/d(each output); invalid where none
    bool differentiated = false;    // whether in_grads holds the gradient function's results
    std::vector<Output> in_grads;
  };
  std::vector<Output> ys;
  std::vector<Output> grad_ys;  // empty: seeded with ones
  std::vector<Output> seeds;
  // The loss's ancestors when the cache was filled: type and data inputs of each.
  absl::flat_hash_map<const Node*, std::pair<std::string, std::vector<Output>>> ancestors;
  absl::flat_hash_map<const Node*, Entry> entries;
};
using GradCaches = std::vector<GradCache>;
constexpr char kGradCacheKey[] = "recsdk.gradients.cache";

}  // namespace

StatusOr<std::vector<Output>> Gradients(const Scope& scope, const std::vector<Output>& ys,
                                        const std::vector<Output>& xs,
                                        const std::vector<Output>& grad_ys) {
  Graph* g = scope.graph();
  if (!g->status().ok()) return g->status();
  if (!grad_ys.empty() && grad_ys.size() != ys.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "Gradients: {} grad_ys for {} ys; pass one per y or none", grad_ys.size(), ys.size()));
  }
  for (const Output& y : ys) {
    if (!y.valid()) return absl::InvalidArgumentError("Gradients: a y is invalid");
    if (!IsFloatingPoint(y.dtype())) {
      return absl::InvalidArgumentError(fmt::format(
          "Gradients: y \"{}\" is {}; only floating-point outputs can be differentiated", y.name(),
          DTypeName(y.dtype())));
    }
  }
  for (const Output& x : xs) {
    if (!x.valid()) return absl::InvalidArgumentError("Gradients: an x is invalid");
  }
  const int n = g->num_nodes();
  // Nodes reachable backwards from ys.
  std::vector<char> from_y(n, 0);
  for (const Output& y : ys) from_y[y.node->id()] = 1;
  for (int id = n - 1; id >= 0; --id) {
    if (!from_y[id]) continue;
    for (const Output& in : g->node(id)->inputs()) from_y[in.node->id()] = 1;
  }
  // Nodes reachable forwards from xs.
  std::vector<char> from_x(n, 0);
  for (const Output& x : xs) from_x[x.node->id()] = 1;
  for (int id = 0; id < n; ++id) {
    if (from_x[id]) continue;
    for (const Output& in : g->node(id)->inputs()) {
      if (from_x[in.node->id()]) {
        from_x[id] = 1;
        break;
      }
    }
  }
  // Pending gradient contributions per (node, output).
  std::vector<std::vector<std::vector<Output>>> pending(n);
  auto add_grad = [&](const Output& o, const Output& grad) {
    auto& slots = pending[o.node->id()];
    if (slots.empty()) slots.resize(o.node->num_outputs());
    slots[o.index].push_back(grad);
  };
  // The cache of these (ys, grad_ys), if still valid.
  std::shared_ptr<void>& state = internal::GraphAccess::BuilderState(*g, kGradCacheKey);
  if (!state) state = std::make_shared<GradCaches>();
  GradCaches& caches = *static_cast<GradCaches*>(state.get());
  GradCache* cache = nullptr;
  for (auto it = caches.begin(); it != caches.end(); ++it) {
    if (it->ys != ys || it->grad_ys != grad_ys) continue;
    bool same = true;
    int ancestors = 0;
    for (int id = 0; id < n && same; ++id) {
      if (!from_y[id]) continue;
      ++ancestors;
      const Node* node = g->node(id);
      auto found = it->ancestors.find(node);
      same = found != it->ancestors.end() && found->second.first == node->type() &&
             found->second.second == node->inputs();
    }
    if (same && ancestors == static_cast<int>(it->ancestors.size())) {
      cache = &*it;
    } else {
      caches.erase(it);
    }
    break;
  }
  const Scope gs = scope.NewSubScope("gradients");
  if (cache == nullptr) {
    GradCache fresh;
    fresh.ys = ys;
    fresh.grad_ys = grad_ys;
    for (int id = 0; id < n; ++id) {
      if (from_y[id]) fresh.ancestors[g->node(id)] = {g->node(id)->type(), g->node(id)->inputs()};
    }
    for (size_t i = 0; i < ys.size(); ++i)
      fresh.seeds.push_back(grad_ys.empty() ? ops::OnesLike(gs, ys[i]) : grad_ys[i]);
    caches.push_back(std::move(fresh));
    cache = &caches.back();
  }
  for (size_t i = 0; i < ys.size(); ++i) add_grad(ys[i], cache->seeds[i]);
  // x outputs whose gradient we must report, even if they are also intermediate nodes.
  auto sum_of = [&](const Scope& s, std::vector<Output>& parts) -> Output {
    if (parts.empty()) return Output();
    if (parts.size() == 1) return parts[0];
    return ops::AddN(s, parts);
  };
  std::vector<std::vector<Output>> x_grads(n);
  auto is_x_node = [&](int id) {
    for (const Output& x : xs) {
      if (x.node->id() == id) return true;
    }
    return false;
  };
  const internal::OpRegistry& registry = internal::OpRegistry::Global();
  for (int id = n - 1; id >= 0; --id) {
    if (!from_y[id] || !from_x[id] || pending[id].empty()) continue;
    Node* node = g->node(id);
    auto cached = cache->entries.find(node);
    GradCache::Entry* entry = cached != cache->entries.end() ? &cached->second : nullptr;
    std::vector<Output> out_grads(node->num_outputs());
    bool any = false;
    if (entry != nullptr) {
      out_grads = entry->out_grads;
      any = true;
    } else {
      for (int o = 0; o < node->num_outputs(); ++o) {
        if (o < static_cast<int>(pending[id].size()) && !pending[id][o].empty()) {
          out_grads[o] = sum_of(gs, pending[id][o]);
          any = true;
        }
      }
      if (!any) continue;
      entry = &cache->entries[node];
      entry->out_grads = out_grads;
    }
    if (is_x_node(id)) {
      x_grads[id] = out_grads;
    }
    // Stop at the xs' own producers only when nothing upstream is also an x.
    bool upstream_needed = false;
    for (const Output& in : node->inputs()) upstream_needed |= from_x[in.node->id()] != 0;
    if (!upstream_needed) continue;
    const internal::OpDef* def = registry.Find(node->type());
    if (def == nullptr || (!def->grad_fn && !def->no_gradient)) {
      return absl::UnimplementedError(fmt::format(
          "Gradients: op \"{}\" ({}) lies between the loss and a variable but has no gradient; "
          "wrap it in StopGradient if no gradient should flow through it",
          node->name(), node->type()));
    }
    if (def->no_gradient) continue;
    if (!entry->differentiated) {
      std::vector<Output> in_grads(node->num_inputs());
      Status s = def->grad_fn(gs.NewSubScope(node->name()), *node, out_grads, &in_grads);
      if (!s.ok()) return s;
      if (!g->status().ok()) {
        return absl::InvalidArgumentError(fmt::format(
            "Gradients of op \"{}\" ({}): {}", node->name(), node->type(), g->status().message()));
      }
      entry->in_grads = std::move(in_grads);
      entry->differentiated = true;
    }
    const std::vector<Output>& in_grads = entry->in_grads;
    for (int i = 0; i < node->num_inputs(); ++i) {
      if (in_grads[i].valid() && from_x[node->input(i).node->id()])
        add_grad(node->input(i), in_grads[i]);
    }
  }
  std::vector<Output> result;
  for (const Output& x : xs) {
    const auto& grads = x_grads[x.node->id()];
    result.push_back(x.index < static_cast<int>(grads.size()) ? grads[x.index] : Output());
  }
  return result;
}

}  // namespace recsdk
