// graph.cc: nodes, attributes and the graph container.
#include "recsdk/graph.h"

#include <algorithm>

#include "fmt/format.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"

namespace recsdk {

std::string Output::name() const {
  if (node == nullptr) return "<invalid>";
  return fmt::format("{}:{}", node->name(), index);
}
DType Output::dtype() const { return node->output_dtype(index); }
const Shape& Output::shape() const { return node->output_shape(index); }

std::string AttrValue::ToString() const {
  struct Visitor {
    std::string operator()(std::monostate) const { return "none"; }
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
    std::string operator()(DType v) const { return std::string(DTypeName(v)); }
    std::string operator()(const Shape& v) const { return v.ToString(); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<double>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<std::string>& v) const {
      return fmt::format("[\"{}\"]", fmt::join(v, "\",\""));
    }
    std::string operator()(const Tensor& v) const { return v.DebugString(4); }
  };
  return std::visit(Visitor{}, value_);
}

const AttrValue* Node::FindAttr(std::string_view name) const {
  auto it = attrs_.find(std::string(name));
  return it == attrs_.end() ? nullptr : &it->second;
}
int64_t Node::IntAttr(std::string_view name, int64_t fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<int64_t>()) return *v;
  }
  return fallback;
}
double Node::FloatAttr(std::string_view name, double fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<double>()) return *v;
    if (auto* v = a->get_if<int64_t>()) return static_cast<double>(*v);
  }
  return fallback;
}
bool Node::BoolAttr(std::string_view name, bool fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<bool>()) return *v;
  }
  return fallback;
}
std::string Node::StringAttr(std::string_view name, std::string fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<std::string>()) return *v;
  }
  return fallback;
}
DType Node::DTypeAttr(std::string_view name, DType fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<DType>()) return *v;
  }
  return fallback;
}
Shape Node::ShapeAttr(std::string_view name, Shape fallback) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<Shape>()) return *v;
  }
  return fallback;
}
std::vector<int64_t> Node::IntsAttr(std::string_view name) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<std::vector<int64_t>>()) return *v;
  }
  return {};
}
std::vector<double> Node::FloatsAttr(std::string_view name) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<std::vector<double>>()) return *v;
  }
  return {};
}
std::vector<std::string> Node::StringsAttr(std::string_view name) const {
  const AttrValue* a = FindAttr(name);
  if (a != nullptr) {
    if (auto* v = a->get_if<std::vector<std::string>>()) return *v;
  }
  return {};
}

std::string Node::DebugString() const {
  std::vector<std::string> ins;
  for (const Output& o : inputs_) ins.push_back(o.name());
  for (const Node* c : control_inputs_) ins.push_back("^" + c->name());
  std::vector<std::string> outs;
  for (int i = 0; i < num_outputs(); ++i) {
    outs.push_back(
        fmt::format("{} {}", DTypeName(output_dtypes_[i]), output_shapes_[i].ToString()));
  }
  std::vector<std::string> attrs;
  for (const auto& [k, v] : attrs_) attrs.push_back(k + "=" + v.ToString());
  return fmt::format("{} = {}({}) {{{}}} -> ({})", name_, type_, fmt::join(ins, ", "),
                     fmt::join(attrs, ", "), fmt::join(outs, ", "));
}

Graph::Graph() = default;
Graph::~Graph() = default;

StatusOr<Node*> Graph::AddNode(NodeSpec spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("a node needs a name");
  if (by_name_.contains(spec.name)) {
    return absl::InvalidArgumentError(
        fmt::format("a node named \"{}\" already exists; names must be unique", spec.name));
  }
  const internal::OpDef* def = internal::OpRegistry::Global().Find(spec.type);
  if (def == nullptr) {
    return absl::InvalidArgumentError(fmt::format(
        "op \"{}\": unknown op type \"{}\"; is the component that defines it initialised?",
        spec.name, spec.type));
  }
  const int n = static_cast<int>(spec.inputs.size());
  if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs)) {
    return absl::InvalidArgumentError(fmt::format(
        "op \"{}\" ({}): takes {} to {} inputs, got {}", spec.name, spec.type, def->min_inputs,
        def->max_inputs < 0 ? std::string("any") : std::to_string(def->max_inputs), n));
  }
  for (int i = 0; i < n; ++i) {
    const Output& in = spec.inputs[i];
    if (!in.valid() || in.node->id() < 0 || in.node->id() >= num_nodes() ||
        nodes_[in.node->id()].get() != in.node || in.index >= in.node->num_outputs()) {
      return absl::InvalidArgumentError(
          fmt::format("op \"{}\" ({}): input {} is not an output of a node of this graph",
                      spec.name, spec.type, i));
    }
  }
  for (Node* c : spec.control_inputs) {
    if (c == nullptr || c->id() < 0 || c->id() >= num_nodes() || nodes_[c->id()].get() != c) {
      return absl::InvalidArgumentError(fmt::format(
          "op \"{}\" ({}): a control input is not a node of this graph", spec.name, spec.type));
    }
  }
  RECSDK_RETURN_IF_ERROR(internal::ValidateAttrs(*def, spec.name, spec.attrs));
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  internal::InferenceContext ctx(*def, spec, &dtypes, &shapes);
  if (def->shape_fn) RECSDK_RETURN_IF_ERROR(def->shape_fn(ctx));
  if (Status s = internal::CheckOutputCount(*def, spec.name, static_cast<int>(dtypes.size()));
      !s.ok()) {
    return absl::InternalError(fmt::format(
        "{}; the shape function and the declaration disagree (a bug in the op)", s.message()));
  }
  return AddNodeUnchecked(std::move(spec), std::move(dtypes), std::move(shapes));
}

