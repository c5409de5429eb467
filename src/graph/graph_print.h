// graph_print.h: a graph as text or as Graphviz dot, for `recsdk dump-graph` (reading a graph.json
// or an exported bundle) and for debugging a graph a program built.
//
// Text: one line per node, in id order (the order nodes were added, so each node's data inputs
// come before it): "name = Type(input, ..., ^control) -> dtype[shape], ..." with " @device" when
// the node is placed. Dot: a digraph with one box per node (name and type) and one edge per input;
// the edge says which output feeds it when its producer has several, control edges are dashed.
// Node names come from files users may not trust, so the dot text quotes and escapes them.
//
// Threading: pure functions of a Graph the caller keeps unchanged meanwhile. Cost: O(nodes +
// edges) time, output text of the same order.
#ifndef RECSDK_GRAPH_GRAPH_PRINT_H_
#define RECSDK_GRAPH_GRAPH_PRINT_H_

#include <string>

#include "recsdk/graph.h"

namespace recsdk::internal {

std::string GraphText(const Graph& graph);
std::string GraphDot(const Graph& graph);

}  // namespace recsdk::internal

#endif  // RECSDK_GRAPH_GRAPH_PRINT_H_
