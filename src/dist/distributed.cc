// distributed.cc: this process's place in the job (recsdk/distributed.h: DistributedOptions,
// InitDistributed, ShutdownDistributed, the rank functions) and the process communicator that
// holds it (process_communicator.h).
//
// Threading: all state is under one mutex (see process_communicator.h).
#include "recsdk/distributed.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/dist/create_communicator.h"
#include "src/dist/deadline.h"
#include "src/dist/launch_env.h"
#include "src/dist/process_communicator.h"
#include "src/dist/ps_heartbeat.h"

namespace recsdk {
namespace {

struct ProcessState {
  absl::Mutex mu;
  std::unique_ptr<dist::Communicator> comm ABSL_GUARDED_BY(mu);
  // workers: the workers' communicator in a job with ps ranks (null on a ps); null without ps
  // ranks, where the workers are every rank and `comm` is theirs.
  std::unique_ptr<dist::Communicator> workers ABSL_GUARDED_BY(mu);
  dist::JobLayout layout ABSL_GUARDED_BY(mu);
  DistributedOptions options ABSL_GUARDED_BY(mu);
  // world: the communicator's rank * 2^32 + size, or -1 without one; written under `mu`, read
  // without it, so that get_rank_id does not wait for a collective in flight.
  std::atomic<int64_t> world{-1};
  // roles: layout.workers * 2^32 + layout.ps, or -1 without a communicator (read like `world`).
  std::atomic<int64_t> roles{-1};
};

void SetCommLocked(ProcessState& state, std::unique_ptr<dist::Communicator> comm,
                   const DistributedOptions& options,
                   std::unique_ptr<dist::Communicator> workers = nullptr,
                   dist::JobLayout layout = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  // The workers' communicator goes first: it may be a sub-communicator of `comm`.
  state.workers = std::move(workers);
  state.comm = std::move(comm);
  state.options = options;
  if (state.comm != nullptr && layout.ps == 0) layout.workers = state.comm->size();
  state.layout = layout;
  state.roles.store(state.comm == nullptr ? -1
                                          : (int64_t{layout.workers} << 32) | int64_t{layout.ps});
  state.world.store(state.comm == nullptr
                        ? -1
                        : (int64_t{state.comm->rank()} << 32) | int64_t{state.comm->size()});
}

const char* ProcessEnvLookup(const char* name) { return std::getenv(name); }

ProcessState& State() {
  static ProcessState* state = new ProcessState;  // never destroyed: usable from exit handlers
  return *state;
}

// CreateLocked: the communicator for `options`, from the launcher's environment.
absl::Status CreateLocked(ProcessState& state, const DistributedOptions& options)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  RECSDK_RETURN_IF_ERROR(options.Validate());
  RECSDK_ASSIGN_OR_RETURN(const dist::LaunchEnvironment env, dist::ReadLaunchEnvironment());
  RECSDK_ASSIGN_OR_RETURN(const dist::JobLayout layout, dist::ReadJobLayout(env, ProcessEnvLookup));
  const dist::Deadline deadline = dist::DeadlineAfterSeconds(options.collective_timeout_s);
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm,
                          dist::CreateCommunicator(env, deadline));
  std::unique_ptr<dist::Communicator> workers;
  if (layout.ps > 0) {
    // Every rank takes part; the ps ranks get none.
    absl::StatusOr<std::unique_ptr<dist::Communicator>> sub =
        comm->SubRange(0, layout.workers, deadline);
    if (!sub.ok()) {
      return Status(sub.status().code(),
                    fmt::format("InitDistributed: making the communicator of the {} workers (a "
                                "job with {} ps ranks): {}",
                                layout.workers, layout.ps, sub.status().message()));
    }
    workers = std::move(*sub);
  }
  std::unique_ptr<dist::Communicator> heartbeat;
  if (layout.ps > 0) {
    // The heartbeat's own communicator (ps_heartbeat.h): every rank takes part.
    absl::StatusOr<std::unique_ptr<dist::Communicator>> made =
        dist::CreateCommunicator(env, deadline);
    if (!made.ok()) {
      return Status(made.status().code(),
                    fmt::format("InitDistributed: making the heartbeat's communicator of a job "
                                "with {} ps ranks: {}",
                                layout.ps, made.status().message()));
    }
    heartbeat = std::move(*made);
  }
  SetCommLocked(state, std::move(comm), options, std::move(workers), layout);
  if (heartbeat != nullptr) {
    dist::StartPsHeartbeat(std::move(heartbeat), options.collective_timeout_s);
  }
  return absl::OkStatus();
}

}  // namespace

Status DistributedOptions::Validate() const {
  if (!std::isfinite(collective_timeout_s) || !(collective_timeout_s > 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "DistributedOptions: collective_timeout_s {} must be a finite number of seconds > 0 (the "
        "longest a collective waits for the other ranks); leave it at its default 300 or set "
        "e.g. 60",
        collective_timeout_s));
  }
  return absl::OkStatus();
}