Node* Graph::AddNodeUnchecked(NodeSpec spec, std::vector<DType> dtypes, std::vector<Shape> shapes) {
  auto node = std::unique_ptr<Node>(new Node());
  node->id_ = num_nodes();
  node->name_ = std::move(spec.name);
  node->type_ = std::move(spec.type);
  node->op_def_ = internal::OpRegistry::Global().Find(node->type_);
  node->device_ = std::move(spec.device);
  node->inputs_ = std::move(spec.inputs);
  node->control_inputs_ = std::move(spec.control_inputs);
  node->attrs_ = std::move(spec.attrs);
  node->output_dtypes_ = std::move(dtypes);
  node->output_shapes_ = std::move(shapes);
  Node* raw = node.get();
  by_name_[raw->name_] = raw;
  name_counts_.try_emplace(raw->name_, 0);
  nodes_.push_back(std::move(node));
  return raw;
}

void Node::ReplaceOp(std::string type, std::vector<Output> inputs, AttrMap attrs) {
  type_ = std::move(type);
  op_def_ = internal::OpRegistry::Global().Find(type_);
  inputs_ = std::move(inputs);
  attrs_ = std::move(attrs);
}

Node* Graph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

StatusOr<Output> Graph::FindOutput(std::string_view name) const {
  std::string_view node_name = name;
  int index = 0;
  const size_t colon = name.rfind(':');
  if (colon != std::string_view::npos) {
    node_name = name.substr(0, colon);
    const std::string_view idx = name.substr(colon + 1);
    if (idx.empty() || idx.size() > 6 || !std::all_of(idx.begin(), idx.end(), ::isdigit)) {
      return absl::InvalidArgumentError(
          fmt::format("\"{}\" is not a tensor name; write \"node\" or \"node:index\"", name));
    }
    index = std::stoi(std::string(idx));
  }
  Node* node = FindNode(node_name);
  if (node == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("no node named \"{}\" in the graph (looking up \"{}\")", node_name, name));
  }
  if (index >= node->num_outputs()) {
    return absl::InvalidArgumentError(
        fmt::format("node \"{}\" ({}) has {} outputs; \"{}\" asks for output {}", node_name,
                    node->type(), node->num_outputs(), name, index));
  }
  return Output(node, index);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

Status Graph::Reorder(const std::vector<Node*>& order) {
  const int n = num_nodes();
  if (static_cast<int>(order.size()) != n) {
    return absl::InvalidArgumentError(fmt::format(
        "Graph::Reorder: the order lists {} nodes but the graph has {}", order.size(), n));
  }
  std::vector<int> position(n, -1);
  for (int i = 0; i < n; ++i) {
    Node* node = order[i];
    if (node == nullptr || node->id() < 0 || node->id() >= n || nodes_[node->id()].get() != node) {
      return absl::InvalidArgumentError(
          fmt::format("Graph::Reorder: entry {} is not a node of this graph", i));
    }
    if (position[node->id()] >= 0) {
      return absl::InvalidArgumentError(
          fmt::format("Graph::Reorder: node \"{}\" is listed twice", node->name()));
    }
    position[node->id()] = i;
  }
  for (int i = 0; i < n; ++i) {
    const Node* node = order[i];
    auto check = [&](const Node* src) -> Status {
      if (position[src->id()] >= i) {
        return absl::InvalidArgumentError(fmt::format(
            "Graph::Reorder: node \"{}\" would come before its input \"{}\"; list every node "
            "after its inputs",
            node->name(), src->name()));
      }
      return absl::OkStatus();
    };
    for (const Output& in : node->inputs()) RECSDK_RETURN_IF_ERROR(check(in.node));
    for (const Node* c : node->control_inputs()) RECSDK_RETURN_IF_ERROR(check(c));
  }
  std::vector<std::unique_ptr<Node>> reordered(n);
  for (int i = 0; i < n; ++i) {
    const int old_id = order[i]->id();
    reordered[i] = std::move(nodes_[old_id]);
    reordered[i]->id_ = i;
  }
  nodes_ = std::move(reordered);
  return absl::OkStatus();
}

std::string Graph::UniqueName(const std::string& base) {
  auto [it, inserted] = name_counts_.try_emplace(base, 0);
  if (inserted && !by_name_.contains(base)) return base;
  for (;;) {
    const std::string candidate = fmt::format("{}_{}", base, ++it->second);
    if (!name_counts_.contains(candidate) && !by_name_.contains(candidate)) {
      name_counts_.try_emplace(candidate, 0);
      return candidate;
    }
  }
}

void Graph::RecordError(const Status& status) {
  if (status_.ok() && !status.ok()) status_ = status;
}

void Graph::AddToCollection(const std::string& key, const std::string& node_name) {
  collections_[key].push_back(node_name);
}

const std::vector<std::string>& Graph::Collection(const std::string& key) const {
  static const std::vector<std::string> kEmpty;
  auto it = collections_.find(key);
  return it == collections_.end() ? kEmpty : it->second;
}

std::unique_ptr<Graph> Graph::Copy() const {
  auto g = std::make_unique<Graph>();
  for (const auto& n : nodes_) {
    NodeSpec spec;
    spec.name = n->name_;
    spec.type = n->type_;
    spec.device = n->device_;
    spec.attrs = n->attrs_;
    for (const Output& in : n->inputs_)
      spec.inputs.push_back(Output(g->nodes_[in.node->id()].get(), in.index));
    for (const Node* c : n->control_inputs_)
      spec.control_inputs.push_back(g->nodes_[c->id()].get());
    g->AddNodeUnchecked(std::move(spec), n->output_dtypes_, n->output_shapes_);
  }
  g->name_counts_ = name_counts_;
  g->collections_ = collections_;
  g->random_seed_ = random_seed_;
  g->status_ = status_;
  return g;
}

}  // namespace recsdk
