// estimator_test.cc: the Estimator on a small CTR model with a planted signal (one sparse table
// through the key stage, dense features, an MLP): it learns (eval AUC near the planted model's),
// train/eval/predict share one tower and one table, evaluation inserts no key, checkpoints
// restore into a new Estimator with identical evaluation, Predict drops padded rows,
// TrainAndEvaluate evaluates periodically, and model_fn mistakes are named.
#include "recsdk/estimator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kSparse = 4;

SyntheticOptions Data(int64_t rows, uint64_t seed) {
  SyntheticOptions d;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kSparse, 300);
  d.num_dense = 4;
  d.zipf_exponent = 1.1;
  d.id_weight_scale = 1.5f;
  d.seed = seed;
  return d;
}

// Input: the rows of one planted model (seed 1): part 0 (even rows) trains, part 1 (odd rows)
// is held out. `rows` counts the rows of the part.
InputFn Input(int64_t rows, int part, int64_t batch, BatchOptions options = {}) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    auto data = SyntheticDataset(Data(2 * rows, 1));
    if (!data.ok()) return data.status();
    auto shard = Shard(*std::move(data), 2, part);
    if (!shard.ok()) return shard.status();
    return BatchRows(*std::move(shard), batch, options);
  };
}

struct ModelOptions {
  bool eval_lookup_trains = false;  // a model_fn mistake the Estimator must name
  int64_t static_batch = 0;         // > 0: the model only works on batches of this size
};

