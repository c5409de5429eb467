// precision_check_test.cc: recsdk precision-check's verdict (src/precision/precision_check.cc):
// each tensor's stage, exact comparison, and hostile traces refused with the file named. The
// end-to-end check on little_demo's PRECISION_CHECK runs is in tests/samples/little_demo_test.cc.
#include "src/precision/precision_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

using internal::Env;
using internal::PrecisionStage;
using testing::BuildLogModel;
using testing::Floats;
using testing::FreshDir;
using testing::MakeSession;
using testing::StepDirs;

// Trace: two steps of BuildLogModel(three) fed `x`, dumped with dump_mode all (as PRECISION_CHECK).
// With `checksums`, the compact trace PRECISION_CHECK writes by default (dump_checksums).
std::string Trace(const std::string& name, float three, std::vector<float> x,
                  bool checksums = false) {
  const std::string dir = FreshDir(name);
  Graph g;
  BuildLogModel(&g, three);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  config.dump_checksums = checksums;
  auto session = MakeSession(g, config);
  for (int step = 0; step < 2; ++step) {
    EXPECT_TRUE(session->Run({{"x", Floats(x)}}, {"scope/z"}).ok());
  }
  return dir;
}

TEST(PrecisionCheckTest, StagesFollowATrainingStep) {
  struct Case {
    const char *op, *type, *direction;
    bool after_loss;
    const char* stage;
  };
  for (const Case& c : std::vector<Case>{
           {"tower/dense/kernel/Initializer/RandomUniform", "RandomUniform", "output", false,
            "init"},
           {"user_lookup_0", "TableGather", "input", false, "batch_ids"},
           {"user_lookup_0", "TableGather", "output", false, "lookups"},
           {"head_0/BiasAdd", "BiasAdd", "output", false, "dense"},
           {"SigmoidCrossEntropyWithLogits", "SigmoidCrossEntropyWithLogits", "output", false,
            "loss"},
           {"ReduceMean", "ReduceMean", "output", true, "loss"},
           {"gradients/head_0/MatMul/MatMul_1", "MatMul", "output", true, "gradients"},
           {"sparse_gradients/user_lookup_0", "TableGradAggregate", "output", true, "gradients"},
           {"Adam/update_head_0/kernel/ApplyAdam", "ApplyAdam", "input", true, "updates"},
           {"sparse_optimizer/apply_user_table", "TableApply", "input", true, "updates"}}) {
    EXPECT_EQ(PrecisionStage(c.op, c.type, c.direction, c.after_loss), c.stage) << c.op;
  }
}

// A difference compare-dumps' cosine threshold forgives is a divergence here: runs that should
// agree bit for bit do not agree "nearly".
TEST(PrecisionCheckTest, TheSmallestDifferenceIsADivergence) {
  const std::string a = Trace("exact_a", 3.0f, {1, 2});
  const std::string b = Trace("exact_b", 3.0f, {1, 2});
  const std::string c = Trace("exact_c", 3.0000002f, {1, 2});
  auto same = internal::PrecisionCheck(Env::Default(), a, b);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->first.has_value()) << same->Text();
  EXPECT_EQ(same->steps_compared, 2);
  EXPECT_NE(same->Text().find("no divergence"), std::string::npos) << same->Text();

  auto near = internal::PrecisionCheck(Env::Default(), a, c);
  ASSERT_TRUE(near.ok()) << near.status();
  ASSERT_TRUE(near->first.has_value()) << near->Text();
  EXPECT_EQ(near->first->step, 0);
  EXPECT_EQ(near->first->tensor.op, "three");
  EXPECT_EQ(near->first->stage, "dense");
  EXPECT_GT(near->first->tensor.cosine, 0.999999);
  EXPECT_FALSE(near->first_training.has_value());  // no step here trains
  EXPECT_NE(near->Text().find("first divergence: step 0, stage dense: op \"three\""),
            std::string::npos)
      << near->Text();
}

