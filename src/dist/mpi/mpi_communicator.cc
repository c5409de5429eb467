// mpi_communicator.cc: the MPI communicator. See mpi_communicator.h for what it promises.
//
// Each call has two phases, each polled against the call's one deadline:
// 1. Headers: an MPI_Irecv from and an MPI_Isend to every other rank of a CollectiveHeader
//    (collective_header.h), on this communicator's own duplicate of MPI_COMM_WORLD with one tag.
//    Messages between two ranks on one tag arrive in the order sent, and every rank sends one
//    header per call, so the k-th header from a rank is its call k. CheckCollectiveHeaders gives
//    every rank the same verdict; on a mismatch no rank posts the data phase and the
//    communicator stays usable. At the deadline, the receives still pending name the ranks that
//    have not joined; they are cancelled when the communicator is destroyed, so a timeout here
//    leaves nothing in flight that MPI_Finalize would wait for.
// 2. Data: the non-blocking MPI collective, on MPI_BYTE (or MPI_FLOAT for AllReduce) with the
//    counts converted to bytes. MPI counts are int: a block or offset past 2^31 - 1 bytes is
//    refused (InvalidArgument, told to the other ranks like any refusal) rather than truncated.
//    At the deadline every rank had joined (its header arrived), so which one stopped cannot be
//    known from here; the request stays in flight (MPI cannot cancel a collective) and MPI is not
//    finalised at exit.
//
// bfloat16 AllReduce widens to float32, runs MPI_SUM on MPI_FLOAT and rounds once, rather than a
// user-defined MPI_Op on 16-bit values: an MPI_Op would round to bfloat16 after every pairwise
// addition (log2(size) or size - 1 roundings, depending on the algorithm MPI picks, so the error
// would depend on the world size and the algorithm, and 8 bits of mantissa make that visible),
// and MPI's built-in float sum is vectorised while a user op is a function call per buffer. The
// price is twice the bytes on the wire for bfloat16 gradients; revisit with a measurement when
// bfloat16 all-reduce traffic matters (issue 24's figures). The widened buffer belongs to the
// communicator, so a bfloat16 call that times out leaves the caller's buffer alone.
//
// Polling: MPI_Testall, spinning for the first kSpinTests tests (a round between ranks of one
// host takes microseconds, about what one yield's system call costs), then with
// std::this_thread::yield() between tests for the first 2 ms of a wait (a collective
// between ranks of one host completes in microseconds, and a yield lets an oversubscribed peer
// run), then sleeps of 50 us doubling to 1 ms, so that a rank waiting for a stopped peer costs
// almost no CPU and sees completion at most 1 ms late. Open MPI progresses non-blocking
// collectives only inside MPI calls, so every step of a multi-round algorithm waits for a test:
// on large multi-host reductions the sleeps would cost throughput; a progress thread is the fix
// if the figures show it.
#include "src/dist/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"  // formats absl::string_view
#include "src/dist/collective_header.h"
#include "src/dist/create_communicator.h"

