// recsdk/graph.h: the static graph a model is written in.
//
// A Graph is a set of named nodes. Each node has an op type, data inputs (outputs of other
// nodes), control inputs (nodes that must run first), typed attributes and a device placement.
// Output dtypes and shapes are inferred when a node is added, so shape errors surface while the
// model is built. Graphs serialise to JSON and load back identically.
//
// Nodes are built through the functions in recsdk/ops.h (and layers.h, optimizers.h) with a
// Scope; those record the first construction error in the graph (see Graph::status()) and turn
// later calls into no-ops, so a model builder can check once at the end. Session::Create also
// refuses a graph that holds an error.
//
// Threading: not thread-safe; build a graph from one thread. A Session copies the graph it is
// created from, so later changes to the caller's graph do not affect it.
#ifndef RECSDK_GRAPH_H_
#define RECSDK_GRAPH_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "recsdk/dtype.h"
#include "recsdk/shape.h"
#include "recsdk/status.h"
#include "recsdk/tensor.h"

namespace recsdk {

namespace internal {
class GraphAccess;  // src/graph/graph_access.h
class NodeAttrs;    // src/graph/op_registry.h
struct OpDef;       // src/graph/op_registry.h
}  // namespace internal

class Graph;
class Node;

// Output: one output of a node, written "name:index" (":0" may be omitted in names).
struct Output {
  // node, index: the producing node (null: an invalid Output) and which of its outputs.
  Node* node = nullptr;
  int index = 0;

  Output() = default;
  // Output: output i of node n.
  Output(Node* n, int i = 0) : node(n), index(i) {}  // NOLINT: an op's node is its output 0

  // valid: false when there is no node (a builder that failed returns such an Output).
  bool valid() const { return node != nullptr; }
  std::string name() const;  // "node:index"
  // dtype, shape: the output's inferred dtype and shape. The Output must be valid.
  DType dtype() const;
  const Shape& shape() const;
  // operator==: the same output of the same node.
  friend bool operator==(const Output& a, const Output& b) {
    return a.node == b.node && a.index == b.index;
  }
};

// AttrValue: a typed attribute of a node.
class AttrValue {
 public:
  // Value: the value, one of the attribute types (std::monostate: none).
  using Value =
      std::variant<std::monostate, int64_t, double, bool, std::string, DType, Shape,
                   std::vector<int64_t>, std::vector<double>, std::vector<std::string>, Tensor>;
  // Type tags in the order of Value's alternatives; pinned because they appear in JSON.
  enum class Type {
    kNone,
    kInt,
    kFloat,
    kBool,
    kString,
    kDType,
    kShape,
    kInts,
    kFloats,
    kStrings,
    kTensor
  };

  AttrValue() = default;
  // AttrValue: a value of each attribute type (int and const char* convert to int64_t and
  // std::string); implicit, so attributes read {{"axis", 1}, {"name", "x"}}.
  AttrValue(int v) : value_(static_cast<int64_t>(v)) {}            // NOLINT
  AttrValue(int64_t v) : value_(v) {}                              // NOLINT
  AttrValue(double v) : value_(v) {}                               // NOLINT
  AttrValue(bool v) : value_(v) {}                                 // NOLINT
  AttrValue(std::string v) : value_(std::move(v)) {}               // NOLINT
  AttrValue(const char* v) : value_(std::string(v)) {}             // NOLINT
  AttrValue(DType v) : value_(v) {}                                // NOLINT
  AttrValue(Shape v) : value_(std::move(v)) {}                     // NOLINT
  AttrValue(std::vector<int64_t> v) : value_(std::move(v)) {}      // NOLINT
  AttrValue(std::vector<double> v) : value_(std::move(v)) {}       // NOLINT
  AttrValue(std::vector<std::string> v) : value_(std::move(v)) {}  // NOLINT
  AttrValue(Tensor v) : value_(std::move(v)) {}                    // NOLINT

  // type: which alternative the value holds.
  Type type() const { return static_cast<Type>(value_.index()); }
  // value: the value itself.
  const Value& value() const { return value_; }
  // get_if: the value when it is a T, else null.
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&value_);
  }
  // ToString renders the value for messages and dumps (tensors are summarised).
  std::string ToString() const;

 private:
  Value value_;
};

