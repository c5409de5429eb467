// op_registry.cc
#include "src/graph/op_registry.h"

#include <algorithm>
#include <mutex>

#include "src/common/check.h"
#include "src/common/hash.h"

namespace recsdk::internal {

const AttrValue* InferenceContext::attr(std::string_view name) const {
  auto it = spec_.attrs.find(std::string(name));
  return it == spec_.attrs.end() ? nullptr : &it->second;
}
int64_t InferenceContext::IntAttr(std::string_view name, int64_t fallback) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return fallback;
  if (auto* v = a->get_if<int64_t>()) return *v;
  return fallback;
}
double InferenceContext::FloatAttr(std::string_view name, double fallback) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return fallback;
  if (auto* v = a->get_if<double>()) return *v;
  if (auto* v = a->get_if<int64_t>()) return static_cast<double>(*v);
  return fallback;
}
bool InferenceContext::BoolAttr(std::string_view name, bool fallback) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return fallback;
  if (auto* v = a->get_if<bool>()) return *v;
  return fallback;
}
std::string InferenceContext::StringAttr(std::string_view name) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return "";
  if (auto* v = a->get_if<std::string>()) return *v;
  return "";
}
DType InferenceContext::DTypeAttr(std::string_view name) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return DType::kInvalid;
  if (auto* v = a->get_if<DType>()) return *v;
  return DType::kInvalid;
}
Shape InferenceContext::ShapeAttr(std::string_view name) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return Shape();
  if (auto* v = a->get_if<Shape>()) return *v;
  return Shape();
}
std::vector<int64_t> InferenceContext::IntsAttr(std::string_view name) const {
  const AttrValue* a = attr(name);
  if (a == nullptr) return {};
  if (auto* v = a->get_if<std::vector<int64_t>>()) return *v;
  return {};
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
    DeclareCoreAttrSchemas(*r);
    RegisterPrecisionOps(*r);  // declares its own schemas
    return r;
  }();
  return *registry;
}

void OpRegistry::Register(OpDef def) {
  absl::MutexLock lock(&mu_);
  std::string type = def.type;
  ops_[type] = std::make_unique<OpDef>(std::move(def));
}

const OpDef* OpRegistry::Find(std::string_view type) const {
  absl::MutexLock lock(&mu_);
  auto it = ops_.find(std::string(type));
  return it == ops_.end() ? nullptr : it->second.get();
}

Status OpRegistry::DeclareAttrs(std::string_view type, std::vector<AttrDef> attrs) {
  absl::MutexLock lock(&mu_);
  auto it = ops_.find(std::string(type));
  if (it == ops_.end()) {
    return absl::FailedPreconditionError(
        fmt::format("DeclareAttrs: op type \"{}\" is not registered; register it first", type));
  }
  it->second->attrs = std::move(attrs);
  it->second->attrs_declared = true;
  return absl::OkStatus();
}

void OpRegistry::DeclareAttrsOrDie(std::string_view type, std::vector<AttrDef> attrs) {
  const Status s = DeclareAttrs(type, std::move(attrs));
  RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
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
  if (!def.attrs_declared) return absl::OkStatus();
  for (const auto& [name, value] : attrs) {
    const AttrDef* a = def.FindAttr(name);
    if (a == nullptr) {
      std::vector<std::string> known;
      for (const AttrDef& d : def.attrs) known.push_back(d.name);
      return absl::InvalidArgumentError(
          fmt::format("node \"{}\" ({}): unknown attribute \"{}\"; the op's attributes are [{}]",
                      node_name, def.type, name, fmt::join(known, ", ")));
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

std::vector<std::string> OpRegistry::OpTypes() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> types;
  for (const auto& [k, v] : ops_) types.push_back(k);
  std::sort(types.begin(), types.end());
  return types;
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
