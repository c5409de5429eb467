// status_macros.h: early-return helpers for absl::Status (Debian's Abseil 20220623 has none).
#ifndef RECSDK_COMMON_STATUS_MACROS_H_
#define RECSDK_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fmt/format.h"

// Debian's Abseil has its own string_view (not std::string_view); let fmt print it, so
// status.message() can go straight into messages.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Ctx>
  auto format(absl::string_view s, Ctx& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

#define RECSDK_STATUS_CONCAT_INNER(a, b) a##b
#define RECSDK_STATUS_CONCAT(a, b) RECSDK_STATUS_CONCAT_INNER(a, b)

// RECSDK_RETURN_IF_ERROR(expr): returns the status of `expr` when it is not OK.
#define RECSDK_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const ::absl::Status recsdk_status_ = (expr);    \
    if (!recsdk_status_.ok()) return recsdk_status_; \
  } while (false)

// RECSDK_ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; returns its status when not
// OK, else assigns its value to `lhs` (which may be a declaration: `auto x`).
#define RECSDK_ASSIGN_OR_RETURN(lhs, expr) \
  RECSDK_ASSIGN_OR_RETURN_IMPL(RECSDK_STATUS_CONCAT(recsdk_statusor_, __LINE__), lhs, expr)
#define RECSDK_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // RECSDK_COMMON_STATUS_MACROS_H_
