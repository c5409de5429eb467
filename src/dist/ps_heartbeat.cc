// ps_heartbeat.cc: the heartbeat thread of a job with ps ranks (ps_heartbeat.h).
#include "src/dist/ps_heartbeat.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/dist/deadline.h"

namespace recsdk::dist {
namespace {

constexpr std::string_view kHeartbeatLabel = "ps/heartbeat";

struct Heartbeat {
  absl::Mutex mu;
  std::unique_ptr<Communicator> comm ABSL_GUARDED_BY(mu);
  std::thread thread ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;  // this rank asks to stop
  absl::Status error ABSL_GUARDED_BY(mu);
  bool exit_handler ABSL_GUARDED_BY(mu) = false;
  std::atomic<int64_t> keep_alive{0};
};

Heartbeat& State() {
  static Heartbeat* h = new Heartbeat;  // never destroyed: the exit handler reads it
  return *h;
}

int64_t ToTicks(Deadline d) { return static_cast<int64_t>(d.time_since_epoch().count()); }

// Run: the rounds, until every rank asked to stop or a round failed.
void Run(Communicator* comm, double timeout_s) {
  Heartbeat& h = State();
  const double interval_s = std::min(timeout_s / 8, 1.0);
  for (int64_t round = 0;; ++round) {
    std::array<float, 1> stop = {0.0f};
    {
      absl::MutexLock lock(&h.mu);
      // Wait the interval, or less once this rank asks to stop (the others may wait for it).
      h.mu.AwaitWithTimeout(absl::Condition(&h.stop), absl::Seconds(interval_s));
      stop[0] = h.stop ? 1.0f : 0.0f;
    }
    const Status s =
        comm->AllReduce(absl::MakeSpan(stop), ReduceOp::kSum, DeadlineAfterSeconds(timeout_s / 2),
                        CallTag{round, kHeartbeatLabel});
    if (!s.ok()) {
      absl::MutexLock lock(&h.mu);
      h.error =
          Status(s.code(), fmt::format("the heartbeat of the job's ranks (a round every {:.2f} s) "
                                       "failed: {}",
                                       interval_s, s.message()));
      return;
    }
    h.keep_alive.store(ToTicks(DeadlineAfterSeconds(timeout_s)), std::memory_order_release);
    if (stop[0] >= static_cast<float>(comm->size())) return;
  }
}

void StopAtExit() { StopPsHeartbeat(); }

}  // namespace

void StartPsHeartbeat(std::unique_ptr<Communicator> comm, double timeout_s) {
  StopPsHeartbeat();
  Heartbeat& h = State();
  absl::MutexLock lock(&h.mu);
  h.stop = false;
  h.error = absl::OkStatus();
  h.keep_alive.store(ToTicks(DeadlineAfterSeconds(timeout_s)), std::memory_order_release);
  h.comm = std::move(comm);
  Communicator* raw = h.comm.get();
  h.thread = std::thread([raw, timeout_s] { Run(raw, timeout_s); });
  if (!h.exit_handler) {
    // Registered after MPI's own exit handler (MPI is initialised by now), so it runs first:
    // MPI_Finalize must not meet a round in flight.
    h.exit_handler = true;
    std::atexit(StopAtExit);
  }
}

void StopPsHeartbeat() {
  Heartbeat& h = State();
  std::thread thread;
  std::unique_ptr<Communicator> comm;
  {
    absl::MutexLock lock(&h.mu);
    h.stop = true;
    thread = std::move(h.thread);
  }
  // Cannot hang: the thread sees `stop` within one interval (AwaitWithTimeout), and its round in
  // flight, the only other wait, has a deadline of timeout / 2.
  if (thread.joinable()) thread.join();
  absl::MutexLock lock(&h.mu);
  // A communicator whose round failed stays (MPI may still use its buffers); the process ends.
  if (h.error.ok()) comm = std::move(h.comm);
  h.comm.release();  // NOLINT(bugprone-unused-return-value): deliberately leaked, see above
}

const std::atomic<int64_t>* PsKeepAlive() { return &State().keep_alive; }

Status PsHeartbeatError() {
  Heartbeat& h = State();
  absl::MutexLock lock(&h.mu);
  return h.error;
}

}  // namespace recsdk::dist
