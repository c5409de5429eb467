// op_registry.h: what the graph knows about each op type: its inputs, how to infer its outputs'
// dtypes and shapes, whether it is stateful, and its gradient function.
//
// The registry is filled once (core ops on first use; higher layers such as tables add theirs
// through RegisterOp at runtime start) and read concurrently afterwards. Registering is guarded
// by a mutex; lookups after registration are lock-free reads of a map that no longer changes
// for the op types involved.
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

// InferenceContext: the view of a node being added that a shape function sees.
class InferenceContext {
 public:
  InferenceContext(const NodeSpec& spec, std::vector<DType>* dtypes, std::vector<Shape>* shapes)
      : spec_(spec), dtypes_(dtypes), shapes_(shapes) {}

  const std::string& name() const { return spec_.name; }
  const std::string& type() const { return spec_.type; }
  int num_inputs() const { return static_cast<int>(spec_.inputs.size()); }
  DType input_dtype(int i) const { return spec_.inputs[i].dtype(); }
  const Shape& input_shape(int i) const { return spec_.inputs[i].shape(); }
  const AttrValue* attr(std::string_view name) const;
  int64_t IntAttr(std::string_view name, int64_t fallback = 0) const;
  double FloatAttr(std::string_view name, double fallback = 0) const;
  bool BoolAttr(std::string_view name, bool fallback = false) const;
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

// AttrDef: one attribute of an op's schema. A required attribute must be present on every node of
// the op; an optional one may be absent, and then `default_value` is what the kernels and shape
// functions assume (the fallback they pass to Node::IntAttr & co.). A present attribute must have
// `type`, except that an int is accepted where a float is declared (it widens exactly as
// Node::FloatAttr reads it).
struct AttrDef {
  std::string name;
  AttrValue::Type type = AttrValue::Type::kNone;
  bool required = false;
  AttrValue default_value;  // kNone when required or when "absent" means "not set"
};

// Attr / RequiredAttr: AttrDef builders for schema tables.
inline AttrDef Attr(std::string name, AttrValue::Type type, AttrValue default_value = {}) {
  return AttrDef{std::move(name), type, false, std::move(default_value)};
}
inline AttrDef RequiredAttr(std::string name, AttrValue::Type type) {
  return AttrDef{std::move(name), type, true, {}};
}

// AttrTypeName: "bool", "int", "list(int)", ... for messages.
std::string_view AttrTypeName(AttrValue::Type type);

struct OpDef {
  std::string type;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  // stateful: reads or writes state (variables, tables, random streams); never pruned as a
  // duplicate and never constant-folded.
  bool stateful = false;
  ShapeFn shape_fn;
  GradFn grad_fn;  // empty: not differentiable (error if a gradient must flow through it)
  // no_gradient: gradients stop here silently (comparisons, integer ops, random sources).
  bool no_gradient = false;
  // attrs: the attribute schema. attrs_declared is false for an op registered without one (then
  // only the types of declared attributes could be checked, and there are none: such an op is a
  // gap that the registry test reports).
  std::vector<AttrDef> attrs;
  bool attrs_declared = false;

  const AttrDef* FindAttr(std::string_view name) const;
};

// ValidateAttrs: checks a node's attributes against its op's schema: every required attribute is
// present, every present one has the declared type, and none is unknown. InvalidArgument names the
// node, the op, the attribute, the type found and the type expected.
Status ValidateAttrs(const OpDef& def, std::string_view node_name, const AttrMap& attrs);

class OpRegistry {
 public:
  // Global: the process-wide registry, holding the core ops.
  static OpRegistry& Global();

  // Register adds or replaces an op definition.
  void Register(OpDef def);
  const OpDef* Find(std::string_view type) const;
  // DeclareAttrs sets the attribute schema of a registered op type. FailedPrecondition when the
  // type is not registered (a registration-order bug).
  Status DeclareAttrs(std::string_view type, std::vector<AttrDef> attrs);
  // DeclareAttrsOrDie: DeclareAttrs for the registration functions, which run once at start-up
  // with the library's own op types; a failure there is a bug in the library (no caller input
  // reaches it), so it aborts with the message.
  void DeclareAttrsOrDie(std::string_view type, std::vector<AttrDef> attrs);
  std::vector<std::string> OpTypes() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_;
};

// Registration of the core op families (src/graph/ops/*.cc).
void RegisterArrayOps(OpRegistry& registry);
void RegisterMathOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);
void RegisterStateOps(OpRegistry& registry);
void RegisterRandomOps(OpRegistry& registry);
// Ops created by fusion passes (src/graph/ops/fused_ops.cc); they declare their own schemas.
void RegisterFusedOps(OpRegistry& registry);
// The attribute schemas of the core ops (src/graph/ops/attr_schemas.cc), declared after the ops.
void DeclareCoreAttrSchemas(OpRegistry& registry);
// Mixed precision and loss scaling ops with their schemas (src/graph/ops/precision_ops.cc).
void RegisterPrecisionOps(OpRegistry& registry);

// BroadcastShapes: NumPy broadcasting of two (possibly partially known) shapes.
StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// DeriveSeed: the seed an op uses: its own seed and the graph seed combined, or both derived from
// the node name when neither is set.
uint64_t DeriveSeed(int64_t graph_seed, int64_t op_seed, std::string_view node_name);

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_OP_REGISTRY_H_
