// memory_limit.cc: see memory_limit.h.
#include "src/common/memory_limit.h"

#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "fmt/format.h"

namespace recsdk::internal {
namespace {

// MappedBytes: the process's virtual size now (/proc/self/statm), 0 when unknown.
uint64_t MappedBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long pages = 0;
  const int got = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  return got == 1 ? pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

AllocationLimit CurrentAllocationLimit() {
  AllocationLimit best;
  struct sysinfo si;
  if (sysinfo(&si) == 0) {
    best.bytes = (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
    best.source = "physical memory + swap";
  } else {
    best.bytes = UINT64_MAX;
    best.source = "no known limit";
  }
  const uint64_t mapped = MappedBytes();
  for (auto [resource, name] :
       {std::pair{RLIMIT_AS, "RLIMIT_AS"}, std::pair{RLIMIT_DATA, "RLIMIT_DATA"}}) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) continue;
    const uint64_t left = rl.rlim_cur > mapped ? rl.rlim_cur - mapped : 0;
    if (left < best.bytes)
      best = {left, fmt::format("{} ({} bytes, {} mapped now)", name,
                                static_cast<uint64_t>(rl.rlim_cur), mapped)};
  }
  return best;
}

absl::Status CheckAllocation(uint64_t bytes, std::string_view what) {
  const AllocationLimit limit = CurrentAllocationLimit();
  if (bytes <= limit.bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(fmt::format(
      "{} needs {} bytes of memory but this process can allocate at most {} ({}); raise the "
      "limit, or use a machine with more memory",
      what, bytes, limit.bytes, limit.source));
}

}  // namespace recsdk::internal