ModelFn Model(ModelOptions mo = {}) {
  return [mo](const Scope& s, const Features& f, const Labels& l, ModeKeys mode,
              const Params&) -> StatusOr<EstimatorSpec> {
    TableConfig c;
    c.name = "ids";
    c.dim = 8;
    c.device_vocabulary_size = 4096;
    c.initializer = Initializer::TruncatedNormal(0, 0.05, 3);
    auto table = create_table(s, c, SparseOptimizerConfig::Adagrad(0.1f, 0.1f));
    if (!table.ok()) return table.status();
    std::vector<Output> ids;
    for (int i = 1; i <= kSparse; ++i) ids.push_back(f.at("C" + std::to_string(i)));
    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.combiner = Combiner::kSum;
    lookup.is_train = mode == ModeKeys::kTrain || mo.eval_lookup_trains;
    auto emb = sparse_lookup(s, *table, ids, lookup);
    if (!emb.ok()) return emb.status();
    std::vector<Output> parts = *emb;
    parts.push_back(f.at("dense"));
    layers::MlpOptions mlp;
    mlp.hidden_units = {32, 16};
    mlp.output_units = 1;
    Output logits = layers::Mlp(s, ops::Concat(s, parts, 1), mlp);
    if (mo.static_batch > 0) {  // e.g. a model with a per-position bias
      auto zeros = Tensor::FromValues<float>(Shape{mo.static_batch, 1},
                                             std::vector<float>(mo.static_batch, 0.0f));
      logits = ops::Add(s, logits, ops::Const(s, *zeros));
    }
    Output prob = ops::Sigmoid(s, logits);
    EstimatorSpec spec;
    spec.predictions["prob"] = prob;
    if (mode == ModeKeys::kPredict) return spec;
    const Output label = l.at("label");
    spec.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
    spec.eval_metric_ops = {{"auc", MetricKind::kAuc, prob, label},
                            {"binned_auc", MetricKind::kBinnedAuc, prob, label}};
    if (mode == ModeKeys::kTrain) {
      AdamOptions a;
      a.learning_rate = 0.01;
      AdamOptimizer adam(a);
      auto dense = adam.Minimize(s, spec.loss);
      if (!dense.ok()) return dense.status();
      auto sparse = SparseMinimize(s, spec.loss);
      if (!sparse.ok()) return sparse.status();
      spec.train_op = ops::Group(s, {*dense, *sparse});
    }
    return spec;
  };
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/estimator_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

RunConfig Config(const std::string& model_dir) {
  RunConfig c;
  c.model_dir = model_dir;
  c.save_checkpoints_secs = 0;
  c.save_checkpoints_steps = 50;
  c.save_summary_steps = 25;
  c.log_step_count_steps = 0;
  c.seed = 5;
  return c;
}

double PlantedAuc(int64_t rows) {
  auto data = *Input(rows, 1, 1024)();
  std::vector<float> scores, labels;
  Batch b;
  while (*data->GetNext(&b)) {
    for (int64_t r = 0; r < b.num_rows(); ++r) {
      std::vector<int64_t> ids;
      for (int i = 1; i <= kSparse; ++i) {
        ids.push_back(b.column("C" + std::to_string(i))->data<int64_t>()[r]);
      }
      scores.push_back(static_cast<float>(SyntheticTrueLogit(
          Data(rows, 1), ids, absl::MakeConstSpan(b.column("dense")->data<float>() + 4 * r, 4))));
      labels.push_back(b.column("label")->data<float>()[r]);
    }
  }
  return *Auc(scores, labels);
}

TEST(EstimatorTest, LearnsSharesOneTowerAndTableAndEvalInsertsNothing) {
  const std::string dir = TempDir("learn");
  auto est = Estimator::Create(Model(), Config(dir));
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_TRUE((*est)->Train(Input(100 * 256, 0, 256), 100).ok());
  EXPECT_EQ(*(*est)->global_step(), 100);

  // One tower (3 dense layers: 6 variables) and one table, for three branches.
  auto vars = (*est)->get_dense_and_sparse_variable();
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_EQ(vars->first.size(), 6u);
  ASSERT_EQ(vars->second.size(), 1u);
  EXPECT_EQ(vars->second[0].table_name(), "ids");

  EmbeddingTable* table = *LookupTable(*(*est)->session(), "ids");
  const int64_t size = table->size();
  // Held-out rows: their keys include ones training never saw.
  auto result = (*est)->Evaluate(Input(8192, 1, 1024));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(table->size(), size) << "evaluation inserted keys";
  const double planted = PlantedAuc(8192);
  EXPECT_GT(result->at("auc"), 0.6);
  EXPECT_GT(result->at("auc"), planted - 0.12) << "planted " << planted;
  EXPECT_NEAR(result->at("binned_auc"), result->at("auc"), 1e-3);
  EXPECT_EQ(result->at("global_step"), 100);

  // TensorBoard files: training and evaluation.
  int events = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(events, 2);
}

TEST(EstimatorTest, CheckpointsRestoreIntoANewEstimator) {
  const std::string dir = TempDir("restore");
  EvalResult first;
  {
    auto est = *Estimator::Create(Model(), Config(dir));
    ASSERT_TRUE(est->Train(Input(60 * 128, 0, 128), 60).ok());
    EXPECT_FALSE(est->latest_checkpoint().empty());
    first = *est->Evaluate(Input(2048, 1, 512));
  }
  auto est = *Estimator::Create(Model(), Config(dir));
  auto again = est->Evaluate(Input(2048, 1, 512));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->at("global_step"), 60);
  EXPECT_DOUBLE_EQ(again->at("auc"), first.at("auc"));
  EXPECT_DOUBLE_EQ(again->at("loss"), first.at("loss"));
  // Training continues from step 60; max_steps counts from 0.
  ASSERT_TRUE(est->Train(Input(100 * 128, 0, 128), -1, 80).ok());
  EXPECT_EQ(*est->global_step(), 80);
  ASSERT_TRUE(est->Train(Input(100 * 128, 0, 128), -1, 80).ok());  // already there: no-op
  EXPECT_EQ(*est->global_step(), 80);
}

