// little_demo_deterministic_test.cc: SessionConfig::deterministic on the little_demo model (the
// Estimator flow with the key stage, two tables, multi-lookup, Adam + LazyAdam, set_threshold,
// evaluation and checkpoints): two runs with the same seed, at 1 and at 2 threads (kernels and
// key stage), give bitwise-identical per-step losses, AUCs, exported tables and checkpoint files.
// A smaller tower and fewer steps than the demo keep it within seconds; the batch is large enough
// that the kernels' parallel loops split at 2 threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "samples/little_demo/little_demo.h"

namespace little_demo {
namespace {

namespace fs = std::filesystem;

struct RunOutput {
  std::vector<float> losses;
  DemoResult result;
  std::map<std::string, std::string> files;  // relative path -> bytes
};

std::string Read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Files a run leaves that must be identical: every checkpoint file and every exported table.
// TensorBoard event files (wall times in them) and the inference bundle (named by time) are left
// out.
void Collect(const fs::path& root, const std::string& prefix, RunOutput* out) {
  if (!fs::exists(root)) return;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), root).string();
    if (rel.find("tfevents") != std::string::npos || rel.find("saved_model") != std::string::npos)
      continue;
    out->files[prefix + rel] = Read(e.path());
  }
}

RunOutput Train(const std::string& dir, int threads, const std::string& cache_mode = "HBM") {
  DemoOptions o;
  o.cache_mode = cache_mode;
  o.train_steps = 24;
  o.eval_every = 12;
  o.eval_steps = 2;
  o.batch_size = 512;
  o.hidden_units = {64, 32};
  o.threshold_step = 6;
  o.use_deterministic = true;
  o.intra_op_parallelism = threads;
  o.key_process_thread_num = threads;
  o.model_dir = dir + "/model";
  o.export_dir = dir + "/export";
  o.out = std::tmpfile();
  RunOutput r;
  o.losses = &r.losses;
  fs::remove_all(dir);
  auto result = Run(o);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) r.result = *result;
  Collect(o.model_dir, "model/", &r);
  Collect(o.export_dir, "export/", &r);
  std::fclose(o.out);
  return r;
}

std::string TestDir(const std::string& name) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/" + name;
}

// TwoThreads: the run at 2 threads with every row on the device, made once and shared by the
// tests below.
const RunOutput& TwoThreads() {
  static const RunOutput* run = new RunOutput(Train(TestDir("little_demo_deterministic/2"), 2));
  return *run;
}

TEST(LittleDemoDeterministicTest, BitwiseIdenticalAtOneAndTwoThreads) {
  const RunOutput a = Train(TestDir("little_demo_deterministic/1"), 1);
  const RunOutput& b = TwoThreads();
  ASSERT_EQ(a.losses.size(), 24u);
  EXPECT_NE(a.losses.front(), a.losses.back());  // it trained
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i];
  }
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(std::memcmp(&a.result.auc[h], &b.result.auc[h], sizeof(double)), 0) << h;
  }
  int checkpoint_files = 0, tables = 0;
  for (const auto& [path, bytes] : a.files) {
    checkpoint_files += path.starts_with("model/") && path.find("ckpt-") != std::string::npos;
    tables += path.starts_with("export/");
    auto it = b.files.find(path);
    ASSERT_NE(it, b.files.end()) << path << " exists only in the 1-thread run";
    EXPECT_TRUE(it->second == bytes) << path << " differs between 1 and 2 threads";
  }
  EXPECT_EQ(a.files.size(), b.files.size());
  EXPECT_GE(checkpoint_files, 4) << "checkpoints were written and compared";
  EXPECT_GE(tables, 2) << "tables were exported and compared";
}

// Tiers are transparent (issue 14): with the device tier at a quarter of each table's keys and
// the rest in host memory (DDR), or host at a tenth and the rest on SSD, the run is bitwise the
// run with every row on the device: losses, AUCs and exported tables. The rows do move: the item
// table ends with about 30500 rows against a device tier of 20000.
TEST(LittleDemoDeterministicTest, CacheModesDdrAndSsdTrainBitwiseAsHbm) {
  const RunOutput& hbm = TwoThreads();
  for (const char* mode : {"DDR", "SSD"}) {
    SCOPED_TRACE(mode);
    const RunOutput r = Train(TestDir("little_demo_cache_modes/") + mode, 2, mode);
    ASSERT_EQ(r.losses.size(), hbm.losses.size());
    for (size_t i = 0; i < r.losses.size(); ++i) {
      EXPECT_EQ(std::memcmp(&r.losses[i], &hbm.losses[i], sizeof(float)), 0)
          << "step " << i + 1 << ": " << r.losses[i] << " vs " << hbm.losses[i];
    }
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(std::memcmp(&r.result.auc[h], &hbm.result.auc[h], sizeof(double)), 0) << h;
    }
    int tables = 0;
    for (const auto& [path, bytes] : hbm.files) {
      if (!path.starts_with("export/")) continue;
      ++tables;
      auto it = r.files.find(path);
      ASSERT_NE(it, r.files.end()) << path;
      EXPECT_TRUE(it->second == bytes) << path << " differs from the HBM run";
    }
    EXPECT_GE(tables, 4) << "both tables' keys and values were compared";
    if (std::string(mode) == "SSD") {
      // The item table outgrows device + host (20000 + 8000 rows) by step 24: rows went to SSD.
      EXPECT_TRUE(r.files.contains("model/ssd/item_table.00000.rows"));
    }
  }
}

}  // namespace
}  // namespace little_demo
