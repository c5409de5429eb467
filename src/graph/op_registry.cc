// op_registry.cc
#include "src/graph/op_registry.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "src/common/check.h"
#include "src/common/hash.h"
#include "src/graph/attr_json.h"

namespace recsdk::internal {

const AttrValue* InferenceContext::attr(std::string_view name) const {
  auto it = spec_.attrs.find(std::string(name));
  return it == spec_.attrs.end() ? nullptr : &it->second;
}

namespace {

// The typed value of an attribute as a reader sees it (AttrOf); a value of another type reads as
// the type's empty value, as Node::IntAttr & co. read it (validation rules that out first).
int64_t OpAttrInt(const AttrValue& a) {
  if (auto* v = a.get_if<int64_t>()) return *v;
  return 0;
}
double OpAttrFloat(const AttrValue& a) {
  if (auto* v = a.get_if<double>()) return *v;
  if (auto* v = a.get_if<int64_t>()) return static_cast<double>(*v);
  return 0;
}
bool OpAttrBool(const AttrValue& a) {
  if (auto* v = a.get_if<bool>()) return *v;
  return false;
}
std::string OpAttrString(const AttrValue& a) {
  if (auto* v = a.get_if<std::string>()) return *v;
  return "";
}
std::vector<int64_t> OpAttrInts(const AttrValue& a) {
  if (auto* v = a.get_if<std::vector<int64_t>>()) return *v;
  return {};
}
std::vector<std::string> OpAttrStrings(const AttrValue& a) {
  if (auto* v = a.get_if<std::vector<std::string>>()) return *v;
  return {};
}

std::string DeclaredAttrNames(const OpDef& def) {
  std::vector<std::string> known;
  for (const AttrDef& d : def.attrs) known.push_back(d.name);
  return fmt::format("[{}]", fmt::join(known, ", "));
}

}  // namespace

const AttrValue& AttrOf(const OpDef& def, const AttrMap& attrs, std::string_view name) {
  const AttrDef* d = def.FindAttr(name);
  RECSDK_CHECK_MSG(d != nullptr,
                   fmt::format("op {} reads attribute \"{}\", which its declaration does not "
                               "have (it declares {}); declare it in the op's OpDef or fix the "
                               "reader",
                               def.type, name, DeclaredAttrNames(def)));
  auto it = attrs.find(std::string(name));
  // A present value of another type (only a graph that skipped validation has one) reads as the
  // default, as the readers' fallbacks did.
  if (it != attrs.end() &&
      (it->second.type() == d->type ||
       (d->type == AttrValue::Type::kFloat && it->second.type() == AttrValue::Type::kInt))) {
    return it->second;
  }
  return d->default_value;
}

int64_t InferenceContext::IntAttr(std::string_view name) const {
  return OpAttrInt(AttrOf(def_, spec_.attrs, name));
}
double InferenceContext::FloatAttr(std::string_view name) const {
  return OpAttrFloat(AttrOf(def_, spec_.attrs, name));
}
bool InferenceContext::BoolAttr(std::string_view name) const {
  return OpAttrBool(AttrOf(def_, spec_.attrs, name));
}
std::string InferenceContext::StringAttr(std::string_view name) const {
  return OpAttrString(AttrOf(def_, spec_.attrs, name));
}
DType InferenceContext::DTypeAttr(std::string_view name) const {
  const AttrValue& a = AttrOf(def_, spec_.attrs, name);
  if (auto* v = a.get_if<DType>()) return *v;
  return DType::kInvalid;
}
Shape InferenceContext::ShapeAttr(std::string_view name) const {
  const AttrValue& a = AttrOf(def_, spec_.attrs, name);
  if (auto* v = a.get_if<Shape>()) return *v;
  return Shape();
}
std::vector<int64_t> InferenceContext::IntsAttr(std::string_view name) const {
  return OpAttrInts(AttrOf(def_, spec_.attrs, name));
}

NodeAttrs::NodeAttrs(const Node& node)
    : node_(node),
      def_(node.op_def_ != nullptr ? node.op_def_ : OpRegistry::Global().Find(node.type())) {
  RECSDK_CHECK_MSG(def_ != nullptr,
                   fmt::format("NodeAttrs: node \"{}\" has op type \"{}\", which is not "
                               "registered (the graph was validated, so this is a reader bug)",
                               node.name(), node.type()));
}
int64_t NodeAttrs::Int(std::string_view name) const {
  return OpAttrInt(AttrOf(*def_, node_.attrs(), name));
}
double NodeAttrs::Float(std::string_view name) const {
  return OpAttrFloat(AttrOf(*def_, node_.attrs(), name));
}
bool NodeAttrs::Bool(std::string_view name) const {
  return OpAttrBool(AttrOf(*def_, node_.attrs(), name));
}
std::string NodeAttrs::String(std::string_view name) const {
  return OpAttrString(AttrOf(*def_, node_.attrs(), name));
}
std::vector<int64_t> NodeAttrs::Ints(std::string_view name) const {
  return OpAttrInts(AttrOf(*def_, node_.attrs(), name));
}
std::vector<std::string> NodeAttrs::Strings(std::string_view name) const {
  return OpAttrStrings(AttrOf(*def_, node_.attrs(), name));
}

std::string InferenceContext::InputDesc(int i) const {
  const Output& in = spec_.inputs[i];
  return fmt::format("input {} \"{}\" {} {}", i, in.name(), DTypeName(in.dtype()),
                     in.shape().ToString());
}

Status InferenceContext::ExpectDType(int input, DType dtype) const {
  if (input_dtype(input) != dtype) {
    return Error("{} must be {}", InputDesc(input), DTypeName(dtype));
  }
  return absl::OkStatus();
}
Status InferenceContext::ExpectFloat(int input) const {
  const DType d = input_dtype(input);
  if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kFloat16 &&
      d != DType::kBFloat16) {
    return Error("{} must be a floating-point tensor; Cast it first", InputDesc(input));
  }
  return absl::OkStatus();
}
Status InferenceContext::ExpectSameDType(int a, int b) const {
  if (input_dtype(a) != input_dtype(b)) {
    return Error("dtypes differ: {} vs {}; Cast one of them", InputDesc(a), InputDesc(b));
  }
  return absl::OkStatus();
}
Status InferenceContext::ExpectRank(int input, int rank) const {
  if (input_shape(input).rank() != rank) {
    return Error("{} must have rank {}", InputDesc(input), rank);
  }
  return absl::OkStatus();
}
Status InferenceContext::ExpectMinRank(int input, int rank) const {
  if (input_shape(input).rank() < rank) {
    return Error("{} must have rank >= {}", InputDesc(input), rank);
  }
  return absl::OkStatus();
}
StatusOr<int> InferenceContext::NormalizeAxis(int64_t axis, int rank) const {
  if (axis < -rank || axis >= std::max(rank, 1)) {
    return Error("axis {} is out of range for rank {}; use an axis in [{}, {})", axis, rank, -rank,
                 rank);
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterArrayOps(*r);
    RegisterMathOps(*r);
    RegisterNnOps(*r);
    RegisterStateOps(*r);
    RegisterRandomOps(*r);
    RegisterFusedOps(*r);
    RegisterPrecisionOps(*r);
    return r;
  }();
  return *registry;
}

