// table_exchange_ops.cc: one exchange per step for all sharded tables: the ops TableLookupExchange
// and TableApplyExchange, their CPU kernels, and the session pass "group_table_exchanges" that
// puts a step's table lookups (and its table updates) into one node each.
//
// Why. With several ranks each sharded table's lookup makes two collectives (keys to their
// owners, rows back) and its update one (gradients to the owners), so a model of 26 tables makes
// 78 exchanges a step, each a round trip of every rank with every other. The exchanges of
// different tables do not depend on each other, so one step can send the keys of every table in
// one ExchangeV (per destination rank: one header record per table giving its count, then each
// table's section), the rows back in one AllToAllV of the same sections, and the gradients in
// one ExchangeV (ShardedTable::ResolveGroup and ApplyGroup, sharded_table.h). Each table's
// results, errors, admission and update are those of its own exchange.
//
// The pass (order 900: after group_lookups and the fusions, before order_collectives at 950,
// which then chains the two group nodes with the AllReduceMeans in id order): with several ranks,
//   - the in-graph lookup nodes of one step (SparseLookup not moved to the key stage, and the
//     TableLookupGroup nodes of group_lookups) with the same is_train, when they are of two or
//     more tables, become one TableLookupExchange node reading all their inputs; each member turns
//     into a TableLookupForward of its share of the outputs, so its consumers are unchanged;
//   - the TableApply nodes, when there are two or more, become one TableApplyExchange node; each
//     member turns into a NoOp that waits for it, so whatever waited for an update still does.
// A set is grouped only when no member depends on another (a lookup whose ids come from another
// table's embeddings, an update chained after another): merging those would make a cycle, so the
// set keeps its per-table exchanges. The group node takes the place of its first member in the
// id order. Replicated tables (is_dp) in a group make their own collectives, in member order,
// before the group's exchange; every rank has the same tables, so the order is the same on every
// rank.
//
// Threading: the kernels run on the Session's threads, one node at a time (kernel.h); the group
// lookup holds the key lock of every member table (taken in member order) for its exchange, as a
// single lookup holds its table's.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/device/table_resource.h"
#include "src/dist/collective_ops.h"
#include "src/dist/graph_order.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"
#include "src/graph/op_registry.h"
#include "src/session/passes/pass_manager.h"
#include "src/table/table_key_work.h"

namespace recsdk::dist {
namespace {

using internal::InferenceContext;
using internal::LookupAttrs;
using internal::LookupBatch;
using internal::OpKernelContext;
using internal::TableGuard;
using internal::TableKeyWork;
using internal::TableResource;

// ---- Shape functions ----

// TableLookupExchange: its outputs are its members' outputs, whose dtypes and shapes the pass
// recorded (output_dtypes, output_ranks, output_dims flattened).
Status LookupExchangeShape(InferenceContext& c) {
  const std::vector<int64_t> dtypes = c.IntsAttr("output_dtypes");
  const std::vector<int64_t> ranks = c.IntsAttr("output_ranks");
  const std::vector<int64_t> dims = c.IntsAttr("output_dims");
  if (dtypes.size() != ranks.size()) {
    return c.Error("{} output dtypes for {} output ranks", dtypes.size(), ranks.size());
  }
  size_t next = 0;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (ranks[i] < 0 || next + static_cast<size_t>(ranks[i]) > dims.size()) {
      return c.Error("output {} has rank {} beyond the {} dims given", i, ranks[i], dims.size());
    }
    c.AddOutput(static_cast<DType>(dtypes[i]),
                Shape(absl::MakeConstSpan(dims).subspan(next, static_cast<size_t>(ranks[i]))));
    next += static_cast<size_t>(ranks[i]);
  }
  if (next != dims.size()) return c.Error("{} output dims left over", dims.size() - next);
  return absl::OkStatus();
}

// TableApplyExchange: per member its TableApply's inputs (handle, step, (rows, gradients)
// pairs), member_num_inputs of them; no outputs.
Status ApplyExchangeShape(InferenceContext& c) {
  const std::vector<int64_t> sizes = c.IntsAttr("member_num_inputs");
  int next = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    if (sizes[m] < 4 || sizes[m] % 2 != 0 || next + sizes[m] > c.num_inputs()) {
      return c.Error("member {} has {} inputs; expects handle, step and (rows, gradients) pairs", m,
                     sizes[m]);
    }
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(next, DType::kResource));
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(next + 1, DType::kInt64));
    for (int i = next + 2; i < next + sizes[m]; i += 2) {
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, DType::kInt32));
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(i + 1, DType::kFloat32));
    }
    next += static_cast<int>(sizes[m]);
  }
  if (next != c.num_inputs()) return c.Error("{} inputs left over", c.num_inputs() - next);
  return absl::OkStatus();
}

