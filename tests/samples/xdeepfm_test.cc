// xdeepfm_test.cc: the xDeepFM sample (samples/xdeepfm) learns: trained on planted data, its
// held-out AUC beats a logistic regression over the same ids trained here, and comes within a
// stated distance of the planted model's own AUC.
#include "samples/xdeepfm/xdeepfm.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"
#include "tests/samples/sample_test_util.h"

namespace xdeepfm {
namespace {

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
  // One weight per (field, id): the first order alone.
  const std::vector<int64_t> offset = sample_test::FieldOffsets(kFields, FieldVocabulary);
  const double lr_auc = sample_test::BestLogisticRegressionAuc(
      offset.back(), sample_test::FieldRows(train.n, train.ids, kFields, offset, train.labels),
      sample_test::FieldRows(eval.n, eval.ids, kFields, offset, eval.labels));
  sample_test::ExpectLearned("xDeepFM", result->auc, lr_auc, result->planted_auc,
                             {kMarginOverLogisticRegression, kDistanceToPlanted});
}

TEST(XDeepFmSampleTest, BadFlagsAreRefused) {
  EXPECT_TRUE(
      sample_test::ParseStatus(ParseOptions, "xdeepfm", {"--deep_units=32,16", "--threads", "2"})
          .ok());
  sample_test::ExpectRefused(ParseOptions, "xdeepfm",
                             {{"--batch_size=x", "not an integer"},
                              {"--deep_units=64,,32", "not an integer"},
                              {"--cin_layers=64,0", "a layer < 1"},
                              {"--sparse_learning_rate=-1", "not a number > 0"},
                              {"--train_rows=10", "at least one batch"},
                              {"--bogus=1", "unknown flag --bogus"}});
}

}  // namespace
}  // namespace xdeepfm
