// dump_report_html_test.cc: the HTML report of compare-dumps (src/precision/dump_report_html.cc)
// on two runs of one model with a planted difference, as dump_compare_test.cc plants it (one run
// built with another parameter): here a LeakyRelu's alpha, so the culprit has a producer and a
// consumer, and the consumer's name is hostile HTML.
#include "src/precision/dump_report_html.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

using internal::Env;
using testing::Floats;
using testing::FreshDir;
using testing::MakeSession;
using testing::ReadText;
using testing::RunTool;

constexpr char kHostile[] = "<script>alert(\"x\")</script>";

// Count: occurrences of `needle` in `text`.
size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// DumpRun: scale = x * two; act = LeakyRelu(scale, alpha); <hostile> = Square(act);
// z = ReduceSum(<hostile>); one step dumped (inputs and outputs) into a fresh `name`.
std::string DumpRun(const std::string& name, float alpha) {
  const std::string dir = FreshDir(name);
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{8});
  Output scale = ops::Mul(root.WithOpName("scale"), x, ops::Const(root.WithOpName("two"), 2.0f));
  Output act = ops::LeakyRelu(root.WithOpName("act"), scale, alpha);
  Output sq = ops::Square(root.WithOpName(kHostile), act);
  ops::ReduceSum(root.WithOpName("z"), sq);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  auto session = MakeSession(g, config);
  EXPECT_TRUE(session->Run({{"x", Floats({-4, -3, -2, -1, 1, 2, 3, 4})}}, {"z"}).ok());
  return dir;
}

TEST(DumpReportHtmlTest, NamesTheCulpritDrawsItsNeighbourhoodAndEscapesNames) {
  const std::string a = DumpRun("html_a", 0.2f);
  // A negative slope turns the negative half around: cosine well below 0.98.
  const std::string b = DumpRun("html_b", -2.0f);
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->culprit_at.has_value()) << c->Text();
  ASSERT_EQ(c->culprit_at->op, "act") << c->Text();

  auto html = internal::DumpReportHtml(Env::Default(), *c, a, b);
  ASSERT_TRUE(html.ok()) << html.status();
  const std::string& h = *html;
  // The summary names the culprit as the terminal report does.
  EXPECT_NE(h.find("<td id=\"culprit\"><span class=\"culprit-name\">step 0: op &quot;act&quot; "
                   "(LeakyRelu)</span>"),
            std::string::npos);
  // One table row per compared port.
  EXPECT_EQ(Count(h, "<tr class=\"row "), c->rows.size());
  EXPECT_GT(c->rows.size(), 6u);
  // The graph: the culprit highlighted, its producer and its consumer beside it, and the feed
  // two hops up drawn as not dumped.
  ASSERT_EQ(Count(h, "<svg class=\"graph\""), 1u);
  const std::string graph = h.substr(h.find("<svg class=\"graph\""));
  EXPECT_NE(graph.find("<g class=\"node culprit\"><title>act (LeakyRelu)</title>"),
            std::string::npos);
  EXPECT_NE(graph.find("<g class=\"node\"><title>scale (Mul)</title>"), std::string::npos);
  EXPECT_NE(graph.find("<g class=\"node\"><title>&lt;script&gt;alert(&quot;x&quot;)&lt;/"
                       "script&gt; (Square)</title>"),
            std::string::npos);
  EXPECT_NE(graph.find("<g class=\"node external\"><title>x ("), std::string::npos);
  EXPECT_EQ(Count(graph.substr(0, graph.find("</svg>")), "<line class=\"edge\""), 5u);
  // Two histograms over the same bins.
  EXPECT_EQ(Count(h, "<svg class=\"histogram\""), 2u);
  EXPECT_GT(Count(h, "class=\"hist-bar left\""), 0u);
  EXPECT_GT(Count(h, "class=\"hist-bar right\""), 0u);
  // The hostile name never comes out as markup; the page's only script is its own.
  EXPECT_EQ(h.find(kHostile), std::string::npos);
  EXPECT_EQ(h.find("<script>alert"), std::string::npos);
  EXPECT_NE(h.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(Count(h, "<script"), 1u);
  // Self-contained: nothing fetched from elsewhere.
  EXPECT_EQ(h.find("src="), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("@import"), std::string::npos);
}

