// dump_compare_test.cc: compare-dumps (src/precision/dump_compare.cc) on two runs of one model
// with a planted difference: the op that makes it is named, not its consumers.
#include "src/precision/dump_compare.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace recsdk
