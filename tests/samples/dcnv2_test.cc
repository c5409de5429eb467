// dcnv2_test.cc: the DCNv2 sample (samples/dcnv2) learns: trained on planted Criteo-format data,
// its held-out AUC beats a logistic regression over the same features trained here, and comes
// within a stated distance of the planted model's own AUC.
#include "samples/dcnv2/dcnv2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/metrics.h"

namespace dcnv2 {
namespace {

// LogisticRegression: one weight per (field, id) and per dense feature (the reader's log1p
// values) and a bias, trained by per-coordinate Adagrad on the log loss, one sample at a time,
// with L2 on the weights a sample touches. Returns the held-out AUC.
double LogisticRegressionAuc(const PlantedRows& train, const PlantedRows& eval, int epochs,
                             double lr, double l2) {
  // Weight and squared-gradient sum of (field, id) at offset[f] + id.
  std::vector<int64_t> offset(kSparseFields + 1, 0);
  for (int f = 0; f < kSparseFields; ++f) offset[f + 1] = offset[f] + FieldVocabulary(f) + 1;
  std::vector<double> w(offset.back(), 0.0), gw(offset.back(), 1e-6);
  std::vector<double> wd(kDenseFields, 0.0), gd(kDenseFields, 1e-6);
  double bias = 0, gb = 1e-6;
  auto score = [&](const PlantedRows& r, int64_t i) {
    double z = bias;
    for (int d = 0; d < kDenseFields; ++d) z += wd[d] * DenseValue(r.counts[i * kDenseFields + d]);
    for (int f = 0; f < kSparseFields; ++f) {
      const int64_t id = r.ids[i * kSparseFields + f];
      if (id != 0) z += w[offset[f] + id];
    }
    return z;
  };
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < train.n; ++i) {
      const double g = 1 / (1 + std::exp(-score(train, i))) - train.labels[i];
      gb += g * g;
      bias -= lr * g / std::sqrt(gb);
      for (int d = 0; d < kDenseFields; ++d) {
        const double gi = g * DenseValue(train.counts[i * kDenseFields + d]) + l2 * wd[d];
        gd[d] += gi * gi;
        wd[d] -= lr * gi / std::sqrt(gd[d]);
      }
      for (int f = 0; f < kSparseFields; ++f) {
        const int64_t id = train.ids[i * kSparseFields + f];
        if (id == 0) continue;
        const int64_t k = offset[f] + id;
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

// TempDir: a fresh directory for one run's data files (104 MB at the learning test's size),
// removed when the ScopedDir goes.
struct ScopedDir {
  std::string path;
  ~ScopedDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = fmt::format(
      "{}/{}", root != nullptr ? root : std::filesystem::temp_directory_path().string(), name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// 400,000 planted rows, one epoch, 2 threads: ~10 s for the model and ~5 s for the baselines at
// -O2. Measured (seed 1): DCNv2 0.7225, best LR 0.7014, planted 0.8011. The model is
// data-limited, not the baseline: with the same settings the sample's held-out AUC is 0.686 at
// 100,000 rows (below LR's 0.693) and 0.756 at 1,600,000 (its default size), while LR stays at
// its linear ceiling (~0.70). Hence the distance to the planted AUC is stated for this size.
constexpr double kMarginOverLogisticRegression = 0.01;
constexpr double kDistanceToPlanted = 0.10;

TEST(Dcnv2SampleTest, BeatsLogisticRegressionAndNearsThePlantedModel) {
  Dcnv2Options o;
  o.train_rows = 400000;
  o.eval_rows = 20000;
  o.threads = 2;
  const ScopedDir dir{TempDir("dcnv2_test")};
  o.data_dir = dir.path;
  o.out = stderr;
  auto result = dcnv2::Run(o);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, o.train_rows / o.batch_size);

  // The same rows the sample wrote (seed 1: train stream 2, eval stream 3). The baseline is the
  // best of a few settings, scored on the held-out rows themselves: if anything, flattering LR.
  const PlantedRows train = MakePlantedRows(o.train_rows, 2 * o.seed);
  const PlantedRows eval = MakePlantedRows(o.eval_rows, 2 * o.seed + 1);
  double lr_auc = 0;
  for (const auto& [epochs, rate] :
       std::vector<std::pair<int, double>>{{1, 0.05}, {1, 0.1}, {3, 0.05}}) {
    const double auc = LogisticRegressionAuc(train, eval, epochs, rate, 1e-4);
    std::fprintf(stderr, "LR epochs %d rate %.2f: AUC %.4f\n", epochs, rate, auc);
    lr_auc = std::max(lr_auc, auc);
  }
  std::fprintf(stderr, "DCNv2 %.4f, best LR %.4f, planted %.4f\n", result->auc, lr_auc,
               result->planted_auc);
  EXPECT_GT(result->auc, lr_auc + kMarginOverLogisticRegression);
  EXPECT_GT(result->auc, result->planted_auc - kDistanceToPlanted);
  EXPECT_LT(result->auc, result->planted_auc);
}

// The other cross structures, the stacked layout and LayerNorm build and learn something on a
// small run (not a quality bar: 20,000 rows).
TEST(Dcnv2SampleTest, VariantsTrain) {
  for (const char* cross : {"low_rank", "mixture"}) {
    SCOPED_TRACE(cross);
    Dcnv2Options o;
    o.train_rows = 20000;
    o.eval_rows = 5000;
    o.threads = 2;
    o.cross = cross;
    o.rank = 8;
    o.experts = 2;
    o.structure = "stacked";
    o.dense_norm = "layer";
    o.deep_units = {64};
    const ScopedDir dir{TempDir(std::string("dcnv2_variant_") + cross)};
    o.data_dir = dir.path;
    std::FILE* sink = std::tmpfile();
    o.out = sink;
    auto result = dcnv2::Run(o);
    std::fclose(sink);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GT(result->auc, 0.6);
  }
}

TEST(Dcnv2SampleTest, BadFlagsAreRefused) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "dcnv2");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseOptions(static_cast<int>(argv.size()), argv.data()).status();
  };
  EXPECT_TRUE(parse({"--cross=mixture", "--rank", "4"}).ok());
  for (const auto& [flag, what] : std::vector<std::pair<std::string, std::string>>{
           {"--cross=diagonal", "not full, low_rank or mixture"},
           {"--structure=tower", "not parallel or stacked"},
           {"--batch_size=x", "not an integer"},
           {"--deep_units=64,,32", "not a positive integer"},
           {"--train_rows=10", "at least one batch"},
           {"--bogus=1", "unknown flag --bogus"}}) {
    const recsdk::Status st = parse({flag});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  }
  // A rank the cross layer refuses surfaces from Run as the layer's error, not a crash.
  Dcnv2Options o;
  o.train_rows = 1024;
  o.eval_rows = 10;
  o.cross = "low_rank";
  o.rank = 0;
  const ScopedDir dir{TempDir("dcnv2_bad_rank")};
  o.data_dir = dir.path;
  auto result = dcnv2::Run(o);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.status().message()).find("rank 0 must be > 0"), std::string::npos)
      << result.status();
}