TEST(DumpReportHtmlTest, AgreeingDumpsHaveNoGraphAndStillAPage) {
  const std::string a = DumpRun("html_same_a", 0.2f);
  const std::string b = DumpRun("html_same_b", 0.2f);
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  auto html = internal::DumpReportHtml(Env::Default(), *c, a, b);
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_NE(html->find("all compared tensors agree"), std::string::npos);
  EXPECT_EQ(Count(*html, "<tr class=\"row ok"), c->rows.size());
  EXPECT_EQ(html->find("<svg"), std::string::npos);
}

TEST(DumpReportHtmlTest, WriteIsAtomicAndAFailureNamesThePath) {
  const std::string a = DumpRun("html_write_a", 0.2f);
  const std::string b = DumpRun("html_write_b", -2.0f);
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string out = FreshDir("html_write") + "/report.html";
  ASSERT_TRUE(internal::WriteDumpReportHtml(Env::Default(), *c, a, b, out).ok());
  EXPECT_NE(ReadText(out).find("</html>"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  const std::string bad = FreshDir("html_write") + "/no/such/dir/report.html";
  Status s = internal::WriteDumpReportHtml(Env::Default(), *c, a, b, bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(bad), std::string::npos) << s;
}

TEST(DumpReportHtmlTest, AWideNeighbourhoodIsCapped) {
  // "act" feeds 60 consumers: the picture keeps the nearest kMaxReportGraphNodes ops and counts
  // the rest.
  auto run = [](const std::string& name, float alpha) {
    const std::string dir = FreshDir(name);
    Graph g;
    Scope root(&g);
    Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{4});
    Output act = ops::LeakyRelu(root.WithOpName("act"), x, alpha);
    std::vector<Output> squares;
    for (int i = 0; i < 60; ++i) {
      squares.push_back(ops::Square(root.WithOpName("sq" + std::to_string(i)), act));
    }
    ops::AddN(root.WithOpName("sum"), squares);
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = dir;
    config.dump_mode = "all";
    auto session = MakeSession(g, config);
    EXPECT_TRUE(session->Run({{"x", Floats({-2, -1, 1, 2})}}, {"sum"}).ok());
    return dir;
  };
  const std::string a = run("html_wide_a", 0.2f);
  const std::string b = run("html_wide_b", -2.0f);
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->culprit_at.has_value()) << c->Text();
  auto html = internal::DumpReportHtml(Env::Default(), *c, a, b);
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_EQ(Count(*html, "<g class=\"node"), static_cast<size_t>(internal::kMaxReportGraphNodes));
  // Within two hops: x, act, 60 squares and "sum"; 39 ops beside act fit.
  EXPECT_NE(html->find("23 more ops within 2 hops left out"), std::string::npos) << *html;
}

TEST(DumpReportHtmlTest, FusedOpsAreFlaggedWithWhatTheyReplace) {
  internal::DumpComparison c;
  internal::TensorComparison row;
  row.op = "dense/fused";
  row.type = "FusedDense";
  row.direction = "output";
  row.fused = "RIGHT FusedDense replaces MatMul \"mm\" + BiasAdd \"dense/fused\"";
  c.rows.push_back(row);
  // A dump written before manifests recorded fused_from: flagged by its type.
  row.op = "concat";
  row.type = "TableGatherConcat";
  row.fused = "";
  c.rows.push_back(row);
  auto html = internal::DumpReportHtml(Env::Default(), c, "l", "r");
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_NE(html->find("\"dense/fused\" (FusedDense): RIGHT FusedDense replaces MatMul "
                       "&quot;mm&quot; + BiasAdd &quot;dense/fused&quot;"),
            std::string::npos)
      << *html;
  EXPECT_NE(html->find("\"concat\" (TableGatherConcat): fused by a fusion pass (this dump does "
                       "not record"),
            std::string::npos)
      << *html;
  EXPECT_NE(html->find("No culprit"), std::string::npos);
}

