// text_parse.h: field parsers for the text sources: no allocation, no locale, no iostreams.
// Thread-safe (pure functions).
#ifndef RECSDK_PIPELINE_TEXT_PARSE_H_
#define RECSDK_PIPELINE_TEXT_PARSE_H_

#include <array>
#include <charconv>
#include <cstdint>

namespace recsdk::internal {

// kHexValue[c]: the value of hex digit c, or 0xff.
inline constexpr std::array<uint8_t, 256> kHexValue = [] {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 0xff;
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<uint8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[c] = static_cast<uint8_t>(c - 'A' + 10);
  return t;
}();

// ParseHex parses [p, end) as 1..16 hex digits into *out (bit pattern of the uint64).
inline bool ParseHex(const char* p, const char* end, int64_t* out) {
  const ptrdiff_t n = end - p;
  if (n <= 0 || n > 16) return false;
  uint64_t v = 0;
  uint8_t bad = 0;
  for (; p < end; ++p) {
    const uint8_t d = kHexValue[static_cast<unsigned char>(*p)];
    bad |= d;
    v = (v << 4) | (d & 0xf);
  }
  if (bad & 0xf0) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// ParseInt64 parses all of [p, end) as a decimal integer with an optional sign.
inline bool ParseInt64(const char* p, const char* end, int64_t* out) {
  if (p < end && *p == '+') ++p;
  if (p >= end) return false;
  auto [ptr, ec] = std::from_chars(p, end, *out);
  return ec == std::errc() && ptr == end;
}

// ParseFloat parses all of [p, end) as a decimal floating-point number.
inline bool ParseFloat(const char* p, const char* end, float* out) {
  if (p < end && *p == '+') ++p;
  if (p >= end) return false;
  auto [ptr, ec] = std::from_chars(p, end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_TEXT_PARSE_H_
