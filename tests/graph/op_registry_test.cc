// op_registry_test.cc: the op attribute schemas (src/graph/op_registry.*, ops/attr_schemas.cc).
#include "src/graph/op_registry.h"

#include <gtest/gtest.h>

#include "recsdk/recsdk.h"
#include "src/session/runtime.h"

namespace recsdk {
namespace {

std::string Msg(const Status& s) { return std::string(s.message()); }

TEST(OpRegistryTest, EveryRegisteredOpDeclaresAnAttributeSchema) {
  internal::InitializeRuntime();  // core ops and the table ops
  const internal::OpRegistry& r = internal::OpRegistry::Global();
  std::vector<std::string> missing;
  for (const std::string& type : r.OpTypes()) {
    if (!r.Find(type)->attrs_declared) missing.push_back(type);
  }
  EXPECT_TRUE(missing.empty()) << "ops without an attribute schema: "
                               << fmt::format("{}", fmt::join(missing, ", "));
  EXPECT_GT(r.OpTypes().size(), 70u);
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
