// pass_manager_test.cc: the pass manager (src/session/passes/): the documented order, validation
// after each pass, graph_run_mode 0, and op_debug_level's kernel_meta.
#include "src/session/passes/pass_manager.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"
#include "tests/session/test_models.h"

namespace recsdk {
namespace {

using testing::ValueOrDie;

std::string Msg(const Status& s) { return std::string(s.message()); }

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Two in-graph lookups of one table: group_lookups has work to do.
void BuildTwoLookups(Graph* g) {
  Scope s(g);
  SparseTable t =
      ValueOrDie(create_table(s, testing::SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions oa, ob;
  oa.name = "a";
  ob.name = "b";
  ValueOrDie(sparse_lookup(s, t, DatasetColumn(s, "A", DType::kInt64, Shape{2, 1}), oa));
  ValueOrDie(sparse_lookup(s, t, DatasetColumn(s, "B", DType::kInt64, Shape{2, 1}), ob));
}

// TestDevice: the device sessions made for "cpu" run on (RECSDK_TEST_DEVICE: the separate_memory
// label runs this test there too, where the placement pass also runs).
std::string TestDevice() {
  const char* d = std::getenv("RECSDK_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

std::vector<std::string> WithPlacement(std::vector<std::string> passes) {
  if (TestDevice() != "cpu") passes.push_back("placement");
  return passes;
}

TEST(PassManagerTest, SessionPassesRunInTheDocumentedOrder) {
  const auto passes = internal::PassRegistry::Global().Passes(internal::PassPhase::kSession);
  ASSERT_GE(passes.size(), 2u);
  EXPECT_EQ(passes[0]->name, "graph_run_mode");
  EXPECT_EQ(passes[1]->name, "group_lookups");
  for (size_t i = 1; i < passes.size(); ++i) EXPECT_LT(passes[i - 1]->order, passes[i]->order);

  Graph g;
  BuildTwoLookups(&g);
  auto training = ValueOrDie(Session::Create(g));
  EXPECT_EQ(training->applied_passes(), WithPlacement({"group_lookups"}));
  SessionConfig inference;
  inference.graph_run_mode = 0;
  auto serving = ValueOrDie(Session::Create(g, inference));
  EXPECT_EQ(serving->applied_passes(), WithPlacement({"graph_run_mode", "group_lookups"}));
}

TEST(PassManagerTest, InferenceModeRefusesUpdatesAndMakesLookupsReadOnly) {
  testing::LinearModel m;
  testing::BuildLinearModel(&m);
  SessionConfig inference;
  inference.graph_run_mode = 0;
  auto refused = Session::Create(m.graph, inference);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(Msg(refused.status()).find("graph_run_mode 0"), std::string::npos);
  EXPECT_NE(Msg(refused.status()).find("(ReduceSumGrad) is a gradient op"), std::string::npos)
      << refused.status();
  // Training mode accepts the same graph.
  EXPECT_TRUE(Session::Create(m.graph).ok());

  Graph g;
  BuildTwoLookups(&g);
  auto serving = ValueOrDie(Session::Create(g, inference));
  int lookups = 0;
  for (const Node* n : serving->graph().nodes()) {
    if (n->type() == "TableLookupGroup" || n->type() == "TableLookupForward") {
      ++lookups;
      EXPECT_FALSE(n->BoolAttr("is_train", true)) << n->name();
    }
  }
  EXPECT_EQ(lookups, 3);  // one group, two forwards
  // Unseen keys read the default value and are not inserted.
  FeedList feeds = {{"A", testing::Ids(2, 1, {5, 6})}, {"B", testing::Ids(2, 1, {5, 7})}};
  ASSERT_TRUE(serving->Run(feeds, {"a", "b"}).ok());
  EmbeddingTable* table = ValueOrDie(LookupTable(*serving, "t"));
  EXPECT_FALSE(table->ReadRow(5).ok());
}

// Test passes that break the invariants, run through RunPass.
class SetBadAttrPass final : public internal::GraphPass {
 public:
  Status Run(const internal::PassContext&, Graph* graph) override {
    graph->FindNode("fc/MatMul")->SetAttr("transpose_a", std::string("yes"));
    return absl::OkStatus();
  }
};
class BreakOrderPass final : public internal::GraphPass {
 public:
  Status Run(const internal::PassContext&, Graph* graph) override {
    Node* mm = graph->FindNode("fc/MatMul");
    mm->set_input(0, graph->FindNode("loss")->output(0));
    return absl::OkStatus();
  }
};

TEST(PassManagerTest, ValidationAfterEachPassNamesThePassAndTheNode) {
  internal::PassRegistry& r = internal::PassRegistry::Global();
  if (r.Find("test_bad_attr") == nullptr) {
    ASSERT_TRUE(r.Register({"test_bad_attr", 5001, internal::PassPhase::kExplicit, "test",
                            [] { return std::make_unique<SetBadAttrPass>(); }})
                    .ok());
    ASSERT_TRUE(r.Register({"test_break_order", 5002, internal::PassPhase::kExplicit, "test",
                            [] { return std::make_unique<BreakOrderPass>(); }})
                    .ok());
  }
  // A duplicate is refused.
  EXPECT_FALSE(
      r.Register({"test_bad_attr", 5003, internal::PassPhase::kExplicit, "", nullptr}).ok());
  {
    testing::LinearModel m;
    testing::BuildLinearModel(&m);
    const Status s = internal::RunPass("test_bad_attr", SessionConfig{}, &m.graph);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(Msg(s).find("after pass \"test_bad_attr\""), std::string::npos) << s;
    EXPECT_NE(Msg(s).find("\"fc/MatMul\""), std::string::npos) << s;
    EXPECT_NE(Msg(s).find("expects bool"), std::string::npos) << s;
  }
  {
    testing::LinearModel m;
    testing::BuildLinearModel(&m);
    const Status s = internal::RunPass("test_break_order", SessionConfig{}, &m.graph);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(Msg(s).find("after pass \"test_break_order\""), std::string::npos) << s;
    EXPECT_NE(Msg(s).find("not topologically ordered"), std::string::npos) << s;
  }
  EXPECT_EQ(internal::RunPass("nope", SessionConfig{}, nullptr).code(),
            absl::StatusCode::kNotFound);
}

TEST(PassManagerTest, OpDebugLevelWritesKernelMeta) {
  const std::string dir = testing::TempDir() + "/kernel_meta_test";
  std::filesystem::remove_all(dir);
  Graph g;
  BuildTwoLookups(&g);
  SessionConfig c;
  c.op_debug_level = 3;
  c.kernel_meta_dir = dir;
  ASSERT_TRUE(Session::Create(g, c).ok());
  const std::string passes = ReadFile(dir + "/passes.txt");
  EXPECT_NE(passes.find("graph_run_mode skipped"), std::string::npos) << passes;
  EXPECT_NE(passes.find("group_lookups ran"), std::string::npos) << passes;
  const std::string ops = ReadFile(dir + "/ops.txt");
  EXPECT_NE(ops.find("type: TableLookupGroup"), std::string::npos) << ops;
  EXPECT_NE(ops.find("pass: group_lookups (created)"), std::string::npos) << ops;
  EXPECT_NE(ops.find("pass: group_lookups (rewritten)"), std::string::npos) << ops;
  EXPECT_NE(ops.find("kernel: TableGather on " + TestDevice()), std::string::npos) << ops;
  // Level 0 writes nothing.
  std::filesystem::remove_all(dir);
  c.op_debug_level = 0;
  ASSERT_TRUE(Session::Create(g, c).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace recsdk