namespace {

// OpArity: the counts a list of input or output names allows (OpDef::inputs' grammar), or an error
// naming the entry that breaks it.
struct OpArity {
  int min = 0;
  int max = 0;  // -1: any number
};

StatusOr<OpArity> ParseOpArity(const std::vector<std::string>& names, std::string_view what) {
  OpArity arity;
  bool optional_seen = false;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const bool last = i + 1 == names.size();
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(fmt::format("{} entry \"{}\": {}", what, n, why));
    };
    if (n.empty()) return bad("a name is needed");
    const char q = n.back();
    int repeat_min = -1;  // >= 0: this entry repeats, at least that many times
    if (q == '*') {
      repeat_min = 0;
    } else if (q == '+') {
      repeat_min = 1;
    } else if (q == '}') {
      const size_t open = n.rfind('{');
      const std::string_view body =
          open == std::string::npos ? std::string_view() : std::string_view(n).substr(open + 1);
      int count = 0;
      if (body.size() < 3 || body.substr(body.size() - 2) != ",}" ||
          !absl::SimpleAtoi(absl::string_view(body.data(), body.size() - 2), &count) || count < 0) {
        return bad("a repeat is written {N,}");
      }
      repeat_min = count;
    }
    if (repeat_min >= 0) {
      if (!last) return bad("only the last entry may repeat");
      if (optional_seen) return bad("a repeated entry cannot follow an optional one");
      arity.min += repeat_min;
      arity.max = -1;
    } else if (q == '?') {
      optional_seen = true;
      ++arity.max;
    } else {
      if (optional_seen) return bad("a required entry cannot follow an optional one");
      ++arity.min;
      ++arity.max;
    }
  }
  return arity;
}

