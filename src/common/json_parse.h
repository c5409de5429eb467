// json_parse.h: the one way recsdk parses JSON text that a file or a caller controls (checkpoint
// manifests and index, graph JSON, a bundle's serving signature, table attributes, session
// configs). nlohmann's parser keeps its own stack, but dump(), comparisons and our readers walk
// the result recursively, so a document nested a million levels deep ran them off the stack.
// ParseJson refuses nesting deeper than kMaxJsonDepth before parsing (one linear scan that skips
// strings), and turns a syntax error into a Status with the line and column, never an exception;
// what it quotes of the text is bounded, so a 100 MB token never lands whole in a message.
// Threading: stateless; thread-safe.
#ifndef RECSDK_COMMON_JSON_PARSE_H_
#define RECSDK_COMMON_JSON_PARSE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace recsdk::internal {

// kMaxJsonDepth: the deepest nesting of arrays and objects any recsdk document needs is about
// 8 (a graph's node -> attrs -> attr -> tensor -> data); 64 leaves room for users' configs and
// keeps every recursive walk a few KiB of stack.
inline constexpr int kMaxJsonDepth = 64;

// ParseJson: the JSON value of `text`. `what` names the document in errors ("checkpoint manifest
// \"dir/manifest.json\"", "session config \"a.json\""); `code` is the error's code (DataLoss for
// files recsdk wrote, InvalidArgument for what a user wrote). Errors: nesting deeper than
// kMaxJsonDepth (the line and column where it passes the bound), a syntax error (line, column
// and the parser's reason), an empty text.
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseJson(
    std::string_view text, std::string_view what,
    absl::StatusCode code = absl::StatusCode::kInvalidArgument);

// CheckJsonDepth: OK when `text` nests at most `max_depth` arrays and objects, else the line and
// column where it first goes deeper, as a message (strings are skipped, escapes honoured).
[[nodiscard]] absl::Status CheckJsonDepth(std::string_view text, std::string_view what,
                                          absl::StatusCode code, int max_depth = kMaxJsonDepth);

// QuoteBounded: `s` in double quotes for an error message: "s" when at most `limit` bytes,
// else "<its first `limit` bytes>..." (N bytes in all), so a hostile 100 MB key or value is
// never copied into a message. Callers write it without quotes of their own.
std::string QuoteBounded(std::string_view s, size_t limit = 80);

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_JSON_PARSE_H_
