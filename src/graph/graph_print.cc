// graph_print.cc: GraphText and GraphDot (see graph_print.h).
#include "src/graph/graph_print.h"

#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "recsdk/dtype.h"

namespace recsdk::internal {

namespace {

std::string InputName(const Output& o) { return o.valid() ? o.name() : std::string("?"); }

// Text for inside a dot quoted string: quotes and backslashes escaped, control characters as
// spaces (a newline inside a name would otherwise break the statement).
std::string DotEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string GraphText(const Graph& graph) {
  const std::vector<Node*> nodes = graph.nodes();
  std::string text = fmt::format("graph: {} nodes\n", nodes.size());
  for (const Node* n : nodes) {
    std::vector<std::string> inputs;
    for (const Output& in : n->inputs()) inputs.push_back(InputName(in));
    for (const Node* c : n->control_inputs()) inputs.push_back("^" + c->name());
    std::vector<std::string> outputs;
    for (int i = 0; i < n->num_outputs(); ++i) {
      outputs.push_back(
          fmt::format("{}{}", DTypeName(n->output_dtype(i)), n->output_shape(i).ToString()));
    }
    text += fmt::format("{} = {}({})", n->name(), n->type(), fmt::join(inputs, ", "));
    if (!outputs.empty()) text += fmt::format(" -> {}", fmt::join(outputs, ", "));
    if (!n->device().empty()) text += " @" + n->device();
    text += "\n";
  }
  return text;
}

std::string GraphDot(const Graph& graph) {
  std::string dot = "digraph recsdk {\n  node [shape=box];\n";
  const std::vector<Node*> nodes = graph.nodes();
  for (const Node* n : nodes) {
    dot += fmt::format("  n{} [label=\"{}\\n{}\"];\n", n->id(), DotEscape(n->name()),
                       DotEscape(n->type()));
  }
  for (const Node* n : nodes) {
    for (const Output& in : n->inputs()) {
      if (!in.valid()) continue;
      if (in.node->num_outputs() > 1) {
        dot += fmt::format("  n{} -> n{} [label=\"{}\"];\n", in.node->id(), n->id(), in.index);
      } else {
        dot += fmt::format("  n{} -> n{};\n", in.node->id(), n->id());
      }
    }
    for (const Node* c : n->control_inputs()) {
      dot += fmt::format("  n{} -> n{} [style=dashed];\n", c->id(), n->id());
    }
  }
  return dot + "}\n";
}

}  // namespace recsdk::internal
