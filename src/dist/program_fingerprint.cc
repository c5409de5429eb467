// program_fingerprint.cc: the same-program check of a distributed job (program_fingerprint.h).
#include "src/dist/program_fingerprint.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "recsdk/variables.h"
#include "recsdk/version.h"
#include "src/common/crc32c.h"
#include "src/common/hash.h"
#include "src/common/status_macros.h"
#include "src/device/table_resource.h"

namespace recsdk::dist {
namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

}  // namespace

std::string DescribeProgram(Session& session) {
  std::string text = fmt::format("recsdk {}\n", RECSDK_VERSION_STRING);
  for (const Variable& v : GlobalVariables(session.graph())) {
    text +=
        fmt::format("variable {} {} {}\n", v.name(), DTypeName(v.dtype()), v.shape().ToString());
  }
  for (const Node* n : session.graph().nodes()) {
    if (n->type() != internal::kTableHandleOp) continue;
    text += fmt::format("table {} {} {}\n", n->StringAttr("table_name"),
                        n->StringAttr("table_config"), n->StringAttr("optimizer_config"));
  }
  return text;
}

Status CheckSameProgram(Session& session, Communicator& comm, Deadline deadline) {
  const std::string text = DescribeProgram(session);
  const uint64_t mine = internal::Mix64(
      (static_cast<uint64_t>(internal::Crc32c(text.data(), text.size())) << 32) ^ text.size());
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  RECSDK_RETURN_IF_ERROR(comm.AllGather<uint64_t>(absl::MakeConstSpan(&mine, 1),
                                                  absl::MakeSpan(all), deadline,
                                                  CallTag{-1, "program_fingerprint"}));
  if (std::all_of(all.begin(), all.end(), [&](uint64_t f) { return f == all[0]; })) {
    return absl::OkStatus();
  }
  // Every rank sees the same fingerprints, so every rank gathers the texts.
  const int64_t size = static_cast<int64_t>(text.size());
  std::vector<int64_t> sizes(all.size());
  RECSDK_RETURN_IF_ERROR(comm.AllGather<int64_t>(absl::MakeConstSpan(&size, 1),
                                                 absl::MakeSpan(sizes), deadline,
                                                 CallTag{-1, "program_text_sizes"}));
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<char> texts(static_cast<size_t>(total));
  RECSDK_RETURN_IF_ERROR(comm.AllGatherV<char>(text, absl::MakeSpan(texts), {sizes, {}}, deadline,
                                               CallTag{-1, "program_texts"}));
  const std::string_view root(texts.data(), static_cast<size_t>(sizes[0]));
  const std::vector<std::string_view> root_lines = Lines(root);
  int64_t offset = sizes[0];
  for (size_t r = 1; r < sizes.size(); ++r) {
    const std::string_view other(texts.data() + offset, static_cast<size_t>(sizes[r]));
    offset += sizes[r];
    if (all[r] == all[0]) continue;
    const std::vector<std::string_view> lines = Lines(other);
    size_t i = 0;
    while (i < lines.size() && i < root_lines.size() && lines[i] == root_lines[i]) ++i;
    auto at = [](const std::vector<std::string_view>& v, size_t k) {
      return k < v.size() && !v[k].empty() ? std::string(v[k]) : std::string("(nothing)");
    };
    return absl::FailedPreconditionError(fmt::format(
        "the ranks run different programs: rank {} has \"{}\" where rank 0 has \"{}\" (line {} "
        "of the description of variables and tables); build the same model, with the same "
        "table configs and recsdk version, on every rank",
        r, at(lines, i), at(root_lines, i), i + 1));
  }
  return absl::OkStatus();  // not reached: different fingerprints come from different texts
}

}  // namespace recsdk::dist
