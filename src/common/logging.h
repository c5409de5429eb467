// logging.h: minimal leveled logging to stderr. Thread-safe (one write per message).
// The level comes from RECSDK_LOG_LEVEL (0 info, 1 warning, 2 error; default 1).
#ifndef RECSDK_COMMON_LOGGING_H_
#define RECSDK_COMMON_LOGGING_H_

#include <string_view>

#include "fmt/format.h"

namespace recsdk::internal {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

bool LogEnabled(LogSeverity severity);
void LogMessage(LogSeverity severity, std::string_view message);

template <typename... Args>
void LogInfo(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogSeverity::kInfo))
    LogMessage(LogSeverity::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarning(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogSeverity::kWarning))
    LogMessage(LogSeverity::kWarning, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogError(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogSeverity::kError))
    LogMessage(LogSeverity::kError, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_LOGGING_H_
