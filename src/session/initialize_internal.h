// initialize_internal.h: the pure parts of init's CPU binding, exposed for tests.
#ifndef RECSDK_SESSION_INITIALIZE_INTERNAL_H_
#define RECSDK_SESSION_INITIALIZE_INTERNAL_H_

#include <vector>

namespace recsdk::internal {

// CpusForLocalRank: the cores local rank `local_rank` of `local_size` binds to: all cores, NUMA
// node after node, split into local_size contiguous equal shares (the first ones one larger when
// they do not divide), so ranks fill node 0 first and a share crosses a node only when it must.
// Empty when the arguments are out of range.
std::vector<int> CpusForLocalRank(const std::vector<std::vector<int>>& numa_nodes, int local_rank,
                                  int local_size);

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_INITIALIZE_INTERNAL_H_
