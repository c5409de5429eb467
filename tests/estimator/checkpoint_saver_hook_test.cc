// checkpoint_saver_hook_test.cc: CheckpointSaverHook's timing (save_checkpoints_secs and
// save_delta_checkpoints_secs) driven by a fake clock, so the test neither sleeps nor depends on
// the machine's speed: which steps are saved, full or delta, and that each one restores.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/env.h"

namespace recsdk {
namespace {

struct Model {
  Graph graph;
  Output loss;
  Node* train = nullptr;
};

// y = x w with SGD; "global_step" counts steps.
void Build(Model* m) {
  Scope s(&m->graph);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 2});
  Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{Shape::kUnknownDim, 1});
  layers::DenseOptions d;
  d.units = 1;
  Output logits = layers::Dense(s, x, d);
  m->loss = ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, y, logits));
  SgdOptimizer sgd(SgdOptions{0.1});
  m->train = *sgd.Minimize(s, m->loss);
  GlobalVariablesInitializer(s);
  ASSERT_TRUE(m->graph.status().ok()) << m->graph.status();
}

FeedList Feeds() {
  return {{"x", *Tensor::FromValues<float>(Shape{2, 2}, {1, 2, -1, 0.5f})},
          {"y", *Tensor::FromValues<float>(Shape{2, 1}, {1, 0})}};
}

std::string TempDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::filesystem::temp_directory_path() /
                    (std::string("recsdk_ckpt_hook_") + info->name() + "_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

// Runs `steps` steps, advancing the fake clock by one second after each; returns "<name>:<kind>"
// of every checkpoint the hook wrote, in order.
std::vector<std::string> Train(CheckpointSaverOptions o, int steps) {
  Model m;
  Build(&m);
  double now = 100;  // any origin: only differences matter
  o.clock = [&now] { return now; };
  auto hook = std::make_shared<CheckpointSaverHook>(o);
  MonitoredSessionOptions options;
  options.hooks = {hook, std::make_shared<StopAtStepHook>(StopAtStepHook::LastStep(steps))};
  auto ms = MonitoredSession::Create(&m.graph, options);
  EXPECT_TRUE(ms.ok()) << ms.status();
  if (!ms.ok()) return {};
  while (!(*ms)->ShouldStop()) {
    now += 1;  // the step takes one second
    EXPECT_TRUE((*ms)->Run(Feeds(), {}, {m.train}, nullptr).ok());
  }
  EXPECT_TRUE((*ms)->Close().ok());
  std::vector<std::string> out;
  for (const std::string& dir : hook->saved()) {
    auto manifest = internal::ReadJsonDocument(internal::Env::Default(),
                                               internal::JoinPath(dir, internal::kManifestFile));
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    if (!manifest.ok()) continue;
    out.push_back(std::filesystem::path(dir).filename().string() + ":" +
                  (*manifest)["kind"].get<std::string>());
  }
  return out;
}

TEST(CheckpointSaverHookTest, SaveSecsSavesAtTheFirstStepPastEachPeriod) {
  CheckpointSaverOptions o;
  o.model_dir = TempDir("secs");
  o.save_secs = 4;
  // Steps end at t = 1..9 seconds after the session was created: due at 4 and 8, and the last
  // step (9) at End.
  EXPECT_EQ(Train(o, 9), (std::vector<std::string>{"ckpt-4:full", "ckpt-8:full", "ckpt-9:full"}));
}

TEST(CheckpointSaverHookTest, DeltaSecsSavesDeltasBetweenFullCheckpoints) {
  CheckpointSaverOptions o;
  o.model_dir = TempDir("delta");
  o.save_secs = 10;
  o.is_incremental_checkpoint = true;
  o.save_delta_checkpoints_secs = 3;
  o.keep_checkpoint_max = 0;
  // t=3: a delta is due but nothing is saved yet, so a full one; then deltas every 3 s after
  // the last save (6, 9, 12); a full one 10 s after the first full (13); a delta 3 s later (16);
  // End saves step 17 in full.
  EXPECT_EQ(Train(o, 17), (std::vector<std::string>{"ckpt-3:full", "ckpt-6:delta", "ckpt-9:delta",
                                                    "ckpt-12:delta", "ckpt-13:full",
                                                    "ckpt-16:delta", "ckpt-17:full"}));
  // Every one restores: a delta through its chain.
  Model m;
  Build(&m);
  auto session = *Session::Create(m.graph);
  ASSERT_TRUE(session->Run({}, {}, {"init"}).ok());
  SaverOptions so;
  so.model_dir = o.model_dir;
  so.is_incremental_checkpoint = true;
  auto saver = *Saver::Create(*session, so);
  for (int step : {6, 12, 16}) {
    auto restored = saver->Restore("ckpt-" + std::to_string(step));
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(*restored, step);
  }
}

TEST(CheckpointSaverHookTest, DeltaSecsWithoutIncrementalSavesNoDeltas) {
  CheckpointSaverOptions o;
  o.model_dir = TempDir("nodelta");
  o.save_delta_checkpoints_secs = 2;  // ignored: is_incremental_checkpoint is false
  o.save_steps = 5;
  EXPECT_EQ(Train(o, 7), (std::vector<std::string>{"ckpt-5:full", "ckpt-7:full"}));
}

}  // namespace
}  // namespace recsdk