Status InitDistributed(const DistributedOptions& options) {
  RECSDK_RETURN_IF_ERROR(options.Validate());
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  if (state.comm != nullptr) {
    if (state.options.collective_timeout_s == options.collective_timeout_s) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(fmt::format(
        "InitDistributed: already initialised with collective_timeout_s {} (by an earlier "
        "InitDistributed, or with the defaults by the first AllReduceMean), now asked for {}; "
        "call InitDistributed once at start, before building sessions, or ShutdownDistributed "
        "first",
        state.options.collective_timeout_s, options.collective_timeout_s));
  }
  return CreateLocked(state, options);
}

void ShutdownDistributed() {
  // First, without the mutex: the heartbeat waits for the other ranks' (each round bounded).
  dist::StopPsHeartbeat();
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  SetCommLocked(state, nullptr, DistributedOptions());
}

namespace {

// FromEnvironment: a field of the launch environment, or of the communicator when one exists
// (rank and size: the communicator's say, which MPI has checked against the environment). The
// size is the workers' (every rank without ps ranks): the data is sharded over the workers.
StatusOr<int> FromEnvironment(int dist::LaunchEnvironment::*field, bool communicator_knows) {
  if (communicator_knows) {
    int rank = 0, size = 1;
    dist::JobLayout layout;
    if (dist::ProcessWorld(&rank, &size) && dist::ProcessJob(&layout)) {
      return field == &dist::LaunchEnvironment::rank ? rank : layout.workers;
    }
  }
  RECSDK_ASSIGN_OR_RETURN(dist::LaunchEnvironment env, dist::ReadLaunchEnvironment());
  if (field == &dist::LaunchEnvironment::size) {
    RECSDK_ASSIGN_OR_RETURN(const dist::JobLayout layout,
                            dist::ReadJobLayout(env, ProcessEnvLookup));
    return layout.workers;
  }
  return env.*field;
}

}  // namespace

StatusOr<int> get_rank_id() { return FromEnvironment(&dist::LaunchEnvironment::rank, true); }
StatusOr<int> get_rank_size() { return FromEnvironment(&dist::LaunchEnvironment::size, true); }
StatusOr<int> get_local_rank_id() {
  return FromEnvironment(&dist::LaunchEnvironment::local_rank, false);
}
StatusOr<int> get_local_rank_size() {
  return FromEnvironment(&dist::LaunchEnvironment::local_size, false);
}

StatusOr<bool> IsParameterServer() {
  RECSDK_ASSIGN_OR_RETURN(const dist::JobLayout layout, dist::CurrentJobLayout());
  return layout.is_ps;
}

}  // namespace recsdk

namespace recsdk::dist {

absl::Status WithProcessCommunicator(
    absl::FunctionRef<absl::Status(Communicator&, const DistributedOptions&)> fn) {
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  if (state.comm == nullptr) RECSDK_RETURN_IF_ERROR(CreateLocked(state, DistributedOptions()));
  return fn(*state.comm, state.options);
}

absl::Status WithWorkerCommunicator(
    absl::FunctionRef<absl::Status(Communicator&, const DistributedOptions&)> fn) {
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  if (state.comm == nullptr) RECSDK_RETURN_IF_ERROR(CreateLocked(state, DistributedOptions()));
  if (state.layout.ps == 0) return fn(*state.comm, state.options);
  if (state.workers == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "this process is a ps rank (rank {} of {}; TF_CONFIG's task type \"ps\"), which holds "
        "table shards and runs no dense graph: the workers' collectives (dense all-reduce, "
        "variable broadcast, metrics) are theirs alone; on a ps call RunParameterServer()",
        state.comm->rank(), state.comm->size()));
  }
  return fn(*state.workers, state.options);
}

bool ProcessJob(JobLayout* layout) {
  const int64_t roles = State().roles.load();
  const int64_t world = State().world.load();
  if (roles < 0 || world < 0) return false;
  layout->workers = static_cast<int>(roles >> 32);
  layout->ps = static_cast<int>(roles & 0xffffffff);
  layout->is_ps = layout->ps > 0 && static_cast<int>(world >> 32) >= layout->workers;
  return true;
}

absl::StatusOr<JobLayout> CurrentJobLayout() {
  JobLayout layout;
  if (ProcessJob(&layout)) return layout;
  RECSDK_ASSIGN_OR_RETURN(const LaunchEnvironment env, ReadLaunchEnvironment());
  return ReadJobLayout(env, ProcessEnvLookup);
}

bool ProcessWorld(int* rank, int* size) {
  const int64_t world = State().world.load();
  if (world < 0) return false;
  *rank = static_cast<int>(world >> 32);
  *size = static_cast<int>(world & 0xffffffff);
  return true;
}

void SetProcessCommunicatorForTesting(std::unique_ptr<Communicator> comm,
                                      const DistributedOptions& options) {
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  SetCommLocked(state, std::move(comm), options);
}

}  // namespace recsdk::dist
