// graph_order.h: renumbering a graph after a distributed pass added nodes (the group nodes of
// group_table_exchanges, the buckets of bucket_all_reduce), so that the id order is topological
// again and puts each added node where the pass wants it in the order of collectives.
//
// Threading: like Graph, single-threaded.
#ifndef RECSDK_DIST_GRAPH_ORDER_H_
#define RECSDK_DIST_GRAPH_ORDER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/status.h"

namespace recsdk::dist {

// ReorderByPriority: renumbers `graph` in a topological order that, among the nodes ready at
// each point, takes the one of least priority first. A node's priority is 2 * its id, or the
// one given in `priorities` (so 2 * k - 1 puts a node just before node k, 2 * k + 1 just after,
// when its inputs allow). InternalError if the graph has a cycle (a pass's bug).
[[nodiscard]] Status ReorderByPriority(Graph* graph,
                                       const std::vector<std::pair<Node*, int64_t>>& priorities);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_GRAPH_ORDER_H_