TEST(DumpReportHtmlTest, HistogramsOfExtremeValuesStayInTheirBins) {
  // "act" is a * b in LEFT and a / b in RIGHT (the planted kernel): LEFT's output spans about
  // +-1.08e308, so the bins' width (hi - lo) overflows a double unless computed in halves, and a
  // position (x - lo) / (hi - lo) would be Inf / Inf. The inputs stay small enough for their
  // cosine.
  auto run = [&](const std::string& name, bool divide) {
    const std::string dir = FreshDir(name);
    Graph g;
    Scope root(&g);
    auto a = Tensor::FromValues<double>(Shape{2}, {9e153, -9e153});
    EXPECT_TRUE(a.ok()) << a.status();
    Output ca = ops::Const(root.WithOpName("a"), *a);
    Output cb = ops::Const(root.WithOpName("b"), 1.2e154);
    if (divide) {
      ops::Div(root.WithOpName("act"), ca, cb);
    } else {
      ops::Mul(root.WithOpName("act"), ca, cb);
    }
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = dir;
    config.dump_mode = "all";
    auto session = MakeSession(g, config);
    EXPECT_TRUE(session->Run({}, {"act"}).ok());
    return dir;
  };
  const std::string l = run("html_big_l", false);
  const std::string r = run("html_big_r", true);
  auto c = internal::CompareDumps(Env::Default(), l, r, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->culprit_at.has_value()) << c->Text();
  ASSERT_EQ(c->culprit_at->op, "act") << c->Text();
  auto html = internal::DumpReportHtml(Env::Default(), *c, l, r);
  ASSERT_TRUE(html.ok()) << html.status();
  // LEFT: one value in the first bin, one in the last; RIGHT: +-0.75, both in the middle bin.
  EXPECT_EQ(Count(*html, "class=\"hist-bar left\""), 2u) << *html;
  EXPECT_EQ(Count(*html, "class=\"hist-bar right\" x=\"230.0\""), 1u) << *html;
}

TEST(DumpReportHtmlTest, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(internal::HtmlEscape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&#39;&#xFFFD;");
}

TEST(DumpReportHtmlTest, ToolExitStatusIsUnchangedWithHtml) {
  if (std::getenv("RECSDK_TOOL") == nullptr) GTEST_SKIP() << "RECSDK_TOOL is not set";
  const std::string a = DumpRun("html_tool_a", 0.2f);
  const std::string b = DumpRun("html_tool_b", 0.2f);
  const std::string d = DumpRun("html_tool_d", -2.0f);
  const std::string dir = FreshDir("html_tool_out");
  auto [same_rc, same] = RunTool("compare-dumps " + a + " " + b + " --html " + dir + "/same.html");
  EXPECT_EQ(same_rc, 0) << same;
  EXPECT_NE(ReadText(dir + "/same.html").find("all compared tensors agree"), std::string::npos);
  auto [diff_rc, diff] = RunTool("compare-dumps " + a + " " + d + " --html " + dir +
                                 "/diff.html --csv " + dir + "/diff.csv");
  EXPECT_EQ(diff_rc, 1) << diff;
  EXPECT_NE(ReadText(dir + "/diff.html").find("node culprit"), std::string::npos);
  EXPECT_NE(ReadText(dir + "/diff.csv").find("\"act\",LeakyRelu,output"), std::string::npos);
  const std::string bad = dir + "/missing/r.html";
  auto [bad_rc, bad_out] = RunTool("compare-dumps " + a + " " + d + " --html " + bad);
  EXPECT_EQ(bad_rc, 2) << bad_out;
  EXPECT_NE(bad_out.find("--html: HTML report \"" + bad + "\" not written"), std::string::npos)
      << bad_out;
  EXPECT_EQ(RunTool("compare-dumps " + a + " " + d + " --html").first, 2);
}

}  // namespace
}  // namespace recsdk
