// wide_deep_test.cc: the Wide & Deep sample (samples/wide_deep) learns: trained on planted data,
// its held-out AUC beats a logistic regression over the same ids and crosses (the wide part
// alone) trained here, and comes within a stated distance of the planted model's own AUC.
#include "samples/wide_deep/wide_deep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"

namespace wide_deep {
namespace {

// LogisticRegressionAuc: one weight per (field, id) and per (cross, crossed id) and a bias,
// trained by per-coordinate Adagrad on the log loss, one sample at a time, with L2 on the weights
// a sample touches. Returns the held-out AUC.
double LogisticRegressionAuc(const PlantedRows& train, const PlantedRows& eval, int epochs,
                             double lr, double l2) {
  std::vector<int64_t> offset(kFields + kCrosses + 1, 0);
  for (int f = 0; f < kFields; ++f) offset[f + 1] = offset[f] + FieldVocabulary(f);
  for (int c = 0; c < kCrosses; ++c) {
    const auto [a, b] = CrossFields(c);
    offset[kFields + c + 1] = offset[kFields + c] + FieldVocabulary(a) * FieldVocabulary(b);
  }
  std::vector<double> w(offset.back(), 0.0), gw(offset.back(), 1e-6);
  double bias = 0, gb = 1e-6;
  auto slots = [&](const PlantedRows& r, int64_t i, int64_t* out) {
    const int64_t* ids = &r.ids[i * kFields];
    for (int f = 0; f < kFields; ++f) out[f] = offset[f] + ids[f];
    for (int c = 0; c < kCrosses; ++c) out[kFields + c] = offset[kFields + c] + CrossId(c, ids);
  };
  auto score = [&](const int64_t* k) {
    double z = bias;
    for (int j = 0; j < kFields + kCrosses; ++j) z += w[k[j]];
    return z;
  };
  int64_t k[kFields + kCrosses];
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < train.n; ++i) {
      slots(train, i, k);
      const double g = 1 / (1 + std::exp(-score(k))) - train.labels[i];
      gb += g * g;
      bias -= lr * g / std::sqrt(gb);
      for (int j = 0; j < kFields + kCrosses; ++j) {
        const double gi = g + l2 * w[k[j]];
        gw[k[j]] += gi * gi;
        w[k[j]] -= lr * gi / std::sqrt(gw[k[j]]);
      }
    }
  }
  std::vector<float> scores;
  for (int64_t i = 0; i < eval.n; ++i) {
    slots(eval, i, k);
    scores.push_back(static_cast<float>(score(k)));
  }
  auto auc = recsdk::Auc(scores, eval.labels);
  return auc.ok() ? *auc : 0;
}

// 2,000,000 planted rows, one epoch, 2 threads: ~5 s for the model, ~2 s for the baselines.
// The model is data-limited: the same settings reach 0.716 at 400,000 rows, 0.751 at 2,000,000
// and 0.774 at 4,000,000 (the sample's default size) against the planted 0.795, while LR stays
// near its ceiling (~0.69, it cannot see the latent interactions). Hence the distance to the
// planted AUC is stated for this size.
constexpr double kMarginOverLogisticRegression = 0.03;
constexpr double kDistanceToPlanted = 0.06;

TEST(WideDeepSampleTest, BeatsLogisticRegressionAndNearsThePlantedModel) {
  WideDeepOptions o;
  o.train_rows = 2000000;
  o.eval_rows = 20000;
  o.threads = 2;
  o.model_dir = "";
  o.out = stderr;
  auto result = wide_deep::Run(o);
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
  std::fprintf(stderr, "Wide & Deep %.4f, best LR %.4f, planted %.4f\n", result->auc, lr_auc,
               result->planted_auc);
  EXPECT_GT(result->auc, lr_auc + kMarginOverLogisticRegression);
  EXPECT_GT(result->auc, result->planted_auc - kDistanceToPlanted);
  EXPECT_LT(result->auc, result->planted_auc);
}

TEST(WideDeepSampleTest, BadFlagsAreRefused) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "wide_deep");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseOptions(static_cast<int>(argv.size()), argv.data()).status();
  };
  EXPECT_TRUE(parse({"--deep_units=32,16", "--threads", "2"}).ok());
  for (const auto& [flag, what] : std::vector<std::pair<std::string, std::string>>{
           {"--batch_size=x", "not an integer"},
           {"--deep_units=64,,32", "not an integer"},
           {"--deep_units=64,0", "a layer < 1"},
           {"--wide_learning_rate=-1", "not a number > 0"},
           {"--train_rows=10", "at least one batch"},
           {"--bogus=1", "unknown flag --bogus"}}) {
    const recsdk::Status st = parse({flag});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace wide_deep
