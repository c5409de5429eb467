// little_demo_test.cc: the spec's little_demo runs in each USE_MODE (train, then load_and_train
// from the saved checkpoint, then predict) and learns its planted signal; the knobs are parsed
// with the spec's names and bad ones are named. A short run with a small tower (the model is the
// demo's otherwise) keeps the test within seconds.
#include "samples/little_demo/little_demo.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "src/common/env.h"
#include "src/precision/precision_check.h"

namespace little_demo {
namespace {

DemoOptions Short(const std::string& dir) {
  DemoOptions o;
  o.train_steps = 60;
  o.eval_every = 30;
  o.eval_steps = 4;
  o.batch_size = 128;
  o.hidden_units = {32, 16};
  o.threshold_step = 20;
  o.model_dir = dir + "/model";
  o.export_dir = dir + "/export";
  o.out = std::tmpfile();
  return o;
}

std::string Output(std::FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[1024];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) text += buf;
  return text;
}

TEST(LittleDemoTest, TrainThenLoadAndTrainThenPredict) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/little_demo_test";
  std::filesystem::remove_all(dir);

  DemoOptions train = Short(dir);
  auto trained = little_demo::Run(train);
  ASSERT_TRUE(trained.ok()) << trained.status() << Output(train.out);
  const std::string log = Output(train.out);
  EXPECT_EQ(trained->global_step, 60);
  for (int h = 0; h < 2; ++h) {
    EXPECT_GT(trained->planted_auc[h], 0.75) << h;
    EXPECT_GT(trained->auc[h], 0.65) << "head " << h << "\n" << log;  // untrained: ~0.5
  }
  EXPECT_NE(log.find("Demo done!"), std::string::npos) << log;
  EXPECT_NE(log.find("user_table"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(dir + "/export/user_table_keys.npy"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/export/saved_model"));

  DemoOptions more = Short(dir);
  more.use_mode = "load_and_train";
  auto continued = little_demo::Run(more);
  ASSERT_TRUE(continued.ok()) << continued.status() << Output(more.out);
  EXPECT_EQ(continued->global_step, 120);
  EXPECT_NE(Output(more.out).find("restored checkpoint of step 60"), std::string::npos)
      << Output(more.out);
  for (int h = 0; h < 2; ++h) EXPECT_GT(continued->auc[h], trained->auc[h] - 0.02) << h;

  DemoOptions predict = Short(dir);
  predict.use_mode = "predict";
  auto predicted = little_demo::Run(predict);
  ASSERT_TRUE(predicted.ok()) << predicted.status() << Output(predict.out);
  EXPECT_EQ(predicted->global_step, 120);
  // Predict uses the same held-out rows and weights as the last evaluation: the same AUC.
  for (int h = 0; h < 2; ++h) EXPECT_NEAR(predicted->auc[h], continued->auc[h], 1e-6) << h;
}

TEST(LittleDemoTest, KnobsUseTheSpecsNames) {
  setenv("USE_MODE", "predict", 1);
  setenv("MULTI_LOOKUP_TIMES", "3", 1);
  char prog[] = "little_demo", flag[] = "--use_padding_keys=1", bad[] = "--use_modee=train";
  char* argv[] = {prog, flag};
  auto o = ParseOptions(2, argv);
  unsetenv("USE_MODE");
  unsetenv("MULTI_LOOKUP_TIMES");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->use_mode, "predict");
  EXPECT_EQ(o->multi_lookup_times, 3);
  EXPECT_TRUE(o->use_padding_keys);
  char* argv_bad[] = {prog, bad};
  auto b = ParseOptions(2, argv_bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("use_modee"), std::string::npos);
  setenv("CACHE_MODE", "DDR", 1);
  auto ddr = ParseOptions(1, argv);
  setenv("CACHE_MODE", "NVME", 1);
  auto nvme = ParseOptions(1, argv);
  unsetenv("CACHE_MODE");
  ASSERT_TRUE(ddr.ok()) << ddr.status();
  EXPECT_EQ(ddr->cache_mode, "DDR");
  EXPECT_EQ(nvme.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(nvme.status().message()).find("HBM, DDR or SSD"), std::string::npos);
}

std::string TestDir(const std::string& name) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

int CountFiles(const std::string& dir, const std::string& suffix) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++n;
    }
  }
  return n;
}

