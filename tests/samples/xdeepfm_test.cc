// xdeepfm_test.cc: the xDeepFM sample (samples/xdeepfm) learns: trained on planted data, its
// held-out AUC beats a logistic regression over the same ids trained here, and comes within a
// stated distance of the planted model's own AUC.
#include "samples/xdeepfm/xdeepfm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"

namespace xdeepfm {
namespace {

// LogisticRegressionAuc: one weight per (field, id) and a bias, trained by per-coordinate
// Adagrad on the log loss, one sample at a time, with L2 on the weights a sample touches. Returns
// the held-out AUC.
double LogisticRegressionAuc(const PlantedRows& train, const PlantedRows& eval, int epochs,
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
      const double g = 1 / (1 + std::exp(-score(train, i))) - train.labels[i];
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
  auto auc = recsdk::Auc(scores, eval.labels);
  return auc.ok() ? *auc : 0;
}

// 500,000 planted rows, one epoch, 2 threads: ~8 s for the model, ~1 s for the baselines. Measured
// (seed 1): xDeepFM 0.747, best LR 0.659, planted 0.806. The model is data-limited: the same
// settings reach 0.781 at 1,000,000 rows and 0.790 at 2,000,000 (the sample's default size), while
// LR cannot see the field interactions; without the CIN (--cin_layers=2) the model reaches 0.711 at
// 500,000 rows. Hence the distance to the planted AUC is stated for this size.
constexpr double kMarginOverLogisticRegression = 0.05;
constexpr double kDistanceToPlanted = 0.08;

TEST(XDeepFmSampleTest, BeatsLogisticRegressionAndNearsThePlantedModel) {
  XDeepFmOptions o;
  o.train_rows = 500000;
  o.eval_rows = 20000;
  o.threads = 2;
  o.model_dir = "";
  o.out = stderr;
  auto result = xdeepfm::Run(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, o.train_rows / o.batch_size);

  // The sample's own rows (seed 1: train stream 2, eval stream 3). The baseline is the best of a
  // few settings, scored on the held-out rows themselves: if anything, flattering LR.
  const PlantedRows train = MakePlantedRows(o.train_rows, 2 * o.seed);
  const PlantedRows eval = MakePlantedRows(o.eval_rows, 2 * o.seed + 1);
  double lr_auc = 0;
  for (const auto& [epochs, rate] :
       std::vector<std::pair<int, double>>{{1, 0.05}, {1, 0.1}, {3, 0.05}}) {
    const double auc = LogisticRegressionAuc(train, eval, epochs, rate, 1e-4);
    std::fprintf(stderr, "LR epochs %d rate %.2f: AUC %.4f\n", epochs, rate, auc);
    lr_auc = std::max(lr_auc, auc);
  }
  std::fprintf(stderr, "xDeepFM %.4f, best LR %.4f, planted %.4f\n", result->auc, lr_auc,
               result->planted_auc);
  EXPECT_GT(result->auc, lr_auc + kMarginOverLogisticRegression);
  EXPECT_GT(result->auc, result->planted_auc - kDistanceToPlanted);
  EXPECT_LT(result->auc, result->planted_auc);
}

TEST(XDeepFmSampleTest, BadFlagsAreRefused) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "xdeepfm");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseOptions(static_cast<int>(argv.size()), argv.data()).status();
  };
  EXPECT_TRUE(parse({"--deep_units=32,16", "--threads", "2"}).ok());
  for (const auto& [flag, what] : std::vector<std::pair<std::string, std::string>>{
           {"--batch_size=x", "not an integer"},
           {"--deep_units=64,,32", "not an integer"},
           {"--cin_layers=64,0", "a layer < 1"},
           {"--sparse_learning_rate=-1", "not a number > 0"},
           {"--train_rows=10", "at least one batch"},
           {"--bogus=1", "unknown flag --bogus"}}) {
    const recsdk::Status st = parse({flag});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace xdeepfm
