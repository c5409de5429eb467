// local_communicator.cc: the collectives of a world of one.
#include "src/dist/local_communicator.h"

#include <cstring>
#include <memory>

#include "src/dist/collective_header.h"

namespace recsdk::dist {
namespace {

// Copy: `send` and `recv` never overlap (Communicator checks it, as MPI requires).
void Copy(void* to, const void* from, int64_t elements, int32_t elem_size) {
  if (elements == 0) return;
  std::memcpy(to, from, static_cast<size_t>(elements) * static_cast<size_t>(elem_size));
}

}  // namespace

absl::Status LocalCommunicator::DoAllReduce(const CollectiveCall&, void*) {
  // The sum of one rank's values is those values, and so is their mean (x / 1 == x exactly).
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoBroadcast(const CollectiveCall&, void*) {
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoAllGather(const CollectiveCall& call, const void* send,
                                            void* recv) {
  Copy(recv, send, call.count, call.elem_size);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoAllGatherV(const CollectiveCall& call, const void* send,
                                             void* recv, absl::Span<const int64_t> recv_displs) {
  Copy(static_cast<char*>(recv) + recv_displs[0] * call.elem_size, send, call.recv_counts[0],
       call.elem_size);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoAllToAll(const CollectiveCall& call, const void* send,
                                           void* recv) {
  Copy(recv, send, call.count, call.elem_size);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoAllToAllV(const CollectiveCall& call, const void* send,
                                            absl::Span<const int64_t> send_displs, void* recv,
                                            absl::Span<const int64_t> recv_displs) {
  // The pairwise count check MPI makes across ranks, with the one pair there is: the same code,
  // so that the message is the same too.
  const CollectiveHeader self = MakeCollectiveHeader(call, 0, 0, 1, /*rejected=*/false);
  absl::Status agree = CheckCollectiveHeaders(call, 0, 1, absl::MakeConstSpan(&self, 1));
  if (!agree.ok()) return agree;
  Copy(static_cast<char*>(recv) + recv_displs[0] * call.elem_size,
       static_cast<const char*>(send) + send_displs[0] * call.elem_size, call.recv_counts[0],
       call.elem_size);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::DoBarrier(const CollectiveCall&) { return absl::OkStatus(); }

absl::StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::DoSubRange(int, int, Deadline) {
  return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());  // [0, 1)
}

absl::Status LocalCommunicator::DoExchangeV(const CollectiveCall& call, const void* send,
                                            absl::Span<const int64_t> send_counts,
                                            absl::Span<int64_t> recv_counts,
                                            absl::FunctionRef<void*(int64_t)> alloc) {
  recv_counts[0] = send_counts[0];
  Copy(alloc(send_counts[0]), send, send_counts[0], call.elem_size);
  return absl::OkStatus();
}

}  // namespace recsdk::dist
