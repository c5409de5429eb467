// gemm_test.cc: ParallelSgemm and SingleSgemm (src/device/cpu/gemm.cc) against SgemmReference on
// both backends, every transpose combination, shapes that split by rows and by columns, odd sizes
// and the DLRM shapes scaled down (1000x47x64 and 640x37x53 split by rows with op(B) = B^T take the
// path that transposes B once, with tile edges in both of B's dimensions); plus the split under 1
// and 2 threads giving the same bits.
#include "src/device/cpu/gemm.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/tbb/task_arena.h"
#include "tests/device/cpu/gemm_test_util.h"

namespace recsdk::internal {
namespace {

using gemm_test::RandomVector;

struct Case {
  int64_t m, n, k;
};

class GemmTest : public ::testing::TestWithParam<std::tuple<GemmBackend, bool, bool>> {};

TEST_P(GemmTest, MatchesTheReference) {
  const auto [backend, ta, tb] = GetParam();
  for (const Case& c :
       {Case{1, 1, 1}, Case{7, 5, 3}, Case{512, 64, 13}, Case{256, 16, 100}, Case{600, 1, 37},
        Case{33, 130, 600}, Case{70, 300, 257}, Case{1000, 47, 64}, Case{640, 37, 53}}) {
    const std::vector<float> a = RandomVector(c.m * c.k, 1), b = RandomVector(c.k * c.n, 2);
    std::vector<float> want(c.m * c.n), got(c.m * c.n, 99.0f);
    SgemmReference(c.m, c.n, c.k, a.data(), ta ? c.m : c.k, ta, b.data(), tb ? c.k : c.n, tb,
                   want.data(), c.n);
    ParallelSgemm(backend, c.m, c.n, c.k, a.data(), ta, b.data(), tb, got.data());
    const float tol = 1e-5f * std::sqrt(static_cast<float>(c.k)) * 4;
    for (int64_t i = 0; i < c.m * c.n; ++i) {
      ASSERT_NEAR(got[i], want[i], tol) << c.m << "x" << c.n << "x" << c.k << " at " << i;
    }
  }
}

TEST_P(GemmTest, OneAndTwoThreadsGiveTheSameBits) {
  // Plain locals, not a structured binding: the lambdas below capture them, which clang 14
  // (CI's fuzz and sanitizer compiler) does not allow for bindings.
  const GemmBackend backend = std::get<0>(GetParam());
  const bool ta = std::get<1>(GetParam()), tb = std::get<2>(GetParam());
  for (const Case& c : {Case{512, 64, 96}, Case{48, 256, 512}}) {
    const std::vector<float> a = RandomVector(c.m * c.k, 3), b = RandomVector(c.k * c.n, 4);
    std::vector<float> one(c.m * c.n), two(c.m * c.n);
    tbb::task_arena(1).execute(
        [&] { ParallelSgemm(backend, c.m, c.n, c.k, a.data(), ta, b.data(), tb, one.data()); });
    tbb::task_arena(2).execute(
        [&] { ParallelSgemm(backend, c.m, c.n, c.k, a.data(), ta, b.data(), tb, two.data()); });
    EXPECT_EQ(one, two) << c.m << "x" << c.n << "x" << c.k;
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GemmTest,
                         ::testing::Combine(::testing::Values(GemmBackend::kEigen,
                                                              GemmBackend::kOneDnn),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(GemmBackendName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_At" : "_A") +
                                  (std::get<2>(info.param) ? "_Bt" : "_B");
                         });

TEST(GemmBackendTest, BestIsOneDnnWhenAvailable) {
  EXPECT_EQ(BestGemmBackend(), OneDnnAvailable() ? GemmBackend::kOneDnn : GemmBackend::kEigen);
  if (!OneDnnAvailable()) GTEST_SKIP() << "libdnnl.so.2 not installed: the Eigen path is tested";
}

}  // namespace
}  // namespace recsdk::internal
