// op_registry_test.cc: the op declarations (src/graph/op_registry.*: OpDef, one per op) and what is
// derived from them: input and output counts, attribute checks on the builder and JSON paths, the
// defaults every reader sees, the schema JSON.
#include "src/graph/op_registry.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "src/session/runtime.h"

namespace recsdk {
namespace {

std::string Msg(const Status& s) { return std::string(s.message()); }

TEST(OpRegistryTest, EveryRegisteredOpIsInTheSchemaJson) {
  internal::InitializeRuntime();  // core ops and the table ops
  const internal::OpRegistry& r = internal::OpRegistry::Global();
  const nlohmann::json schema = nlohmann::json::parse(r.SchemaJson());
  ASSERT_EQ(schema["ops"].size(), r.OpTypes().size());
  EXPECT_GT(r.OpTypes().size(), 70u);
  const nlohmann::json* matmul = nullptr;
  for (const auto& op : schema["ops"]) {
    if (op["type"] == "MatMul") matmul = &op;
  }
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ((*matmul)["inputs"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ((*matmul)["outputs"], nlohmann::json::array({"product"}));
  EXPECT_EQ((*matmul)["attrs"][0]["name"], "transpose_a");
  EXPECT_EQ((*matmul)["attrs"][0]["type"], "bool");
  EXPECT_EQ((*matmul)["attrs"][0]["default"]["value"], false);
  EXPECT_TRUE((*matmul)["differentiable"].get<bool>());
}

TEST(OpRegistryTest, InputCountsAreDerivedFromTheDeclaredInputs) {
  internal::InitializeRuntime();
  const internal::OpRegistry& r = internal::OpRegistry::Global();
  auto counts = [&](const char* type) {
    const internal::OpDef* d = r.Find(type);
    EXPECT_NE(d, nullptr) << type;
    return d == nullptr ? std::pair(-2, -2) : std::pair(d->min_inputs, d->max_inputs);
  };
  EXPECT_EQ(counts("MatMul"), std::pair(2, 2));
  EXPECT_EQ(counts("AddN"), std::pair(1, -1));
  EXPECT_EQ(counts("ApplyAdam"), std::pair(5, 6));  // the lr multiplier is optional
  EXPECT_EQ(counts("Placeholder"), std::pair(0, 0));
  EXPECT_EQ(counts("TableApply"), std::pair(4, -1));  // "rows_and_grads{2,}"
  EXPECT_EQ(counts("TableGradAggregate"), std::pair(3, -1));
}

// A declaration whose shape function adds another number of outputs than it declares is named.
TEST(OpRegistryTest, OutputCountMustMatchTheDeclaration) {
  internal::OpRegistry::Global().Register({.type = "TestTwoOutputsDeclaredOne",
                                           .inputs = {"x"},
                                           .outputs = {"y"},
                                           .shape_fn = [](internal::InferenceContext& c) {
                                             c.AddOutput(c.input_dtype(0), c.input_shape(0));
                                             c.AddOutput(c.input_dtype(0), c.input_shape(0));
                                             return absl::OkStatus();
                                           }});
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{2});
  root.WithOpName("two").AddNode("TestTwoOutputsDeclaredOne", {a});
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInternal) << g.status();
  EXPECT_NE(Msg(g.status()).find("\"two\" (TestTwoOutputsDeclaredOne): 2 outputs"),
            std::string::npos)
      << g.status();
}

TEST(OpRegistryDeathTest, MalformedDeclarationsAbortNamingTheOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(internal::OpRegistry::Global().Register(
                   {.type = "TestBadOrder", .inputs = {"x?", "y"}, .outputs = {"z"}}),
               "TestBadOrder.*\"y\": a required entry cannot follow an optional one");
  EXPECT_DEATH(internal::OpRegistry::Global().Register(
                   {.type = "TestBadDefault",
                    .outputs = {"z"},
                    .attrs = {internal::Attr("axis", internal::AttrType::kInt, 0.5)}}),
               "TestBadDefault.*\"axis\" is int but its default 0.5 is float");
}

TEST(OpRegistryDeathTest, ReadingAnUndeclaredAttributeAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{2, 2});
  Output mm = ops::MatMul(root.WithOpName("mm"), a, a);
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_DEATH((void)internal::NodeAttrs(*mm.node).Bool("transpose_c"),
               "op MatMul reads attribute \"transpose_c\".*\\[transpose_a, transpose_b\\]");
}

// Every optional attribute a builder leaves at its default reads, on the node, as the
// declaration's default: the builder either leaves it out or writes the declared value (a float
// parameter at the builder's float precision).
TEST(OpRegistryTest, DeclaredDefaultsReachTheBuilders) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{4, 4});
  Output ids = ops::Placeholder(root.WithOpName("ids"), DType::kInt64, Shape{3});
  // (The random sources' a and b are the caller's arguments; they are passed as the defaults so
  // that only the seed, which the builder defaults, is what is compared.)
  std::vector<Output> built = {
      ops::MatMul(root, x, x),
      ops::BatchMatMul(root, ops::Reshape(root, x, {1, 4, 4}), ops::Reshape(root, x, {1, 4, 4})),
      ops::LeakyRelu(root, x),
      ops::Gelu(root, x),
      ops::Softmax(root, x),
      ops::LogSoftmax(root, x),
      ops::Dropout(root, x, 0.5f),
      ops::Gather(root, x, ids),
      ops::ReduceSum(root, x),
      ops::ReduceMean(root, x),
      ops::ReduceMax(root, x),
      ops::RandomUniform(root, Shape{2}, DType::kFloat32, 0, 0),
      ops::RandomNormal(root, Shape{2}, DType::kFloat32, 0, 0),
      ops::TruncatedNormal(root, Shape{2}, DType::kFloat32, 0, 0),
  };
  ASSERT_TRUE(g.status().ok()) << g.status();
  int checked = 0;
  for (const Output& o : built) {
    const Node& n = *o.node;
    const internal::OpDef& def = *internal::OpRegistry::Global().Find(n.type());
    for (const internal::AttrDef& a : def.attrs) {
      if (a.required || a.default_value.type() == AttrValue::Type::kNone) continue;
      const AttrValue* v = n.FindAttr(a.name);
      if (v == nullptr) {
        ++checked;  // left out: every reader sees the declared default
        continue;
      }
      if (const double* f = v->get_if<double>()) {
        EXPECT_EQ(static_cast<float>(*f), static_cast<float>(*a.default_value.get_if<double>()))
            << n.type() << "." << a.name;
      } else {
        EXPECT_EQ(v->ToString(), a.default_value.ToString()) << n.type() << "." << a.name;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

// A node loaded from JSON without its optional attributes computes what the builder's node
// computes: both read the declared defaults (LeakyRelu's alpha 0.2, Softmax's axis -1).
TEST(OpRegistryTest, DeclaredDefaultsReachTheJsonPath) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  ops::LeakyRelu(root.WithOpName("leaky"), x);
  ops::Softmax(root.WithOpName("softmax"), x);
  ASSERT_TRUE(g.status().ok()) << g.status();
  nlohmann::json j = nlohmann::json::parse(g.ToJson());
  int stripped = 0;
  for (auto& node : j["nodes"]) {
    if (node["op"] == "LeakyRelu" || node["op"] == "Softmax") {
      stripped += static_cast<int>(node["attrs"].size());
      node["attrs"] = nlohmann::json::object();
    }
  }
  ASSERT_EQ(stripped, 2);
  auto loaded = Graph::FromJson(j.dump());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Node* leaky = (*loaded)->FindNode("leaky");
  ASSERT_NE(leaky, nullptr);
  EXPECT_EQ(leaky->FindAttr("alpha"), nullptr);
  EXPECT_EQ(internal::NodeAttrs(*leaky).Float("alpha"), 0.2);
  EXPECT_EQ(internal::NodeAttrs(*(*loaded)->FindNode("softmax")).Int("axis"), -1);

  Tensor in(DType::kFloat32, Shape{2, 3});
  const float values[] = {-1.5f, 0.25f, -3.0f, 2.0f, -0.5f, 1.0f};
  std::copy(values, values + 6, in.data<float>());
  auto built = Session::Create(g);
  auto from_json = Session::Create(**loaded);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  auto a = (*built)->Run({{"x", in}}, {"leaky", "softmax"});
  auto b = (*from_json)->Run({{"x", in}}, {"leaky", "softmax"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ((*a)[i].num_elements(), 6);
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ((*a)[i].data<float>()[k], (*b)[i].data<float>()[k]) << i << " " << k;
    }
  }
  EXPECT_FLOAT_EQ((*b)[0].data<float>()[0], -1.5f * 0.2f);
}

// The graph JSON of one MatMul node "mm" with `attrs`.
std::string MatMulJson(const nlohmann::json& attrs) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{2, 2});
  ops::MatMul(root.WithOpName("mm"), a, a);
  nlohmann::json j = nlohmann::json::parse(g.ToJson());
  for (auto& node : j["nodes"]) {
    if (node["name"] == "mm") node["attrs"] = attrs;
  }
  return j.dump();
}