// The promise: every session option of the spec can be tried on the main job from a file,
// without editing code. enable_dump + dump_path in the file make the run write a dump.
TEST(LittleDemoTest, SessionConfigFileTurnsOnDumps) {
  const std::string dir = TestDir("little_demo_session_config_test");
  const std::string config = dir + "/session_config.json";
  WriteFile(config, "{\"enable_dump\": true, \"dump_path\": \"" + dir +
                        "/dump\", \"dump_step\": \"1\", \"dump_mode\": \"all\"}\n");
  char prog[] = "little_demo", flag[] = "--session_config";
  std::string path = config;
  char* argv[] = {prog, flag, path.data()};
  auto parsed = ParseOptions(3, argv);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->session_config.has_value());
  EXPECT_TRUE(parsed->session_config->enable_dump);

  DemoOptions o = Short(dir);
  o.session_config = parsed->session_config;
  o.train_steps = 4;
  o.eval_every = 4;
  o.eval_steps = 1;
  o.export_dir = "";
  auto result = little_demo::Run(o);
  ASSERT_TRUE(result.ok()) << result.status() << Output(o.out);
  EXPECT_GE(CountFiles(dir + "/dump", "manifest.json"), 1);
  EXPECT_GE(CountFiles(dir + "/dump", ".npy"), 2);

  // SESSION_CONFIG=FILE does the same as the flag.
  setenv("SESSION_CONFIG", config.c_str(), 1);
  auto from_env = ParseOptions(1, argv);
  unsetenv("SESSION_CONFIG");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  ASSERT_TRUE(from_env->session_config.has_value());
  EXPECT_EQ(from_env->session_config->dump_path, dir + "/dump");
}

