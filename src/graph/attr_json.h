// attr_json.h: a node's attributes as JSON, in the layout of the graph JSON (graph_json.cc:
// {name: {"type": pinned tag, "value"}}), for the dumps' manifests (src/precision/), which record
// each op's attributes so that `recsdk replay-op` can rebuild the op.
//
// Threading: pure functions.
#ifndef RECSDK_GRAPH_ATTR_JSON_H_
#define RECSDK_GRAPH_ATTR_JSON_H_

#include "nlohmann/json.hpp"
#include "recsdk/graph.h"
#include "recsdk/status.h"

namespace recsdk::internal {

// AttrMapToJson: every attribute, as Graph::ToJson writes them.
nlohmann::json AttrMapToJson(const AttrMap& attrs);

// AttrMapFromJson: the attributes back. Nothing is trusted: DataLoss naming `what` and the
// attribute for anything that is not an object of well-typed attributes; never throws.
[[nodiscard]] StatusOr<AttrMap> AttrMapFromJson(const nlohmann::json& j, std::string_view what);

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_ATTR_JSON_H_
