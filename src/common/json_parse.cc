// json_parse.cc: bounded, exception-free JSON parsing. Threading: stateless.
#include "src/common/json_parse.h"

#include <algorithm>
#include <cstdint>

#include "fmt/format.h"

namespace recsdk::internal {
namespace {

struct LineColumn {
  size_t line = 1, column = 1;
};

// Where byte `pos` (0-based) of `text` is, 1-based line and column.
LineColumn Locate(std::string_view text, size_t pos) {
  LineColumn lc;
  pos = std::min(pos, text.size());
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++lc.line;
      lc.column = 1;
    } else {
      ++lc.column;
    }
  }
  return lc;
}

absl::Status MakeError(absl::StatusCode code, std::string message) {
  return absl::Status(code, message);
}

// Bounded: `s`, cut to `limit` bytes with "..." (the parser's reason may quote a long token).
std::string Bounded(std::string_view s, size_t limit) {
  if (s.size() <= limit) return std::string(s);
  return fmt::format("{}...", s.substr(0, limit));
}

}  // namespace

std::string QuoteBounded(std::string_view s, size_t limit) {
  if (s.size() <= limit) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\" ({} bytes in all)", s.substr(0, limit), s.size());
}

absl::Status CheckJsonDepth(std::string_view text, std::string_view what, absl::StatusCode code,
                            int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        const LineColumn lc = Locate(text, i);
        return MakeError(code, fmt::format("{} nests arrays and objects more than {} levels deep "
                                           "(at line {}, column {}); no recsdk document needs "
                                           "that many: the file is corrupt or not one of ours",
                                           what, max_depth, lc.line, lc.column));
      }
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);  // unbalanced text is the parser's to report
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                         absl::StatusCode code) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; })) {
    return MakeError(code, fmt::format("{} is empty; it must hold a JSON document", what));
  }
  if (absl::Status s = CheckJsonDepth(text, what, code); !s.ok()) return s;
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte the parser stopped at. Its message repeats the position and
    // may quote a long token: keep only the reason, bounded.
    const LineColumn lc = Locate(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string_view reason = e.what();
    if (const size_t colon = reason.find(": "); colon != std::string_view::npos) {
      reason.remove_prefix(colon + 2);
    }
    return MakeError(code, fmt::format("{} is not valid JSON: line {}, column {}: {}", what,
                                       lc.line, lc.column, Bounded(reason, 160)));
  } catch (const std::exception& e) {
    return MakeError(code, fmt::format("{} is not valid JSON: {}", what, Bounded(e.what(), 160)));
  }
}

}  // namespace recsdk::internal
