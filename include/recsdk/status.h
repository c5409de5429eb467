// recsdk/status.h: the error type of the public API.
//
// Every public function that can fail on user input returns absl::Status or absl::StatusOr<T>.
// The message names the thing, the value, the rule and the fix. No exception crosses the API.
#ifndef RECSDK_STATUS_H_
#define RECSDK_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace recsdk {

// Status: the error type of every public function that can fail (absl::Status).
using Status = absl::Status;
// StatusOr: a T or the Status saying why there is none (absl::StatusOr).
template <typename T>
using StatusOr = absl::StatusOr<T>;

}  // namespace recsdk

#endif  // RECSDK_STATUS_H_
