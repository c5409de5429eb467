// dump_compare_test.cc: compare-dumps (src/precision/dump_compare.cc) on two runs of one model
// with a planted difference: the op that makes it is named, not its consumers.
#include "src/precision/dump_compare.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/precision/dump_reader.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

using internal::Env;
using testing::BuildLogModel;
using testing::Floats;
using testing::FreshDir;
using testing::MakeSession;
using testing::RunTool;

// DumpRun: two steps of BuildLogModel(three) fed `x`, dumped with `mode` into a fresh `name`.
std::string DumpRun(const std::string& name, float three, std::vector<float> x,
                    const std::string& mode = "all") {
  const std::string dir = FreshDir(name);
  Graph g;
  BuildLogModel(&g, three);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = mode;
  auto session = MakeSession(g, config);
  for (int step = 0; step < 2; ++step) {
    EXPECT_TRUE(session->Run({{"x", Floats(x)}}, {"scope/z"}).ok());
  }
  return dir;
}

TEST(DumpCompareTest, IdenticalRunsAgree) {
  const std::string a = DumpRun("same_a", 3.0f, {1, 2});
  const std::string b = DumpRun("same_b", 3.0f, {1, 2});
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->all_agree()) << c->Text();
  EXPECT_FALSE(c->culprit.has_value());
  EXPECT_EQ(c->rows.size(), 2u * 6);  // per step: three out, y in 2 + out, z in + out
  for (const auto& r : c->rows) {
    EXPECT_DOUBLE_EQ(r.cosine, 1.0) << r.op;
    EXPECT_EQ(r.max_abs, 0.0);
    EXPECT_EQ(r.first_diff, -1);
  }
}

TEST(DumpCompareTest, ThePerturbedOpIsTheCulpritNotItsConsumers) {
  for (const char* mode : {"all", "output"}) {
    const std::string a = DumpRun(std::string("culprit_a_") + mode, 3.0f, {1, -2}, mode);
    // "three" is 3 in one run and -3 in the other: y and z differ too, but their inputs differ.
    const std::string b = DumpRun(std::string("culprit_b_") + mode, -3.0f, {1, -2}, mode);
    auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->all_agree());
    ASSERT_TRUE(c->culprit.has_value()) << mode << "\n" << c->Text();
    EXPECT_EQ(*c->culprit, "step 0: op \"three\" (Const)") << mode;
    const std::string text = c->Text();
    EXPECT_NE(text.find("first op whose inputs agree but outputs differ: step 0: op \"three\""),
              std::string::npos)
        << text;
    for (const auto& r : c->rows) {
      if (r.op == "y" && r.direction == "output") {
        EXPECT_FALSE(r.agree);
        EXPECT_NEAR(r.cosine, -1.0, 1e-6);
        EXPECT_EQ(r.first_diff, 0);
        EXPECT_NEAR(r.max_abs, 12.0, 1e-5);  // {3, -6} vs {-3, 6}
      }
    }
    EXPECT_NE(c->Csv().find("step,op,type,direction,port"), std::string::npos);
  }
}

TEST(DumpCompareTest, ADifferentFeedIsNotBlamedOnAnOp) {
  const std::string a = DumpRun("feed_a", 3.0f, {1, 2});
  const std::string b = DumpRun("feed_b", 3.0f, {2, 1});
  auto c = internal::CompareDumps(Env::Default(), a, b, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->all_agree());
  EXPECT_FALSE(c->culprit.has_value()) << c->Text();
  const std::string text = c->Text();
  EXPECT_NE(text.find("op \"y\" (Mul) differs, but so does what it was given from outside the "
                      "dump: input 0 from \"x:0\""),
            std::string::npos)
      << text;
}

