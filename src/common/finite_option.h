// finite_option.h: the check every floating-point option goes through where it is validated. A
// rule written as a comparison (`secs < 0`, `rate > 0`) is false for NaN, so a NaN option passed
// every such rule and then disabled a feature or poisoned the model without a word (issue 30);
// an infinity was "a very long period" by accident. Options reject both explicitly, first.
// Threading: pure functions; thread-safe.
#ifndef RECSDK_COMMON_FINITE_OPTION_H_
#define RECSDK_COMMON_FINITE_OPTION_H_

#include <cmath>
#include <string_view>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace recsdk::internal {

// CheckFiniteOption: OK when `value` is finite, else InvalidArgument
// "<owner>: <option> <value> is not a finite number; <fix>", e.g. "RunConfig:
// save_checkpoints_secs nan is not a finite number; give a period in seconds, or 0 ...".
[[nodiscard]] inline absl::Status CheckFiniteOption(std::string_view owner, std::string_view option,
                                                    double value, std::string_view fix) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("{}: {} {} is not a finite number; {}", owner, option, value, fix));
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_FINITE_OPTION_H_
