// merge_metrics.cc: the ranks agreeing on a value and on metrics (recsdk/distributed.h):
// AllRanksAgree (one AllReduce of the votes) and MergeMetricOverRanks (the ranks' metric states
// gathered, an AllGather of their sizes and an AllGatherV of the numbers, merged in rank order).
//
// Threading: as a Session's Run; makes collectives on the process communicator.
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/status_macros.h"
#include "src/dist/process_communicator.h"

namespace recsdk {

StatusOr<bool> AllRanksAgree(bool value, std::string_view label) {
  float votes = value ? 1.0f : 0.0f;
  int size = 1;
  const Status s = dist::WithWorkerCommunicator(
      [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
        size = comm.size();
        if (size == 1) return absl::OkStatus();
        return comm.AllReduce(absl::MakeSpan(&votes, 1), dist::ReduceOp::kSum,
                              dist::DeadlineAfterSeconds(o.collective_timeout_s), {-1, label});
      });
  if (!s.ok()) {
    return Status(s.code(), fmt::format("AllRanksAgree(\"{}\"): {}", label, s.message()));
  }
  return votes == static_cast<float>(size);
}

Status MergeMetricOverRanks(StreamingMetric& metric) {
  // Mergeable at all? Asked before any exchange, so every rank (holding the same kinds of
  // metric) refuses alike and none is left waiting.
  RECSDK_RETURN_IF_ERROR(metric.MergeState({}));
  const std::vector<double> mine = metric.SaveState();
  std::vector<int64_t> sizes;
  std::vector<double> all;
  const Status s = dist::WithWorkerCommunicator(
      [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
        if (comm.size() == 1) return absl::OkStatus();
        const dist::Deadline deadline = dist::DeadlineAfterSeconds(o.collective_timeout_s);
        const int64_t size = static_cast<int64_t>(mine.size());
        sizes.assign(static_cast<size_t>(comm.size()), 0);
        RECSDK_RETURN_IF_ERROR(comm.AllGather<int64_t>(absl::MakeConstSpan(&size, 1),
                                                       absl::MakeSpan(sizes), deadline,
                                                       {-1, "metric_state_sizes"}));
        int64_t total = 0;
        for (int64_t n : sizes) total += n;
        all.resize(static_cast<size_t>(total));
        return comm.AllGatherV<double>(mine, absl::MakeSpan(all), {sizes, {}}, deadline,
                                       {-1, "metric_states"});
      });
  if (!s.ok()) {
    return Status(s.code(),
                  fmt::format("MergeMetricOverRanks(\"{}\"): {}", metric.name(), s.message()));
  }
  if (sizes.empty()) return absl::OkStatus();  // a world of one
  metric.Reset();
  size_t offset = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    const size_t n = static_cast<size_t>(sizes[r]);
    const Status m = metric.MergeState(absl::MakeConstSpan(all).subspan(offset, n));
    if (!m.ok()) {
      return Status(m.code(),
                    fmt::format("MergeMetricOverRanks: the state of rank {}: {}", r, m.message()));
    }
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace recsdk
