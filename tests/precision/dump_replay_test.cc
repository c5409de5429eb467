// dump_replay_test.cc: `recsdk replay-op` (src/precision/dump_replay.cc) on a dump taken with a
// deliberately perturbed CPU kernel for one op: the replay on the reference kernel finds that op
// and clears a healthy one; unknown ops, corrupt inputs and ops that cannot be replayed are errors.
#include "src/precision/dump_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/device/kernel.h"
#include "src/precision/dump_reader.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

using internal::Env;
using internal::ReplayOp;
using internal::ReplayOptions;
using testing::BuildLogModel;
using testing::Floats;
using testing::FreshDir;
using testing::MakeSession;
using testing::RunTool;

// DumpLogModel: one step of BuildLogModel fed {1, 2}, dumped with `mode` into a fresh `name`; with
// `perturb_mul`, the float Mul kernel ("y") is perturbed while the step runs and restored after.
std::string DumpLogModel(const std::string& name, bool perturb_mul,
                         const std::string& mode = "all") {
  const std::string dir = FreshDir(name);
  {
    // The CPU kernels are registered when the first session starts.
    Graph g;
    BuildLogModel(&g);
    MakeSession(g, SessionConfig());
  }
  std::optional<testing::ScopedPerturbedKernel> perturbed;
  if (perturb_mul) perturbed.emplace("Mul");
  {
    Graph g;
    BuildLogModel(&g);
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = dir;
    config.dump_mode = mode;
    auto session = MakeSession(g, config);
    EXPECT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  }
  return dir;
}

std::string StepDir(const std::string& root) { return testing::StepDirs(root).begin()->second; }

TEST(DumpReplayTest, ThePerturbedOpDiffersAndAHealthyOneAgrees) {
  const std::string dump = DumpLogModel("perturbed", /*perturb_mul=*/true);
  auto y = ReplayOp(Env::Default(), dump, "y", ReplayOptions());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_FALSE(y->all_agree()) << y->Text();
  ASSERT_EQ(y->rows.size(), 1u);
  EXPECT_EQ(y->rows[0].first_diff, 1);
  EXPECT_NEAR(y->rows[0].max_abs, 12.0, 1e-5);  // dumped {3, -6}, replayed {3, 6}
  EXPECT_NEAR(y->rows[0].cosine, -0.6, 1e-6);
  EXPECT_NE(y->Text().find("differs"), std::string::npos) << y->Text();
  // scope/z was given the perturbed y and computed its log faithfully (NaN for the -6, on both
  // sides).
  for (const char* healthy : {"scope/z", "three"}) {
    auto r = ReplayOp(Env::Default(), dump, healthy, ReplayOptions());
    ASSERT_TRUE(r.ok()) << healthy << ": " << r.status();
    EXPECT_TRUE(r->all_agree()) << r->Text();
    EXPECT_EQ(r->rows.size(), 1u);
    EXPECT_NE(r->Text().find("agrees"), std::string::npos) << r->Text();
  }
  // The same dump without the fault: y agrees.
  auto clean = ReplayOp(Env::Default(), DumpLogModel("clean", false), "y", ReplayOptions());
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_TRUE(clean->all_agree()) << clean->Text();
  EXPECT_EQ(clean->rows[0].max_abs, 0.0);
}

TEST(DumpReplayTest, ErrorsNameTheOpAndWhy) {
  const std::string dump = DumpLogModel("errors", false);
  auto unknown = ReplayOp(Env::Default(), dump, "no_such_op", ReplayOptions());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("\"no_such_op\""), std::string::npos);
  EXPECT_NE(unknown.status().message().find("\"y\""), std::string::npos) << unknown.status();

  ReplayOptions bad_threshold;
  bad_threshold.threshold = 2;
  EXPECT_EQ(ReplayOp(Env::Default(), dump, "y", bad_threshold).status().code(),
            absl::StatusCode::kInvalidArgument);
  ReplayOptions other_step;
  other_step.step = 7;
  EXPECT_EQ(ReplayOp(Env::Default(), dump, "y", other_step).status().code(),
            absl::StatusCode::kNotFound);

  // Inputs not dumped (dump_mode output): nothing to replay from.
  auto outputs_only =
      ReplayOp(Env::Default(), DumpLogModel("outputs_only", false, "output"), "y", ReplayOptions());
  EXPECT_EQ(outputs_only.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(outputs_only.status().message().find("dump_mode"), std::string::npos)
      << outputs_only.status();

  // A corrupted input file: the reader's checksum catches it and the error names the file.
  const std::string corrupt = DumpLogModel("corrupt", false);
  const std::string file = StepDir(corrupt) + "/y.input.0.npy";
  ASSERT_TRUE(std::filesystem::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto damaged = ReplayOp(Env::Default(), corrupt, "y", ReplayOptions());
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(damaged.status().message().find("y.input.0.npy"), std::string::npos)
      << damaged.status();
}

TEST(DumpReplayTest, StatefulOpsAndOldDumpsAreRefused) {
  const std::string dir = FreshDir("stateful");
  {
    Graph g;
    Scope root(&g);
    Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{2});
    ops::Add(root.WithOpName("sum"), x,
             ops::RandomUniform(root.WithOpName("noise"), Shape{2}, DType::kFloat32, 0, 1));
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = dir;
    config.dump_mode = "all";
    auto session = MakeSession(g, config);
    ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"sum"}).ok());
  }
  auto noise = ReplayOp(Env::Default(), dir, "noise", ReplayOptions());
  EXPECT_EQ(noise.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(noise.status().message().find("op \"noise\" (RandomUniform) cannot be replayed: it is "
                                          "stateful"),
            std::string::npos)
      << noise.status();
  auto sum = ReplayOp(Env::Default(), dir, "sum", ReplayOptions());
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_TRUE(sum->all_agree()) << sum->Text();

  // A manifest written before manifests recorded attributes still reads (compare-dumps,
  // find-nan), but replay-op says why it cannot rebuild the op.
  const std::string manifest = StepDir(dir) + "/manifest.json";
  nlohmann::json m = nlohmann::json::parse(testing::ReadText(manifest));
  for (auto& op : m["ops"]) op.erase("attrs");
  std::ofstream(manifest, std::ios::trunc) << m.dump();
  auto old = ReplayOp(Env::Default(), dir, "sum", ReplayOptions());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.status().message().find("records no attributes"), std::string::npos)
      << old.status();
  EXPECT_TRUE(internal::FindNan(Env::Default(), dir).ok());
}