namespace recsdk::dist {
namespace {

// kHeaderTag: the tag of header messages (below 32767, the smallest MPI_TAG_UB MPI allows).
constexpr int kHeaderTag = 0x5243;
// kSpinTests: MPI_Testall calls a wait makes before it starts yielding (Poll): about 10-30 us
// of spinning on a core, the time a round between ranks of one host takes.
constexpr int64_t kSpinTests = 64;

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

absl::Status MpiFailed(std::string_view where, std::string_view function, int code) {
  return absl::InternalError(
      fmt::format("{}: {} failed: {} (MPI error {})", where, function, MpiErrorText(code), code));
}

// RankList: "1", "1 and 3", "1, 3 and 4".
std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

// MpiProcess: what this process knows about MPI as a whole.
struct MpiProcess {
  // mu: held while initialising MPI, so that two threads creating communicators do it once.
  absl::Mutex mu;
  // timed_out: a collective missed its deadline: some rank may never answer again.
  std::atomic<bool> timed_out{false};
  // abandoned: a collective was left in flight by a deadline; MPI_Finalize would wait for it.
  std::atomic<bool> abandoned{false};
};

MpiProcess& Process() {
  static MpiProcess* process = new MpiProcess;  // never destroyed: read by the exit handler
  return *process;
}

// kFinalizeGrace: how long MPI_Finalize may take at exit after a deadline was missed.
constexpr std::chrono::seconds kFinalizeGrace(10);

void FinalizeAtExit() {
  MpiProcess& process = Process();
  // After an abandoned collective MPI_Finalize would wait for it, that is, forever: end without
  // it. mpirun then reports that this rank exited without finalising, which is the truth.
  if (process.abandoned.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (process.timed_out.load()) {
    // MPI_Finalize waits for every rank (Open MPI ends with a fence), and after a missed deadline
    // one may never come: a stopped rank would hold this one forever. Bound the wait. Only then:
    // in a healthy job a rank that finishes first legitimately waits here for the others.
    std::thread([] {
      std::this_thread::sleep_for(kFinalizeGrace);
      std::fprintf(stderr,
                   "recsdk: MPI_Finalize did not complete within %lld s after a collective missed "
                   "its deadline (a rank is not answering); exiting without it\n",
                   static_cast<long long>(kFinalizeGrace.count()));
      std::_Exit(1);
    }).detach();
  }
  MPI_Finalize();
}

// EnsureMpi: initialises MPI unless the program did, and checks the thread level.
absl::Status EnsureMpi() {
  MpiProcess& process = Process();
  absl::MutexLock lock(&process.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "MPI was already finalised in this process; create communicators before MPI_Finalize");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return MpiFailed("creating the MPI communicator", "MPI_Init_thread", rc);
    std::atexit(FinalizeAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(fmt::format(
        "MPI provides thread level {} (MPI_THREAD_SINGLE = {}, MPI_THREAD_FUNNELED = {}); "
        "recsdk needs MPI_THREAD_SERIALIZED or more: initialise MPI with MPI_Init_thread("
        "MPI_THREAD_MULTIPLE) or let recsdk initialise it",
        provided, MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED));
  }
  return absl::OkStatus();
}

// Poll: drives MPI on `requests` until all have completed (true) or `deadline` passes (false);
// with `keep_alive` (CallTag::keep_alive), not before *keep_alive passes either. `where` names
// the call in an error; it is formatted only then.
absl::StatusOr<bool> Poll(std::vector<MPI_Request>& requests, Deadline deadline,
                          absl::FunctionRef<std::string()> where,
                          const std::atomic<int64_t>* keep_alive = nullptr) {
  const auto start = DeadlineClock::now();
  auto sleep = std::chrono::microseconds(50);
  for (int64_t tests = 1;; ++tests) {
    int done = 0;
    const int rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return MpiFailed(where(), "MPI_Testall", rc);
    if (done) return true;
    // The first tests spin: between ranks of one host a round completes within microseconds,
    // and a yield is a system call that costs about as much as the round itself.
    if (tests < kSpinTests) continue;
    const auto now = DeadlineClock::now();
    if (now >= deadline && keep_alive != nullptr) {
      const Deadline later{DeadlineClock::duration(keep_alive->load(std::memory_order_acquire))};
      if (later > deadline) deadline = later;
    }
    if (now >= deadline) return false;
    if (now - start < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(
          std::min<DeadlineClock::duration>(sleep, deadline - DeadlineClock::now()));
      sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(1));
    }
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size)
      : comm_(comm),
        rank_(rank),
        size_(size),
        send_headers_(size),
        recv_headers_(size),
        header_requests_(2 * static_cast<size_t>(size), MPI_REQUEST_NULL) {}
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

 protected:
  absl::Status DoAllReduce(const CollectiveCall& call, void* data) override;
  absl::Status DoBroadcast(const CollectiveCall& call, void* data) override;
  absl::Status DoAllGather(const CollectiveCall& call, const void* send, void* recv) override;
  absl::Status DoAllGatherV(const CollectiveCall& call, const void* send, void* recv,
                            absl::Span<const int64_t> recv_displs) override;
  absl::Status DoAllToAll(const CollectiveCall& call, const void* send, void* recv) override;
  absl::Status DoAllToAllV(const CollectiveCall& call, const void* send,
                           absl::Span<const int64_t> send_displs, void* recv,
                           absl::Span<const int64_t> recv_displs) override;
  absl::Status DoBarrier(const CollectiveCall& call) override;
  absl::Status DoExchangeV(const CollectiveCall& call, const void* send,
                           absl::Span<const int64_t> send_counts, absl::Span<int64_t> recv_counts,
                           absl::FunctionRef<void*(int64_t)> alloc) override;
  absl::Status Rejected(const CollectiveCall& call, absl::Status error) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSubRange(int first, int count,
                                                           Deadline deadline) override;

 private:
  std::string Where(const CollectiveCall& call) const {
    return fmt::format("{} on rank {} of {}", DescribeCall(call), rank_, size_);
  }
  // Begin: what every call does before its data moves: refuse when unusable, exchange the
  // headers, compare them.
  absl::Status Begin(const CollectiveCall& call);
  // ExchangeHeaders: phase 1 (see the file comment).
  absl::Status ExchangeHeaders(const CollectiveCall& call, bool rejected);
  // Finish: phase 2's wait for `request`, the data of `call`.
  absl::Status Finish(const CollectiveCall& call, MPI_Request request);
  // Bytes: `elements` of `call` in bytes as an MPI count, or InvalidArgument naming `what`.
  absl::StatusOr<int> Bytes(const CollectiveCall& call, int64_t elements, std::string_view what);
  // ByteLayout: counts and displacements (elements) as MPI byte counts into `counts`, `displs`.
  absl::Status ByteLayout(const CollectiveCall& call, absl::Span<const int64_t> counts,
                          absl::Span<const int64_t> displs, std::string_view name,
                          std::vector<int>* byte_counts, std::vector<int>* byte_displs);
  // Fail: records why this communicator is unusable and returns `status`.
  absl::Status Fail(absl::Status status);

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  // unusable_: empty while usable; else the error that made it unusable.
  std::string unusable_;
  std::vector<CollectiveHeader> send_headers_;
  std::vector<CollectiveHeader> recv_headers_;
  // header_requests_: [0, size) the receives from each rank, [size, 2 size) the sends to each.
  std::vector<MPI_Request> header_requests_;
  // data_requests_: the one data request of a call, in a vector for Poll.
  std::vector<MPI_Request> data_requests_;
  std::vector<int> send_bytes_, send_byte_displs_, recv_bytes_, recv_byte_displs_;
  // widened_: bfloat16 AllReduce's float32 copy.
  std::vector<float> widened_;
};

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // nothing can be freed any more; the process is ending
  // Headers that never came (a deadline passed): receives can be cancelled. A cancelled receive
  // completes at once unless its message is arriving; 1 s bounds even that.
  std::vector<MPI_Request> receives;
  for (int r = 0; r < size_; ++r) {
    if (header_requests_[r] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&header_requests_[r]);
    receives.push_back(header_requests_[r]);
  }
  bool leak_headers = false;
  if (!receives.empty()) {
    absl::StatusOr<bool> done = Poll(receives, DeadlineAfter(std::chrono::seconds(1)),
                                     [] { return std::string("destroying the communicator"); });
    leak_headers = !done.ok() || !*done;
  }
  for (int r = 0; r < size_; ++r) {
    MPI_Request& send = header_requests_[size_ + r];
    if (send == MPI_REQUEST_NULL) continue;
    // MPI finishes a freed send on its own, reading send_headers_ until then.
    MPI_Request_free(&send);
    leak_headers = true;
  }
  if (leak_headers) {
    // Deliberately leaked: MPI may still use them.
    new std::vector<CollectiveHeader>(std::move(send_headers_));
    new std::vector<CollectiveHeader>(std::move(recv_headers_));
  }
  for (MPI_Request& request : data_requests_) {
    if (request == MPI_REQUEST_NULL) continue;
    // A collective left in flight by a deadline: it may still write its buffers, and freeing
    // the communicator under it is erroneous. Leave both; the process is meant to end.
    new std::vector<float>(std::move(widened_));  // deliberately leaked
    return;
  }
  MPI_Comm_free(&comm_);
}

absl::Status MpiCommunicator::Fail(absl::Status status) {
  unusable_ = std::string(status.message());
  return status;
}

absl::Status MpiCommunicator::ExchangeHeaders(const CollectiveCall& call, bool rejected) {
  const auto start = DeadlineClock::now();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const int rc = MPI_Irecv(&recv_headers_[r], sizeof(CollectiveHeader), MPI_BYTE, r, kHeaderTag,
                             comm_, &header_requests_[r]);
    if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Irecv", rc));
  }
  recv_headers_[rank_] = MakeCollectiveHeader(call, rank_, rank_, size_, rejected);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    send_headers_[r] = MakeCollectiveHeader(call, rank_, r, size_, rejected);
    const int rc = MPI_Isend(&send_headers_[r], sizeof(CollectiveHeader), MPI_BYTE, r, kHeaderTag,
                             comm_, &header_requests_[size_ + r]);
    if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Isend", rc));
  }
  absl::StatusOr<bool> done = Poll(
      header_requests_, call.deadline, [&] { return Where(call); }, call.tag.keep_alive);
  if (!done.ok()) return Fail(done.status());
  if (*done) return absl::OkStatus();
  // The deadline passed. A receive still pending is a rank that has not entered this call.
  std::vector<int> missing;
  std::vector<int> undelivered;
  for (int r = 0; r < size_; ++r) {
    for (int phase = 0; phase < 2; ++phase) {
      MPI_Request& request = header_requests_[phase * size_ + r];
      int complete = 1;
      if (request != MPI_REQUEST_NULL) MPI_Test(&request, &complete, MPI_STATUS_IGNORE);
      if (!complete) (phase == 0 ? missing : undelivered).push_back(r);
    }
  }
  std::string who;
  if (!missing.empty()) {
    who = fmt::format(
        "rank{} {} did not join it within {:.2f} s (no header from {} had "
        "arrived; {} of {} ranks had joined)",
        missing.size() > 1 ? "s" : "", RankList(missing), SecondsSince(start),
        missing.size() > 1 ? "them" : "it", size_ - missing.size(), size_);
  } else {
    who = fmt::format(
        "every rank's header arrived, but this rank's headers to rank{} {} were "
        "not delivered within {:.2f} s",
        undelivered.size() > 1 ? "s" : "", RankList(undelivered), SecondsSince(start));
  }
  Process().timed_out.store(true);
  return Fail(absl::DeadlineExceededError(fmt::format(
      "{}: {}; a rank that does not join is stopped, crashed, slower than the deadline allows, "
      "or issuing fewer collectives than this one. This communicator is now unusable (MPI "
      "cannot cancel a collective): end the process with a non-zero status, and look at rank {}",
      Where(call), who, missing.empty() ? undelivered.front() : missing.front())));
}

