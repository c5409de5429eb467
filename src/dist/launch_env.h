// launch_env.h: the rank, size and local rank an MPI launcher gives a process in its environment.
//
// mpirun starts each rank with variables that say who it is, before MPI is initialised (and on
// a build without MPI, where nothing else can say it). ReadLaunchEnvironment reads them, for
// CreateCommunicator's choice and for its error on a launch with several ranks and no MPI.
// Launchers recognised, the first whose size variable is set wins:
//   Open MPI      OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE
//   MPICH, Intel PMI_SIZE, PMI_RANK, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   MVAPICH2     MV2_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE
// A launcher without the local pair (an old PMI) is taken to run every rank on one host.
//
// Threading: ReadLaunchEnvironment() reads the process environment (getenv), which is not safe
// beside a setenv in another thread; the overload with a lookup is as safe as its lookup.
#ifndef RECSDK_DIST_LAUNCH_ENV_H_
#define RECSDK_DIST_LAUNCH_ENV_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace recsdk::dist {

// LaunchEnvironment: who this process is in the job, as its launcher says.
struct LaunchEnvironment {
  // launcher: "Open MPI", "MPICH/Intel MPI" or "MVAPICH2"; empty when no launcher started this
  // process (a plain program: a world of one).
  std::string launcher;
  // size_variable, rank_variable: the variables read ("OMPI_COMM_WORLD_SIZE"), for messages.
  std::string size_variable;
  std::string rank_variable;
  int rank = 0;
  int size = 1;
  // local_rank, local_size: the rank among the ranks on this host, and how many there are.
  int local_rank = 0;
  int local_size = 1;

  bool under_launcher() const { return !launcher.empty(); }
};

// EnvLookup: getenv's shape: the value of a variable, or nullptr when it is not set.
using EnvLookup = absl::FunctionRef<const char*(const char*)>;

// ReadLaunchEnvironment: the launch environment from `lookup`. InvalidArgument, naming the
// variable and its value, when a value is not a whole number in range (0 <= rank < size,
// 0 <= local_rank < local_size <= size), or when a launcher's size variable is set without its
// rank variable.
absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(EnvLookup lookup);
// ReadLaunchEnvironment: the same, from this process's environment.
absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment();

// CheckTfConfig: the spec's PS-worker scripts describe the job in TF_CONFIG ({"cluster":
// {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type", "index"}}). Under recsdk the
// launcher's ranks are the job, and every rank both holds a shard of every table and trains (the
// parameter server is built into the workers), so TF_CONFIG, when set, must agree with them:
// as many tasks as ranks, and this process's task (chief first, then the workers, then the ps
// tasks) at its rank. OK when TF_CONFIG is unset; InvalidArgument naming TF_CONFIG when it is
// not such JSON; FailedPrecondition naming both sides when it disagrees with the launcher, and
// for a "ps" task (list it as a worker: every rank is one).
absl::Status CheckTfConfig(const LaunchEnvironment& env, EnvLookup lookup);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_LAUNCH_ENV_H_