TEST(EstimatorTest, ResumeInputPositionContinuesTheInputOnlyWhenAskedTo) {
  // The input is 20 batches. Train 12 steps, then a new Estimator trains until the input ends:
  // with resume_input_position it continues at batch 12 (8 more steps, as an uninterrupted run
  // over the input), without it the input starts again at batch 0 (20 more steps).
  const InputFn input = Input(20 * 128, 0, 128);
  EstimatorOptions resume;
  resume.resume_input_position = true;
  auto run = [&](const std::string& name, bool first_resumes, bool second_resumes) {
    const std::string dir = TempDir(name);
    {
      auto est =
          *Estimator::Create(Model(), Config(dir), {}, first_resumes ? resume : EstimatorOptions{});
      EXPECT_TRUE(est->Train(input, 12).ok());
    }
    auto est =
        *Estimator::Create(Model(), Config(dir), {}, second_resumes ? resume : EstimatorOptions{});
    EXPECT_TRUE(est->Train(input).ok());
    return *est->global_step();
  };
  EXPECT_EQ(run("resume_on", true, true), 20);
  EXPECT_EQ(run("resume_off", true, false), 32);
  EXPECT_EQ(run("resume_late", false, true), 20);  // the position is saved either way

  // Within one process too: Train calls continue the same input; at its end, nothing is left.
  auto est = *Estimator::Create(Model(), Config(TempDir("resume_calls")), {}, resume);
  ASSERT_TRUE(est->Train(input, 6).ok());
  ASSERT_TRUE(est->Train(input, 6).ok());
  EXPECT_EQ(*est->global_step(), 12);
  ASSERT_TRUE(est->Train(input).ok());
  EXPECT_EQ(*est->global_step(), 20);
  ASSERT_TRUE(est->Train(input).ok());
  EXPECT_EQ(*est->global_step(), 20);
  // Without the option, each call starts the input again.
  auto fresh = *Estimator::Create(Model(), Config(TempDir("no_resume_calls")));
  ASSERT_TRUE(fresh->Train(input, 6).ok());
  ASSERT_TRUE(fresh->Train(input).ok());
  EXPECT_EQ(*fresh->global_step(), 26);
}

TEST(EstimatorTest, PredictDropsPaddedRows) {
  auto est = *Estimator::Create(Model(), Config(TempDir("predict")));
  ASSERT_TRUE(est->Train(Input(20 * 128, 0, 128), 20).ok());
  BatchOptions pad;
  pad.pad_remainder = true;
  int64_t rows = 0, batches = 0;
  ASSERT_TRUE(est->Predict(Input(1000, 1, 256, pad),
                           [&](const Batch& b, const std::map<std::string, Tensor>& p) {
                             EXPECT_EQ(p.at("prob").shape().dim(0), b.num_valid());
                             rows += p.at("prob").shape().dim(0);
                             ++batches;
                             return absl::OkStatus();
                           })
                  .ok());
  EXPECT_EQ(rows, 1000);
  EXPECT_EQ(batches, 4);
}

TEST(EstimatorTest, ExportedModelServesThePredictionsOfThePredictBranch) {
  const std::string dir = TempDir("export");
  auto est = *Estimator::Create(Model(), Config(dir + "/model"));
  ASSERT_TRUE(est->Train(Input(20 * 128, 0, 128), 20).ok());
  std::vector<ServingInputColumn> serving;
  for (int i = 1; i <= kSparse; ++i) {
    serving.push_back({"C" + std::to_string(i), DType::kInt64, Shape{Shape::kUnknownDim, 1}});
  }
  serving.push_back({"dense", DType::kFloat32, Shape{Shape::kUnknownDim, 4}});
  auto exported = est->ExportSavedModel(dir + "/export", serving);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto predictor = Predictor::Load(*exported);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  // Served under the model_fn's predictions key, not the graph's tensor name.
  EXPECT_EQ((*predictor)->signature().output_names, std::vector<std::string>{"prob"});
  int checked = 0;
  ASSERT_TRUE(est->Predict(Input(512, 1, 256),
                           [&](const Batch& b, const std::map<std::string, Tensor>& p) {
                             FeedList feeds;
                             for (const ServingInputColumn& c : serving) {
                               feeds.emplace_back(c.name, *b.column(c.name));
                             }
                             auto served = (*predictor)->PredictNamed(feeds);
                             if (!served.ok()) return served.status();
                             EXPECT_EQ(served->size(), 1u);
                             if (!served->contains("prob")) return absl::NotFoundError("prob");
                             const Tensor& mine = p.at("prob");
                             for (int64_t r = 0; r < mine.num_elements(); ++r) {
                               EXPECT_EQ(served->at("prob").data<float>()[r],
                                         mine.data<float>()[r]);
                             }
                             ++checked;
                             return absl::OkStatus();
                           })
                  .ok());
  EXPECT_EQ(checked, 2);
  EXPECT_FALSE(est->ExportSavedModel(dir + "/export", {{"nope", DType::kInt64, Shape{}}}).ok());
}