// ---- Kernels ----

StatusOr<TableResource*> TableAt(OpKernelContext& ctx, int input) {
  auto* t = dynamic_cast<TableResource*>(internal::ResourceFromTensor(ctx.input(input)));
  if (t == nullptr) return ctx.Error("input {} is not a table handle", input);
  return t;
}

// ExchangeMembers: a TableLookupExchange node's members (one per table handle), each its
// lookups' attributes, in input order.
std::vector<std::vector<LookupAttrs>> ExchangeMembers(const Node& node) {
  const std::vector<std::string> tables = node.StringsAttr("member_tables");
  const std::vector<int64_t> lookups = node.IntsAttr("member_num_lookups");
  const std::vector<std::string> names = node.StringsAttr("lookup_names");
  const std::vector<int64_t> features = node.IntsAttr("lookup_num_features");
  const std::vector<int64_t> masks = node.IntsAttr("lookup_has_mask");
  const std::vector<int64_t> times = node.IntsAttr("lookup_has_timestamps");
  const std::vector<int64_t> dynamic = node.IntsAttr("lookup_use_dynamic");
  const std::vector<int64_t> send = node.IntsAttr("lookup_send_count");
  const std::vector<int64_t> weights = node.IntsAttr("lookup_feature_weights");
  const bool is_train = node.BoolAttr("is_train", true);
  std::vector<std::vector<LookupAttrs>> out(tables.size());
  size_t l = 0, w = 0;
  for (size_t m = 0; m < tables.size() && m < lookups.size(); ++m) {
    for (int64_t k = 0; k < lookups[m] && l < names.size(); ++k, ++l) {
      LookupAttrs a;
      a.name = names[l];
      a.table_name = tables[m];
      a.is_train = is_train;
      a.num_features = static_cast<int>(features[l]);
      a.has_mask = masks[l] != 0;
      a.has_timestamps = times[l] != 0;
      a.static_shape = dynamic[l] == 0;
      a.send_count = send[l];
      const size_t end = std::min(weights.size(), w + static_cast<size_t>(a.num_features));
      a.feature_weights.assign(weights.begin() + static_cast<std::ptrdiff_t>(w),
                               weights.begin() + static_cast<std::ptrdiff_t>(end));
      w = end;
      out[m].push_back(std::move(a));
    }
  }
  return out;
}

class TableLookupExchangeKernel final : public internal::OpKernel {
 public:
  explicit TableLookupExchangeKernel(const Node& node) : members_(ExchangeMembers(node)) {}