// Tamper: rewrites op `op`'s manifest entry of the dump's step with `edit` (checksums cover tensor
// files, not the manifest).
template <typename Edit>
void Tamper(const std::string& dump, const std::string& op, Edit edit) {
  const std::string manifest = StepDir(dump) + "/manifest.json";
  nlohmann::json m = nlohmann::json::parse(testing::ReadText(manifest));
  for (auto& entry : m["ops"]) {
    if (entry["name"] == op) edit(entry);
  }
  std::ofstream(manifest, std::ios::trunc) << m.dump();
}

TEST(DumpReplayTest, AManifestThatDoesNotDescribeTheOpIsAnErrorNotACrash) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"attrs not an object", [](nlohmann::json& e) { e["attrs"] = 5; },
       absl::StatusCode::kDataLoss},
      {"a malformed attribute",
       [](nlohmann::json& e) {
         e["attrs"] = {{"shape", {{"type", 6}, {"value", "x"}}}};
       },
       absl::StatusCode::kDataLoss},
      {"an attribute the op does not have",
       [](nlohmann::json& e) {
         e["attrs"] = {{"axis", {{"type", 1}, {"value", 1}}}};
       },
       absl::StatusCode::kFailedPrecondition},
      {"another op type", [](nlohmann::json& e) { e["type"] = "Log"; },
       absl::StatusCode::kFailedPrecondition},
      {"an unregistered type", [](nlohmann::json& e) { e["type"] = "NoSuchOp"; },
       absl::StatusCode::kFailedPrecondition},
      {"another output dtype", [](nlohmann::json& e) { e["outputs"][0]["dtype"] = "int32"; },
       absl::StatusCode::kFailedPrecondition},
      {"an extra output", [](nlohmann::json& e) { e["outputs"].push_back(e["outputs"][0]); },
       absl::StatusCode::kDataLoss},
      {"a large shape claimed", [](nlohmann::json& e) { e["outputs"][0]["shape"] = {1 << 30}; },
       absl::StatusCode::kFailedPrecondition},
  };
  for (const Case& c : cases) {
    const std::string dump = DumpLogModel("tamper", false);
    Tamper(dump, "y", c.edit);
    auto r = ReplayOp(Env::Default(), dump, "y", ReplayOptions());
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status();
  }
}

TEST(DumpReplayTest, ToolExitStatus) {
  if (std::getenv("RECSDK_TOOL") == nullptr) GTEST_SKIP() << "RECSDK_TOOL is not set";
  const std::string dump = DumpLogModel("tool", /*perturb_mul=*/true);
  auto [differs_rc, differs] = RunTool("replay-op " + dump + " y");
  EXPECT_EQ(differs_rc, 1) << differs;
  EXPECT_NE(differs.find("differs"), std::string::npos) << differs;
  EXPECT_NE(differs.find("DIFF"), std::string::npos) << differs;
  auto [agrees_rc, agrees] = RunTool("replay-op " + dump + " scope/z --threshold 0.99");
  EXPECT_EQ(agrees_rc, 0) << agrees;
  EXPECT_NE(agrees.find("agrees"), std::string::npos) << agrees;
  auto [unknown_rc, unknown] = RunTool("replay-op " + dump + " nope");
  EXPECT_EQ(unknown_rc, 2) << unknown;
  EXPECT_NE(unknown.find("op \"nope\" is not in the dump"), std::string::npos) << unknown;
  std::filesystem::resize_file(StepDir(dump) + "/scope_z.input.0.npy", 10);
  auto [corrupt_rc, corrupt] = RunTool("replay-op " + dump + " scope/z");
  EXPECT_EQ(corrupt_rc, 2) << corrupt;
  EXPECT_NE(corrupt.find("scope_z.input.0.npy"), std::string::npos) << corrupt;
  auto [usage_rc, usage] = RunTool("replay-op " + dump);
  EXPECT_EQ(usage_rc, 2) << usage;
  EXPECT_NE(usage.find("replay-op DUMP OP"), std::string::npos) << usage;
}

}  // namespace
}  // namespace recsdk
