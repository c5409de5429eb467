// graph_json.cc: Graph::ToJson / Graph::FromJson.
//
// Layout: {"format": "recsdk.graph", "version": 1, "random_seed": s, "collections": {...},
// "nodes": [{"name", "op", "device", "inputs": ["a:0", "^b"], "attrs": {k: {"type", "value"}},
// "outputs": [{"dtype", "shape"}]}]}. Tensors are {"dtype", "shape", "data": base64 of the raw
// little-endian bytes}, so values round-trip bit for bit.
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/graph.h"
#include "src/common/checked_math.h"
#include "src/common/json_number.h"
#include "src/common/json_parse.h"
#include "src/common/status_macros.h"
#include "src/graph/attr_json.h"
#include "src/graph/op_registry.h"

namespace recsdk {
namespace {

using json = nlohmann::json;
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(const unsigned char* data, size_t n) {
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{data[i]} << 16) | (i + 1 < n ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{data[i + 2]} : 0);
    out += kB64[(b >> 18) & 63];
    out += kB64[(b >> 12) & 63];
    out += i + 1 < n ? kB64[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[b & 63] : '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (s.size() % 4 != 0) return absl::DataLossError("tensor data is not valid base64");
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      if (s[i + j] == '=') {
        v[j] = 0;
        ++pad;
      } else {
        v[j] = val(s[i + j]);
        if (v[j] < 0) return absl::DataLossError("tensor data is not valid base64");
      }
    }
    const uint32_t b = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((b >> 16) & 255);
    if (pad < 2) out += static_cast<char>((b >> 8) & 255);
    if (pad < 1) out += static_cast<char>(b & 255);
  }
  return out;
}

json ShapeToJson(const Shape& s) {
  json a = json::array();
  for (int64_t d : s.dims()) a.push_back(d);
  return a;
}

// ShapeFromJson: each dimension a size >= 0 or -1 (unknown), at most 32 of them.
StatusOr<Shape> ShapeFromJson(const json& j) {
  if (!j.is_array() || j.size() > 32) {
    return absl::DataLossError(
        fmt::format("graph JSON shape {} is not an array of at most 32 dimensions", j.dump()));
  }
  Shape s;
  for (const auto& d : j) {
    // An integer, not any number: converting a float such as -2e30 to int64 is undefined.
    if (!d.is_number_integer()) {
      return absl::DataLossError(fmt::format(
          "graph JSON shape {} has dimension {}, which is not an integer", j.dump(), d.dump()));
    }
    const int64_t v = internal::JsonNumber<int64_t>(d);
    if (v < Shape::kUnknownDim) {
      return absl::DataLossError(fmt::format(
          "graph JSON shape {} has dimension {}; dimensions are sizes >= 0 or -1 (unknown)",
          j.dump(), v));
    }
    s.AddDim(v);
  }
  return s;
}

json TensorToJson(const Tensor& t) {
  json j;
  j["dtype"] = std::string(DTypeName(t.dtype()));
  j["shape"] = ShapeToJson(t.shape());
  j["data"] = Base64Encode(static_cast<const unsigned char*>(t.raw_data()), t.TotalBytes());
  return j;
}

StatusOr<Tensor> TensorFromJson(const json& j) {
  auto dtype = ParseDType(j.at("dtype").get<std::string>());
  if (!dtype.ok()) return dtype.status();
  RECSDK_ASSIGN_OR_RETURN(Shape shape, ShapeFromJson(j.at("shape")));
  if (!shape.IsFullyDefined()) return absl::DataLossError("tensor attribute has an unknown shape");
  auto bytes = Base64Decode(j.at("data").get<std::string>());
  if (!bytes.ok()) return bytes.status();
  // The size the shape needs, overflow-checked, must match the data before anything is
  // allocated: a crafted shape must not size an allocation.
  if (DTypeSize(*dtype) == 0) {
    return absl::DataLossError(
        fmt::format("tensor attribute has dtype {}, which holds no numbers", DTypeName(*dtype)));
  }
  std::optional<uint64_t> need = static_cast<uint64_t>(DTypeSize(*dtype));
  for (int64_t d : shape.dims()) {
    if (need.has_value()) need = internal::CheckedMul<uint64_t>(*need, static_cast<uint64_t>(d));
  }
  if (!need.has_value() || *need != bytes->size()) {
    return absl::DataLossError(
        fmt::format("tensor attribute {} {} holds {} bytes, its shape needs {}", DTypeName(*dtype),
                    shape.ToString(), bytes->size(),
                    need.has_value() ? fmt::format("{}", *need) : std::string("more than 2^64")));
  }
  Tensor t(*dtype, shape);
  if (!bytes->empty()) std::memcpy(t.raw_data(), bytes->data(), bytes->size());
  return t;
}