// AttrMap: a node's attributes by name.
using AttrMap = std::map<std::string, AttrValue>;

// Node: one op in a Graph, which owns it (Graph::AddNode makes it). Its outputs' dtypes and
// shapes were inferred when it was added.
class Node {
 public:
  // id: the position in the graph's topological order (Graph::nodes).
  int id() const { return id_; }
  // name, type, device: the unique name, the op type and the placement ("": the session's).
  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  const std::string& device() const { return device_; }

  // num_inputs, input, inputs, control_inputs: the data inputs, in order, and the nodes that
  // must run first.
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Output& input(int i) const { return inputs_[i]; }
  const std::vector<Output>& inputs() const { return inputs_; }
  const std::vector<Node*>& control_inputs() const { return control_inputs_; }

  // num_outputs, output_dtype, output_shape, output: the outputs and their inferred dtypes and
  // shapes.
  int num_outputs() const { return static_cast<int>(output_dtypes_.size()); }
  DType output_dtype(int i) const { return output_dtypes_[i]; }
  const Shape& output_shape(int i) const { return output_shapes_[i]; }
  Output output(int i) const { return Output(const_cast<Node*>(this), i); }

  // attrs: every attribute. FindAttr: the attribute of that name, or null.
  const AttrMap& attrs() const { return attrs_; }
  const AttrValue* FindAttr(std::string_view name) const;
  // IntAttr, FloatAttr, BoolAttr, StringAttr, DTypeAttr, ShapeAttr, IntsAttr, FloatsAttr,
  // StringsAttr: the attribute's value; `fallback` (or empty) when the attribute is absent or of
  // another type. FloatAttr accepts an int attribute too.
  int64_t IntAttr(std::string_view name, int64_t fallback = 0) const;
  double FloatAttr(std::string_view name, double fallback = 0) const;
  bool BoolAttr(std::string_view name, bool fallback = false) const;
  std::string StringAttr(std::string_view name, std::string fallback = "") const;
  DType DTypeAttr(std::string_view name, DType fallback = DType::kInvalid) const;
  Shape ShapeAttr(std::string_view name, Shape fallback = Shape()) const;
  std::vector<int64_t> IntsAttr(std::string_view name) const;
  std::vector<double> FloatsAttr(std::string_view name) const;
  std::vector<std::string> StringsAttr(std::string_view name) const;

  // set_device, SetAttr, set_input, AddControlInput: mutators used by graph passes; they do not
  // re-run shape inference.
  void set_device(std::string device) { device_ = std::move(device); }
  void SetAttr(const std::string& name, AttrValue value) { attrs_[name] = std::move(value); }
  void set_input(int i, Output source) { inputs_[i] = source; }
  void AddControlInput(Node* node) { control_inputs_.push_back(node); }
  // ReplaceControlInput: a control input on `from` becomes one on `to` (for a pass that moves
  // `from`'s work into `to`); no change when there is none, and no duplicate when `to` is one.
  void ReplaceControlInput(const Node* from, Node* to) {
    auto it = std::find(control_inputs_.begin(), control_inputs_.end(), from);
    if (it == control_inputs_.end()) return;
    if (std::find(control_inputs_.begin(), control_inputs_.end(), to) != control_inputs_.end()) {
      control_inputs_.erase(it);
    } else {
      *it = to;
    }
  }
  // ReplaceOp: turns the node into another op (type, data inputs and attributes), keeping its
  // name, control inputs and outputs, so every consumer and every "name:index" still refers to
  // it. The pass guarantees the new op produces outputs of the same dtypes and shapes. An input
  // may come from a node added later; the pass then restores the id order with Graph::Reorder.
  void ReplaceOp(std::string type, std::vector<Output> inputs, AttrMap attrs);

  // DebugString: one line: name, type, inputs ("^" before control inputs), outputs' dtypes and
  // shapes, attributes.
  std::string DebugString() const;

 private:
  friend class Graph;
  friend class internal::NodeAttrs;
  Node() = default;

  int id_ = -1;
  std::string name_;
  std::string type_;
  // op_def_: the declaration of type_ (null when it is not registered), kept so that readers of
  // attributes on a kernel's path do not look the op up in the registry on every call.
  const internal::OpDef* op_def_ = nullptr;
  std::string device_;
  std::vector<Output> inputs_;
  std::vector<Node*> control_inputs_;
  AttrMap attrs_;
  std::vector<DType> output_dtypes_;
  std::vector<Shape> output_shapes_;
};