  Status Compute(OpKernelContext& ctx) override {
    const size_t m = members_.size();
    const LookupMode mode =
        ctx.node().BoolAttr("is_train", true) ? LookupMode::kTrain : LookupMode::kEval;
    std::vector<TableResource*> tables(m);
    std::vector<TableKeyWork> works(m);
    int next = 0;
    for (size_t t = 0; t < m; ++t) {
      RECSDK_ASSIGN_OR_RETURN(tables[t], TableAt(ctx, next++));
      std::vector<LookupBatch> lookups(members_[t].size());
      for (size_t l = 0; l < members_[t].size(); ++l) {
        const LookupAttrs& a = members_[t][l];
        LookupBatch& b = lookups[l];
        b.attrs = &a;
        if (next + a.num_inputs() > ctx.num_inputs()) {
          return ctx.Error("lookup \"{}\" reads inputs beyond the node's {}", a.name,
                           ctx.num_inputs());
        }
        for (int f = 0; f < a.num_features; ++f) b.ids.push_back(&ctx.input(next + f));
        if (a.has_mask) b.mask = &ctx.input(next + a.mask_input());
        if (a.has_timestamps) b.timestamps = &ctx.input(next + a.timestamps_input());
        next += a.num_inputs();
      }
      works[t].table_name = members_[t].front().table_name;
      RECSDK_RETURN_IF_ERROR(internal::PrepareTableKeys(lookups, &works[t]));
    }
    // Every member's key lock, in member order, for the whole exchange.
    std::vector<TableGuard> guards;
    guards.reserve(m);
    for (size_t t = 0; t < m; ++t) guards.push_back(tables[t]->table()->LockKeys(mode));
    std::vector<ShardedTable::GroupResolve> group;
    for (size_t t = 0; t < m; ++t) {
      EmbeddingTable* table = guards[t].get();
      TableKeyWork& w = works[t];
      RECSDK_RETURN_IF_ERROR(internal::PrepareResolve(table, &w, nullptr));
      auto* sharded = dynamic_cast<ShardedTable*>(table);
      if (sharded == nullptr) {
        // Not sharded (a replicated table, or a world of one): its own Resolve, now.
        RECSDK_RETURN_IF_ERROR(table->Resolve(w.dedup.unique_keys, internal::ResolveCounts(w),
                                              w.key_times, mode, absl::MakeSpan(w.rows)));
        continue;
      }
      group.push_back({sharded, w.dedup.unique_keys, internal::ResolveCounts(w), w.key_times, mode,
                       absl::MakeSpan(w.rows)});
    }
    if (group.size() == 1) {
      const ShardedTable::GroupResolve& g = group.front();
      RECSDK_RETURN_IF_ERROR(g.table->Resolve(g.keys, g.counts, g.times, g.mode, g.rows));
    } else {
      RECSDK_RETURN_IF_ERROR(ShardedTable::ResolveGroup(group));
    }
    guards.clear();
    int out = 0;
    for (TableKeyWork& w : works) {
      internal::FinishTableKeys(&w);
      for (TableKeyWork::Part& part : w.parts) {
        ctx.set_output(out++, std::move(part.unique_rows));
        for (Tensor& r : part.restore) ctx.set_output(out++, std::move(r));
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::vector<std::vector<LookupAttrs>> members_;
};

// MergedGradients: one TableApply's (rows, gradients) pairs as one summed gradient per row, as
// the TableApply kernel merges them (several lookups of one table update each row once).
struct MergedGradients {
  std::vector<uint32_t> rows;
  std::vector<float> grads;
};

Status MergeParts(OpKernelContext& ctx, int first, int num_inputs, const EmbeddingTable& table,
                  MergedGradients* out) {
  const int64_t dim = table.dim();
  const int parts = (num_inputs - 2) / 2;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(first + 2 + 2 * p);
    const Tensor& g = ctx.input(first + 3 + 2 * p);
    if (g.num_elements() != u.num_elements() * dim) {
      return ctx.Error("summed gradients {} do not match {} rows of dim {} of table \"{}\"",
                       g.shape().ToString(), u.num_elements(), dim, table.name());
    }
  }
  if (parts == 1) {
    const Tensor& u = ctx.input(first + 2);
    const auto* rows = reinterpret_cast<const uint32_t*>(u.data<int32_t>());
    out->rows.assign(rows, rows + u.num_elements());
    const float* g = ctx.input(first + 3).data<float>();
    out->grads.assign(g, g + u.num_elements() * dim);
    return absl::OkStatus();
  }
  absl::flat_hash_map<uint32_t, int64_t> slot;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(first + 2 + 2 * p);
    const auto* rows = reinterpret_cast<const uint32_t*>(u.data<int32_t>());
    const float* g = ctx.input(first + 3 + 2 * p).data<float>();
    for (int64_t i = 0; i < u.num_elements(); ++i) {
      const uint32_t row = rows[i];
      if (row == EmbeddingTable::kPaddingRow || row == EmbeddingTable::kDefaultRow) continue;
      auto [it, inserted] = slot.try_emplace(row, static_cast<int64_t>(out->rows.size()));
      if (inserted) {
        out->rows.push_back(row);
        out->grads.resize(out->grads.size() + static_cast<size_t>(dim), 0.0f);
      }
      float* o = out->grads.data() + it->second * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += g[i * dim + d];
    }
  }
  return absl::OkStatus();
}

Status TableApplyExchangeKernel(OpKernelContext& ctx) {
  const std::vector<int64_t> sizes = ctx.node().IntsAttr("member_num_inputs");
  const size_t m = sizes.size();
  std::vector<TableResource*> tables(m);
  std::vector<MergedGradients> merged(m);
  std::vector<int64_t> steps(m);
  int next = 0;
  for (size_t t = 0; t < m; ++t) {
    RECSDK_ASSIGN_OR_RETURN(tables[t], TableAt(ctx, next));
    const Tensor& step = ctx.input(next + 1);
    if (step.dtype() != DType::kInt64 || step.num_elements() != 1) {
      return ctx.Error("the step of table \"{}\" must be an int64 scalar",
                       tables[t]->table()->name());
    }
    steps[t] = step.scalar<int64_t>() + 1;
    RECSDK_RETURN_IF_ERROR(
        MergeParts(ctx, next, static_cast<int>(sizes[t]), *tables[t]->table(), &merged[t]));
    next += static_cast<int>(sizes[t]);
  }
  // The rows' shared lock, as each table's ApplyGradients takes it (locked_table.h).
  std::vector<TableGuard> guards;
  guards.reserve(m);
  for (size_t t = 0; t < m; ++t) guards.push_back(tables[t]->table()->LockRows());
  std::vector<ShardedTable::GroupApply> group;
  for (size_t t = 0; t < m; ++t) {
    EmbeddingTable* table = guards[t].get();
    const auto rows = absl::MakeConstSpan(merged[t].rows);
    const auto grads = absl::MakeConstSpan(merged[t].grads);
    if (auto* sharded = dynamic_cast<ShardedTable*>(table); sharded != nullptr) {
      group.push_back({sharded, rows, grads, steps[t]});
      continue;
    }
    if (table->optimizer().ByAddress()) {
      std::vector<float*> addresses(rows.size());
      RECSDK_RETURN_IF_ERROR(table->RowAddresses(rows, absl::MakeSpan(addresses)));
      RECSDK_RETURN_IF_ERROR(table->ApplyGradientsByAddress(addresses, grads, steps[t]));
    } else {
      RECSDK_RETURN_IF_ERROR(table->ApplyGradients(rows, grads, steps[t]));
    }
  }
  if (group.size() == 1) {
    const ShardedTable::GroupApply& g = group.front();
    return g.table->ApplyGradients(g.rows, g.grads, g.step);
  }
  return ShardedTable::ApplyGroup(group);
}

// ---- The pass ----

std::vector<int> Predecessors(const Node& node) {
  std::set<int> ids;
  for (const Output& in : node.inputs()) ids.insert(in.node->id());
  for (const Node* c : node.control_inputs()) ids.insert(c->id());
  return {ids.begin(), ids.end()};
}

// Independent: whether no node of `set` is an ancestor of another (then merging them into one
// node keeps the graph acyclic).
bool Independent(const Graph& graph, const std::vector<Node*>& set) {
  std::vector<char> member(static_cast<size_t>(graph.num_nodes()), 0);
  for (const Node* n : set) member[static_cast<size_t>(n->id())] = 1;
  for (const Node* n : set) {
    std::vector<char> seen(member.size(), 0);
    std::vector<int> stack = Predecessors(*n);
    while (!stack.empty()) {
      const int id = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(id)]) continue;
      seen[static_cast<size_t>(id)] = 1;
      if (member[static_cast<size_t>(id)]) return false;
      for (int p : Predecessors(*graph.node(id))) stack.push_back(p);
    }
  }
  return true;
}