// The compact trace (dump_checksums): no tensor files, each tensor's CRC-32C and first values in
// the manifest; the verdicts are those of the whole-tensor trace, the numbers from the samples.
TEST(PrecisionCheckTest, ChecksumTracesGiveTheSameVerdictWithoutTensorFiles) {
  const std::string a = Trace("sum_a", 3.0f, {1, 2}, true);
  const std::string b = Trace("sum_b", 3.0f, {1, 2}, true);
  const std::string c = Trace("sum_c", 3.0000002f, {1, 2}, true);
  const std::string whole = Trace("sum_whole", 3.0f, {1, 2}, false);
  uint64_t compact_bytes = 0, whole_bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
    EXPECT_NE(e.path().extension(), ".npy") << e.path();
    if (e.is_regular_file()) compact_bytes += e.file_size();
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(whole)) {
    if (e.is_regular_file()) whole_bytes += e.file_size();
  }
  EXPECT_LT(compact_bytes, whole_bytes);
  const nlohmann::json m =
      nlohmann::json::parse(testing::ReadText(StepDirs(a).at(0) + "/manifest.json"));
  const nlohmann::json& y_out = m["ops"][1]["outputs"][0];
  EXPECT_EQ(m["ops"][1]["name"], "y");
  EXPECT_FALSE(y_out.contains("file"));
  EXPECT_EQ(y_out["sample"], nlohmann::json::array({3.0, 6.0}));
  const float y[2] = {3.0f, 6.0f};
  EXPECT_EQ(y_out["payload_crc32c"], internal::Crc32c(y, sizeof(y)));

  auto same = internal::PrecisionCheck(Env::Default(), a, b);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->first.has_value()) << same->Text();
  EXPECT_EQ(same->tensors_compared, 12);  // per step: three out, y in 2 + out, z in + out

  auto near = internal::PrecisionCheck(Env::Default(), a, c);
  ASSERT_TRUE(near.ok()) << near.status();
  ASSERT_TRUE(near->first.has_value()) << near->Text();
  EXPECT_EQ(near->first->step, 0);
  EXPECT_EQ(near->first->tensor.op, "three");
  EXPECT_EQ(near->first->tensor.first_diff, 0);
  EXPECT_NE(near->Text().find("checksums differ"), std::string::npos) << near->Text();
  // compare-dumps over the same traces: the pair agrees or not by checksum.
  auto compared = internal::CompareDumps(Env::Default(), a, c, 0.98);
  ASSERT_TRUE(compared.ok()) << compared.status();
  EXPECT_FALSE(compared->all_agree());
  ASSERT_TRUE(compared->culprit.has_value()) << compared->Text();
  EXPECT_EQ(*compared->culprit, "step 0: op \"three\" (Const)");
}

// Hostile or broken traces are errors naming the file, never a crash or a verdict.
TEST(PrecisionCheckTest, BrokenTracesAreNamedErrors) {
  const std::string a = Trace("broken_a", 3.0f, {1, 2});
  const std::string b = Trace("broken_b", 3.0f, {1, 2});
  const std::string step0 = StepDirs(b).at(0);
  std::string npy;
  for (const auto& e : std::filesystem::directory_iterator(step0)) {
    if (e.path().extension() == ".npy") npy = e.path().string();
  }
  ASSERT_FALSE(npy.empty());
  {  // one flipped byte in the payload: the CRC-32C no longer matches
    std::fstream f(npy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto flipped = internal::PrecisionCheck(Env::Default(), a, b);
  ASSERT_FALSE(flipped.ok());
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss) << flipped.status();
  EXPECT_NE(std::string(flipped.status().message()).find(npy.substr(npy.rfind('/') + 1)),
            std::string::npos)
      << flipped.status();

  std::ofstream(step0 + "/manifest.json", std::ios::trunc) << "{\"format\": \"recsdk-dump\", [";
  auto garbled = internal::PrecisionCheck(Env::Default(), a, b);
  ASSERT_FALSE(garbled.ok());
  EXPECT_NE(std::string(garbled.status().message()).find("manifest.json"), std::string::npos)
      << garbled.status();

  const std::string empty = FreshDir("broken_empty");
  EXPECT_FALSE(internal::PrecisionCheck(Env::Default(), a, empty).ok());
  EXPECT_EQ(internal::PrecisionCheck(Env::Default(), a, empty + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace recsdk
