// run_config_test.cc: RunConfig (NPURunConfig) validation and forwarding, and the framework's
// init / terminate_config_initializer: unknown and contradictory settings name the setting,
// terminate is safe twice and stops key stages, bind_cpu pins (or logs a no-op).
#include "recsdk/run_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/initialize.h"
#include "recsdk/recsdk.h"
#include "src/session/initialize_internal.h"

namespace recsdk {
namespace {

void ExpectMentions(const Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(what), std::string::npos) << s;
}

TEST(RunConfigTest, DefaultsAreValidAndForwardSessionOptions) {
  NPURunConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.deterministic = true;
  c.op_select_implmode = "high_precision";
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_TRUE(c.EffectiveSessionConfig().deterministic);
  EXPECT_EQ(c.EffectiveSessionConfig().op_select_implmode, "high_precision");
  c.op_select_implmode = "fastest";
  ExpectMentions(c.Validate(), "op_select_implmode");
}

TEST(RunConfigTest, UnsupportedArgumentsAreRejectedWithTheSpecsAdvice) {
  RunConfig c;
  c.train_distribute = "mirrored_strategy";
  ExpectMentions(c.Validate(), "train_distribute");
  EXPECT_NE(std::string(c.Validate().message()).find("delete it"), std::string::npos);
  RunConfig d;
  d.device_fn = "f";
  ExpectMentions(d.Validate(), "device_fn");
  RunConfig e;
  e.experimental_distribute = "x";
  ExpectMentions(e.Validate(), "experimental_distribute");
}

TEST(RunConfigTest, SessionOptionsAreForwardedAndValidatedAndContradictionsAreErrors) {
  RunConfig a;
  a.iterations_per_loop = 10;
  a.precision_mode = "must_keep_origin_dtype";
  a.mix_compile_mode = true;
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(a.EffectiveSessionConfig().iterations_per_loop, 10);
  EXPECT_EQ(a.EffectiveSessionConfig().precision_mode, "must_keep_origin_dtype");
  EXPECT_TRUE(a.EffectiveSessionConfig().mix_compile_mode);
  RunConfig b;
  b.precision_mode = "no_such_mode";
  ExpectMentions(b.Validate(), "precision_mode");
  RunConfig e;
  e.enable_data_pre_proc = true;  // the CPU backend has no device to offload to
  ExpectMentions(e.Validate(), "enable_data_pre_proc");
  RunConfig c;
  c.save_checkpoints_steps = 100;  // with the default save_checkpoints_secs 600
  ExpectMentions(c.Validate(), "save_checkpoints_secs");
  c.save_checkpoints_secs = 0;
  EXPECT_TRUE(c.Validate().ok());
  RunConfig d;
  d.keep_checkpoint_max = 0;
  ExpectMentions(d.Validate(), "keep_checkpoint_max");
}

// NaN fails every comparison, so it passed `save_checkpoints_steps > 0 && secs > 0`; an infinity
// was an accidental "never".
TEST(RunConfigTest, NonFiniteSaveCheckpointsSecsIsRejected) {
  for (double secs :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity()}) {
    RunConfig c;
    c.save_checkpoints_secs = secs;
    ExpectMentions(c.Validate(), fmt::format("save_checkpoints_secs {} is not a finite", secs));
  }
}