json AttrToJson(const AttrValue& a) {
  json j;
  j["type"] = static_cast<int>(a.type());
  const auto& v = a.value();
  switch (a.type()) {
    case AttrValue::Type::kNone:
      j["value"] = nullptr;
      break;
    case AttrValue::Type::kInt:
      j["value"] = std::get<int64_t>(v);
      break;
    case AttrValue::Type::kFloat:
      j["value"] = std::get<double>(v);
      break;
    case AttrValue::Type::kBool:
      j["value"] = std::get<bool>(v);
      break;
    case AttrValue::Type::kString:
      j["value"] = std::get<std::string>(v);
      break;
    case AttrValue::Type::kDType:
      j["value"] = std::string(DTypeName(std::get<DType>(v)));
      break;
    case AttrValue::Type::kShape:
      j["value"] = ShapeToJson(std::get<Shape>(v));
      break;
    case AttrValue::Type::kInts:
      j["value"] = std::get<std::vector<int64_t>>(v);
      break;
    case AttrValue::Type::kFloats:
      j["value"] = std::get<std::vector<double>>(v);
      break;
    case AttrValue::Type::kStrings:
      j["value"] = std::get<std::vector<std::string>>(v);
      break;
    case AttrValue::Type::kTensor:
      j["value"] = TensorToJson(std::get<Tensor>(v));
      break;
  }
  return j;
}

StatusOr<AttrValue> AttrFromJson(const json& j) {
  const auto& v = j.at("value");
  const auto& type = j.at("type");
  // Integers must be JSON integers: converting a float such as -2e30 to int64 is undefined.
  if (!type.is_number_integer()) {
    return absl::DataLossError(
        fmt::format("graph JSON attribute type {} is not an integer", type.dump()));
  }
  if (!v.is_number_integer() &&
      static_cast<AttrValue::Type>(internal::JsonNumber<int64_t>(type)) == AttrValue::Type::kInt) {
    return absl::DataLossError(
        fmt::format("graph JSON int attribute value {} is not an integer", v.dump()));
  }
  switch (static_cast<AttrValue::Type>(internal::JsonNumber<int64_t>(type))) {
    case AttrValue::Type::kNone:
      return AttrValue();
    case AttrValue::Type::kInt:
      return AttrValue(internal::JsonNumber<int64_t>(v));
    case AttrValue::Type::kFloat:
      return AttrValue(v.get<double>());
    case AttrValue::Type::kBool:
      return AttrValue(v.get<bool>());
    case AttrValue::Type::kString:
      return AttrValue(v.get<std::string>());
    case AttrValue::Type::kDType: {
      auto d = ParseDType(v.get<std::string>());
      if (!d.ok()) return d.status();
      return AttrValue(*d);
    }
    case AttrValue::Type::kShape: {
      auto s = ShapeFromJson(v);
      if (!s.ok()) return s.status();
      return AttrValue(*std::move(s));
    }
    case AttrValue::Type::kInts:
      if (!v.is_array()) {
        return absl::DataLossError(
            fmt::format("graph JSON ints attribute value {} is not an array", v.dump()));
      }
      for (const auto& e : v) {
        if (!e.is_number_integer()) {
          return absl::DataLossError(fmt::format(
              "graph JSON ints attribute value {} holds {}, not an integer", v.dump(), e.dump()));
        }
      }
      return AttrValue(v.get<std::vector<int64_t>>());
    case AttrValue::Type::kFloats:
      return AttrValue(v.get<std::vector<double>>());
    case AttrValue::Type::kStrings:
      return AttrValue(v.get<std::vector<std::string>>());
    case AttrValue::Type::kTensor: {
      auto t = TensorFromJson(v);
      if (!t.ok()) return t.status();
      return AttrValue(*std::move(t));
    }
  }
  return absl::DataLossError("unknown attribute type in graph JSON");
}

}  // namespace

std::string Graph::ToJson(int indent) const {
  json j;
  j["format"] = "recsdk.graph";
  j["version"] = 1;
  j["random_seed"] = random_seed_;
  j["collections"] = collections_;
  json nodes = json::array();
  for (const auto& n : nodes_) {
    json jn;
    jn["name"] = n->name();
    jn["op"] = n->type();
    jn["device"] = n->device();
    json ins = json::array();
    for (const Output& in : n->inputs()) ins.push_back(in.name());
    for (const Node* c : n->control_inputs()) ins.push_back("^" + c->name());
    jn["inputs"] = ins;
    json attrs = json::object();
    for (const auto& [k, v] : n->attrs()) attrs[k] = AttrToJson(v);
    jn["attrs"] = attrs;
    json outs = json::array();
    for (int i = 0; i < n->num_outputs(); ++i) {
      outs.push_back({{"dtype", std::string(DTypeName(n->output_dtype(i)))},
                      {"shape", ShapeToJson(n->output_shape(i))}});
    }
    jn["outputs"] = outs;
    nodes.push_back(jn);
  }
  j["nodes"] = nodes;
  return j.dump(indent);
}

