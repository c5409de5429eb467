// recsdk/variables.h: dense trainable state.
//
// A Variable is a named tensor owned by the Session (not by the graph). In the graph it appears
// as a handle node "<name>" (op VarHandle), a read node "<name>/read" whose output is the current
// value, and an initializer "<name>/Assign" that the init op runs. Reads are zero-copy; an update
// while a read of the same step is still in use writes a fresh buffer (copy on write), so every
// op of a step sees one consistent value.
#ifndef RECSDK_VARIABLES_H_
#define RECSDK_VARIABLES_H_

#include <string>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/initializers.h"
#include "recsdk/scope.h"

namespace recsdk {

// VariableOptions: how Variable::Make creates a variable.
struct VariableOptions {
  // initializer: how the init op fills the variable. Default glorot uniform.
  Initializer initializer = Initializer::GlorotUniform();
  // trainable: listed in kTrainableVariables, so optimizers update it by default.
  bool trainable = true;
  // dtype: the element type. Default float32.
  DType dtype = DType::kFloat32;
};

// Variable: a named, stateful tensor of the graph: a handle node, a read of its value and an
// init node. A cheap value; the Session holds the state.
class Variable {
 public:
  Variable() = default;
  // Make: builds a variable named `name` under scope (uniquified). Under a scope with variable
  // reuse (Scope::WithVariableReuse) it is GetOrCreate (kAutoReuse) or returns the existing
  // variable (kReuse; a graph error naming it when it does not exist).
  static Variable Make(const Scope& scope, std::string_view name, const Shape& shape,
                       const VariableOptions& options = {});
  // GetOrCreate (TensorFlow's get_variable under AUTO_REUSE): the variable
  // "<scope.variable_prefix()>/<name>" if the graph has it, else a new one of exactly that name.
  // An existing variable of another shape or dtype, or a non-variable node of that name, is a
  // graph error naming the variable and both shapes; the result is then invalid. A reused
  // variable keeps its own initializer and trainable flag (`options` apply only on creation).
  static Variable GetOrCreate(const Scope& scope, std::string_view name, const Shape& shape,
                              const VariableOptions& options = {});
  // FromGraph: the variable whose handle node is `name`.
  static StatusOr<Variable> FromGraph(const Graph& graph, std::string_view name);

  // valid: false for a default-constructed or failed variable. name: the handle node's name.
  // handle: the resource output the update ops take.
  bool valid() const { return handle_.valid() && value_.valid(); }
  const std::string& name() const;
  Output handle() const { return handle_; }
  // value: the current value (the read node's output).
  Output value() const { return value_; }
  // initializer: the node that sets the initial value (GlobalVariablesInitializer groups them).
  // dtype, shape: the value's.
  Node* initializer() const { return initializer_; }
  DType dtype() const { return value_.dtype(); }
  const Shape& shape() const { return value_.shape(); }
  // operator Output: the value, so a variable can be passed wherever an Output is.
  operator Output() const { return value_; }  // NOLINT: a variable reads as its value

 private:
  Output handle_;
  Output value_;
  Node* initializer_ = nullptr;
};

// Assign / AssignAdd / AssignSub: update ops on a variable (run them as targets).
Node* Assign(const Scope& scope, const Variable& var, Output value);
Node* AssignAdd(const Scope& scope, const Variable& var, Output delta);
Node* AssignSub(const Scope& scope, const Variable& var, Output delta);

// GlobalVariablesInitializer: a NoOp "init" that runs every variable's initializer.
Node* GlobalVariablesInitializer(const Scope& scope);

// Global step: an int64 scalar "global_step" (not trainable) that optimizers increment.
Variable GetOrCreateGlobalStep(const Scope& scope);

// TrainableVariables / GlobalVariables: the graph's variables, in creation order.
std::vector<Variable> TrainableVariables(const Graph& graph);
std::vector<Variable> GlobalVariables(const Graph& graph);

}  // namespace recsdk

#endif  // RECSDK_VARIABLES_H_