TEST(EstimatorTest, TrainAndEvaluateEvaluatesPeriodically) {
  std::FILE* log = std::tmpfile();
  EstimatorOptions options;
  options.log = log;
  auto est = *Estimator::Create(Model(), Config(TempDir("tae")), {}, options);
  TrainSpec train{Input(1000 * 64, 0, 64), 60, {}};
  EvalSpec eval;
  eval.input_fn = Input(1024, 1, 512);
  eval.every_n_steps = 20;
  auto result = est->TrainAndEvaluate(train, eval);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->at("global_step"), 60);
  std::rewind(log);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), log) != nullptr) text += buf;
  std::fclose(log);
  for (const char* at : {"eval at step 20:", "eval at step 40:", "eval at step 60:"}) {
    EXPECT_NE(text.find(at), std::string::npos) << text;
  }
}

TEST(EstimatorTest, AShortLastBatchErrorSaysToDropOrPadIt) {
  ModelOptions fixed;
  fixed.static_batch = 128;
  auto est = *Estimator::Create(Model(fixed), Config(""));
  const Status s = est->Train(Input(1000, 0, 128));  // 7 full batches, then 104 rows
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("104 rows where the first had 128"), std::string::npos)
      << s;
  EXPECT_NE(std::string(s.message()).find("drop_remainder"), std::string::npos) << s;
  BatchOptions drop;
  drop.drop_remainder = true;
  auto ok = *Estimator::Create(Model(fixed), Config(""));
  EXPECT_TRUE(ok->Train(Input(1000, 0, 128, drop)).ok());
  EXPECT_EQ(*ok->global_step(), 7);
}