bool IsLookup(const Node& n) {
  return (n.type() == internal::kSparseLookupOp && !n.BoolAttr("moved_to_key_stage")) ||
         n.type() == internal::kTableLookupGroupOp;
}

std::vector<LookupAttrs> LookupsOf(const Node& n) {
  if (n.type() == internal::kTableLookupGroupOp) return internal::ReadGroupAttrs(n);
  return {internal::ReadLookupAttrs(n)};
}

// GroupLookups: the TableLookupExchange node of `members` (lookup nodes of one is_train).
StatusOr<Node*> GroupLookups(Graph* graph, const std::vector<Node*>& members, bool is_train) {
  NodeSpec spec;
  spec.name =
      graph->UniqueName(is_train ? "table_exchange/lookups" : "table_exchange/lookups_eval");
  spec.type = kTableLookupExchangeOp;
  spec.device = members.front()->device();
  std::set<Node*> control;
  std::vector<std::string> tables, names;
  std::vector<int64_t> num_lookups, features, masks, times, dynamic, send, weights;
  std::vector<int64_t> dtypes, ranks, dims;
  for (Node* m : members) {
    for (const Output& in : m->inputs()) spec.inputs.push_back(in);
    control.insert(m->control_inputs().begin(), m->control_inputs().end());
    const std::vector<LookupAttrs> lookups = LookupsOf(*m);
    tables.push_back(lookups.front().table_name);
    num_lookups.push_back(static_cast<int64_t>(lookups.size()));
    for (const LookupAttrs& a : lookups) {
      names.push_back(a.name);
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
    for (int o = 0; o < m->num_outputs(); ++o) {
      dtypes.push_back(static_cast<int64_t>(m->output_dtype(o)));
      const Shape& shape = m->output_shape(o);
      ranks.push_back(shape.rank());
      for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape.dim(d));
    }
  }
  spec.control_inputs.assign(control.begin(), control.end());
  spec.attrs = {{"is_train", is_train},
                {"member_tables", tables},
                {"member_num_lookups", num_lookups},
                {"lookup_names", names},
                {"lookup_num_features", features},
                {"lookup_has_mask", masks},
                {"lookup_has_timestamps", times},
                {"lookup_use_dynamic", dynamic},
                {"lookup_send_count", send},
                {"lookup_feature_weights", weights},
                {"output_dtypes", dtypes},
                {"output_ranks", ranks},
                {"output_dims", dims}};
  RECSDK_ASSIGN_OR_RETURN(Node * group, graph->AddNode(std::move(spec)));
  int out = 0;
  for (Node* m : members) {
    std::vector<Output> inputs;
    for (int o = 0; o < m->num_outputs(); ++o) inputs.emplace_back(group, out++);
    AttrMap attrs;
    if (m->type() == internal::kSparseLookupOp) {
      attrs = m->attrs();
    } else {
      attrs = {{"table_name", m->StringAttr("table_name")}, {"is_train", is_train}};
    }
    attrs["lookup_group"] = group->name();
    m->ReplaceOp(internal::kTableLookupForwardOp, std::move(inputs), std::move(attrs));
  }
  return group;
}

