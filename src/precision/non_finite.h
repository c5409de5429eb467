// non_finite.h: counting NaN and Inf in a buffer of floating-point elements, for overflow detection
// (dump_observer.cc) and find-nan (dump_reader.cc). Pure functions; thread-safe.
#ifndef RECSDK_PRECISION_NON_FINITE_H_
#define RECSDK_PRECISION_NON_FINITE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "recsdk/dtype.h"

namespace recsdk::internal {

struct NonFinite {
  int64_t nan = 0, inf = 0;
  bool any() const { return nan + inf > 0; }
};

namespace non_finite_detail {

template <typename T>
NonFinite CountFloat(const char* p, int64_t n) {
  NonFinite c;
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));  // no alignment assumed (a file's payload)
    if (std::isnan(v)) ++c.nan;
    if (std::isinf(v)) ++c.inf;
  }
  return c;
}

// CountHalf: float16 (exponent mask 0x7C00) and bfloat16 (0x7F80) by their bits.
inline NonFinite CountHalf(const char* p, int64_t n, uint16_t exponent, uint16_t mantissa) {
  NonFinite c;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + i * 2, 2);
    if ((bits & exponent) != exponent) continue;
    if ((bits & mantissa) != 0) {
      ++c.nan;
    } else {
      ++c.inf;
    }
  }
  return c;
}

}  // namespace non_finite_detail

// CountNonFinite: NaN and Inf among `n` elements of `dtype` at `data`; zero for dtypes that are not
// floating point. O(n).
inline NonFinite CountNonFinite(DType dtype, const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  switch (dtype) {
    case DType::kFloat32:
      return non_finite_detail::CountFloat<float>(p, n);
    case DType::kFloat64:
      return non_finite_detail::CountFloat<double>(p, n);
    case DType::kFloat16:
      return non_finite_detail::CountHalf(p, n, 0x7C00, 0x03FF);
    case DType::kBFloat16:
      return non_finite_detail::CountHalf(p, n, 0x7F80, 0x007F);
    default:
      return {};
  }
}

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_NON_FINITE_H_
