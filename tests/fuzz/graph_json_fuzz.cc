// graph_json_fuzz.cc: libFuzzer target for Graph::FromJson (graph JSON read back: nodes, inputs,
// attributes, base64 tensors, shapes). A graph that loads must serialise again and load again to
// the same text (round trip), and print (`recsdk dump-graph`'s text and dot): one dot line per
// node and per edge, whatever the names hold (they are escaped).
#include <string>
#include <string_view>

#include "recsdk/graph.h"
#include "src/graph/graph_print.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recsdk;
  auto g = Graph::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!g.ok()) return 0;
  const std::string text = (*g)->ToJson();
  auto again = Graph::FromJson(text);
  if (!again.ok() || (*again)->ToJson() != text) std::abort();
  (void)internal::GraphText(**g);
  const std::string dot = internal::GraphDot(**g);
  // One line per node and per edge, plus the opening two and the closing one: a newline in a
  // name would have split a statement.
  size_t lines = 0, expected = 3;
  for (char c : dot) lines += c == '\n' ? 1 : 0;
  for (const Node* n : (*g)->nodes()) {
    expected += 1 + n->control_inputs().size();
    for (const Output& in : n->inputs()) expected += in.valid() ? 1 : 0;
  }
  if (lines != expected) std::abort();
  return 0;
}
