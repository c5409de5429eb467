// recsdk/dtype.h: element types of tensors.
//
// DType values are pinned: they appear in serialised graphs and checkpoints, so a value never
// changes meaning. Thread-safe (pure functions and constants).
#ifndef RECSDK_DTYPE_H_
#define RECSDK_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "recsdk/status.h"

namespace recsdk {

// DType: an element type. Values are pinned (see the file comment).
enum class DType : int32_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kBool = 6,
  kFloat64 = 7,  // for gradient checks and reference computations
  kUInt8 = 8,
  kString = 9,  // not a tensor element type; reserved so the value is never reused
  // kResource: a handle to a stateful resource (a variable, a table) held by the Session.
  // Tensors of this dtype are produced by handle ops; users never feed or fetch them.
  kResource = 20,
};

// float16: IEEE 754 binary16, stored as its bit pattern. Convert with ToFloat/FromFloat.
struct float16 {
  // bits: the bit pattern. FromFloat, ToFloat: conversions, rounding to nearest even.
  // operator==: the same bits.
  uint16_t bits = 0;
  static float16 FromFloat(float value);
  float ToFloat() const;
  friend bool operator==(float16 a, float16 b) { return a.bits == b.bits; }
};

// bfloat16: the upper 16 bits of a float32, rounded to nearest even on conversion.
struct bfloat16 {
  // bits: the bit pattern. FromFloat, ToFloat: conversions. operator==: the same bits.
  uint16_t bits = 0;
  static bfloat16 FromFloat(float value);
  float ToFloat() const;
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};

// DTypeSize returns the size in bytes of one element, or 0 for kInvalid/kString.
size_t DTypeSize(DType dtype);

// DTypeName returns the lower-case name ("float32", "int64", ...); "invalid" for unknown values.
std::string_view DTypeName(DType dtype);

// ParseDType accepts the names DTypeName produces.
StatusOr<DType> ParseDType(std::string_view name);

bool IsFloatingPoint(DType dtype);  // float16, bfloat16, float32, float64
bool IsInteger(DType dtype);        // int32, int64, uint8

// DTypeOf<T>::value maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<float16> {
  static constexpr DType value = DType::kFloat16;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};

}  // namespace recsdk

#endif  // RECSDK_DTYPE_H_
