// mpi_test_main.h: the main() of every MPI test binary (tests/dist/mpi_*_test.cc, run under
// mpirun by CTest): registers the MPI communicator, refuses to run outside a launcher, and lets
// rank 0 print gtest's report while the other ranks print only their failures, with the rank;
// and the fixture of a test of several ranks (RanksTest).
// Include it from exactly one .cc per binary. Threading: main's thread.
#ifndef RECSDK_TESTS_DIST_MPI_TEST_MAIN_H_
#define RECSDK_TESTS_DIST_MPI_TEST_MAIN_H_

#include <cstdio>

#include "gtest/gtest.h"
#include "recsdk/distributed.h"
#include "src/dist/launch_env.h"
#include "src/dist/mpi/mpi_communicator.h"

namespace recsdk::dist::testing {

// FailurePrinter: a rank's failures on stderr, prefixed with the rank (instead of gtest's whole
// report once per rank).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

// RanksTest: a test of several ranks: InitDistributed with a generous collective timeout (the
// ranks share 2 cores with each other and with whatever else CI runs), then rank_ and size_.
class RanksTest : public ::testing::Test {
 protected:
  static constexpr double kGenerousS = 60;

  void SetUp() override {
    DistributedOptions o;
    o.collective_timeout_s = kGenerousS;
    ASSERT_TRUE(InitDistributed(o).ok());
    rank_ = get_rank_id().value_or(-1);
    size_ = get_rank_size().value_or(-1);
    ASSERT_GE(size_, 2) << "run this test under mpirun -np 2 or more";
  }

  int rank_ = -1;
  int size_ = -1;
};

}  // namespace recsdk::dist::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  recsdk::dist::RegisterMpiCommunicator();
  const absl::StatusOr<recsdk::dist::LaunchEnvironment> env = recsdk::dist::ReadLaunchEnvironment();
  if (!env.ok() || !env->under_launcher()) {
    std::fprintf(stderr, "run this test under mpirun (e.g. mpirun -np 2 %s)\n", argv[0]);
    return 1;
  }
  if (env->rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new recsdk::dist::testing::FailurePrinter(env->rank));
  }
  return RUN_ALL_TESTS();
}

#endif  // RECSDK_TESTS_DIST_MPI_TEST_MAIN_H_
