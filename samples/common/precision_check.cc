// precision_check.cc: see precision_check.h.
#include "samples/common/precision_check.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace samples {

recsdk::StatusOr<PrecisionCheckOptions> PrecisionCheckFromEnv(const std::string& sample) {
  PrecisionCheckOptions o;
  for (auto [name, field] :
       {std::pair<const char*, bool*>{"PRECISION_CHECK", &o.on},
        std::pair<const char*, bool*>{"PRECISION_CHECK_TENSORS", &o.tensors}}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    const std::string text(v);
    if (text != "0" && text != "1") {
      return absl::InvalidArgumentError(
          fmt::format("{}: {}=\"{}\" is not 0 or 1", sample, name, text.substr(0, 80)));
    }
    *field = text == "1";
  }
  if (const char* v = std::getenv("PRECISION_CHECK_DIR")) o.dir = v;
  if (const char* v = std::getenv("PRECISION_CHECK_STEPS")) o.steps = v;
  return o;
}

recsdk::Status ApplyPrecisionCheck(const std::string& sample, const PrecisionCheckOptions& o,
                                   recsdk::SessionConfig* config, std::FILE* out) {
  if (!o.on) return absl::OkStatus();
  // The trace is a dump of every op's inputs and outputs: one mechanism (the dump observer), read
  // back by the dump reader's checks, compared by `recsdk precision-check`.
  recsdk::SessionConfig traced = *config;
  traced.enable_dump = true;
  traced.dump_path = o.dir;
  traced.dump_step = o.steps;
  traced.dump_mode = "all";
  traced.dump_checksums = !o.tensors;
  if (recsdk::Status s = traced.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: PRECISION_CHECK_STEPS \"{}\" / PRECISION_CHECK_DIR \"{}\": {}", sample,
                    o.steps, o.dir, std::string(s.message())));
  }
  *config = std::move(traced);
  if (out != nullptr) {
    std::fprintf(out, "PRECISION_CHECK: tracing steps %s under %s/<time>/ (%s)\n", o.steps.c_str(),
                 o.dir.c_str(),
                 o.tensors ? "whole tensors" : "checksums and first values of every tensor");
  }
  return absl::OkStatus();
}

}  // namespace samples
