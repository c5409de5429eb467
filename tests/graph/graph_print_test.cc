// graph_print_test.cc: GraphText and GraphDot (src/graph/graph_print.h), and `recsdk dump-graph`
// on a graph JSON file and on an exported model, with its errors (exit status 2, the file named).
#include "src/graph/graph_print.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

// y = MatMul(x, w), and r = RandomUniform ordered after y by a control edge.
void BuildSmallGraph(Graph* g) {
  Scope s(g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 2});
  Output w = ops::Const(s.WithOpName("w"), *Tensor::FromValues<float>(Shape{2, 1}, {1.0f, -1.0f}));
  Output y = ops::MatMul(s.WithOpName("y"), x, w);
  Output r = ops::RandomUniform(s.WithOpName("r"), Shape{3}, DType::kFloat32, -1.0, 1.0, 5);
  r.node->AddControlInput(y.node);
  ASSERT_TRUE(s.ok()) << s.status();
}

TEST(GraphPrintTest, TextListsEveryNodeWithItsTypeInputsAndOutputs) {
  Graph g;
  BuildSmallGraph(&g);
  const std::string text = internal::GraphText(g);
  EXPECT_NE(text.find("graph: 4 nodes\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x = Placeholder() -> float32[?,2]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("w = Const() -> float32[2,1]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("y = MatMul(x:0, w:0) -> float32[?,1]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("r = RandomUniform(^y) -> float32[3]\n"), std::string::npos) << text;
  // Producers before consumers.
  EXPECT_LT(text.find("x = "), text.find("y = "));
}

TEST(GraphPrintTest, DotHasANodePerOpAndAnEdgePerInputWithNamesEscaped) {
  Graph g;
  BuildSmallGraph(&g);
  Scope s(&g);
  ops::Identity(s.WithOpName("say \"hi\"\\"), ops::Const(s.WithOpName("c"), 1.0f));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string dot = internal::GraphDot(g);
  EXPECT_EQ(dot.rfind("digraph recsdk {\n", 0), 0u) << dot;
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
  const int x = g.FindNode("x")->id(), w = g.FindNode("w")->id(), y = g.FindNode("y")->id(),
            r = g.FindNode("r")->id();
  EXPECT_NE(dot.find(fmt::format("n{} [label=\"y\\nMatMul\"];", y)), std::string::npos) << dot;
  EXPECT_NE(dot.find(fmt::format("n{} -> n{};", x, y)), std::string::npos) << dot;
  EXPECT_NE(dot.find(fmt::format("n{} -> n{};", w, y)), std::string::npos) << dot;
  EXPECT_NE(dot.find(fmt::format("n{} -> n{} [style=dashed];", y, r)), std::string::npos) << dot;
  EXPECT_NE(dot.find("[label=\"say \\\"hi\\\"\\\\\\nIdentity\"]"), std::string::npos) << dot;
}

TEST(GraphPrintTest, ToolPrintsAGraphFileAndAnExportedModelAndNamesBadFiles) {
  const std::string dir = testing::FreshDir("dump_graph");
  Graph g;
  BuildSmallGraph(&g);
  { std::ofstream(dir + "/graph.json") << g.ToJson(); }
  auto [rc, out] = testing::RunTool("dump-graph " + dir + "/graph.json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, internal::GraphText(g));
  std::tie(rc, out) = testing::RunTool("dump-graph " + dir + "/graph.json --dot");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, internal::GraphDot(g));

  // An exported model: its graph.json is checked against serving.json first.
  Graph model;
  Scope s(&model);
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kFloat32, Shape{2, 2});
  Variable v = Variable::Make(s, "v", Shape{2, 1});
  ops::MatMul(s.WithOpName("out"), ids, v);
  Node* init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
  auto session = Session::Create(model, SessionConfig{});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init}).ok());
  const std::string bundle = dir + "/bundle";
  ASSERT_TRUE(ExportSavedModel(**session, bundle, {{"ids"}, {"out"}}).ok());
  std::tie(rc, out) = testing::RunTool("dump-graph " + bundle);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("out = MatMul(ids:0, "), std::string::npos) << out;

  // A corrupted bundle graph, a file that is not a graph, a missing path: exit 2, named.
  { std::ofstream(bundle + "/graph.json", std::ios::app) << " "; }
  std::tie(rc, out) = testing::RunTool("dump-graph " + bundle);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(bundle + "/graph.json"), std::string::npos) << out;
  EXPECT_NE(out.find("export the model again"), std::string::npos) << out;
  { std::ofstream(dir + "/bad.json") << "{\"nodes\": ["; }
  std::tie(rc, out) = testing::RunTool("dump-graph " + dir + "/bad.json");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(dir + "/bad.json"), std::string::npos) << out;
  std::tie(rc, out) = testing::RunTool("dump-graph " + dir + "/missing.json");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  std::tie(rc, out) = testing::RunTool("dump-graph");
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace recsdk