// NodeSpec: what Graph::AddNode needs to create a node.
struct NodeSpec {
  std::string name;  // unique in the graph
  std::string type;  // a registered op type
  // inputs, control_inputs, attrs, device: as Node has them.
  std::vector<Output> inputs;
  std::vector<Node*> control_inputs;
  AttrMap attrs;
  std::string device;
};

// kGlobalVariables, kTrainableVariables, kVariableInitializers, kGlobalStep: well-known collection
// names.
inline constexpr char kGlobalVariables[] = "variables";
inline constexpr char kTrainableVariables[] = "trainable_variables";
inline constexpr char kVariableInitializers[] = "variable_initializers";
inline constexpr char kGlobalStep[] = "global_step";

// Graph: the nodes of a model (see the file comment). Not copyable (Copy() makes a deep copy);
// not thread-safe.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // AddNode checks the op type, attributes and inputs against the op registry, infers output
  // dtypes and shapes, and adds the node. Errors name the node, its inputs and their shapes.
  StatusOr<Node*> AddNode(NodeSpec spec);

  // FindNode returns the node of that name, or nullptr.
  Node* FindNode(std::string_view name) const;
  // FindOutput resolves "name:index" or "name" (index 0).
  StatusOr<Output> FindOutput(std::string_view name) const;

  // num_nodes, node: the node count and the node of an id (0 <= id < num_nodes()).
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  Node* node(int id) const { return nodes_[id].get(); }
  // nodes: every node, in id order: the order they were added, or the one Reorder set. Always a
  // topological order (Gradients, Copy and the Session rely on it).
  std::vector<Node*> nodes() const;

  // Reorder: renumbers the nodes so that order[i] gets id i. `order` must hold every node once,
  // each after its data and control inputs; InvalidArgument otherwise (and nothing changes).
  // Node pointers stay valid. For passes whose rewiring makes a node read one added after it.
  Status Reorder(const std::vector<Node*>& order);

  // UniqueName returns `base` if no node or scope uses it yet, else base_1, base_2, ...
  // and reserves the returned name.
  std::string UniqueName(const std::string& base);

  // status: the first error a builder recorded (OK if none). Builders stop adding nodes after it.
  // RecordError: records `status` when it is an error and none is recorded yet.
  const Status& status() const { return status_; }
  void RecordError(const Status& status);

  // AddToCollection, Collection, collections: named lists of node names (variables,
  // initializers, ...), in insertion order; Collection of an unknown key is empty.
  void AddToCollection(const std::string& key, const std::string& node_name);
  const std::vector<std::string>& Collection(const std::string& key) const;
  const std::map<std::string, std::vector<std::string>>& collections() const {
    return collections_;
  }

  // random_seed, set_random_seed: the graph-level random seed. Ops with their own seed combine
  // it with this one; with neither set, the op derives a seed from its name, so graphs are
  // reproducible by default.
  int64_t random_seed() const { return random_seed_; }
  void set_random_seed(int64_t seed) { random_seed_ = seed; }

  // Copy returns a deep copy (nodes, attributes, collections, seed, status).
  std::unique_ptr<Graph> Copy() const;

  // ToJson, FromJson: serialise the graph and load it back. FromJson(ToJson(g)).ToJson() equals
  // ToJson(g). Loading does not need the op registry (dtypes and shapes are stored).
  std::string ToJson(int indent = 1) const;
  static StatusOr<std::unique_ptr<Graph>> FromJson(std::string_view json);

 private:
  // The library's graph builders keep their state with the graph through it (builder_state_).
  friend class internal::GraphAccess;
  Node* AddNodeUnchecked(NodeSpec spec, std::vector<DType> dtypes, std::vector<Shape> shapes);

  std::vector<std::unique_ptr<Node>> nodes_;
  absl::flat_hash_map<std::string, Node*> by_name_;
  absl::flat_hash_map<std::string, int> name_counts_;
  std::map<std::string, std::vector<std::string>> collections_;
  int64_t random_seed_ = 0;
  Status status_;
  std::map<std::string, std::shared_ptr<void>> builder_state_;
};

}  // namespace recsdk

#endif  // RECSDK_GRAPH_H_
