// program_fingerprint.h: the check that every rank of a job runs the same program, made once at
// the start of training (broadcast_global_variables, and so BroadcastGlobalVariablesHook).
//
// Ranks that build different models (another table dim, another layer width, another recsdk
// version) would otherwise fail at their first mismatched collective, or worse, train on with
// buffers of equal size that mean different things. The check describes the program in lines
// (the recsdk version, every global variable's name, dtype and shape, every table's configs),
// compares one 64-bit fingerprint of that text across the ranks (one AllGather) and, only when
// they differ, gathers the texts (AllGather of sizes, AllGatherV of bytes) so that every rank
// fails with the same error naming the first differing line, the ranks and both versions.
//
// Threading: as the Session's Run; makes collectives on the process communicator.
#ifndef RECSDK_DIST_PROGRAM_FINGERPRINT_H_
#define RECSDK_DIST_PROGRAM_FINGERPRINT_H_

#include <string>

#include "recsdk/session.h"
#include "src/dist/communicator.h"

namespace recsdk::dist {

// DescribeProgram: the lines the ranks compare (one per variable and table, in graph order).
std::string DescribeProgram(Session& session);

// CheckSameProgram: OK when every rank's DescribeProgram is the same; FailedPrecondition naming
// the first difference otherwise (on every rank). A collective: every rank must call it.
[[nodiscard]] Status CheckSameProgram(Session& session, Communicator& comm, Deadline deadline);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_PROGRAM_FINGERPRINT_H_
