// exception_guard.h: the public boundary's exception net. No exception from the STL, Eigen or
// oneTBB may leave a public function; CatchExceptions runs a Status- or StatusOr-returning body
// and turns std::bad_alloc into ResourceExhausted and any other std::exception into Internal,
// naming `who` (the entry point and the object). Used by the readers' and transforms' GetNext and
// by the table's batch calls; Session::Run and Graph::FromJson catch on their own.
// Threading: stateless; thread-safe.
#ifndef RECSDK_COMMON_EXCEPTION_GUARD_H_
#define RECSDK_COMMON_EXCEPTION_GUARD_H_

#include <exception>
#include <new>
#include <string_view>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace recsdk::internal {

template <typename Fn>
auto CatchExceptions(std::string_view who, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "{}: out of memory; lower the sizes involved (batch, chunk, vocabulary) or free memory",
        who));
  } catch (const std::exception& e) {
    return absl::InternalError(fmt::format("{}: unexpected exception: {}", who, e.what()));
  }
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_EXCEPTION_GUARD_H_
