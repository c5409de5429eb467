// ps_heartbeat.h: the heartbeat of a job with ps ranks, which keeps a ps's waits for the workers
// alive while every worker lives, however long the workers go without a table exchange.
//
// Why: a ps waits for the workers' next announced exchange (parameter_server.h), and a ps serving
// a key stage waits for their next batch vote. Bounded by collective_timeout_s alone, a pause of
// the workers without exchanges (a long evaluation, a summary write, a slow input) longer than
// the timeout ended the ps although every worker was alive. A longer timeout only delays the
// detection of a worker that really stopped.
//
// How: every rank of the job (workers and ps) runs a heartbeat thread on a communicator of its
// own (made at InitDistributed, a collective of every rank): a round every min(timeout / 8, 1 s),
// each an AllReduce of every rank with the deadline timeout / 2, so a stopped (SIGSTOP) or lost
// rank fails the round on every other rank within about half the timeout, naming it (the
// communicator's DeadlineExceeded names the ranks that did not join). After each round, the ps's
// waits for the workers may last until timeout past it (PsKeepAlive, CallTag::keep_alive): a live
// but busy worker's thread keeps answering, so the ps waits on; a stopped one does not, so the
// ps's wait ends at most the timeout after the last round it answered, and the ps's error names
// it (PsHeartbeatError). The rounds carry a vote to stop: the heartbeat ends after the first round
// in which every rank asks to (StopPsHeartbeat: ShutdownDistributed, or the exit handler), so no
// rank waits for a round the others will not make. In a job without ps ranks nothing runs.
//
// Cost: one AllReduce of one float per rank and round (at most one a second).
//
// Threading: every function is thread-safe.
#ifndef RECSDK_DIST_PS_HEARTBEAT_H_
#define RECSDK_DIST_PS_HEARTBEAT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "src/dist/communicator.h"

namespace recsdk::dist {

// StartPsHeartbeat: starts this process's heartbeat on `comm` (a communicator of every rank of
// the job, used by nothing else) with the job's collective timeout. Replaces nothing: a second
// call while one runs stops the first (StopPsHeartbeat) before starting.
void StartPsHeartbeat(std::unique_ptr<Communicator> comm, double timeout_s);

// StopPsHeartbeat: asks the other ranks to stop and waits until the heartbeat has ended: after
// the first round in which every rank asked, or at once when a round failed (a rank stopped or
// died). Each round has its deadline, so the wait is bounded while every rank stops too; a rank
// that keeps running without stopping keeps this one waiting as MPI_Finalize would.
void StopPsHeartbeat();

// PsKeepAlive: the time (CallTag::keep_alive's unit) until which the ps's waits for the workers
// may last: the last round's end plus the timeout; 0 before any round. Never null.
const std::atomic<int64_t>* PsKeepAlive();

// PsHeartbeatError: OK while the heartbeat runs (or none runs); once a round failed, its error,
// which names the ranks that did not answer.
[[nodiscard]] absl::Status PsHeartbeatError();

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_PS_HEARTBEAT_H_
