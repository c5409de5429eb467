// dcnv2_test.cc: the DCNv2 sample (samples/dcnv2) learns: trained on planted Criteo-format data,
// its held-out AUC beats a logistic regression over the same features trained here, and comes
// within a stated distance of the planted model's own AUC.
#include "samples/dcnv2/dcnv2.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/metrics.h"
#include "tests/samples/sample_test_util.h"

namespace dcnv2 {
namespace {

// Linear: one weight per (field, id) and per dense feature (the reader's log1p values), at
// offset[f] + id and offset.back() + d; an empty field (id 0) has none.
struct Linear {
  std::vector<int64_t> offset = std::vector<int64_t>(kSparseFields + 1, 0);
  Linear() {
    for (int f = 0; f < kSparseFields; ++f) offset[f + 1] = offset[f] + FieldVocabulary(f) + 1;
  }
  int64_t weights() const { return offset.back() + kDenseFields; }
  sample_test::LinearRows Rows(const PlantedRows& r) const {
    return {r.n,
            [this, &r](int64_t i, std::vector<sample_test::LinearFeature>* out) {
              for (int d = 0; d < kDenseFields; ++d) {
                out->push_back({offset.back() + d, DenseValue(r.counts[i * kDenseFields + d])});
              }
              for (int f = 0; f < kSparseFields; ++f) {
                const int64_t id = r.ids[i * kSparseFields + f];
                if (id != 0) out->push_back({offset[f] + id});
              }
            },
            &r.labels};
  }
};

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
  const Linear linear;
  const double lr_auc = sample_test::BestLogisticRegressionAuc(linear.weights(), linear.Rows(train),
                                                               linear.Rows(eval));
  sample_test::ExpectLearned("DCNv2", result->auc, lr_auc, result->planted_auc,
                             {kMarginOverLogisticRegression, kDistanceToPlanted});
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
  EXPECT_TRUE(
      sample_test::ParseStatus(ParseOptions, "dcnv2", {"--cross=mixture", "--rank", "4"}).ok());
  sample_test::ExpectRefused(ParseOptions, "dcnv2",
                             {{"--cross=diagonal", "not full, low_rank or mixture"},
                              {"--structure=tower", "not parallel or stacked"},
                              {"--batch_size=x", "not an integer"},
                              {"--deep_units=64,,32", "not a positive integer"},
                              {"--train_rows=10", "at least one batch"},
                              {"--bogus=1", "unknown flag --bogus"}});
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
