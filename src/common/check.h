// check.h: assertions for programming errors inside the library (never for user input, which
// gets a Status). RECSDK_CHECK is always on; RECSDK_DCHECK only in debug builds.
#ifndef RECSDK_COMMON_CHECK_H_
#define RECSDK_COMMON_CHECK_H_

#include <string_view>

namespace recsdk::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);
}  // namespace recsdk::internal

#define RECSDK_CHECK(cond)                                                       \
  do {                                                                           \
    if (!(cond)) ::recsdk::internal::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (false)

#define RECSDK_CHECK_MSG(cond, msg)                                                 \
  do {                                                                              \
    if (!(cond)) ::recsdk::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (false)

#ifdef NDEBUG
#define RECSDK_DCHECK(cond) \
  do {                      \
  } while (false && (cond))
#else
#define RECSDK_DCHECK(cond) RECSDK_CHECK(cond)
#endif

#endif  // RECSDK_COMMON_CHECK_H_