// GroupApplies: the TableApplyExchange node of `members` (TableApply nodes).
StatusOr<Node*> GroupApplies(Graph* graph, const std::vector<Node*>& members) {
  NodeSpec spec;
  spec.name = graph->UniqueName("table_exchange/apply");
  spec.type = kTableApplyExchangeOp;
  spec.device = members.front()->device();
  std::set<Node*> control;
  std::vector<std::string> tables;
  std::vector<int64_t> sizes;
  for (Node* m : members) {
    for (const Output& in : m->inputs()) spec.inputs.push_back(in);
    control.insert(m->control_inputs().begin(), m->control_inputs().end());
    tables.push_back(m->StringAttr("table_name"));
    sizes.push_back(m->num_inputs());
  }
  spec.control_inputs.assign(control.begin(), control.end());
  spec.attrs = {{"member_tables", tables}, {"member_num_inputs", sizes}};
  RECSDK_ASSIGN_OR_RETURN(Node * group, graph->AddNode(std::move(spec)));
  for (Node* m : members) {
    m->ReplaceOp("NoOp", {}, {});
    m->AddControlInput(group);
  }
  return group;
}

class GroupTableExchangesPass final : public internal::GraphPass {
 public:
  bool Enabled(const internal::PassContext&) const override {
    // Every rank of the world, ps ranks included (their table exchanges need one order too).
    const absl::StatusOr<JobLayout> job = CurrentJobLayout();
    return job.ok() && job->world() > 1;
  }