// Any session option from a file (--session_config or SESSION_CONFIG): enable_dump + dump_path
// make the sample's run write a dump; a bad file is refused naming it.
TEST(Dcnv2SampleTest, SessionConfigFileTurnsOnDumps) {
  const ScopedDir dir{TempDir("dcnv2_session_config")};
  const std::string config = dir.path + "/session_config.json";
  std::ofstream(config) << "{\"enable_dump\": true, \"dump_path\": \"" << dir.path
                        << "/dump\", \"dump_step\": \"1\"}";
  setenv("SESSION_CONFIG", config.c_str(), 1);
  char prog[] = "dcnv2";
  std::string data_dir = "--data_dir=" + dir.path + "/data";
  char train_rows[] = "--train_rows=2048", eval_rows[] = "--eval_rows=64",
       units[] = "--deep_units=16";
  char* argv[] = {prog, data_dir.data(), train_rows, eval_rows, units};
  auto o = ParseOptions(5, argv);
  unsetenv("SESSION_CONFIG");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->session_config.has_value());
  std::FILE* sink = std::tmpfile();
  o->out = sink;
  auto result = dcnv2::Run(*o);
  std::fclose(sink);
  ASSERT_TRUE(result.ok()) << result.status();
  int manifests = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path + "/dump", ec)) {
    if (e.path().filename() == "manifest.json") ++manifests;
  }
  EXPECT_EQ(manifests, 1);

  std::string bad = "--session_config=" + dir.path + "/missing.json";
  char* argv_bad[] = {prog, bad.data()};
  auto refused = ParseOptions(2, argv_bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(refused.status().message()).find(dir.path + "/missing.json"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace dcnv2
