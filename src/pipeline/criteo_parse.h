// criteo_parse.h: the Criteo TSV chunk parser (label, 13 integer, 26 hex fields per line).
// Two paths over the same chunk layout:
//  - the reference path: one line at a time, memchr per field, byte-by-byte hex; it decides every
//    malformed case (reason and message);
//  - the fast path: stage 1 indexes every '\t'/'\n' of a 16 KiB window (separator_index.h, SIMD
//    64 bytes a step), stage 2 checks a line's 40 separators at once and parses each hex or
//    decimal field of up to 8 digits branch-free (empty fields by masks): with AVX2, four fields
//    per instruction (digits checked and combined in byte lanes); otherwise one field per SWAR
//    step in a 64-bit register.
//    It only ever accepts a line; anything it does not recognise (a float, a sign, a '\r', a
//    field near the chunk's end, a malformed line) goes to the reference path for that line, so
//    results and errors are the reference's bit for bit (tests/pipeline/criteo_fast_path_test.cc).
// Both write into one uninitialised allocation for all 28 columns (no zero fill).
// Thread-safe: Parse is const.
#ifndef RECSDK_PIPELINE_CRITEO_PARSE_H_
#define RECSDK_PIPELINE_CRITEO_PARSE_H_

#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "recsdk/dataset.h"
#include "src/pipeline/chunked_source.h"

namespace recsdk::internal {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoSparse = 26;

class CriteoParser {
 public:
  explicit CriteoParser(const CriteoOptions& options);

  // Path: which code parses. kFast picks the best the CPU has (AVX2, else SWAR); kSwar forces
  // the portable fast path; kReference runs only the reference path. All give the same result.
  enum class Path { kFast, kSwar, kReference };

  // Parse parses `text` (whole lines; the last may lack its newline when at_eof) into a Batch of
  // label [n,1], dense [n,13], C1..C26 [n,1] plus the malformed lines' errors (0-based line index
  // within the chunk).
  ParsedChunk Parse(std::string_view text, bool at_eof, Path path = Path::kFast) const;

 private:
  // log1p(i) for i < kLog1pTable, shared by all parsers (256 KiB, built on first use): Criteo's
  // integer features are mostly below it, and log1pf costs ~50 cycles a call.
  static constexpr int kLog1pTable = 1 << 16;
  float Dense(int64_t v) const {
    if (transform_ == DenseTransform::kNone) return static_cast<float>(v);
    if (v <= 0) return 0.0f;  // log(1 + max(x, 0))
    if (v < kLog1pTable) return log1p_[v];
    return std::log1p(static_cast<float>(v));
  }
  struct FastLineParser;
  // ParseLine (reference) parses one line into row r; returns false with *reason/*detail.
  bool ParseLine(const char* p, const char* end, bool unterminated, int64_t r, float* label,
                 float* dense, int64_t* const* sparse, MalformedReason* reason,
                 std::string* detail) const;

  DenseTransform transform_;
  int64_t default_id_;
  int64_t id_modulus_;
  float empty_dense_ = 0.0f;
  const float* log1p_;
  std::array<std::string, kCriteoSparse> names_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_CRITEO_PARSE_H_
