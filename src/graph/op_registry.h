// op_registry.h: the declaration of each op type (OpDef: its inputs, outputs, attributes with
// their types and defaults, shape function, gradient) and the registry that holds them.
//
// The registry is filled once (core ops on first use; higher layers such as tables add theirs
// through Register at runtime start) and read concurrently afterwards. Registering takes the
// mutex exclusively; lookups take it shared.
#ifndef RECSDK_GRAPH_OP_REGISTRY_H_
#define RECSDK_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "recsdk/graph.h"
#include "recsdk/scope.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

struct OpDef;

// InferenceContext: the view of a node being added that a shape function sees. Its attribute
// readers return the op's declared default (OpDef::attrs) for an attribute the node leaves out.
class InferenceContext {
 public:
  InferenceContext(const OpDef& def, const NodeSpec& spec, std::vector<DType>* dtypes,
                   std::vector<Shape>* shapes)
      : def_(def), spec_(spec), dtypes_(dtypes), shapes_(shapes) {}

  const std::string& name() const { return spec_.name; }
  const std::string& type() const { return spec_.type; }
  int num_inputs() const { return static_cast<int>(spec_.inputs.size()); }
  DType input_dtype(int i) const { return spec_.inputs[i].dtype(); }
  const Shape& input_shape(int i) const { return spec_.inputs[i].shape(); }
  // attr: the node's own value, or nullptr when the node leaves it out.
  const AttrValue* attr(std::string_view name) const;
  // The typed readers: the node's value, else the declared default (AttrOf below).
  int64_t IntAttr(std::string_view name) const;
  double FloatAttr(std::string_view name) const;
  bool BoolAttr(std::string_view name) const;
  std::string StringAttr(std::string_view name) const;
  DType DTypeAttr(std::string_view name) const;
  Shape ShapeAttr(std::string_view name) const;
  std::vector<int64_t> IntsAttr(std::string_view name) const;

  void AddOutput(DType dtype, Shape shape) {
    dtypes_->push_back(dtype);
    shapes_->push_back(std::move(shape));
  }

  // InputDesc: `input 1 "fc1/MatMul:0" float32 [32,16]`, for messages.
  std::string InputDesc(int i) const;

  // Error: InvalidArgument prefixed with the op's name and type.
  template <typename... Args>
  Status Error(fmt::format_string<Args...> format, Args&&... args) const {
    return absl::InvalidArgumentError(fmt::format("op \"{}\" ({}): ", name(), type()) +
                                      fmt::format(format, std::forward<Args>(args)...));
  }

  // Helpers used by many shape functions.
  Status ExpectDType(int input, DType dtype) const;
  Status ExpectFloat(int input) const;
  Status ExpectSameDType(int a, int b) const;
  Status ExpectRank(int input, int rank) const;
  Status ExpectMinRank(int input, int rank) const;
  // NormalizeAxis maps a possibly negative axis into [0, rank).
  StatusOr<int> NormalizeAxis(int64_t axis, int rank) const;

 private:
  const OpDef& def_;
  const NodeSpec& spec_;
  std::vector<DType>* dtypes_;
  std::vector<Shape>* shapes_;
};

using ShapeFn = std::function<Status(InferenceContext&)>;

// GradFn: given the node and the gradients of its outputs (an invalid Output for an output that
// no path to the loss uses), sets one gradient per input (invalid where none flows).
using GradFn = std::function<Status(const Scope& scope, const Node& node,
                                    const std::vector<Output>& grad_outputs,
                                    std::vector<Output>* grad_inputs)>;

// AttrDef: one attribute of an op's declaration. A required attribute must be present on every
// node of the op; an optional one may be absent, and then `default_value` is what every reader
// sees (InferenceContext's readers, NodeAttrs, the builders that leave it out). A present
// attribute must have `type`, except that an int is accepted where a float is declared (it widens
// exactly as Node::FloatAttr reads it).
struct AttrDef {
  std::string name;
  AttrValue::Type type = AttrValue::Type::kNone;
  bool required = false;
  // default_value: kNone when required or when "absent" means "not set" (Placeholder's shape);
  // then an absent attribute reads as the type's empty value (0, false, "", [], unknown shape).
  AttrValue default_value = {};
};

// AttrType: the attribute types, for the declarations (AttrType::kBool, AttrType::kInts, ...).
using AttrType = AttrValue::Type;

// Attr / RequiredAttr: AttrDef builders for the declarations.
inline AttrDef Attr(std::string name, AttrValue::Type type, AttrValue default_value = {}) {
  return AttrDef{std::move(name), type, false, std::move(default_value)};
}
inline AttrDef RequiredAttr(std::string name, AttrValue::Type type) {
  return AttrDef{std::move(name), type, true, {}};
}

// AttrTypeName: "bool", "int", "list(int)", ... for messages.
std::string_view AttrTypeName(AttrValue::Type type);

