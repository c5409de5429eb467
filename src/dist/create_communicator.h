// create_communicator.h: which Communicator a process gets.
//
// CreateCommunicator is the one place that decides, from the launcher's environment
// (launch_env.h):
// - no launcher (a plain program), or a launcher with one rank and no MPI in this program: a
//   LocalCommunicator, the world of one;
// - a launcher, and an MPI communicator registered in this program: that one (any world size,
//   1 included, so that `mpirun -np 1` runs the MPI code);
// - a launcher with several ranks and no MPI in this program: FailedPrecondition saying how to
//   get MPI (N processes each training alone would silently train N different models).
//
// The MPI implementation lives in its own library (recsdk::mpi) so that the core library never
// links MPI; a program that links it calls RegisterMpiCommunicator() (src/dist/mpi/) once at
// start. An explicit call, not a static registrar object: those vanish from static libraries.
//
// Threading: SetMultiProcessCommunicator and CreateCommunicator may be called from any thread
// (the registration is under a mutex); register before creating.
#ifndef RECSDK_DIST_CREATE_COMMUNICATOR_H_
#define RECSDK_DIST_CREATE_COMMUNICATOR_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/dist/communicator.h"
#include "src/dist/deadline.h"
#include "src/dist/launch_env.h"

namespace recsdk::dist {

// CommunicatorFactory: makes the communicator of a multi-process launch. `deadline` bounds the
// wait for the other ranks (creating a communicator is collective).
using CommunicatorFactory = absl::StatusOr<std::unique_ptr<Communicator>> (*)(
    const LaunchEnvironment& env, Deadline deadline);

// SetMultiProcessCommunicator: makes CreateCommunicator use `factory` (named `name`, e.g. "mpi",
// in messages) under a launcher. A later call replaces an earlier one; nullptr unregisters.
void SetMultiProcessCommunicator(std::string_view name, CommunicatorFactory factory);

// CreateCommunicator: the communicator for `env` (see the file comment). `deadline` bounds the
// wait for the other ranks when the communicator is a multi-process one.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const LaunchEnvironment& env,
                                                                 Deadline deadline);
// CreateCommunicator: the same, for this process's environment; InvalidArgument naming the
// variable when the launcher's variables do not parse.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Deadline deadline);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_CREATE_COMMUNICATOR_H_
