// wide_deep_test.cc: the Wide & Deep sample (samples/wide_deep) learns: trained on planted data,
// its held-out AUC beats a logistic regression over the same ids and crosses (the wide part
// alone) trained here, and comes within a stated distance of the planted model's own AUC.
#include "samples/wide_deep/wide_deep.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"
#include "tests/samples/sample_test_util.h"

namespace wide_deep {
namespace {

// Linear: one weight per (field, id) and per (cross, crossed id): the wide part alone.
struct Linear {
  std::vector<int64_t> offset = std::vector<int64_t>(kFields + kCrosses + 1, 0);
  Linear() {
    for (int f = 0; f < kFields; ++f) offset[f + 1] = offset[f] + FieldVocabulary(f);
    for (int c = 0; c < kCrosses; ++c) {
      const auto [a, b] = CrossFields(c);
      offset[kFields + c + 1] = offset[kFields + c] + FieldVocabulary(a) * FieldVocabulary(b);
    }
  }
  sample_test::LinearRows Rows(const PlantedRows& r) const {
    return {r.n,
            [this, &r](int64_t i, std::vector<sample_test::LinearFeature>* out) {
              const int64_t* ids = &r.ids[i * kFields];
              for (int f = 0; f < kFields; ++f) out->push_back({offset[f] + ids[f]});
              for (int c = 0; c < kCrosses; ++c) {
                out->push_back({offset[kFields + c] + CrossId(c, ids)});
              }
            },
            &r.labels};
  }
};

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
  const Linear linear;
  const double lr_auc = sample_test::BestLogisticRegressionAuc(
      linear.offset.back(), linear.Rows(train), linear.Rows(eval));
  sample_test::ExpectLearned("Wide & Deep", result->auc, lr_auc, result->planted_auc,
                             {kMarginOverLogisticRegression, kDistanceToPlanted});
}

TEST(WideDeepSampleTest, BadFlagsAreRefused) {
  EXPECT_TRUE(
      sample_test::ParseStatus(ParseOptions, "wide_deep", {"--deep_units=32,16", "--threads", "2"})
          .ok());
  sample_test::ExpectRefused(ParseOptions, "wide_deep",
                             {{"--batch_size=x", "not an integer"},
                              {"--deep_units=64,,32", "not an integer"},
                              {"--deep_units=64,0", "a layer < 1"},
                              {"--wide_learning_rate=-1", "not a number > 0"},
                              {"--train_rows=10", "at least one batch"},
                              {"--bogus=1", "unknown flag --bogus"}});
}

}  // namespace
}  // namespace wide_deep
