// broadcast_variables.cc: broadcast_global_variables (recsdk/distributed.h) and
// BroadcastGlobalVariablesHook (recsdk/hooks.h).
//
// All the variables travel in one Broadcast of their bytes, packed in the graph's creation order
// (the same on every rank, which builds the same graph): one collective instead of one per
// variable, and a rank whose variables differ in total size fails the call on every rank at once
// (the ranks compare the counts before any data moves). A non-root rank writes each received
// value into a new tensor and swaps it in under the variable's lock, so that a tensor a reader
// still holds from an earlier step is never changed under it.
//
// Before the broadcast the ranks check that they run the same program (program_fingerprint.h).
//
// Threading: as the Session's Run (not beside a Run of the same session).
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "recsdk/hooks.h"
#include "recsdk/variables.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/dist/process_communicator.h"
#include "src/dist/program_fingerprint.h"
#include "src/session/session_resources.h"

namespace recsdk {

Status broadcast_global_variables(Session& session, int root_rank) {
  struct Entry {
    std::string name;
    internal::VariableResource* resource;
    size_t offset, bytes;
  };
  std::vector<Entry> entries;
  size_t total = 0;
  for (const Variable& v : GlobalVariables(session.graph())) {
    auto* r = dynamic_cast<internal::VariableResource*>(
        internal::SessionResources(session)->Lookup(v.name()));
    size_t bytes = 0;
    bool initialized = false;
    if (r != nullptr) {
      std::lock_guard<std::mutex> lock(r->mu);
      initialized = r->initialized();
      if (initialized) bytes = r->value.TotalBytes();
    }
    if (!initialized) {
      return absl::FailedPreconditionError(fmt::format(
          "broadcast_global_variables: variable \"{}\" is not initialised on this rank; run the "
          "init op (GlobalVariablesInitializer) or restore a checkpoint before broadcasting",
          v.name()));
    }
    entries.push_back({v.name(), r, total, bytes});
    total += bytes;
  }
  std::vector<std::byte> buffer(total);
  internal::ResourceMgr* rm = internal::SessionResources(session);
  for (const Entry& e : entries) {
    std::lock_guard<std::mutex> lock(e.resource->mu);
    // A variable in device memory is read through the device.
    RECSDK_ASSIGN_OR_RETURN(Tensor host, rm->ToHost(e.resource->value));
    std::memcpy(buffer.data() + e.offset, host.raw_data(), e.bytes);
  }
  int rank = 0;
  const Status s = dist::WithWorkerCommunicator(
      [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
        rank = comm.rank();
        // First, that every rank runs the same program: different variables or tables are
        // named here instead of failing the broadcast on its byte count.
        RECSDK_RETURN_IF_ERROR(dist::CheckSameProgram(
            session, comm, dist::DeadlineAfterSeconds(o.collective_timeout_s)));
        return comm.Broadcast(absl::Span<std::byte>(buffer), root_rank,
                              dist::DeadlineAfterSeconds(o.collective_timeout_s),
                              dist::CallTag{-1, "global_variables"});
      });
  if (!s.ok()) {
    return Status(s.code(), fmt::format("broadcast_global_variables(root_rank {}) of {} variables "
                                        "({} bytes): {}",
                                        root_rank, entries.size(), total, s.message()));
  }
  if (rank == root_rank) return absl::OkStatus();
  for (const Entry& e : entries) {
    std::lock_guard<std::mutex> lock(e.resource->mu);
    Tensor fresh(e.resource->value.dtype(), e.resource->value.shape());
    std::memcpy(fresh.raw_data(), buffer.data() + e.offset, e.bytes);
    RECSDK_ASSIGN_OR_RETURN(e.resource->value, rm->ToDevice(fresh));
  }
  return absl::OkStatus();
}

Status BroadcastGlobalVariablesHook::AfterCreateSession(Session& session) {
  return broadcast_global_variables(session, root_rank_);
}

}  // namespace recsdk