// A bad file is an error naming the file (and what is wrong in it), before anything runs.
TEST(LittleDemoTest, BadSessionConfigFileIsNamed) {
  const std::string dir = TestDir("little_demo_bad_session_config_test");
  WriteFile(dir + "/syntax.json", "{\"enable_dump\": true,\n");
  WriteFile(dir + "/unknown.json", "{\"enable_dumpp\": true}");
  WriteFile(dir + "/not_object.json", "[1, 2]");
  char prog[] = "little_demo";
  struct Case {
    std::string file;
    absl::StatusCode code;
    std::string says;
  };
  for (const Case& c :
       {Case{dir + "/missing.json", absl::StatusCode::kNotFound, ""},
        Case{dir, absl::StatusCode::kInvalidArgument, "is a directory"},
        Case{dir + "/syntax.json", absl::StatusCode::kInvalidArgument, "line"},
        Case{dir + "/unknown.json", absl::StatusCode::kInvalidArgument, "enable_dumpp"},
        Case{dir + "/not_object.json", absl::StatusCode::kInvalidArgument, "not an object"}}) {
    std::string flag = "--session_config=" + c.file;
    char* argv[] = {prog, flag.data()};
    auto o = ParseOptions(2, argv);
    ASSERT_FALSE(o.ok()) << c.file;
    EXPECT_EQ(o.status().code(), c.code) << o.status();
    const std::string message(o.status().message());
    EXPECT_NE(message.find("\"" + c.file + "\""), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

// PrecisionRun: a short deterministic run with PRECISION_CHECK on; the trace's directory
// (precision_check_dir/<time>).
std::string PrecisionRun(const std::string& dir, uint64_t seed) {
  DemoOptions o = Short(dir);
  o.train_steps = 3;
  o.eval_every = 3;
  o.eval_steps = 1;
  o.batch_size = 64;
  o.export_dir = "";
  o.use_deterministic = true;
  o.precision_check = true;
  o.precision_check_dir = dir + "/precision_check";
  o.precision_check_steps = "0-2";
  o.seed = seed;
  auto result = little_demo::Run(o);
  EXPECT_TRUE(result.ok()) << result.status() << Output(o.out);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(o.precision_check_dir, ec)) {
    return e.path().string();
  }
  ADD_FAILURE() << "no trace under " << o.precision_check_dir << "\n" << Output(o.out);
  return o.precision_check_dir;
}

std::pair<int, std::string> RunTool(const std::string& args, const std::string& out) {
  const int rc = std::system(
      (std::string(std::getenv("RECSDK_TOOL")) + " " + args + " >" + out + " 2>&1").c_str());
  std::string text;
  std::ifstream f(out);
  for (std::string line; std::getline(f, line);) text += line + "\n";
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, text};
}

// The spec's monitoring mode: two runs with the same seed in deterministic mode trace the same
// bits at every stage. With another seed the initial weights differ (trace step 0, the
// initialization run) and the tables' rows, made at their first lookup, too: the first training
// step (trace step 1) goes apart at its lookups, while its ids, from the same data, agree.
TEST(LittleDemoTest, PrecisionCheckNamesTheFirstDivergence) {
  const std::string dir = TestDir("little_demo_precision_check_test");
  const std::string a = PrecisionRun(dir + "/a", 7);
  const std::string b = PrecisionRun(dir + "/b", 7);
  const std::string c = PrecisionRun(dir + "/c", 8);
  recsdk::internal::Env* env = recsdk::internal::Env::Default();

  auto same = recsdk::internal::PrecisionCheck(env, a, b);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->first.has_value()) << same->Text();
  EXPECT_EQ(same->steps_compared, 3) << same->Text();
  EXPECT_GT(same->tensors_compared, 100) << same->Text();

  auto other = recsdk::internal::PrecisionCheck(env, a, c);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->first.has_value()) << other->Text();
  EXPECT_EQ(other->first->step, 0) << other->Text();
  EXPECT_EQ(other->first->stage, "init") << other->Text();
  ASSERT_TRUE(other->first_training.has_value()) << other->Text();
  EXPECT_EQ(other->first_training->step, 1) << other->Text();
  EXPECT_EQ(other->first_training->stage, "lookups") << other->Text();
  EXPECT_EQ(other->first_training->tensor.type, "TableGather") << other->Text();
  EXPECT_EQ(other->first_training->tensor.direction, "output") << other->Text();

  if (std::getenv("RECSDK_TOOL") == nullptr) GTEST_SKIP() << "RECSDK_TOOL is not set";
  const std::string out = dir + "/tool.txt";
  auto [same_rc, same_text] = RunTool("precision-check " + a + " " + b, out);
  EXPECT_EQ(same_rc, 0) << same_text;
  EXPECT_NE(same_text.find("no divergence"), std::string::npos) << same_text;
  auto [diff_rc, diff_text] = RunTool("precision-check " + a + " " + c, out);
  EXPECT_EQ(diff_rc, 1) << diff_text;
  EXPECT_NE(diff_text.find("step 0, stage init"), std::string::npos) << diff_text;
  EXPECT_NE(diff_text.find("training step: step 1, stage lookups"), std::string::npos) << diff_text;
  EXPECT_EQ(RunTool("precision-check " + a + " " + dir + "/missing", out).first, 2);
  EXPECT_EQ(RunTool("precision-check " + a, out).first, 2);
}

TEST(LittleDemoTest, BadPrecisionCheckKnobsAreNamed) {
  char prog[] = "little_demo", on[] = "--precision_check=1", steps[] = "--precision_check_steps=3-",
       seed[] = "--seed=-4";
  char* bad_steps[] = {prog, on, steps};
  auto s = ParseOptions(3, bad_steps);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("PRECISION_CHECK_STEPS \"3-\""),
            std::string::npos)
      << s.status();
  char* bad_seed[] = {prog, seed};
  auto n = ParseOptions(2, bad_seed);
  EXPECT_NE(std::string(n.status().message()).find("SEED -4 is negative"), std::string::npos)
      << n.status();
}

}  // namespace
}  // namespace little_demo
