// process_communicator.h: the one communicator of this process, shared by the distributed API
// (recsdk/distributed.h), the AllReduceMean kernel and broadcast_global_variables.
//
// InitDistributed creates it; the kernel creates it with default options on first use when the
// program did not (so a single-process program needs no ceremony). Every use holds one mutex
// for the whole collective: Communicator is not thread-safe, and the Session runs independent
// nodes on several threads. Holding the mutex does not order collectives across ranks; the
// graph does that (AllReduceMean nodes are chained by control inputs).
//
// Threading: every function is thread-safe. A collective running under WithProcessCommunicator
// blocks the others (and ShutdownDistributed) until it ends or its deadline passes.
#ifndef RECSDK_DIST_PROCESS_COMMUNICATOR_H_
#define RECSDK_DIST_PROCESS_COMMUNICATOR_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "recsdk/distributed.h"
#include "src/dist/communicator.h"
#include "src/dist/launch_env.h"

namespace recsdk::dist {

// WithProcessCommunicator: runs `fn` with the process communicator and its options, under the
// process mutex, and returns what `fn` returns. Creates the communicator with default options
// when InitDistributed has not run (and returns that creation's error, if any).
[[nodiscard]] absl::Status WithProcessCommunicator(
    absl::FunctionRef<absl::Status(Communicator&, const DistributedOptions&)> fn);

// WithWorkerCommunicator: as WithProcessCommunicator, with the workers' communicator: the
// process communicator itself in a job without ps ranks (every rank a worker); in a job with
// ps ranks, the communicator of the workers alone, for the collectives of the dense graph (the
// all-reduce, the variable broadcast, the metrics, the end-of-data vote, replicated tables).
// FailedPrecondition on a ps rank.
[[nodiscard]] absl::Status WithWorkerCommunicator(
    absl::FunctionRef<absl::Status(Communicator&, const DistributedOptions&)> fn);

// ProcessJob: the roles of the job's ranks (launch_env.h) when the process communicator exists;
// false otherwise. An atomic read, like ProcessWorld.
bool ProcessJob(JobLayout* layout);

// CurrentJobLayout: ProcessJob's layout, or, before the communicator exists, the one the
// launcher's environment and TF_CONFIG describe (ReadJobLayout's errors).
[[nodiscard]] absl::StatusOr<JobLayout> CurrentJobLayout();

// ProcessWorld: rank and size of the process communicator when one exists; false otherwise
// (then nothing is created). Does not wait for a collective in flight (an atomic read).
bool ProcessWorld(int* rank, int* size);

// SetProcessCommunicatorForTesting: installs `comm` (a fake that fails, a local one) as the
// process communicator with `options`, replacing any; nullptr removes it.
void SetProcessCommunicatorForTesting(std::unique_ptr<Communicator> comm,
                                      const DistributedOptions& options = {});

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_PROCESS_COMMUNICATOR_H_
