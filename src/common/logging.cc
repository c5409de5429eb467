// logging.cc: stderr logging and the assertion failure handler.
#include "src/common/logging.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/common/check.h"

namespace recsdk::internal {
namespace {

int ThresholdFromEnv() {
  const char* env = std::getenv("RECSDK_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return static_cast<int>(LogSeverity::kWarning);
  return std::atoi(env);
}

}  // namespace

bool LogEnabled(LogSeverity severity) {
  static const int threshold = ThresholdFromEnv();
  return static_cast<int>(severity) >= threshold;
}

void LogMessage(LogSeverity severity, std::string_view message) {
  static constexpr const char* kTags[] = {"I", "W", "E"};
  std::string line = fmt::format("[recsdk {}] {}\n", kTags[static_cast<int>(severity)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void CheckFailed(const char* file, int line, const char* condition, std::string_view message) {
  std::string text =
      fmt::format("[recsdk F] {}:{}: check failed: {} {}\n", file, line, condition, message);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::abort();
}

}  // namespace recsdk::internal
