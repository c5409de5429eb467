// fused_from.h: the "fused_from" attribute a fusion pass sets on the node it builds, naming the
// ops that node replaced, so that tools reading the graph after its passes (dumps, compare-dumps,
// dump-graph) can say which unfused ops a fused op stands for.
//
// The attribute is a list of strings, one per replaced op, each "TYPE NAME" (the op type, one
// space, the node name; types hold no spaces, names may). The fused node itself keeps the name of
// the last op of the chain it replaced (so fetches still work), and that op is listed too. Ops
// whose schema declares it: FusedDense (fuse_dense) and TableGatherConcat (fuse_gather_concat).
//
// Threading: pure functions.
#ifndef RECSDK_GRAPH_FUSED_FROM_H_
#define RECSDK_GRAPH_FUSED_FROM_H_

#include <string>
#include <string_view>
#include <utility>

#include "recsdk/graph.h"

namespace recsdk::internal {

// kFusedFromAttr: the attribute's name.
inline constexpr char kFusedFromAttr[] = "fused_from";

// FusedFromEntry: the entry for `node` as it is before the pass rewrites it.
inline std::string FusedFromEntry(const Node& node) { return node.type() + " " + node.name(); }

// ParseFusedFromEntry: {type, name} of an entry; an entry without a space (written by hand) is
// all name, with an empty type.
inline std::pair<std::string, std::string> ParseFusedFromEntry(std::string_view entry) {
  const size_t space = entry.find(' ');
  if (space == std::string_view::npos) return {std::string(), std::string(entry)};
  return {std::string(entry.substr(0, space)), std::string(entry.substr(space + 1))};
}

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_FUSED_FROM_H_
