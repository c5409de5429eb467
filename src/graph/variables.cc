// variables.cc: Variable and its graph nodes.
#include "recsdk/variables.h"

#include "fmt/format.h"
#include "recsdk/ops.h"
#include "src/common/status_macros.h"
#include "src/graph/ops/op_util.h"

namespace recsdk {

Variable Variable::Make(const Scope& scope, std::string_view name, const Shape& shape,
                        const VariableOptions& options) {
  Variable v;
  if (!scope.ok()) return v;
  if (Status s = options.initializer.Validate(); !s.ok()) {
    scope.graph()->RecordError(absl::InvalidArgumentError(
        fmt::format("variable \"{}\": {}", scope.FullName(name), s.message())));
    return v;
  }
  Node* handle = scope.WithOpName(name).AddNode(
      "VarHandle", {},
      {{"shape", shape}, {"dtype", options.dtype}, {"trainable", options.trainable}});
  if (handle == nullptr) return v;
  const Scope vs(Scope(scope.graph()).WithDevice(scope.device()));
  const std::string& full = handle->name();
  Node* read =
      vs.WithOpName(full + "/read")
          .AddNode("ReadVariable", {Output(handle)}, {{"shape", shape}, {"dtype", options.dtype}});
  // The initial value is built under "<name>/Initializer" and written by "<name>/Assign".
  const Scope init_scope = vs.NewSubScope(full + "/Initializer");
  const Output initial = options.initializer.Build(init_scope, shape, options.dtype);
  Node* assign = vs.WithOpName(full + "/Assign").AddNode("Assign", {Output(handle), initial});
  if (read == nullptr || assign == nullptr) return v;
  Graph* g = scope.graph();
  g->AddToCollection(kGlobalVariables, full);
  if (options.trainable) g->AddToCollection(kTrainableVariables, full);
  g->AddToCollection(kVariableInitializers, assign->name());
  v.handle_ = Output(handle);
  v.value_ = Output(read);
  v.initializer_ = assign;
  return v;
}

StatusOr<Variable> Variable::FromGraph(const Graph& graph, std::string_view name) {
  Node* handle = graph.FindNode(name);
  if (handle == nullptr || handle->type() != "VarHandle") {
    return absl::NotFoundError(fmt::format("no variable named \"{}\" in the graph", name));
  }
  Node* read = graph.FindNode(std::string(name) + "/read");
  Node* assign = graph.FindNode(std::string(name) + "/Assign");
  if (read == nullptr || assign == nullptr) {
    return absl::NotFoundError(fmt::format("variable \"{}\" lacks its read or Assign node", name));
  }
  Variable v;
  v.handle_ = Output(handle);
  v.value_ = Output(read);
  v.initializer_ = assign;
  return v;
}

const std::string& Variable::name() const {
  static const std::string kEmpty;
  return handle_.valid() ? handle_.node->name() : kEmpty;
}

namespace {
Node* Update(const Scope& scope, const char* type, const Variable& var, Output value) {
  if (!var.valid()) {
    scope.graph()->RecordError(
        absl::InvalidArgumentError(fmt::format("{} on an invalid variable", type)));
    return nullptr;
  }
  return scope.AddNode(type, {var.handle(), value});
}
}  // namespace

Node* Assign(const Scope& scope, const Variable& var, Output value) {
  return Update(scope, "Assign", var, value);
}
Node* AssignAdd(const Scope& scope, const Variable& var, Output d) {
  return Update(scope, "AssignAdd", var, d);
}
Node* AssignSub(const Scope& scope, const Variable& var, Output d) {
  return Update(scope, "AssignSub", var, d);
}

Node* GlobalVariablesInitializer(const Scope& scope) {
  std::vector<Node*> inits;
  for (const std::string& name : scope.graph()->Collection(kVariableInitializers)) {
    if (Node* n = scope.graph()->FindNode(name)) inits.push_back(n);
  }
  return scope.WithOpName("init").WithControlDependencies(inits).AddNode("NoOp", {});
}

Variable GetOrCreateGlobalStep(const Scope& scope) {
  if (auto v = Variable::FromGraph(*scope.graph(), kGlobalStep); v.ok()) return *v;
  VariableOptions o;
  o.initializer = Initializer::Zeros();
  o.trainable = false;
  o.dtype = DType::kInt64;
  Scope root(scope.graph());
  return Variable::Make(root, kGlobalStep, Shape{}, o);
}

namespace {
std::vector<Variable> Collect(const Graph& graph, const char* key) {
  std::vector<Variable> out;
  for (const std::string& name : graph.Collection(key)) {
    if (auto v = Variable::FromGraph(graph, name); v.ok()) out.push_back(*v);
  }
  return out;
}
}  // namespace

std::vector<Variable> TrainableVariables(const Graph& graph) {
  return Collect(graph, kTrainableVariables);
}
std::vector<Variable> GlobalVariables(const Graph& graph) {
  return Collect(graph, kGlobalVariables);
}

}  // namespace recsdk
