// text_parse.h: field parsers for the text sources: no allocation, no locale, no iostreams.
// Thread-safe (pure functions).
#ifndef RECSDK_PIPELINE_TEXT_PARSE_H_
#define RECSDK_PIPELINE_TEXT_PARSE_H_

#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>

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

// ---- Fast-path helpers (SWAR / SIMD). Each returns false where the reference helper above would
// need to decide; callers then fall back to it. They read 8 bytes at p, so p + 8 <= end of buffer.

// Load8: 8 bytes at p, little-endian (p[0] in the low byte).
inline uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  if constexpr (std::endian::native == std::endian::big) x = __builtin_bswap64(x);
  return x;
}

inline constexpr uint64_t kOnes = 0x0101010101010101ULL;
inline constexpr uint64_t kHigh = 0x8080808080808080ULL;

// ParseHex8Swar parses the n (1..8) hex digits at p (8 readable bytes) in one SWAR step. Branch
// free: *out is written (garbage when the digits are not valid) and the result says if valid.
inline bool ParseHex8Swar(const char* p, int n, uint64_t* out) {
  const int shift = 8 * (8 - n);
  const uint64_t x = Load8(p) << shift;  // the digits in the high n bytes, zero bytes below
  const uint64_t high = x & kHigh;       // the range tests below need bytes < 0x80
  const uint64_t digit = ((x | kHigh) - 0x30 * kOnes) & ((0xB9 * kOnes) - x) & kHigh;
  const uint64_t lower = x | (0x20 * kOnes);
  const uint64_t letter = ((lower | kHigh) - 0x61 * kOnes) & ((0xE6 * kOnes) - lower) & kHigh;
  const uint64_t low_bytes = ~(~uint64_t{0} << shift) & kHigh;  // the zero fill
  uint64_t v = (x & (0x0F * kOnes)) + (letter >> 7) * 9;        // one nibble per byte
  v = __builtin_bswap64(v);                                     // least significant digit first
  v = (v | (v >> 4)) & 0x00FF00FF00FF00FFULL;
  v = (v | (v >> 8)) & 0x0000FFFF0000FFFFULL;
  v = (v | (v >> 16)) & 0x00000000FFFFFFFFULL;
  *out = v;
  return (((digit | letter | low_bytes) ^ kHigh) | high) == 0;
}

// ParseDec8Swar parses the n (1..8) decimal digits at p (8 readable bytes) in one SWAR step.
// Branch free like ParseHex8Swar.
inline bool ParseDec8Swar(const char* p, int n, uint64_t* out) {
  // Subtract first, then shift: borrows only run towards later bytes, which the shift drops.
  uint64_t x = (Load8(p) - 0x30 * kOnes) << (8 * (8 - n));
  const bool ok = (((x + 0x76 * kOnes) | x) & kHigh) == 0;  // every byte 0..9
  x = (x * 10) + (x >> 8);
  x = (((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
       (((x >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
      32;
  *out = x;
  return ok;
}

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_TEXT_PARSE_H_
