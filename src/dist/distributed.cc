// distributed.cc: this process's place in the job (recsdk/distributed.h: DistributedOptions,
// InitDistributed, ShutdownDistributed, the rank functions) and the process communicator that
// holds it (process_communicator.h).
//
// Threading: all state is under one mutex (see process_communicator.h).
#include "recsdk/distributed.h"

#include <atomic>
#include <cmath>
#include <cstdint>
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

namespace recsdk {
namespace {

struct ProcessState {
  absl::Mutex mu;
  std::unique_ptr<dist::Communicator> comm ABSL_GUARDED_BY(mu);
  DistributedOptions options ABSL_GUARDED_BY(mu);
  // world: the communicator's rank * 2^32 + size, or -1 without one; written under `mu`, read
  // without it, so that get_rank_id does not wait for a collective in flight.
  std::atomic<int64_t> world{-1};
};

void SetCommLocked(ProcessState& state, std::unique_ptr<dist::Communicator> comm,
                   const DistributedOptions& options) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  state.comm = std::move(comm);
  state.options = options;
  state.world.store(state.comm == nullptr
                        ? -1
                        : (int64_t{state.comm->rank()} << 32) | int64_t{state.comm->size()});
}

ProcessState& State() {
  static ProcessState* state = new ProcessState;  // never destroyed: usable from exit handlers
  return *state;
}

// CreateLocked: the communicator for `options`, from the launcher's environment.
absl::Status CreateLocked(ProcessState& state, const DistributedOptions& options)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  RECSDK_RETURN_IF_ERROR(options.Validate());
  RECSDK_ASSIGN_OR_RETURN(
      std::unique_ptr<dist::Communicator> comm,
      dist::CreateCommunicator(dist::DeadlineAfterSeconds(options.collective_timeout_s)));
  SetCommLocked(state, std::move(comm), options);
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
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  SetCommLocked(state, nullptr, DistributedOptions());
}

namespace {

// FromEnvironment: a field of the launch environment, or of the communicator when one exists
// (rank and size: the communicator's say, which MPI has checked against the environment).
StatusOr<int> FromEnvironment(int dist::LaunchEnvironment::*field, bool communicator_knows) {
  if (communicator_knows) {
    int rank = 0, size = 1;
    if (dist::ProcessWorld(&rank, &size)) {
      return field == &dist::LaunchEnvironment::rank ? rank : size;
    }
  }
  RECSDK_ASSIGN_OR_RETURN(dist::LaunchEnvironment env, dist::ReadLaunchEnvironment());
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

}  // namespace recsdk

namespace recsdk::dist {

absl::Status WithProcessCommunicator(
    absl::FunctionRef<absl::Status(Communicator&, const DistributedOptions&)> fn) {
  ProcessState& state = State();
  absl::MutexLock lock(&state.mu);
  if (state.comm == nullptr) RECSDK_RETURN_IF_ERROR(CreateLocked(state, DistributedOptions()));
  return fn(*state.comm, state.options);
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
