// mmoe_test.cc: the MMoE sample (samples/mmoe) learns both tasks: trained on planted data with
// two correlated tasks, each task's held-out AUC beats a logistic regression for that task over
// the same ids trained here, and comes within a stated distance of the planted model's own AUC.
#include "samples/mmoe/mmoe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"

namespace mmoe {
namespace {

// LogisticRegressionAuc: for task t, one weight per (field, id) and a bias, trained by
// per-coordinate Adagrad on the log loss, one sample at a time, with L2 on the weights a sample
// touches. Returns the held-out AUC.
double LogisticRegressionAuc(const PlantedRows& train, const PlantedRows& eval, int t, int epochs,
                             double lr, double l2) {
  std::vector<int64_t> offset(kFields + 1, 0);
  for (int f = 0; f < kFields; ++f) offset[f + 1] = offset[f] + FieldVocabulary(f);
  std::vector<double> w(offset.back(), 0.0), gw(offset.back(), 1e-6);
  double bias = 0, gb = 1e-6;
  auto score = [&](const PlantedRows& r, int64_t i) {
    double z = bias;
    for (int f = 0; f < kFields; ++f) z += w[offset[f] + r.ids[i * kFields + f]];
    return z;
  };
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < train.n; ++i) {
      const double g = 1 / (1 + std::exp(-score(train, i))) - train.labels[t][i];
      gb += g * g;
      bias -= lr * g / std::sqrt(gb);
      for (int f = 0; f < kFields; ++f) {
        const int64_t k = offset[f] + train.ids[i * kFields + f];
        const double gi = g + l2 * w[k];
        gw[k] += gi * gi;
        w[k] -= lr * gi / std::sqrt(gw[k]);
      }
    }
  }
  std::vector<float> scores;
  for (int64_t i = 0; i < eval.n; ++i) scores.push_back(static_cast<float>(score(eval, i)));
  auto auc = recsdk::Auc(scores, eval.labels[t]);
  return auc.ok() ? *auc : 0;
}

// 1,000,000 planted rows, one epoch, 2 threads: ~11 s for the model, ~4 s for the baselines.
// Measured (seed 1): MMoE 0.735 / 0.737, best LR 0.680 / 0.670, planted 0.770 / 0.778 (tasks
// 0 / 1). The model is data-limited: 0.763 / 0.772 at 4,000,000 rows (the sample's default
// size); with 64-unit experts, 0.724 / 0.723 at this size. Hence the distance to the planted AUC
// is stated for this size.
constexpr double kMarginOverLogisticRegression = 0.03;
constexpr double kDistanceToPlanted = 0.06;

TEST(MmoeSampleTest, BothTasksBeatLogisticRegressionAndNearThePlantedModel) {
  MmoeOptions o;
  o.train_rows = 1000000;
  o.eval_rows = 20000;
  o.threads = 2;
  o.model_dir = "";
  o.out = stderr;
  auto result = mmoe::Run(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, o.train_rows / o.batch_size);
  EXPECT_GT(result->planted_correlation, 0.4);  // the tasks are related, not the same
  EXPECT_LT(result->planted_correlation, 0.8);

  // The sample's own rows (seed 1: train stream 2, eval stream 3). The baseline is the best of a
  // few settings, scored on the held-out rows themselves: if anything, flattering LR.
  const PlantedRows train = MakePlantedRows(o.train_rows, 2 * o.seed);
  const PlantedRows eval = MakePlantedRows(o.eval_rows, 2 * o.seed + 1);
  for (int t = 0; t < kTasks; ++t) {
    double lr_auc = 0;
    for (const auto& [epochs, rate] :
         std::vector<std::pair<int, double>>{{1, 0.05}, {1, 0.1}, {3, 0.05}}) {
      const double auc = LogisticRegressionAuc(train, eval, t, epochs, rate, 1e-4);
      std::fprintf(stderr, "task %d LR epochs %d rate %.2f: AUC %.4f\n", t, epochs, rate, auc);
      lr_auc = std::max(lr_auc, auc);
    }
    std::fprintf(stderr, "task %d: MMoE %.4f, best LR %.4f, planted %.4f\n", t, result->auc[t],
                 lr_auc, result->planted_auc[t]);
    EXPECT_GT(result->auc[t], lr_auc + kMarginOverLogisticRegression) << "task " << t;
    EXPECT_GT(result->auc[t], result->planted_auc[t] - kDistanceToPlanted) << "task " << t;
    EXPECT_LT(result->auc[t], result->planted_auc[t]) << "task " << t;
  }
}

TEST(MmoeSampleTest, BadFlagsAreRefused) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "mmoe");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseOptions(static_cast<int>(argv.size()), argv.data()).status();
  };
  EXPECT_TRUE(parse({"--expert_units=32,16", "--experts", "3"}).ok());
  for (const auto& [flag, what] : std::vector<std::pair<std::string, std::string>>{
           {"--batch_size=x", "not an integer"},
           {"--tower_units=64,,32", "not an integer"},
           {"--expert_units=64,0", "a layer < 1"},
           {"--dense_learning_rate=0", "not a number > 0"},
           {"--train_rows=10", "at least one batch"},
           {"--bogus=1", "unknown flag --bogus"}}) {
    const recsdk::Status st = parse({flag});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  }
  // An expert count the layer refuses surfaces from Run as the layer's error, not a crash.
  MmoeOptions o;
  o.train_rows = 1024;
  o.eval_rows = 10;
  o.experts = 0;
  o.model_dir = "";
  std::FILE* sink = std::tmpfile();
  o.out = sink;
  auto result = mmoe::Run(o);
  std::fclose(sink);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.status().message()).find("num_experts 0"), std::string::npos)
      << result.status();
}

}  // namespace
}  // namespace mmoe