TEST(DumpCompareTest, BadArgumentsAreErrorsNamingTheFix) {
  const std::string a = DumpRun("args_a", 3.0f, {1, 2});
  EXPECT_EQ(internal::CompareDumps(Env::Default(), a, a, 1.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(internal::CompareDumps(Env::Default(), a, a + "/missing", 0.98).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DumpCompareTest, TwoSessionsInOneDumpPathAreNotMixed) {
  // Two sessions of one process dump under one dump_path (graph ids apart): each step number is
  // compared once, and the dump left out is named.
  const std::string shared = FreshDir("two_sessions");
  for (int i = 0; i < 2; ++i) {
    Graph g;
    BuildLogModel(&g);
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = shared;
    auto session = MakeSession(g, config);
    ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  }
  const std::string other = DumpRun("two_sessions_other", 3.0f, {1, 2}, "output");
  auto c = internal::CompareDumps(Env::Default(), shared, other, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->all_agree()) << c->Text();
  EXPECT_EQ(c->rows.size(), 3u);  // step 0's three outputs, once
  EXPECT_NE(c->Text().find("left out"), std::string::npos) << c->Text();
}

// float64 tensors with values past 1e154: their squares would overflow a plain sum, making the
// cosine NaN and two equal tensors "differ".
TEST(DumpCompareTest, HugeFloat64ValuesCompareWithoutOverflow) {
  auto payload = [](std::vector<double> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  };
  internal::DumpTensor t;
  t.dtype = "float64";
  t.shape = {3};
  internal::TensorComparison same;
  const std::string big = payload({1e200, -2e200, 3e250});
  internal::CompareTensors(t, big, t, big, 0.98, &same);
  EXPECT_TRUE(same.agree) << same.cosine;
  EXPECT_DOUBLE_EQ(same.cosine, 1.0);
  internal::TensorComparison opposite;
  internal::CompareTensors(t, big, t, payload({-1e200, 2e200, -3e250}), 0.98, &opposite);
  EXPECT_FALSE(opposite.agree);
  EXPECT_DOUBLE_EQ(opposite.cosine, -1.0);
}

TEST(DumpCompareTest, ToolExitStatus) {
  if (std::getenv("RECSDK_TOOL") == nullptr) GTEST_SKIP() << "RECSDK_TOOL is not set";
  const std::string a = DumpRun("tool_a", 3.0f, {1, 2});
  const std::string b = DumpRun("tool_b", 3.0f, {1, 2});
  const std::string c = DumpRun("tool_c", 3.5f, {1, 2});
  auto [same_rc, same] = RunTool("compare-dumps " + a + " " + b);
  EXPECT_EQ(same_rc, 0) << same;
  EXPECT_NE(same.find("compared tensors agree"), std::string::npos) << same;
  // 3 vs 3.5 scales every tensor: cosine similarity 1, so by the spec's measure they agree.
  auto [scaled_rc, scaled] = RunTool("compare-dumps " + a + " " + c + " --threshold 0.98");
  EXPECT_EQ(scaled_rc, 0) << scaled;
  const std::string csv = FreshDir("tool_csv") + "/out.csv";
  auto [neg_rc, neg] =
      RunTool("compare-dumps " + a + " " + DumpRun("tool_d", -3.0f, {1, 2}) + " --csv " + csv);
  EXPECT_EQ(neg_rc, 1) << neg;
  EXPECT_NE(neg.find("op \"three\""), std::string::npos) << neg;
  EXPECT_NE(testing::ReadText(csv).find("\"three\",Const,output,0,1"), std::string::npos);
  EXPECT_EQ(RunTool("compare-dumps " + a).first, 2);
  EXPECT_EQ(RunTool("compare-dumps " + a + " " + b + " --threshold x").first, 2);
  EXPECT_EQ(RunTool("compare-dumps " + a + " " + a + "/missing").first, 2);
}

// DenseRun: out = 2 * relu(x w + b) (ops "dense/mm", "dense/ba", "dense/relu", "out"), one step
// dumped with dump_mode all into a fresh `name`; with `fuse`, the fuse_dense pass makes
// "dense/relu" one FusedDense; with `perturb`, that op's kernel is perturbed (a planted fault).
std::string DenseRun(const std::string& name, bool fuse, bool perturb) {
  const std::string dir = FreshDir(name);
  auto build = [](Graph* g) {
    Scope s(g);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2, 3});
    Output w = ops::Const(s.WithOpName("w"),
                          *Tensor::FromValues<float>(Shape{3, 2}, {1, -2, 3, 4, -5, 6}));
    Output b = ops::Const(s.WithOpName("b"), *Tensor::FromValues<float>(Shape{2}, {0.5f, -1}));
    Output mm = ops::MatMul(s.WithOpName("dense/mm"), x, w);
    Output relu =
        ops::Relu(s.WithOpName("dense/relu"), ops::BiasAdd(s.WithOpName("dense/ba"), mm, b));
    ops::Mul(s.WithOpName("out"), relu, ops::Const(s.WithOpName("two"), 2.0f));
  };
  {
    Graph g;  // registers the CPU kernels before one is perturbed
    build(&g);
    MakeSession(g, SessionConfig());
  }
  std::optional<testing::ScopedPerturbedKernel> perturbed;
  if (perturb) perturbed.emplace("FusedDense");
  Graph g;
  build(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  if (fuse) config.enable_scope_fusion_passes = "fuse_dense";
  auto session = MakeSession(g, config);
  const Tensor x = *Tensor::FromValues<float>(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(session->Run({{"x", x}}, {"out"}).ok());
  return dir;
}

// compare-dumps between an unfused run and one with fuse_dense: the fused op's rows say it is
// fused and what it replaced (table, CSV, tool output), the ops it replaced are noted as fused
// rather than missing, and a fault in the fused kernel names the fused op as the culprit (its
// inputs, the chain's, are compared with what the other side's chain read, not port by port
// against the Relu's).
TEST(DumpCompareTest, FusedOpsAreFlaggedWithTheOpsTheyReplaced) {
  const std::string plain = DenseRun("fused_plain", false, false);
  const std::string fused = DenseRun("fused_fused", true, false);
  auto c = internal::CompareDumps(Env::Default(), plain, fused, 0.98);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->all_agree()) << c->Text();
  const std::string want =
      "RIGHT FusedDense replaces MatMul \"dense/mm\" + BiasAdd \"dense/ba\" + Relu \"dense/relu\"";
  int fused_rows = 0;
  for (const auto& r : c->rows) {
    if (r.op == "dense/relu") {
      EXPECT_EQ(r.fused, want);
      ++fused_rows;
    } else {
      EXPECT_EQ(r.fused, "") << r.op;
    }
  }
  // Its three inputs (x, w, b: compared with what LEFT's MatMul and BiasAdd read) and its output.
  EXPECT_EQ(fused_rows, 4);
  const std::string text = c->Text();
  EXPECT_NE(text.find("[fused: " + want + "]"), std::string::npos) << text;
  EXPECT_NE(text.find("op \"dense/mm\" (MatMul) only in LEFT: RIGHT fused it into \"dense/relu\" "
                      "(FusedDense)"),
            std::string::npos)
      << text;
  const std::string csv = c->Csv();
  EXPECT_NE(csv.find(",agree,fused\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\"dense/relu\",Relu,output,0,4,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1,\"RIGHT FusedDense replaces MatMul \"\"dense/mm\"\" + BiasAdd"),
            std::string::npos)
      << csv;
  // The manifest holds the record the pass made.
  auto step = internal::ReadDumpManifest(Env::Default(), testing::StepDirs(fused).begin()->second);
  ASSERT_TRUE(step.ok()) << step.status();
  bool found = false;
  for (const auto& op : step->ops) {
    if (op.name != "dense/relu") continue;
    found = true;
    EXPECT_EQ(op.type, "FusedDense");
    ASSERT_EQ(op.fused_from.size(), 3u);
    EXPECT_EQ(op.fused_from[0].name, "dense/mm");
    EXPECT_EQ(op.fused_from[0].type, "MatMul");
    EXPECT_EQ(op.fused_from[2].type, "Relu");
  }
  EXPECT_TRUE(found);

  // A planted fault in the fused kernel: the fused op is the culprit, "out" is not.
  const std::string broken = DenseRun("fused_broken", true, true);
  auto d = internal::CompareDumps(Env::Default(), plain, broken, 0.98);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->culprit.has_value()) << d->Text();
  EXPECT_EQ(*d->culprit, "step 0: op \"dense/relu\" (Relu)") << d->Text();

  // The tool: exit 0, the flag in its table; --csv with the column.
  const std::string csv_path = FreshDir("fused_csv") + "/out.csv";
  auto [rc, out] = RunTool("compare-dumps " + plain + " " + fused + " --csv " + csv_path);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[fused: RIGHT FusedDense replaces"), std::string::npos) << out;
  EXPECT_NE(testing::ReadText(csv_path).find(",agree,fused"), std::string::npos);
}

}  // namespace
}  // namespace recsdk