absl::Status MpiCommunicator::Begin(const CollectiveCall& call) {
  if (!unusable_.empty()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: this MPI communicator is unusable since an earlier call failed: {}",
                    Where(call), unusable_));
  }
  absl::Status exchanged = ExchangeHeaders(call, /*rejected=*/false);
  if (!exchanged.ok()) return exchanged;
  // A mismatch leaves every rank out of the data phase, in step: the communicator stays usable.
  return CheckCollectiveHeaders(call, rank_, size_, recv_headers_);
}

absl::Status MpiCommunicator::Rejected(const CollectiveCall& call, absl::Status error) {
  if (!unusable_.empty()) return error;
  // Tell the other ranks, which would otherwise wait for this one until their deadline.
  absl::Status told = ExchangeHeaders(call, /*rejected=*/true);
  if (told.ok()) return error;
  return absl::Status(error.code(), fmt::format("{} (and telling the other ranks failed: {})",
                                                error.message(), told.message()));
}

absl::Status MpiCommunicator::Finish(const CollectiveCall& call, MPI_Request request) {
  const auto start = DeadlineClock::now();
  data_requests_.assign(1, request);
  absl::StatusOr<bool> done = Poll(
      data_requests_, call.deadline, [&] { return Where(call); }, call.tag.keep_alive);
  if (!done.ok()) return Fail(done.status());
  if (*done) return absl::OkStatus();
  Process().timed_out.store(true);
  Process().abandoned.store(true);
  return Fail(absl::DeadlineExceededError(fmt::format(
      "{}: every rank joined (all headers had arrived) but the data did not arrive within "
      "{:.2f} s; a rank stopped or died during the exchange, or the exchange is too large for "
      "the deadline: which rank cannot be known from here. This communicator is now unusable "
      "(MPI cannot cancel a collective) and MPI may still write this call's buffers: keep them "
      "alive and end the process with a non-zero status",
      Where(call), SecondsSince(start))));
}