TEST(InitTest, UnknownAndContradictorySettingsNameTheSetting) {
  ExpectMentions(InitOptions::FromSettings({{"train_step", "10"}}).status(), "\"train_step\"");
  ExpectMentions(InitOptions::FromSettings({{"if_load", "yes"}}).status(), "if_load");
  ExpectMentions(
      InitOptions::FromSettings(
          {{"max_steps", "0"}, {"train_steps", "0"}, {"eval_steps", "0"}, {"save_steps", "0"}})
          .status(),
      "all 0");
  ExpectMentions(InitOptions::FromSettings({{"max_steps", "10"}, {"train_steps", "20"}}).status(),
                 "train_steps 20 exceeds max_steps 10");
  ExpectMentions(InitOptions::FromSettings({{"is_incremental_checkpoint", "true"}}).status(),
                 "save_delta_checkpoints_secs");
  ExpectMentions(InitOptions::FromSettings({{"restore_model_version", "100"}}).status(), "if_load");
  auto ok = InitOptions::FromSettings({{"train_steps", "200"}, {"use_dynamic", "false"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train_steps, 200);
  EXPECT_FALSE(ok->use_dynamic);
}

TEST(InitTest, InitTerminateTwiceAndStopsKeyStages) {
  terminate_config_initializer();  // nothing to do: safe
  InitOptions o;
  o.train_steps = 5;
  ASSERT_TRUE(init(o).ok());
  ASSERT_NE(ConfigInitializer::Get(), nullptr);
  EXPECT_EQ(ConfigInitializer::Get()->options().train_steps, 5);
  EXPECT_EQ(init(o).code(), absl::StatusCode::kFailedPrecondition);

  // A key stage on an endless dataset: terminate stops it, so Next returns false.
  Graph g;
  Scope s(&g);
  DatasetColumn(s, "x", DType::kFloat32, Shape{Shape::kUnknownDim, 1});
  auto session = *Session::Create(g);
  InMemoryColumn col;
  col.name = "x";
  col.values = std::vector<float>{1, 2, 3, 4};
  auto data = *Repeat(*InMemoryDataset({col}, 2), -1);
  auto stage = *KeyStage::Start(*session, std::move(data));
  FeedList feeds;
  ASSERT_TRUE(*stage->Next(&feeds));
  terminate_config_initializer();
  EXPECT_EQ(ConfigInitializer::Get(), nullptr);
  auto next = stage->Next(&feeds);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(*next);
  terminate_config_initializer();
}

TEST(InitTest, BindCpuPinsOrLogsANoOp) {
  InitOptions o;
  o.bind_cpu = true;
  ASSERT_TRUE(init(o).ok());
  const ConfigInitializer* c = ConfigInitializer::Get();
  ASSERT_NE(c, nullptr);
  if (!c->bound_cpus().empty()) {  // rank 0 of 1: every core
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    EXPECT_EQ(CPU_COUNT(&set), static_cast<int>(c->bound_cpus().size()));
  }
  terminate_config_initializer();
}

// ScopedEnv: sets an environment variable (unsets it for nullptr) for the scope, then unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A rank variable that is set but does not parse was taken as rank 0 (every process of a node
// pinned to the same cores); now init refuses it, naming the variable and its value, and records
// nothing.
TEST(InitTest, RankVariablesThatDoNotParseAreErrors) {
  InitOptions o;
  o.bind_cpu = true;
  struct Case {
    const char* rank;
    const char* size;
    const char* ompi_rank;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {"abc", nullptr, nullptr, {"LOCAL_RANK=\"abc\"", "decimal integer >= 0"}},
      {"", nullptr, nullptr, {"LOCAL_RANK=\"\""}},
      {"1x", "4", nullptr, {"LOCAL_RANK=\"1x\""}},
      {"-1", "4", nullptr, {"LOCAL_RANK=\"-1\""}},
      {nullptr, "0", nullptr, {"LOCAL_SIZE=\"0\"", ">= 1"}},
      {nullptr, nullptr, "two", {"OMPI_COMM_WORLD_LOCAL_RANK=\"two\""}},
      {"99999999999", nullptr, nullptr, {"LOCAL_RANK=\"99999999999\""}},
      {"2", "2", nullptr, {"local rank 2 (LOCAL_RANK)", "local size 2 (LOCAL_SIZE)"}},
      {"1", nullptr, nullptr, {"local rank 1 (LOCAL_RANK)", "local size 1 (default)"}},
  };
  for (const Case& c : cases) {
    ScopedEnv rank("LOCAL_RANK", c.rank), size("LOCAL_SIZE", c.size),
        ompi_rank("OMPI_COMM_WORLD_LOCAL_RANK", c.ompi_rank),
        ompi_size("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
    const Status s = init(o);
    for (const std::string& w : c.words) ExpectMentions(s, w);
    EXPECT_EQ(ConfigInitializer::Get(), nullptr);
    terminate_config_initializer();
  }
  // Set and valid: the launcher's values are used.
  ScopedEnv rank("LOCAL_RANK", "0"), size("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
  EXPECT_TRUE(init(o).ok());
  terminate_config_initializer();
}

TEST(InitTest, CpusForLocalRankSplitsNodeByNode) {
  const std::vector<std::vector<int>> nodes = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(internal::CpusForLocalRank(nodes, 0, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(internal::CpusForLocalRank(nodes, 1, 2), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(internal::CpusForLocalRank(nodes, 2, 3), (std::vector<int>{6, 7}));
  EXPECT_EQ(internal::CpusForLocalRank(nodes, 0, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(internal::CpusForLocalRank(nodes, 3, 3).empty());
  EXPECT_TRUE(internal::CpusForLocalRank({{0}}, 0, 2).empty());
}

}  // namespace
}  // namespace recsdk
