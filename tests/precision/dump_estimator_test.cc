// dump_estimator_test.cc: dumps with the Estimator (issue 25: "Estimator and Session both work with
// dumps on; dumping and checkpointing at the same time work", which the spec forbids and we need
// not): a small CTR model trains with checkpoints every two steps and a dump at one step.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/precision/dump_reader.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

InputFn Input(int64_t rows, int64_t batch) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    SyntheticOptions d;
    d.num_rows = rows;
    d.vocabulary_sizes = {100, 100};
    d.num_dense = 2;
    d.seed = 3;
    auto data = SyntheticDataset(d);
    if (!data.ok()) return data.status();
    return BatchRows(*std::move(data), batch);
  };
}

StatusOr<EstimatorSpec> Model(const Scope& s, const Features& f, const Labels& l, ModeKeys mode,
                              const Params&) {
  TableConfig c;
  c.name = "ids";
  c.dim = 4;
  c.device_vocabulary_size = 1024;
  c.initializer = Initializer::TruncatedNormal(0, 0.05, 3);
  auto table = create_table(s, c, SparseOptimizerConfig::Adagrad(0.1f, 0.1f));
  if (!table.ok()) return table.status();
  SparseLookupOptions lookup;
  lookup.combiner = Combiner::kSum;
  lookup.is_train = mode == ModeKeys::kTrain;
  auto emb = sparse_lookup(s, *table, {f.at("C1"), f.at("C2")}, lookup);
  if (!emb.ok()) return emb.status();
  std::vector<Output> parts = *emb;
  parts.push_back(f.at("dense"));
  layers::MlpOptions mlp;
  mlp.hidden_units = {8};
  mlp.output_units = 1;
  Output logits = layers::Mlp(s, ops::Concat(s, parts, 1), mlp);
  EstimatorSpec spec;
  spec.predictions["prob"] = ops::Sigmoid(s, logits);
  if (mode == ModeKeys::kPredict) return spec;
  spec.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, l.at("label"), logits));
  if (mode == ModeKeys::kTrain) {
    AdamOptimizer adam(AdamOptions{});
    auto dense = adam.Minimize(s, spec.loss);
    if (!dense.ok()) return dense.status();
    auto sparse = SparseMinimize(s, spec.loss);
    if (!sparse.ok()) return sparse.status();
    spec.train_op = ops::Group(s, {*dense, *sparse});
  }
  return spec;
}

TEST(DumpEstimatorTest, TrainsWithDumpsAndCheckpointsAtOnce) {
  const std::string model_dir = testing::FreshDir("estimator_model");
  const std::string dump_dir = testing::FreshDir("estimator_dump");
  RunConfig config;
  config.model_dir = model_dir;
  config.save_checkpoints_secs = 0;
  config.save_checkpoints_steps = 2;
  config.save_summary_steps = 0;
  config.log_step_count_steps = 0;
  config.seed = 5;
  config.session_config.enable_dump = true;
  config.session_config.dump_path = dump_dir;
  config.session_config.dump_step = "3";
  config.session_config.enable_dump_debug = true;
  auto est = Estimator::Create(Model, config);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_TRUE((*est)->Train(Input(6 * 32, 32), 6).ok());
  EXPECT_EQ(*(*est)->global_step(), 6);
  EXPECT_EQ((*est)->session()->stats().overflow_count, 0);

  const auto steps = testing::StepDirs(dump_dir);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.begin()->first, 3);
  auto manifest = internal::ReadDumpManifest(internal::Env::Default(), steps.begin()->second);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  bool lookup = false;
  for (const auto& op : manifest->ops) lookup = lookup || op.type.rfind("Table", 0) == 0;
  EXPECT_TRUE(lookup) << "no table op dumped";
  auto report = internal::FindNan(internal::Env::Default(), dump_dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->first.has_value()) << report->Text();
  // The checkpoints were written meanwhile.
  int checkpoints = 0;
  for (const auto& e : std::filesystem::directory_iterator(model_dir)) {
    checkpoints += e.path().filename().string().rfind("ckpt-", 0) == 0;
  }
  EXPECT_GE(checkpoints, 1);
}

}  // namespace
}  // namespace recsdk