// Issue 30: a model_dir holding ckpt-* directories but no index is refused, as Saver::Restore
// refuses it, instead of training from step 0 beside (and later over) those checkpoints.
TEST(EstimatorTest, ModelDirWithCheckpointsButNoIndexIsRefusedSayingHowToStartFresh) {
  const std::string dir = TempDir("no_index");
  {
    auto est = *Estimator::Create(Model(), Config(dir));
    ASSERT_TRUE(est->Train(Input(10 * 128, 0, 128), 10).ok());
  }
  ASSERT_TRUE(std::filesystem::remove(dir + "/checkpoint"));
  auto est = *Estimator::Create(Model(), Config(dir));
  const Status s = est->Train(Input(10 * 128, 0, 128), 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("index"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("start fresh"), std::string::npos) << s;
}

// Issue 30: an error of the input during training says which call, step and batch it stopped
// at, instead of the reader's bare words.
TEST(EstimatorTest, AnInputErrorNamesTheCallTheStepAndTheBatch) {
  auto failing = [](int64_t fail_at) -> InputFn {
    return [fail_at]() -> StatusOr<std::unique_ptr<Dataset>> {
      auto data = Input(10 * 128, 0, 128)();
      if (!data.ok()) return data.status();
      auto seen = std::make_shared<int64_t>(0);
      return Map(*std::move(data), [seen, fail_at](Batch b) -> StatusOr<Batch> {
        if ((*seen)++ == fail_at) return absl::DataLossError("bad block");
        return b;
      });
    };
  };
  auto est = *Estimator::Create(Model(), Config(""));
  const Status s = est->Train(failing(3), 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(std::string(s.message()).find("Estimator::Train"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("global step 3"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("batch 4"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("bad block"), std::string::npos) << s;
  const auto e = est->Evaluate(failing(1));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << e.status();
  EXPECT_NE(std::string(e.status().message()).find("Estimator::Evaluate"), std::string::npos)
      << e.status();
}

// StepLog: the global step and steps of every AfterRun the Estimator's hooks see.
class StepLog : public SessionRunHook {
 public:
  Status AfterRun(SessionRunContext& c, absl::Span<const Tensor>) override {
    calls.emplace_back(c.global_step, c.steps);
    return absl::OkStatus();
  }
  std::vector<std::pair<int64_t, int64_t>> calls;
};

// The spec's iterations_per_loop with the Estimator: the hooks run once per loop and see the
// step it ended at; the last loop stops at the asked step; the input may end inside a loop; the
// model trains exactly as with one step per call; periods must be multiples of the loop.
TEST(EstimatorTest, IterationsPerLoopRunsTheHooksOncePerLoop) {
  const std::string dir = TempDir("per_loop");
  RunConfig looped = Config(dir);
  looped.iterations_per_loop = 5;
  looped.save_checkpoints_steps = 10;
  looped.save_summary_steps = 5;
  auto est = Estimator::Create(Model(), looped);
  ASSERT_TRUE(est.ok()) << est.status();
  auto log = std::make_shared<StepLog>();
  ASSERT_TRUE((*est)->Train(Input(40 * 128, 0, 128), 23, -1, {log}).ok());
  EXPECT_EQ(*(*est)->global_step(), 23);
  EXPECT_EQ(log->calls,
            (std::vector<std::pair<int64_t, int64_t>>{{5, 5}, {10, 5}, {15, 5}, {20, 5}, {23, 3}}));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-10")) << "a checkpoint every 10 steps";
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-20"));
  // The input (12 batches) ends inside the third loop.
  log->calls.clear();
  ASSERT_TRUE((*est)->Train(Input(12 * 128, 0, 128), -1, -1, {log}).ok());
  EXPECT_EQ(*(*est)->global_step(), 35);
  EXPECT_EQ(log->calls, (std::vector<std::pair<int64_t, int64_t>>{{28, 5}, {33, 5}, {35, 2}}));

  // The same 35 steps, one per call: the same model.
  auto single = *Estimator::Create(Model(), Config(""));
  ASSERT_TRUE(single->Train(Input(40 * 128, 0, 128), 23).ok());
  ASSERT_TRUE(single->Train(Input(12 * 128, 0, 128)).ok());
  const EvalResult a = *(*est)->Evaluate(Input(2048, 1, 512));
  const EvalResult b = *single->Evaluate(Input(2048, 1, 512));
  EXPECT_DOUBLE_EQ(a.at("loss"), b.at("loss"));
  EXPECT_DOUBLE_EQ(a.at("auc"), b.at("auc"));

  RunConfig odd = Config("");
  odd.iterations_per_loop = 4;  // Config's save_summary_steps is 25
  odd.save_checkpoints_steps = 8;
  const Status st = Estimator::Create(Model(), odd).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message())
                .find("save_summary_steps 25 is not a multiple of "
                      "iterations_per_loop 4"),
            std::string::npos)
      << st;
}

TEST(EstimatorTest, ModelFnMistakesAreNamed) {
  ModelOptions bad;
  bad.eval_lookup_trains = true;
  auto est = *Estimator::Create(Model(bad), Config(""));
  const Status s = est->Train(Input(1024, 0, 128), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("is_train"), std::string::npos) << s;
  EXPECT_FALSE(Estimator::Create(nullptr, RunConfig()).ok());
  RunConfig unsupported;
  unsupported.protocol = "grpc";
  EXPECT_FALSE(Estimator::Create(Model(), unsupported).ok());
  RunConfig loop = Config("");
  loop.iterations_per_loop = 10;
  const Status per_loop = Estimator::Create(Model(), loop).status();
  EXPECT_NE(std::string(per_loop.message()).find("iterations_per_loop"), std::string::npos)
      << per_loop;
  auto ok = *Estimator::Create(Model(), Config(""));
  EXPECT_EQ(ok->Train(Input(1024, 0, 128), 5, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ok->ExportSavedModel("x", {{"dense", DType::kFloat32, Shape{}}}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // nothing built yet
}

}  // namespace
}  // namespace recsdk
