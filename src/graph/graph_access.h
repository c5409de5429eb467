// graph_access.h: what the library's graph builders keep inside a Graph that its public API does
// not show. Not part of the public API: recsdk/graph.h names only the friend class below.
//
// Threading: as Graph (building is single-threaded).
#ifndef RECSDK_GRAPH_GRAPH_ACCESS_H_
#define RECSDK_GRAPH_GRAPH_ACCESS_H_

#include <memory>
#include <string>

#include "recsdk/graph.h"

namespace recsdk::internal {

// GraphAccess: Graph's friend (graph.h), the one way into its private state from src/.
class GraphAccess {
 public:
  // BuilderState: state a graph builder keeps with `graph` between its calls, by key (the
  // gradient cache through which Minimize and SparseMinimize share one backward pass, the last
  // AllReduceMean, the loss scaler's scaled losses). Empty until set; neither copied by
  // Graph::Copy nor serialised.
  static std::shared_ptr<void>& BuilderState(Graph& graph, const std::string& key) {
    return graph.builder_state_[key];
  }
};

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_GRAPH_ACCESS_H_
