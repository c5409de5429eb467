// recsdk/scope.h: where op builders put nodes.
//
// A Scope is a light value: the graph, a name prefix ("tower/fc1"), a device placement, control
// dependencies and an optional exact name for the next op. Op builders take a `const Scope&`.
// Sub-scopes are uniquified like TensorFlow's name scopes ("dense", "dense_1", ...).
// Threading: as for Graph (one builder thread).
#ifndef RECSDK_SCOPE_H_
#define RECSDK_SCOPE_H_

#include <string>
#include <string_view>
#include <vector>

#include "recsdk/graph.h"

namespace recsdk {

class Scope {
 public:
  explicit Scope(Graph* graph) : graph_(graph) {}

  Graph* graph() const { return graph_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& device() const { return device_; }
  const std::vector<Node*>& control_dependencies() const { return control_deps_; }

  // NewSubScope: names below it start with "<prefix>/<name>/"; a name already used gets _1, _2...
  Scope NewSubScope(std::string_view name) const;
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

 private:
  Graph* graph_;
  std::string prefix_;
  std::string op_name_;
  std::string device_;
  std::vector<Node*> control_deps_;
};

}  // namespace recsdk

#endif  // RECSDK_SCOPE_H_