  Status Run(const internal::PassContext&, Graph* graph) override {
    // Candidates, in id order: lookups by is_train, and the applies.
    std::map<bool, std::vector<Node*>> lookups;
    std::vector<Node*> applies;
    for (Node* n : graph->nodes()) {
      if (IsLookup(*n)) lookups[n->BoolAttr("is_train", true)].push_back(n);
      if (n->type() == internal::kTableApplyOp) applies.push_back(n);
    }
    std::vector<std::pair<std::vector<Node*>, int>> sets;  // (members, 0 eval / 1 train / 2 apply)
    for (auto& [is_train, members] : lookups) {
      std::set<const Node*> handles;
      for (const Node* m : members) handles.insert(m->input(0).node);
      if (handles.size() >= 2 && Independent(*graph, members)) {
        sets.emplace_back(members, is_train ? 1 : 0);
      }
    }
    if (applies.size() >= 2 && Independent(*graph, applies)) sets.emplace_back(applies, 2);
    if (sets.empty()) return absl::OkStatus();
    std::vector<std::pair<Node*, int64_t>> placed;  // each group just before its first member
    for (const auto& [members, kind] : sets) {
      const int first = members.front()->id();
      StatusOr<Node*> group =
          kind == 2 ? GroupApplies(graph, members) : GroupLookups(graph, members, kind == 1);
      RECSDK_RETURN_IF_ERROR(group.status());
      placed.emplace_back(*group, 2 * int64_t{first} - 1);
    }
    return ReorderByPriority(graph, placed);
  }
};

}  // namespace

void RegisterTableExchangeOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    using T = AttrValue::Type;
    internal::OpRegistry& r = internal::OpRegistry::Global();
    // One declaration per op (op_registry.h): inputs are every member lookup's handle and ids
    // in member order (at least one table: handle + ids), outputs the members' results in order.
    r.Register(
        {.type = kTableLookupExchangeOp,
         .inputs = {"member_inputs{2,}"},
         .outputs = {"member_outputs*"},
         .attrs = {internal::Attr("is_train", T::kBool, true),
                   internal::RequiredAttr("member_tables", T::kStrings),
                   internal::RequiredAttr("member_num_lookups", T::kInts),
                   internal::RequiredAttr("lookup_names", T::kStrings),
                   internal::RequiredAttr("lookup_num_features", T::kInts),
                   internal::RequiredAttr("lookup_has_mask", T::kInts),
                   internal::RequiredAttr("lookup_has_timestamps", T::kInts),
                   internal::RequiredAttr("lookup_use_dynamic", T::kInts),
                   internal::RequiredAttr("lookup_send_count", T::kInts),
                   internal::Attr("lookup_feature_weights", T::kInts, std::vector<int64_t>{}),
                   internal::RequiredAttr("output_dtypes", T::kInts),
                   internal::RequiredAttr("output_ranks", T::kInts),
                   internal::Attr("output_dims", T::kInts, std::vector<int64_t>{})},
         .shape_fn = LookupExchangeShape,
         .no_gradient = true,
         .stateful = true});
    // Inputs: every member update's inputs in member order (two tables at least, 4 or more each:
    // handle, step, then (rows, gradients) pairs).
    r.Register({.type = kTableApplyExchangeOp,
                .inputs = {"member_inputs{8,}"},
                .outputs = {"member_outputs*"},
                .attrs = {internal::RequiredAttr("member_tables", T::kStrings),
                          internal::RequiredAttr("member_num_inputs", T::kInts)},
                .shape_fn = ApplyExchangeShape,
                .no_gradient = true,
                .stateful = true});
    internal::KernelRegistry& k = internal::KernelRegistry::Global();
    k.Register(kTableLookupExchangeOp, internal::kCpu, DType::kInvalid,
               [](const Node& node) -> StatusOr<std::unique_ptr<internal::OpKernel>> {
                 return std::unique_ptr<internal::OpKernel>(
                     std::make_unique<TableLookupExchangeKernel>(node));
               });
    k.RegisterFn(kTableApplyExchangeOp, internal::kCpu, {DType::kInvalid},
                 TableApplyExchangeKernel);
    const Status s = internal::PassRegistry::Global().Register(
        {"group_table_exchanges", 900, internal::PassPhase::kSession,
         "with several ranks, the in-graph lookups of a step's sharded tables exchange their "
         "keys and rows in one collective each, and their updates their gradients in one",
         [] { return std::unique_ptr<internal::GraphPass>(new GroupTableExchangesPass); }});
    RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
  });
}

}  // namespace recsdk::dist