TEST(OpRegistryTest, UnknownAttributeInJsonNamesTheOpTheAttributeAndTheAllowedOnes) {
  const auto loaded = Graph::FromJson(MatMulJson({{"tranpose_b", {{"type", 3}, {"value", true}}}}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m = Msg(loaded.status());
  EXPECT_NE(m.find("node \"mm\" (MatMul): unknown attribute \"tranpose_b\"; the op's attributes "
                   "are [transpose_a, transpose_b]"),
            std::string::npos)
      << m;
}

TEST(OpRegistryTest, MistypedAttributeInJsonNamesTheOpTheAttributeAndTheTypes) {
  // Tagged int (type 1) where the declaration says bool.
  auto loaded = Graph::FromJson(MatMulJson({{"transpose_a", {{"type", 1}, {"value", 1}}}}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(loaded.status())
                .find("node \"mm\" (MatMul): attribute \"transpose_a\" is int 1 but the op "
                      "expects bool"),
            std::string::npos)
      << loaded.status();
  // A value that does not match its own tag (bool "yes") names the node, its op and the attribute.
  loaded = Graph::FromJson(MatMulJson({{"transpose_a", {{"type", 3}, {"value", "yes"}}}}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(Msg(loaded.status()).find("node \"mm\" (MatMul): attribute \"transpose_a\""),
            std::string::npos)
      << loaded.status();
}

// A loaded node must list the outputs its declaration has: a kernel sets only those.
TEST(OpRegistryTest, JsonNodeWithOtherOutputsThanDeclaredIsAnError) {
  nlohmann::json j = nlohmann::json::parse(MatMulJson(nlohmann::json::object()));
  for (auto& node : j["nodes"]) {
    if (node["name"] == "mm") node["outputs"].push_back(node["outputs"][0]);
  }
  const auto loaded = Graph::FromJson(j.dump());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(loaded.status())
                .find("node \"mm\" (MatMul): 2 outputs, but the op's declaration has outputs "
                      "[product]"),
            std::string::npos)
      << loaded.status();
}

TEST(OpRegistryTest, MistypedAttributeIsAnErrorNamingNodeAttrAndType) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{2, 2});
  // Before the schema, "yes" silently read as false (Node::BoolAttr's fallback).
  root.WithOpName("mm").AddNode("MatMul", {a, a}, {{"transpose_a", "yes"}});
  ASSERT_FALSE(g.status().ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m = Msg(g.status());
  EXPECT_NE(m.find("\"mm\""), std::string::npos) << m;
  EXPECT_NE(m.find("\"transpose_a\""), std::string::npos) << m;
  EXPECT_NE(m.find("expects bool"), std::string::npos) << m;
  EXPECT_NE(m.find("string"), std::string::npos) << m;
}

TEST(OpRegistryTest, MissingRequiredAndUnknownAttributesAreErrors) {
  {
    Graph g;
    Scope root(&g);
    Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{4});
    root.WithOpName("r").AddNode("Reshape", {a}, {});
    ASSERT_FALSE(g.status().ok());
    EXPECT_NE(Msg(g.status()).find("required attribute \"shape\""), std::string::npos)
        << g.status();
  }
  {
    Graph g;
    Scope root(&g);
    Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{2, 2});
    root.WithOpName("mm").AddNode("MatMul", {a, a}, {{"tranpose_b", true}});
    ASSERT_FALSE(g.status().ok());
    const std::string m = Msg(g.status());
    EXPECT_NE(m.find("unknown attribute \"tranpose_b\""), std::string::npos) << m;
    EXPECT_NE(m.find("transpose_b"), std::string::npos) << m;  // the valid names are listed
  }
}

TEST(OpRegistryTest, IntIsAcceptedForAFloatAttributeAndReadTheSame) {
  Graph g;
  Scope root(&g);
  Output a = ops::Placeholder(root.WithOpName("a"), DType::kFloat32, Shape{3});
  Node* n = root.WithOpName("lr").AddNode("LeakyRelu", {a}, {{"alpha", int64_t{1}}});
  ASSERT_TRUE(g.status().ok()) << g.status();
  EXPECT_EQ(n->FloatAttr("alpha"), 1.0);
}

TEST(OpRegistryTest, ValidateAttrsChecksAgainstTheDeclaredSchema) {
  const internal::OpDef* def = internal::OpRegistry::Global().Find("Dropout");
  ASSERT_NE(def, nullptr);
  EXPECT_TRUE(internal::ValidateAttrs(*def, "d", {{"rate", 0.5}, {"seed", int64_t{3}}}).ok());
  const Status bad = internal::ValidateAttrs(*def, "d", {{"rate", 0.5}, {"seed", 1.5}});
  EXPECT_NE(Msg(bad).find("attribute \"seed\" is float 1.5 but the op expects int"),
            std::string::npos)
      << bad;
}

}  // namespace
}  // namespace recsdk
