// variables.cc: Variable and its graph nodes.
#include "recsdk/variables.h"

#include "fmt/format.h"
#include "recsdk/ops.h"
#include "src/common/status_macros.h"
#include "src/graph/ops/op_util.h"

namespace recsdk {

namespace {

// FindExisting: the variable `full` if the graph has one; records an error (and returns an
// invalid variable through *error = true) when the name is taken by something else or the
// variable does not match.
Variable FindExisting(const Scope& scope, const std::string& full, const Shape& shape, DType dtype,
                      bool* error) {
  *error = false;
  Graph* g = scope.graph();
  Node* node = g->FindNode(full);
  if (node == nullptr) return Variable();
  auto existing = Variable::FromGraph(*g, full);
  if (!existing.ok()) {
    g->RecordError(absl::InvalidArgumentError(fmt::format(
        "variable \"{}\": reuse found a {} node of that name, not a variable; give the variable "
        "or the other node another name",
        full, node->type())));
    *error = true;
    return Variable();
  }
  if (existing->shape() != shape || existing->dtype() != dtype) {
    g->RecordError(absl::InvalidArgumentError(fmt::format(
        "variable \"{}\": reuse asks for {} {} but the existing variable is {} {}; under "
        "variable reuse two layers of the same name share weights, so give different layers "
        "different names",
        full, DTypeName(dtype), shape.ToString(), DTypeName(existing->dtype()),
        existing->shape().ToString())));
    *error = true;
    return Variable();
  }
  return *existing;
}

}  // namespace

Variable Variable::GetOrCreate(const Scope& scope, std::string_view name, const Shape& shape,
                               const VariableOptions& options) {
  if (!scope.ok()) return Variable();
  const std::string full = scope.VariableName(name);
  bool error = false;
  Variable found = FindExisting(scope, full, shape, options.dtype, &error);
  if (error || found.valid()) return found;
  // Created at the root under its exact name: the variable name ignores name scopes.
  const Scope root = Scope(scope.graph()).WithDevice(scope.device());
  Variable made = Make(root, full, shape, options);
  if (made.valid() && made.name() != full) {
    scope.graph()->RecordError(absl::InvalidArgumentError(fmt::format(
        "variable \"{}\": the name is already used by a scope, so the variable would be \"{}\"; "
        "rename the scope or the variable",
        full, made.name())));
    return Variable();
  }
  return made;
}

Variable Variable::Make(const Scope& scope, std::string_view name, const Shape& shape,
                        const VariableOptions& options) {
  Variable v;
  if (!scope.ok()) return v;
  if (scope.variable_reuse() == VariableReuse::kAutoReuse) {
    return GetOrCreate(scope.WithVariableReuse(VariableReuse::kNone), name, shape, options);
  }
  if (scope.variable_reuse() == VariableReuse::kReuse) {
    const std::string full = scope.VariableName(name);
    bool error = false;
    Variable found = FindExisting(scope, full, shape, options.dtype, &error);
    if (!error && !found.valid()) {
      scope.graph()->RecordError(absl::NotFoundError(fmt::format(
          "variable \"{}\": the scope says reuse (VariableReuse::kReuse) but no such variable "
          "exists; build the model once without reuse first, or use kAutoReuse",
          full)));
    }
    return found;
  }
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
