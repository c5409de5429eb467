// mpi_communicator.h: the Communicator of a job launched with mpirun (library recsdk::mpi).
//
// No MPI type appears here: mpi.h is included by mpi_communicator.cc only, so that neither the
// core library nor a program that includes this header needs MPI's headers. A program links
// recsdk::mpi and calls RegisterMpiCommunicator() once at start; CreateCommunicator
// (create_communicator.h) then returns an MPI communicator under mpirun.
//
// How the MPI communicator works (details in mpi_communicator.cc):
// - Every collective is a non-blocking MPI call (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather(v),
//   MPI_Ialltoall(v)) tested with MPI_Test against the call's deadline, with short yields, then
//   sleeps, between tests. Before the data moves, the ranks exchange collective headers
//   (collective_header.h), which catch collectives issued in different orders and counts that
//   disagree, and say which ranks have not joined a call when its deadline passes. Barrier is
//   that exchange alone: no rank completes it before every rank has entered.
// - bfloat16 AllReduce widens to float32, reduces with MPI_SUM on MPI_FLOAT, and rounds once.
// - A deadline that passes fails the call with DeadlineExceeded, naming the ranks whose headers
//   had not arrived, and leaves the communicator unusable: MPI cannot cancel a collective, so the
//   ranks are no longer in step. Every later call fails with FailedPrecondition. The process
//   should then end (with a non-zero status: mpirun then stops the other ranks). When the
//   deadline passed while the data was moving, MPI may still write the call's buffers until the
//   process ends: keep them alive until then.
//
// MPI is initialised on first use, asking for MPI_THREAD_MULTIPLE, unless the program did it;
// then recsdk finalises it at exit. MPI_Finalize waits for every rank, so after a missed deadline
// (when a rank may never come) that wait is bounded: after 10 s the process exits with status 1
// and says why; and when a deadline left a collective in flight, MPI is not finalised at all.
// Each communicator works on its own duplicate of MPI_COMM_WORLD, so its messages never meet the
// program's own.
//
// Threading: as Communicator (one thread at a time per communicator). Communicators may be used
// from different threads when MPI provides MPI_THREAD_MULTIPLE (Open MPI does); with
// MPI_THREAD_SERIALIZED, which a program that initialised MPI itself may have chosen, the program
// must keep their calls from overlapping.
#ifndef RECSDK_DIST_MPI_MPI_COMMUNICATOR_H_
#define RECSDK_DIST_MPI_MPI_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/dist/communicator.h"
#include "src/dist/deadline.h"
#include "src/dist/launch_env.h"

namespace recsdk::dist {

// RegisterMpiCommunicator: makes CreateCommunicator return an MPI communicator when this process
// runs under an MPI launcher. Call once at start, before CreateCommunicator; cheap (it records a
// function pointer, and initialises nothing).
void RegisterMpiCommunicator();

// CreateMpiCommunicator: a communicator over every rank of MPI_COMM_WORLD. Initialises MPI if
// needed (see above; MPI_Init waits for every rank to start, with no deadline MPI could keep),
// then duplicates MPI_COMM_WORLD, a collective bounded by `deadline`. FailedPrecondition when
// MPI was finalised, provides less than MPI_THREAD_SERIALIZED, or disagrees with `env` (the
// launcher's variables) about the rank or the world size.
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const LaunchEnvironment& env,
                                                                    Deadline deadline);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_MPI_MPI_COMMUNICATOR_H_
