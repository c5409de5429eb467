// memory_limit.h: checking a size read from a file against what this process can allocate,
// before allocating it. A checkpoint payload whose manifest claims tens of GiB (a sparse file
// costs its writer nothing) otherwise ends in an uncaught std::bad_alloc under a memory limit,
// or in the OOM killer without one.
// Threading: thread-safe (reads process limits only).
#ifndef RECSDK_COMMON_MEMORY_LIMIT_H_
#define RECSDK_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace recsdk::internal {

// AllocationLimit: the most bytes one more allocation can take, and where that bound comes from.
struct AllocationLimit {
  uint64_t bytes = 0;
  std::string source;  // "RLIMIT_AS", "RLIMIT_DATA" or "physical memory + swap"
};
// CurrentAllocationLimit: the address-space or data-segment limit left to this process when one
// is set (the limit less what is mapped now), else the machine's memory plus swap. O(1) system
// calls.
AllocationLimit CurrentAllocationLimit();

// CheckAllocation: ResourceExhausted naming `what`, `bytes` and the limit when `bytes` is above
// CurrentAllocationLimit(); OK otherwise (the allocation may still fail: the limit is an upper
// bound, and callers still catch std::bad_alloc).
[[nodiscard]] absl::Status CheckAllocation(uint64_t bytes, std::string_view what);

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_MEMORY_LIMIT_H_
