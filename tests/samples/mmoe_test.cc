// mmoe_test.cc: the MMoE sample (samples/mmoe) learns both tasks: trained on planted data with
// two correlated tasks, each task's held-out AUC beats a logistic regression for that task over
// the same ids trained here, and comes within a stated distance of the planted model's own AUC.
#include "samples/mmoe/mmoe.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/metrics.h"
#include "tests/samples/sample_test_util.h"

namespace mmoe {
namespace {

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
  // For each task, one weight per (field, id): the first-order parts alone.
  const std::vector<int64_t> offset = sample_test::FieldOffsets(kFields, FieldVocabulary);
  for (int t = 0; t < kTasks; ++t) {
    SCOPED_TRACE(fmt::format("task {}", t));
    const double lr_auc = sample_test::BestLogisticRegressionAuc(
        offset.back(), sample_test::FieldRows(train.n, train.ids, kFields, offset, train.labels[t]),
        sample_test::FieldRows(eval.n, eval.ids, kFields, offset, eval.labels[t]),
        fmt::format("task {} ", t));
    sample_test::ExpectLearned(fmt::format("task {}: MMoE", t), result->auc[t], lr_auc,
                               result->planted_auc[t],
                               {kMarginOverLogisticRegression, kDistanceToPlanted});
  }
}

TEST(MmoeSampleTest, BadFlagsAreRefused) {
  EXPECT_TRUE(
      sample_test::ParseStatus(ParseOptions, "mmoe", {"--expert_units=32,16", "--experts", "3"})
          .ok());
  sample_test::ExpectRefused(ParseOptions, "mmoe",
                             {{"--batch_size=x", "not an integer"},
                              {"--tower_units=64,,32", "not an integer"},
                              {"--expert_units=64,0", "a layer < 1"},
                              {"--dense_learning_rate=0", "not a number > 0"},
                              {"--train_rows=10", "at least one batch"},
                              {"--bogus=1", "unknown flag --bogus"}});
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
