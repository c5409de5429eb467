// local_communicator.h: the Communicator of a world of one process, no MPI.
//
// What a plain single-process program gets from CreateCommunicator, so that distributed code
// has no second path: with one rank every collective is the identity or a copy (AllReduce's
// mean divides by 1), and the arguments are checked exactly as under MPI, so a call that is
// wrong on N ranks is already wrong here. Nothing waits: a deadline that has passed does not
// fail a call, which has no one to wait for.
//
// Threading: as Communicator (one thread at a time).
#ifndef RECSDK_DIST_LOCAL_COMMUNICATOR_H_
#define RECSDK_DIST_LOCAL_COMMUNICATOR_H_

#include <string_view>

#include "src/dist/communicator.h"

namespace recsdk::dist {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "local"; }

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
  absl::StatusOr<std::unique_ptr<Communicator>> DoSubRange(int first, int count,
                                                           Deadline deadline) override;
};

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_LOCAL_COMMUNICATOR_H_
