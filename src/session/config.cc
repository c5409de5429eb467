// config.cc: SessionConfig validation.
#include "recsdk/config.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

constexpr int64_t kMaxMemory = 256 * kGiB;
constexpr int64_t kMaxTotalMemory = 31 * kGiB;

StatusOr<std::map<std::string, int>> ParseStreams(const std::string& text) {
  std::map<std::string, int> out;
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, ':');
    int n = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &n)) {
      return absl::InvalidArgumentError(fmt::format(
          "stream_max_parallel_num: \"{}\" is not ENGINE:N; write e.g. \"DNN_VM_TF:1,DNN_V100:2\"",
          part));
    }
    if (kv[0] != "DNN_V100" && kv[0] != "DNN_VM_TF") {
      return absl::InvalidArgumentError(
          fmt::format("stream_max_parallel_num: engine \"{}\" is unknown; use DNN_V100 (device "
                      "ops) or DNN_VM_TF (host ops)",
                      kv[0]));
    }
    if (n < 1 || n > 13) {
      return absl::InvalidArgumentError(
          fmt::format("stream_max_parallel_num: {} for {} is out of range; use 1 to 13", n, kv[0]));
    }
    out[kv[0]] = n;
  }
  return out;
}

}  // namespace

Status SessionConfig::Validate() const {
  if (device.empty()) return absl::InvalidArgumentError("device: empty; use \"cpu\"");
  if (auto s = ParseStreams(stream_max_parallel_num); !s.ok()) return s.status();
  if (intra_op_parallelism < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "intra_op_parallelism: {} is negative; use 0 (all hardware threads) or a thread count",
        intra_op_parallelism));
  }
  for (auto [name, value] :
       {std::pair<const char*, int64_t>{"graph_memory_max_size", graph_memory_max_size},
        std::pair<const char*, int64_t>{"variable_memory_max_size", variable_memory_max_size}}) {
    if (value < 0 || value > kMaxMemory) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {} bytes is outside [0, 256 GiB]", name, value));
    }
  }
  if (graph_memory_max_size + variable_memory_max_size > kMaxTotalMemory) {
    return absl::InvalidArgumentError(
        fmt::format("graph_memory_max_size ({}) + variable_memory_max_size ({}) = {} bytes exceeds "
                    "31 GiB; lower one of them",
                    graph_memory_max_size, variable_memory_max_size,
                    graph_memory_max_size + variable_memory_max_size));
  }
  if (op_select_implmode != "high_performance" && op_select_implmode != "high_precision") {
    return absl::InvalidArgumentError(
        fmt::format("op_select_implmode: \"{}\" is unknown; use high_performance or high_precision",
                    op_select_implmode));
  }
  if (!optypelist_for_implmode.empty() && op_select_implmode.empty()) {
    return absl::InvalidArgumentError("optypelist_for_implmode needs op_select_implmode");
  }
  return absl::OkStatus();
}

std::map<std::string, int> SessionConfig::ParsedStreamLimits() const {
  auto parsed = ParseStreams(stream_max_parallel_num);
  std::map<std::string, int> out = parsed.ok() ? *parsed : std::map<std::string, int>{};
  out.try_emplace("DNN_V100", 1);
  out.try_emplace("DNN_VM_TF", 1);
  return out;
}

}  // namespace recsdk