// OpDef: the one declaration of an op type. Everything the library knows about the op comes from
// it: Graph::AddNode checks a node's inputs, attributes and outputs against it, Graph::FromJson
// and the session passes check loaded and rewritten nodes against it, the shape function and the
// kernels read absent attributes as its defaults, autodiff calls its gradient, and
// OpRegistry::SchemaJson describes it. Write one per op, with designated initializers, in the
// family's file under src/graph/ops/ (or the layer that owns the op), and register it with
// OpRegistry::Register:
//
//   r.Register({.type = "MatMul",
//               .inputs = {"a", "b"},
//               .outputs = {"product"},
//               .attrs = {Attr("transpose_a", AttrType::kBool, false),
//                         Attr("transpose_b", AttrType::kBool, false)},
//               .shape_fn = MatMulShape,
//               .grad_fn = MatMulGrad});
struct OpDef {
  std::string type;
  // inputs, outputs: the names, in order, with a quantifier on the last entries: "x" one, "x?"
  // optional (only after the plain ones), and on the last entry "x*" zero or more, "x+" one or
  // more, "x{N,}" N or more. Register derives min_inputs / max_inputs from `inputs`; AddNode
  // checks the count of outputs the shape function adds against `outputs`.
  std::vector<std::string> inputs = {};
  std::vector<std::string> outputs = {};
  // attrs: every attribute a node of the op may have; any other is an error.
  std::vector<AttrDef> attrs = {};
  ShapeFn shape_fn = nullptr;
  GradFn grad_fn = nullptr;  // empty: not differentiable (error if a gradient must flow through it)
  // no_gradient: gradients stop here silently (comparisons, integer ops, random sources).
  bool no_gradient = false;
  // stateful: reads or writes state (variables, tables, random streams); never pruned as a
  // duplicate and never constant-folded.
  bool stateful = false;

  // Derived by OpRegistry::Register from `inputs` (max_inputs -1: any number); not set by hand.
  int min_inputs = 0;
  int max_inputs = 0;
  int min_outputs = 0;
  int max_outputs = 0;

  const AttrDef* FindAttr(std::string_view name) const;
};

// ValidateAttrs: checks a node's attributes against its op's declaration: every required attribute
// is present, every present one has the declared type, and none is unknown. InvalidArgument names
// the node, the op, the attribute, the type found and the type expected, or the op's attributes.
Status ValidateAttrs(const OpDef& def, std::string_view node_name, const AttrMap& attrs);

// CheckOutputCount: an error naming the node, the op, the count and the declared outputs when
// `count` outputs (what the shape function added, or what a loaded graph lists) do not fit the
// declaration's `outputs`. Internal code; the callers say whose fault it is.
Status CheckOutputCount(const OpDef& def, std::string_view node_name, int count);

// AttrOf: what a reader of attribute `name` of a node of op `def` sees: the node's value, or the
// declared default when the node leaves it out. Reading an attribute the op does not declare is a
// bug in the reader (a typo, or a kernel shared by ops of which only some declare it): it aborts
// naming the op, the attribute and the declared ones. Use OpDef::FindAttr first where an
// attribute is declared by only some of the ops a reader serves.
const AttrValue& AttrOf(const OpDef& def, const AttrMap& attrs, std::string_view name);

// NodeAttrs: a built node's attributes read through its op's declaration (for gradient
// functions, passes and kernels): the declaration the node keeps from Graph::AddNode (no registry
// lookup, so kernels may make one per call), then AttrOf for each read.
class NodeAttrs {
 public:
  explicit NodeAttrs(const Node& node);
  const OpDef& def() const { return *def_; }
  bool Declares(std::string_view name) const { return def_->FindAttr(name) != nullptr; }
  int64_t Int(std::string_view name) const;
  double Float(std::string_view name) const;
  bool Bool(std::string_view name) const;
  std::string String(std::string_view name) const;
  std::vector<int64_t> Ints(std::string_view name) const;
  std::vector<std::string> Strings(std::string_view name) const;

 private:
  const Node& node_;
  const OpDef* def_;
};

class OpRegistry {
 public:
  // Global: the process-wide registry, holding the core ops.
  static OpRegistry& Global();

  // Register adds or replaces an op declaration. It derives the input and output counts and
  // aborts with the op's name on a malformed declaration (a quantifier out of place, a default of
  // another type than its attribute's, an attribute declared twice): declarations are the
  // library's own code, run once at start-up, and no caller input reaches them.
  void Register(OpDef def);
  const OpDef* Find(std::string_view type) const;
  std::vector<std::string> OpTypes() const;

  // SchemaJson: every registered op's declaration as JSON, sorted by type: {"ops": [{"type",
  // "inputs", "outputs", "attrs": [{"name", "type", "required", "default"?}], "stateful",
  // "differentiable"}]}. The attribute types are AttrTypeName's, the defaults in the graph JSON's
  // attribute layout ({"type": tag, "value"}). `recsdk ops` prints it.
  std::string SchemaJson(int indent = 2) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_;
  // retired_: declarations replaced by a later Register, kept for the nodes that point at them.
  std::vector<std::unique_ptr<OpDef>> retired_;
};

// Registration of the core op families (src/graph/ops/*.cc), each op one OpDef.
void RegisterArrayOps(OpRegistry& registry);
void RegisterMathOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);
void RegisterStateOps(OpRegistry& registry);
void RegisterRandomOps(OpRegistry& registry);
// Ops created by fusion passes (src/graph/ops/fused_ops.cc).
void RegisterFusedOps(OpRegistry& registry);
// Mixed precision and loss scaling ops (src/graph/ops/precision_ops.cc).
void RegisterPrecisionOps(OpRegistry& registry);

// BroadcastShapes: NumPy broadcasting of two (possibly partially known) shapes.
StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// DeriveSeed: the seed an op uses: its own seed and the graph seed combined, or both derived from
// the node name when neither is set.
uint64_t DeriveSeed(int64_t graph_seed, int64_t op_seed, std::string_view node_name);

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_OP_REGISTRY_H_