absl::StatusOr<int> MpiCommunicator::Bytes(const CollectiveCall& call, int64_t elements,
                                           std::string_view what) {
  const int64_t limit = std::numeric_limits<int>::max();
  if (elements > limit / call.elem_size) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {} is {} elements of {} bytes, past the {} bytes an MPI count holds; "
                    "split the call",
                    Where(call), what, elements, call.elem_size, limit));
  }
  return static_cast<int>(elements * call.elem_size);
}

absl::Status MpiCommunicator::ByteLayout(const CollectiveCall& call,
                                         absl::Span<const int64_t> counts,
                                         absl::Span<const int64_t> displs, std::string_view name,
                                         std::vector<int>* byte_counts,
                                         std::vector<int>* byte_displs) {
  byte_counts->resize(size_);
  byte_displs->resize(size_);
  for (int r = 0; r < size_; ++r) {
    // The end of the block must fit too: MPI computes it.
    absl::StatusOr<int> end = Bytes(call, displs[r] + counts[r],
                                    fmt::format("the end of rank {}'s block in {}", r, name));
    if (!end.ok()) return end.status();
    (*byte_displs)[r] = static_cast<int>(displs[r] * call.elem_size);
    (*byte_counts)[r] = static_cast<int>(counts[r] * call.elem_size);
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoAllReduce(const CollectiveCall& call, void* data) {
  if (call.count > std::numeric_limits<int>::max()) {
    return Rejected(call, absl::InvalidArgumentError(fmt::format(
                              "{}: {} elements are more than an MPI count holds ({}); split the "
                              "call",
                              Where(call), call.count, std::numeric_limits<int>::max())));
  }
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  const int count = static_cast<int>(call.count);
  float* values = static_cast<float*>(data);
  if (call.dtype == DType::kBFloat16) {
    const bfloat16* narrow = static_cast<const bfloat16*>(data);
    widened_.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) widened_[i] = narrow[i].ToFloat();
    values = widened_.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(MPI_IN_PLACE, values, count, MPI_FLOAT, MPI_SUM, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Iallreduce", rc));
  absl::Status finished = Finish(call, request);
  if (!finished.ok()) return finished;
  if (call.op == ReduceOp::kMean) {
    const float ranks = static_cast<float>(size_);
    for (int i = 0; i < count; ++i) values[i] /= ranks;
  }
  if (call.dtype == DType::kBFloat16) {
    bfloat16* narrow = static_cast<bfloat16*>(data);
    for (int i = 0; i < count; ++i) narrow[i] = bfloat16::FromFloat(widened_[i]);
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::DoBroadcast(const CollectiveCall& call, void* data) {
  absl::StatusOr<int> bytes = Bytes(call, call.count, "data");
  if (!bytes.ok()) return Rejected(call, bytes.status());
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibcast(data, *bytes, MPI_BYTE, call.root, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Ibcast", rc));
  return Finish(call, request);
}

absl::Status MpiCommunicator::DoAllGather(const CollectiveCall& call, const void* send,
                                          void* recv) {
  absl::StatusOr<int> bytes = Bytes(call, call.count * size_, "recv");
  if (!bytes.ok()) return Rejected(call, bytes.status());
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  const int block = *bytes / size_;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallgather(send, block, MPI_BYTE, recv, block, MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Iallgather", rc));
  return Finish(call, request);
}

absl::Status MpiCommunicator::DoAllGatherV(const CollectiveCall& call, const void* send, void* recv,
                                           absl::Span<const int64_t> recv_displs) {
  absl::Status layout =
      ByteLayout(call, call.recv_counts, recv_displs, "recv", &recv_bytes_, &recv_byte_displs_);
  if (!layout.ok()) return Rejected(call, layout);
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallgatherv(send, recv_bytes_[rank_], MPI_BYTE, recv, recv_bytes_.data(),
                                 recv_byte_displs_.data(), MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Iallgatherv", rc));
  return Finish(call, request);
}

absl::Status MpiCommunicator::DoAllToAll(const CollectiveCall& call, const void* send, void* recv) {
  absl::StatusOr<int> bytes = Bytes(call, call.count * size_, "send");
  if (!bytes.ok()) return Rejected(call, bytes.status());
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  const int block = *bytes / size_;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ialltoall(send, block, MPI_BYTE, recv, block, MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Ialltoall", rc));
  return Finish(call, request);
}

absl::Status MpiCommunicator::DoAllToAllV(const CollectiveCall& call, const void* send,
                                          absl::Span<const int64_t> send_displs, void* recv,
                                          absl::Span<const int64_t> recv_displs) {
  absl::Status layout =
      ByteLayout(call, call.send_counts, send_displs, "send", &send_bytes_, &send_byte_displs_);
  if (layout.ok()) {
    layout =
        ByteLayout(call, call.recv_counts, recv_displs, "recv", &recv_bytes_, &recv_byte_displs_);
  }
  if (!layout.ok()) return Rejected(call, layout);
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc =
      MPI_Ialltoallv(send, send_bytes_.data(), send_byte_displs_.data(), MPI_BYTE, recv,
                     recv_bytes_.data(), recv_byte_displs_.data(), MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Ialltoallv", rc));
  return Finish(call, request);
}

absl::Status MpiCommunicator::DoBarrier(const CollectiveCall& call) {
  // The header exchange is a barrier already: a rank completes it only once every other rank's
  // header, sent when that rank entered, has arrived. An MPI_Ibarrier after it would add a round
  // trip and nothing else.
  return Begin(call);
}

// DoSubRange: a Barrier bounded by `deadline` (every rank has reached this point), then
// MPI_Comm_split, which has no non-blocking form but completes at once when every rank is in it.
absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::DoSubRange(int first, int count,
                                                                          Deadline deadline) {
  const std::string label = fmt::format("sub-communicator of ranks [{}, {})", first, first + count);
  RECSDK_RETURN_IF_ERROR(Barrier(deadline, CallTag{-1, label}));
  const bool inside = rank_ >= first && rank_ < first + count;
  MPI_Comm sub = MPI_COMM_NULL;
  int rc = MPI_Comm_split(comm_, inside ? 0 : MPI_UNDEFINED, rank_, &sub);
  const std::string where = fmt::format("making the {} on rank {} of {}", label, rank_, size_);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(where, "MPI_Comm_split", rc));
  if (!inside) return std::unique_ptr<Communicator>();
  rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return MpiFailed(where, "MPI_Comm_set_errhandler", rc);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(sub, rank_ - first, count));
}

absl::Status MpiCommunicator::DoExchangeV(const CollectiveCall& call, const void* send,
                                          absl::Span<const int64_t> send_counts,
                                          absl::Span<int64_t> recv_counts,
                                          absl::FunctionRef<void*(int64_t)> alloc) {
  // Two rounds: the headers, which carry the counts, then the data. Once every rank is in this
  // call (the headers say so) the data round follows on every rank with no choice left in
  // between. So that no rank can fail between them, a block is limited to (2^31 - 1) / size()
  // bytes here, before the headers: then every rank's receive total fits an MPI count.
  const int64_t block_limit = std::numeric_limits<int>::max() / size_;
  for (int r = 0; r < size_; ++r) {
    if (send_counts[r] > block_limit / call.elem_size) {
      return Rejected(
          call, absl::InvalidArgumentError(fmt::format(
                    "{}: the block for rank {} is {} elements of {} bytes; ExchangeV moves at "
                    "most {} bytes per block at {} ranks (so that a rank's receive total fits an "
                    "MPI count); split the exchange",
                    Where(call), r, send_counts[r], call.elem_size, block_limit, size_)));
    }
  }
  // The counts came with the headers (each header carries what its sender sends its receiver),
  // so once the headers agree the data round follows with no round of its own for the counts.
  absl::Status begun = Begin(call);
  if (!begun.ok()) return begun;
  int64_t total = 0;
  send_bytes_.resize(size_);
  send_byte_displs_.resize(size_);
  recv_bytes_.resize(size_);
  recv_byte_displs_.resize(size_);
  int64_t sent = 0;
  for (int r = 0; r < size_; ++r) {
    recv_counts[r] = r == rank_ ? send_counts[r] : recv_headers_[r].send_to_receiver;
    if (recv_counts[r] < 0 || recv_counts[r] > block_limit / call.elem_size) {
      // Every sender checked its blocks: only a rank of another build sends this. The others
      // go on to the data round; this communicator cannot.
      return Fail(absl::InternalError(
          fmt::format("{}: rank {} announced a block of {} elements, outside [0, {}]; every rank "
                      "must run the same program build",
                      Where(call), r, recv_counts[r], block_limit / call.elem_size)));
    }
    recv_byte_displs_[r] = static_cast<int>(total * call.elem_size);
    recv_bytes_[r] = static_cast<int>(recv_counts[r] * call.elem_size);
    total += recv_counts[r];
    send_byte_displs_[r] = static_cast<int>(sent * call.elem_size);
    send_bytes_[r] = static_cast<int>(send_counts[r] * call.elem_size);
    sent += send_counts[r];
  }
  void* recv = alloc(total);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc =
      MPI_Ialltoallv(send, send_bytes_.data(), send_byte_displs_.data(), MPI_BYTE, recv,
                     recv_bytes_.data(), recv_byte_displs_.data(), MPI_BYTE, comm_, &request);
  if (rc != MPI_SUCCESS) return Fail(MpiFailed(Where(call), "MPI_Ialltoallv", rc));
  return Finish(call, request);
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateForRegistry(const LaunchEnvironment& env,
                                                                Deadline deadline) {
  return CreateMpiCommunicator(env, deadline);
}

}  // namespace

void RegisterMpiCommunicator() { SetMultiProcessCommunicator("mpi", &CreateForRegistry); }

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const LaunchEnvironment& env,
                                                                    Deadline deadline) {
  absl::Status ready = EnsureMpi();
  if (!ready.ok()) return ready;
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (env.under_launcher() && (env.rank != world_rank || env.size != world_size)) {
    return absl::FailedPreconditionError(fmt::format(
        "the launcher ({}) says this process is rank {} of {} ({}, {}) but MPI_COMM_WORLD says "
        "rank {} of {}; launch with the mpirun of the MPI recsdk was built with",
        env.launcher, env.rank, env.size, env.rank_variable, env.size_variable, world_rank,
        world_size));
  }
  const auto start = DeadlineClock::now();
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &requests[0]);
  const std::string where =
      fmt::format("creating the MPI communicator on rank {} of {}", world_rank, world_size);
  if (rc != MPI_SUCCESS) return MpiFailed(where, "MPI_Comm_idup", rc);
  absl::StatusOr<bool> done = Poll(requests, deadline, [&] { return std::string(where); });
  if (!done.ok()) return done.status();
  if (!*done) {
    Process().timed_out.store(true);
    Process().abandoned.store(true);
    return absl::DeadlineExceededError(fmt::format(
        "{}: duplicating MPI_COMM_WORLD did not complete within {:.2f} s: some rank has not "
        "created its communicator (which one cannot be known from here); end the process with "
        "a non-zero status",
        where, SecondsSince(start)));
  }
  // Errors become return codes (and Statuses) instead of aborting the job.
  rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return MpiFailed(where, "MPI_Comm_set_errhandler", rc);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(comm, world_rank, world_size));
}

}  // namespace recsdk::dist
