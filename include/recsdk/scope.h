// recsdk/scope.h: where op builders put nodes.
//
// A Scope is a light value: the graph, a name prefix ("tower/fc1"), a device placement, control
// dependencies and an optional exact name for the next op. Op builders take a `const Scope&`.
// Sub-scopes are uniquified like TensorFlow's name scopes ("dense", "dense_1", ...).
//
// Variable reuse (TensorFlow's variable scopes with reuse): a scope also carries a variable
// prefix and a VariableReuse mode. With the default kNone, variables are named like ops (under
// the uniquified prefix) and building a layer twice builds two sets of weights. Under
// WithVariableReuse(kAutoReuse), NewSubScope extends the variable prefix with the name as given
// (not uniquified), and Variable::Make returns the variable of that name when it exists, so
// calling layers::Mlp twice under the same name shares one tower (the second call's ops are
// uniquified, "mlp_1/...", its variables are "mlp/..."). NewNameScope groups ops without
// touching variable names (TensorFlow's name_scope), e.g. an "eval" branch that shares the
// training weights.
// Threading: as for Graph (one builder thread).
#ifndef RECSDK_SCOPE_H_
#define RECSDK_SCOPE_H_

#include <string>
#include <string_view>
#include <vector>

#include "recsdk/graph.h"

namespace recsdk {

// VariableReuse: what Variable::Make does with a name that already names a variable.
enum class VariableReuse {
  kNone,       // default: the new variable gets a uniquified name ("kernel_1"); nothing shared
  kReuse,      // the variable must exist (NotFound-style graph error otherwise); it is returned
  kAutoReuse,  // returned if it exists, created otherwise (TensorFlow's tf.compat.v1.AUTO_REUSE)
};

// Scope: where op builders put nodes (see the file comment). A light value; copy it freely.
class Scope {
 public:
  // Scope: the root scope of `graph`: no prefix, no device, no control dependencies. The graph must
  // outlive every scope made from it.
  explicit Scope(Graph* graph) : graph_(graph) {}

  // graph: the graph ops are added to.
  Graph* graph() const { return graph_; }
  // prefix: the op name prefix ("tower/fc1"; empty at the root).
  const std::string& prefix() const { return prefix_; }
  // device: the placement of ops built with this scope ("": the session's device).
  const std::string& device() const { return device_; }
  // control_dependencies: nodes every op built with this scope runs after.
  const std::vector<Node*>& control_dependencies() const { return control_deps_; }
  // variable_prefix: where variables built under this scope are named ("tower/fc1"); equals
  // prefix() unless variable reuse is on (see above).
  const std::string& variable_prefix() const { return var_prefix_; }
  // variable_reuse: this scope's VariableReuse mode (kNone unless WithVariableReuse).
  VariableReuse variable_reuse() const { return reuse_; }

  // NewSubScope: names below it start with "<prefix>/<name>/"; a name already used gets _1, _2...
  Scope NewSubScope(std::string_view name) const;
  // NewNameScope: like NewSubScope for op names only; variable names keep this scope's
  // variable prefix (TensorFlow's name_scope beside variable_scope).
  Scope NewNameScope(std::string_view name) const;
  // WithVariableReuse: variables built under the returned scope (and its sub-scopes) follow
  // `reuse`. Sub-scopes made from it name variables by the names given, not uniquified, so the
  // same model code run twice names (and with kReuse/kAutoReuse shares) the same variables.
  // Hazard: under reuse, two different layers given the same name share weights (their shapes
  // must then agree, else the graph records an error naming the variable and both shapes).
  Scope WithVariableReuse(VariableReuse reuse = VariableReuse::kAutoReuse) const;
  // WithOpName: the next op built with this scope is named exactly "<prefix>/<name>"
  // (uniquified if that name is taken).
  Scope WithOpName(std::string_view name) const;
  // WithDevice: ops built with this scope are placed on `device` ("cpu", "cpu:0", ...).
  Scope WithDevice(std::string_view device) const;
  // WithControlDependencies: ops built with this scope run after `nodes`.
  Scope WithControlDependencies(std::vector<Node*> nodes) const;

  // ok/status: the graph's first construction error.
  bool ok() const { return graph_->status().ok(); }
  const Status& status() const { return graph_->status(); }

  // AddNode builds a node named after the op name or `default_name` (the op type when empty)
  // under this scope, with its device and control dependencies. On an error (or when the graph
  // already holds one) it records it and returns nullptr. Every input must be valid.
  Node* AddNode(std::string_view op_type, std::vector<Output> inputs, AttrMap attrs = {},
                std::string_view default_name = {}) const;

  // FullName: "<prefix>/<name>" without uniquifying.
  std::string FullName(std::string_view name) const;
  // VariableName: "<variable_prefix>/<name>", the name a variable built here asks for.
  std::string VariableName(std::string_view name) const;

 private:
  Graph* graph_;
  std::string prefix_;
  std::string var_prefix_;
  VariableReuse reuse_ = VariableReuse::kNone;
  std::string op_name_;
  std::string device_;
  std::vector<Node*> control_deps_;
};

}  // namespace recsdk

#endif  // RECSDK_SCOPE_H_
