// checked_math.h: overflow-checked arithmetic for every length, count and size that comes from a
// file or a caller. A size that would wrap is an error, never a small number: `len + 4` on a
// uint64 length read from a file, or the sum of caller-given vocabulary sizes, go through
// CheckedAdd / CheckedMul, and the caller turns std::nullopt into a Status naming the value.
// Also the documented upper bounds of user-given sizes that drive an allocation.
// Threading: pure functions and constants; thread-safe.
#ifndef RECSDK_COMMON_CHECKED_MATH_H_
#define RECSDK_COMMON_CHECKED_MATH_H_

#include <cstdint>
#include <optional>
#include <type_traits>

namespace recsdk::internal {

// CheckedAdd: a + b, or std::nullopt when the result does not fit in T.
template <typename T>
[[nodiscard]] constexpr std::optional<T> CheckedAdd(T a, T b) {
  static_assert(std::is_integral_v<T>, "CheckedAdd is for integers");
  T out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// CheckedMul: a * b, or std::nullopt when the result does not fit in T.
template <typename T>
[[nodiscard]] constexpr std::optional<T> CheckedMul(T a, T b) {
  static_assert(std::is_integral_v<T>, "CheckedMul is for integers");
  T out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// FitsWithin: whether `a + b` neither wraps nor exceeds `limit` (e.g. a record's length plus its
// 4-byte CRC against the bytes left in a file).
template <typename T>
[[nodiscard]] constexpr bool FitsWithin(T a, T b, T limit) {
  const std::optional<T> sum = CheckedAdd(a, b);
  return sum.has_value() && *sum <= limit;
}

// Upper bounds of user-given sizes that size an allocation (documented with each option).
// kMaxBatchRows: BatchRows' batch_size (2^24 rows: far above any training batch, and a bad_alloc
// or a multi-terabyte reservation below it is impossible for rows of a few KiB).
inline constexpr int64_t kMaxBatchRows = int64_t{1} << 24;

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_CHECKED_MATH_H_