// CheckDeclaration: a malformed declaration's error, naming what is wrong.
Status CheckOpDeclaration(OpDef& def) {
  if (def.type.empty()) return absl::InvalidArgumentError("an op declaration needs a type");
  RECSDK_ASSIGN_OR_RETURN(const OpArity in, ParseOpArity(def.inputs, "inputs"));
  RECSDK_ASSIGN_OR_RETURN(const OpArity out, ParseOpArity(def.outputs, "outputs"));
  def.min_inputs = in.min;
  def.max_inputs = in.max;
  def.min_outputs = out.min;
  def.max_outputs = out.max;
  for (size_t i = 0; i < def.attrs.size(); ++i) {
    const AttrDef& a = def.attrs[i];
    for (size_t j = 0; j < i; ++j) {
      if (def.attrs[j].name == a.name) {
        return absl::InvalidArgumentError(
            fmt::format("attribute \"{}\" is declared twice", a.name));
      }
    }
    if (a.type == AttrValue::Type::kNone) {
      return absl::InvalidArgumentError(fmt::format("attribute \"{}\" needs a type", a.name));
    }
    const AttrValue::Type dt = a.default_value.type();
    if (a.required && dt != AttrValue::Type::kNone) {
      return absl::InvalidArgumentError(
          fmt::format("required attribute \"{}\" cannot have a default", a.name));
    }
    if (dt != AttrValue::Type::kNone && dt != a.type) {
      return absl::InvalidArgumentError(
          fmt::format("attribute \"{}\" is {} but its default {} is {}", a.name,
                      AttrTypeName(a.type), a.default_value.ToString(), AttrTypeName(dt)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void OpRegistry::Register(OpDef def) {
  const Status s = CheckOpDeclaration(def);
  RECSDK_CHECK_MSG(s.ok(),
                   fmt::format("op declaration \"{}\" is malformed: {}", def.type, s.message()));
  absl::MutexLock lock(&mu_);
  std::unique_ptr<OpDef>& slot = ops_[def.type];
  // A replaced declaration stays alive: nodes keep a pointer to the declaration of their op.
  if (slot != nullptr) retired_.push_back(std::move(slot));
  slot = std::make_unique<OpDef>(std::move(def));
}

const OpDef* OpRegistry::Find(std::string_view type) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = ops_.find(absl::string_view(type.data(), type.size()));  // no string is built
  return it == ops_.end() ? nullptr : it->second.get();
}

std::string_view AttrTypeName(AttrValue::Type type) {
  using T = AttrValue::Type;
  switch (type) {
    case T::kNone:
      return "none";
    case T::kInt:
      return "int";
    case T::kFloat:
      return "float";
    case T::kBool:
      return "bool";
    case T::kString:
      return "string";
    case T::kDType:
      return "dtype";
    case T::kShape:
      return "shape";
    case T::kInts:
      return "list(int)";
    case T::kFloats:
      return "list(float)";
    case T::kStrings:
      return "list(string)";
    case T::kTensor:
      return "tensor";
  }
  return "unknown";
}

const AttrDef* OpDef::FindAttr(std::string_view name) const {
  for (const AttrDef& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

Status ValidateAttrs(const OpDef& def, std::string_view node_name, const AttrMap& attrs) {
  for (const auto& [name, value] : attrs) {
    const AttrDef* a = def.FindAttr(name);
    if (a == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("node \"{}\" ({}): unknown attribute \"{}\"; the op's attributes are {}",
                      node_name, def.type, name, DeclaredAttrNames(def)));
    }
    const AttrValue::Type got = value.type();
    const bool widened = a->type == AttrValue::Type::kFloat && got == AttrValue::Type::kInt;
    if (got != a->type && !widened) {
      return absl::InvalidArgumentError(fmt::format(
          "node \"{}\" ({}): attribute \"{}\" is {} {} but the op expects {}; pass a value of "
          "type {}",
          node_name, def.type, name, AttrTypeName(got), value.ToString(), AttrTypeName(a->type),
          AttrTypeName(a->type)));
    }
  }
  for (const AttrDef& a : def.attrs) {
    if (a.required && !attrs.contains(a.name)) {
      return absl::InvalidArgumentError(
          fmt::format("node \"{}\" ({}): required attribute \"{}\" ({}) is missing", node_name,
                      def.type, a.name, AttrTypeName(a.type)));
    }
  }
  return absl::OkStatus();
}

Status CheckOutputCount(const OpDef& def, std::string_view node_name, int count) {
  if (count < def.min_outputs || (def.max_outputs >= 0 && count > def.max_outputs)) {
    return absl::InternalError(
        fmt::format("node \"{}\" ({}): {} outputs, but the op's declaration has outputs [{}]",
                    node_name, def.type, count, fmt::join(def.outputs, ", ")));
  }
  return absl::OkStatus();
}

std::vector<std::string> OpRegistry::OpTypes() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> types;
  for (const auto& [k, v] : ops_) types.push_back(k);
  std::sort(types.begin(), types.end());
  return types;
}

std::string OpRegistry::SchemaJson(int indent) const {
  nlohmann::json ops = nlohmann::json::array();
  for (const std::string& type : OpTypes()) {
    const OpDef& def = *Find(type);
    nlohmann::json attrs = nlohmann::json::array();
    for (const AttrDef& a : def.attrs) {
      nlohmann::json ja = {
          {"name", a.name}, {"type", std::string(AttrTypeName(a.type))}, {"required", a.required}};
      if (a.default_value.type() != AttrValue::Type::kNone) {
        ja["default"] = AttrMapToJson({{a.name, a.default_value}})[a.name];
      }
      attrs.push_back(std::move(ja));
    }
    ops.push_back({{"type", def.type},
                   {"inputs", def.inputs},
                   {"outputs", def.outputs},
                   {"attrs", std::move(attrs)},
                   {"stateful", def.stateful},
                   {"differentiable", static_cast<bool>(def.grad_fn)}});
  }
  return nlohmann::json{{"format", "recsdk.op_schema"}, {"version", 1}, {"ops", std::move(ops)}}
      .dump(indent);
}

StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a.dim(ia) : 1;
    const int64_t db = ib >= 0 ? b.dim(ib) : 1;
    int64_t d;
    if (da == 1) {
      d = db;
    } else if (db == 1) {
      d = da;
    } else if (da == Shape::kUnknownDim) {
      d = db;
    } else if (db == Shape::kUnknownDim) {
      d = da;
    } else if (da == db) {
      d = da;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("shapes {} and {} cannot be broadcast: dimension {} is {} vs {}",
                      a.ToString(), b.ToString(), i, da, db));
    }
    out.AddDim(d);
  }
  return out;
}

uint64_t DeriveSeed(int64_t graph_seed, int64_t op_seed, std::string_view node_name) {
  if (op_seed != 0)
    return CombineSeeds(static_cast<uint64_t>(graph_seed), static_cast<uint64_t>(op_seed));
  return CombineSeeds(static_cast<uint64_t>(graph_seed), Fingerprint64(node_name));
}

}  // namespace recsdk::internal
