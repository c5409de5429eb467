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

// JobLayout: the roles of the job's ranks. Ranks [0, workers) are workers (rank 0 is the chief:
// summaries, dense checkpoint files, export); ranks [workers, workers + ps) are parameter servers,
// which hold the shards of the sharded tables, read no data and run no dense graph (distributed.h,
// RunParameterServer). With no ps ranks (the default, and every job without TF_CONFIG) every rank
// is a worker and holds a shard of every table.
struct JobLayout {
  int workers = 1;
  int ps = 0;
  // is_ps: this process is a parameter server.
  bool is_ps = false;

  // owner_first, owners: the ranks that own table shards, [owner_first, owner_first + owners):
  // the ps ranks, or every rank when there are none.
  int owner_first() const { return ps > 0 ? workers : 0; }
  int owners() const { return ps > 0 ? ps : workers; }
  int world() const { return workers + ps; }
};

// ReadJobLayout: the layout of the job `env` describes, from the spec's TF_CONFIG ({"cluster":
// {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type", "index"}}) when set: the
// launcher's ranks are the cluster's tasks in TensorFlow's order (chief first, then the workers,
// then the ps tasks), so TF_CONFIG must list as many tasks as ranks, this process's task at its
// rank, and at least one chief or worker. Without TF_CONFIG: every rank a worker. InvalidArgument
// naming TF_CONFIG when it is not such JSON; FailedPrecondition naming both sides when it
// disagrees with the launcher.
absl::StatusOr<JobLayout> ReadJobLayout(const LaunchEnvironment& env, EnvLookup lookup);

// CheckTfConfig: ReadJobLayout's checks alone.
absl::Status CheckTfConfig(const LaunchEnvironment& env, EnvLookup lookup);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_LAUNCH_ENV_H_
