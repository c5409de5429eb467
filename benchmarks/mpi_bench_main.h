// mpi_bench_main.h: the main of the benchmarks that run under mpirun (dist_bench.cc,
// tailing_bench.cc): every rank runs the same benchmarks, since their collectives must match,
// and rank 0 alone prints.
#ifndef RECSDK_BENCHMARKS_MPI_BENCH_MAIN_H_
#define RECSDK_BENCHMARKS_MPI_BENCH_MAIN_H_

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "oneapi/tbb/global_control.h"
#include "recsdk/distributed.h"
#include "src/dist/mpi/mpi_communicator.h"

namespace recsdk::bench {

// QuietReporter: the other ranks' reporter: prints nothing.
class QuietReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// RunUnderMpi: initialises the distributed runtime on MPI (collective timeout 120 s), runs the
// benchmarks the flags select, shuts down; returns main's status. With `share_cores` each
// rank's thread pool gets its share of the host's cores (cores / ranks, as a job of several
// ranks per host is configured), so that the pools' spinning workers do not sit on the cores
// the other ranks' MPI calls poll.
inline int RunUnderMpi(int argc, char** argv, const char* program, bool share_cores) {
  dist::RegisterMpiCommunicator();
  DistributedOptions o;
  o.collective_timeout_s = 120;
  if (const Status s = InitDistributed(o); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, std::string(s.message()).c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::optional<tbb::global_control> threads;
  if (share_cores) {
    const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads.emplace(tbb::global_control::max_allowed_parallelism,
                    static_cast<size_t>(std::max(1, cores / size)));
  }
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    QuietReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  ShutdownDistributed();
  return 0;
}

}  // namespace recsdk::bench

#endif  // RECSDK_BENCHMARKS_MPI_BENCH_MAIN_H_
