// graph_json_fuzz.cc: libFuzzer target for Graph::FromJson (graph JSON read back: nodes, inputs,
// attributes, base64 tensors, shapes). A graph that loads must serialise again and load again to
// the same text (round trip).
#include <string>
#include <string_view>

#include "recsdk/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recsdk;
  auto g = Graph::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!g.ok()) return 0;
  const std::string text = (*g)->ToJson();
  auto again = Graph::FromJson(text);
  if (!again.ok() || (*again)->ToJson() != text) std::abort();
  return 0;
}