StatusOr<std::unique_ptr<Graph>> Graph::FromJson(std::string_view text) {
  absl::StatusOr<json> parsed = internal::ParseJson(text, "graph JSON");
  if (!parsed.ok()) return parsed.status();
  try {
    const json& j = *parsed;
    if (!j.is_object() || j.value("format", "") != "recsdk.graph") {
      return absl::InvalidArgumentError(
          "not a recsdk graph: the \"format\" field is missing or wrong");
    }
    if (internal::JsonNumberOr<int64_t>(j, "version", 0) != 1) {
      return absl::InvalidArgumentError(
          fmt::format("graph JSON version {} is not supported; this build reads version 1",
                      internal::JsonNumberOr<int64_t>(j, "version", 0)));
    }
    auto g = std::make_unique<Graph>();
    g->random_seed_ = internal::JsonNumberOr<int64_t>(j, "random_seed", 0);
    for (const auto& [k, v] : j.at("collections").items()) {
      g->collections_[k] = v.get<std::vector<std::string>>();
    }
    for (const auto& jn : j.at("nodes")) {
      NodeSpec spec;
      spec.name = jn.at("name").get<std::string>();
      spec.type = jn.at("op").get<std::string>();
      spec.device = jn.value("device", "");
      if (g->by_name_.contains(spec.name)) {
        return absl::DataLossError(fmt::format("graph JSON names node \"{}\" twice", spec.name));
      }
      for (const auto& in : jn.at("inputs")) {
        const std::string s = in.get<std::string>();
        if (!s.empty() && s[0] == '^') {
          Node* c = g->FindNode(s.substr(1));
          if (c == nullptr) {
            return absl::DataLossError(fmt::format(
                "node \"{}\": control input \"{}\" is not defined before it", spec.name, s));
          }
          spec.control_inputs.push_back(c);
        } else {
          auto o = g->FindOutput(s);
          if (!o.ok()) {
            return absl::DataLossError(
                fmt::format("node \"{}\": input {}", spec.name, o.status().message()));
          }
          spec.inputs.push_back(*o);
        }
      }
      // The attributes: each one that cannot be read names the node, its op and the attribute;
      // a node of a registered op is checked against the op's declaration here, so an unknown or
      // mistyped attribute is an error naming the op, the attribute and the declared ones (ops
      // of upper layers that are not registered yet are checked when a Session is created).
      RECSDK_ASSIGN_OR_RETURN(
          spec.attrs,
          internal::AttrMapFromJson(
              jn.at("attrs"), fmt::format("graph JSON node \"{}\" ({})", spec.name, spec.type)));
      if (const internal::OpDef* def = internal::OpRegistry::Global().Find(spec.type)) {
        if (Status s = internal::ValidateAttrs(*def, spec.name, spec.attrs); !s.ok()) {
          return absl::InvalidArgumentError(fmt::format("graph JSON: {}", s.message()));
        }
      }
      std::vector<DType> dtypes;
      std::vector<Shape> shapes;
      for (const auto& o : jn.at("outputs")) {
        auto d = ParseDType(o.at("dtype").get<std::string>());
        if (!d.ok()) return d.status();
        dtypes.push_back(*d);
        RECSDK_ASSIGN_OR_RETURN(Shape shape, ShapeFromJson(o.at("shape")));
        shapes.push_back(std::move(shape));
      }
      if (const internal::OpDef* def = internal::OpRegistry::Global().Find(spec.type)) {
        if (Status s = internal::CheckOutputCount(*def, spec.name, static_cast<int>(dtypes.size()));
            !s.ok()) {
          return absl::InvalidArgumentError(fmt::format("graph JSON: {}", s.message()));
        }
      }
      g->AddNodeUnchecked(std::move(spec), std::move(dtypes), std::move(shapes));
    }
    return g;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(fmt::format("graph JSON is malformed: {}", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("graph JSON: out of memory while loading the graph");
  } catch (const std::exception& e) {
    // No exception leaves a public function: anything else from the STL becomes a Status.
    return absl::InvalidArgumentError(fmt::format("graph JSON could not be loaded: {}", e.what()));
  }
}

namespace internal {

json AttrMapToJson(const AttrMap& attrs) {
  json j = json::object();
  for (const auto& [k, v] : attrs) j[k] = AttrToJson(v);
  return j;
}

StatusOr<AttrMap> AttrMapFromJson(const json& j, std::string_view what) {
  if (!j.is_object()) {
    return absl::DataLossError(fmt::format("{}: \"attrs\" is not an object", what));
  }
  AttrMap attrs;
  for (const auto& [k, v] : j.items()) {
    try {
      if (!v.is_object()) {
        return absl::DataLossError(fmt::format("{}: attribute \"{}\" is not an object", what, k));
      }
      auto a = AttrFromJson(v);
      if (!a.ok()) {
        return absl::DataLossError(
            fmt::format("{}: attribute \"{}\": {}", what, k, a.status().message()));
      }
      attrs[k] = *std::move(a);
    } catch (const std::exception& e) {
      return absl::DataLossError(
          fmt::format("{}: attribute \"{}\" is malformed: {}", what, k, e.what()));
    }
  }
  return attrs;
}

}  // namespace internal

}  // namespace recsdk
