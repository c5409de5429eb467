// gemm_tuner_test.cc: auto_tune_mode's GEMM tuner (src/device/cpu/gemm_tuner.cc): a tuned plan
// computes the product (single and batched, transposed operands); the bank file is written,
// keyed by machine and threads, read back by a later tuner without measuring again, and keeps
// other machines' lines; a malformed bank is an error naming the file and the line; a Session
// with auto_tune_mode trains to the same loss as without it and leaves its shapes in the bank.
#include "src/device/cpu/gemm_tuner.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/device/cpu/gemm_test_util.h"

namespace recsdk::internal {
namespace {

using gemm_test::RandomVector;

std::string TempDir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("recsdk_gemm_tuner_" + name)).string();
  std::filesystem::remove_all(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Tune: tunes `s` with fresh operands and checks the tuned plan's product against the reference.
GemmPlan TuneAndCheck(GemmTuner& tuner, const GemmShape& s) {
  const int64_t items = std::max<int64_t>(s.batch, 1);
  const std::vector<float> a = RandomVector(items * s.m * s.k, 1);
  const std::vector<float> b = RandomVector(items * s.k * s.n, 2);
  std::vector<float> c(items * s.m * s.n, 0.0f), want(c.size());
  const GemmPlan plan = tuner.Plan(s, a.data(), b.data(), c.data());
  std::fill(c.begin(), c.end(), 99.0f);
  RunGemmPlan(plan, s, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < items; ++i) {
    SgemmReference(s.m, s.n, s.k, a.data() + i * s.m * s.k, s.trans_a ? s.m : s.k, s.trans_a,
                   b.data() + i * s.k * s.n, s.trans_b ? s.k : s.n, s.trans_b,
                   want.data() + i * s.m * s.n, s.n);
  }
  const float tol = 4e-5f * std::sqrt(static_cast<float>(s.k));
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_NEAR(c[i], want[i], tol) << "at " << i;
    if (std::abs(c[i] - want[i]) > tol) break;
  }
  return plan;
}

// Every plan the tuner may pick, by rows and by columns, on both backends and all transposes,
// with an epilogue that must see every row of the finished product exactly once.
TEST(GemmTunerTest, EveryCandidatePlanComputesTheProduct) {
  const int64_t m = 70, n = 150, k = 33;
  for (GemmBackend backend : {GemmBackend::kEigen, GemmBackend::kOneDnn}) {
    for (bool columns : {false, true}) {
      for (int parts : {1, 2, 4, 8}) {
        for (int t = 0; t < 4; ++t) {
          const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
          const std::vector<float> a = RandomVector(m * k, 3), b = RandomVector(k * n, 4);
          std::vector<float> c(m * n, 99.0f), want(m * n);
          SgemmReference(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, want.data(),
                         n);
          std::vector<int> seen(m, 0);
          RunGemmPlan(GemmPlan{backend, parts, columns}, GemmShape{0, m, n, k, ta, tb}, a.data(),
                      b.data(), c.data(), [&](int64_t r0, int64_t r1) {
                        for (int64_t r = r0; r < r1; ++r) {
                          ++seen[r];
                          for (int64_t j = 0; j < n; ++j) c[r * n + j] += 1.0f;
                        }
                      });
          const std::string what = std::string(GemmBackendName(backend)) + " " +
                                   std::to_string(parts) + (columns ? " columns" : " rows") +
                                   " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
          EXPECT_EQ(seen, std::vector<int>(m, 1)) << what;
          for (int64_t i = 0; i < m * n; ++i) {
            ASSERT_NEAR(c[i], want[i] + 1.0f, 1e-4f) << what << " at " << i;
          }
        }
      }
    }
  }
}

TEST(GemmTunerTest, TunedPlansComputeTheProduct) {
  auto tuner = GemmTuner::Create(TempDir("products"), 2);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  const std::vector<GemmShape> shapes = {
      {0, 256, 64, 96, false, false}, {0, 200, 48, 130, true, false}, {0, 96, 257, 64, false, true},
      {0, 7, 5, 3, false, false},     {6, 16, 16, 32, false, true},   {3, 20, 9, 17, true, true}};
  for (const GemmShape& s : shapes) {
    const GemmPlan plan = TuneAndCheck(**tuner, s);
    EXPECT_GE(plan.parts, 1);
    if (s.batch > 0) {
      EXPECT_EQ(plan.parts, 1);
    }
  }
  const std::vector<GemmTuneRecord> records = (*tuner)->Records();
  ASSERT_EQ(records.size(), shapes.size());
  EXPECT_EQ((*tuner)->measured(), static_cast<int64_t>(shapes.size()));
  for (const GemmTuneRecord& r : records) {
    EXPECT_GT(r.default_us, 0);
    // The default plan is a candidate, so the chosen one measured no slower.
    EXPECT_LE(r.tuned_us, r.default_us);
  }
}

TEST(GemmTunerTest, TheBankIsKeyedByMachineAndReadBackWithoutMeasuring) {
  const std::string dir = TempDir("bank");
  std::filesystem::create_directories(dir);
  const std::string foreign = "Other_CPU/avx2\t4\t0 64 64 64 0 0\teigen 2 rows\t10.0 9.0\n";
  { std::ofstream(dir + "/gemm.tsv") << foreign; }
  const GemmShape s{0, 320, 40, 72, false, false};
  GemmPlan first;
  {
    auto tuner = GemmTuner::Create(dir, 2);
    ASSERT_TRUE(tuner.ok()) << tuner.status();
    first = TuneAndCheck(**tuner, s);
    EXPECT_EQ((*tuner)->measured(), 1);
  }
  const std::string text = ReadAll(dir + "/gemm.tsv");
  EXPECT_NE(text.find(foreign), std::string::npos) << text;  // other machines' lines are kept
  EXPECT_NE(text.find(GemmTuner::MachineKey() + "\t2\t0 320 40 72 0 0\t"), std::string::npos)
      << text;
  // A later process (here: tuner) with the same machine and threads reads the choice back.
  auto again = GemmTuner::Create(dir, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(TuneAndCheck(**again, s), first);
  EXPECT_EQ((*again)->measured(), 0);
  // Another thread count is another key: it measures.
  auto other = GemmTuner::Create(dir, 1);
  ASSERT_TRUE(other.ok()) << other.status();
  TuneAndCheck(**other, s);
  EXPECT_EQ((*other)->measured(), 1);
}

TEST(GemmTunerTest, AMalformedBankIsAnErrorNamingTheFileAndLine) {
  const std::string dir = TempDir("malformed");
  std::filesystem::create_directories(dir);
  const std::string good = "Other_CPU/avx2\t4\t0 64 64 64 0 0\teigen 2 rows\t10.0 9.0\n";
  for (const std::string& bad : {std::string("not a bank line\n"),
                                 std::string("cpu\t2\t0 64 -1 64 0 0\teigen 2 rows\t1 1\n"),
                                 std::string("cpu\t2\t0 64 64 64 0 0\tmkl 2 rows\t1 1\n"),
                                 std::string("cpu\t2\t0 64 64 64 0 0\teigen 99 rows\t1 1\n"),
                                 std::string("cpu\t2\t0 64 64 64 0 0\teigen 2 diagonal\t1 1\n"),
                                 std::string("cpu\t2\t0 64 64 64 0 0\teigen 2 rows\t1\n")}) {
    { std::ofstream(dir + "/gemm.tsv") << good << bad; }
    auto tuner = GemmTuner::Create(dir, 2);
    ASSERT_FALSE(tuner.ok()) << bad;
    const std::string msg(tuner.status().message());
    EXPECT_NE(msg.find(dir + "/gemm.tsv"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("delete the file"), std::string::npos) << msg;
  }
}

// A two-layer regression trained with SGD, with and without auto_tune_mode.
std::vector<float> TrainLosses(const SessionConfig& config) {
  Graph g;
  g.set_random_seed(7);
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{256, 24});
  Output y = ops::Placeholder(root.WithOpName("y"), DType::kFloat32, Shape{256, 1});
  layers::DenseOptions d1;
  d1.units = 64;
  d1.activation = layers::Activation::kRelu;
  d1.name = "fc1";
  layers::DenseOptions d2;
  d2.units = 1;
  d2.name = "fc2";
  Output pred = layers::Dense(root, layers::Dense(root, x, d1), d2);
  Output loss =
      ops::ReduceMean(root.WithOpName("loss"), ops::Square(root, ops::Sub(root, pred, y)));
  SgdOptimizer sgd(SgdOptions{0.05});
  auto train = sgd.Minimize(root, loss);
  EXPECT_TRUE(train.ok()) << train.status();
  Node* init = GlobalVariablesInitializer(root);
  auto session = Session::Create(g, config);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok() || !train.ok()) return {};
  EXPECT_TRUE((*session)->Run({}, {}, {init->name()}).ok());
  Tensor xv(DType::kFloat32, Shape{256, 24}), yv(DType::kFloat32, Shape{256, 1});
  std::mt19937 data(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : xv.flat<float>()) v = u(data);
  for (int64_t i = 0; i < 256; ++i) yv.flat<float>()[i] = xv.flat<float>()[i * 24] * 0.5f;
  std::vector<float> losses;
  for (int step = 0; step < 30; ++step) {
    auto out = (*session)->Run({{"x", xv}, {"y", yv}}, {loss.name()}, {(*train)->name()});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    losses.push_back((*out)[0].scalar<float>());
  }
  return losses;
}

TEST(GemmTunerTest, ASessionWithAutoTuneTrainsTheSameAndFillsTheBank) {
  SessionConfig plain;
  plain.intra_op_parallelism = 2;
  SessionConfig tuned = plain;
  tuned.auto_tune_mode = "GA";
  tuned.tune_bank_path = TempDir("session");
  const std::vector<float> a = TrainLosses(plain), b = TrainLosses(tuned);
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  EXPECT_LT(a.back(), a.front() * 0.8f);  // it learns
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4f * (1 + a[i])) << i;
  // Forward [256x24]x[24x64] and [256x64]x[64x1], and the backward products, are in the bank.
  const std::string text = ReadAll(tuned.tune_bank_path + "/gemm.tsv");
  EXPECT_NE(text.find("\t0 256 64 24 0 0\t"), std::string::npos) << text;
  EXPECT_NE(text.find("\t0 256 1 64 0 0\t"), std::string::npos) << text;
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 4) << text;
}

}  // namespace
}  // namespace recsdk::internal
