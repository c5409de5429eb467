// dtype.cc: dtype names, sizes and the half-precision conversions.
#include "recsdk/dtype.h"

#include <bit>
#include <cmath>
#include <string>

namespace recsdk {

float16 float16::FromFloat(float value) {
  // Round-to-nearest-even conversion of IEEE binary32 to binary16.
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t abs = f & 0x7fffffffu;
  float16 h;
  if (abs >= 0x7f800000u) {  // inf or nan
    h.bits = static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    return h;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return h;
  }
  if (abs < 0x38800000u) {  // subnormal half or zero
    // Use float arithmetic: adding 0.5 (2^-1) aligns the mantissa so the FPU rounds for us.
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5
    const float r = std::bit_cast<float>(abs) + magic;
    h.bits = static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
    return h;
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  h.bits = static_cast<uint16_t>(sign | (abs >> 13));
  return h;
}

float float16::ToFloat() const {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

bfloat16 bfloat16::FromFloat(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  bfloat16 b;
  if ((f & 0x7fffffffu) > 0x7f800000u) {  // nan stays a quiet nan
    b.bits = static_cast<uint16_t>((f >> 16) | 0x40u);
    return b;
  }
  f += 0x7fffu + ((f >> 16) & 1u);
  b.bits = static_cast<uint16_t>(f >> 16);
  return b;
}

float bfloat16::ToFloat() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    case DType::kBool:
    case DType::kUInt8:
      return 1;
    case DType::kResource:
      return 8;
    default:
      return 0;
  }
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat64:
      return "float64";
    case DType::kUInt8:
      return "uint8";
    case DType::kString:
      return "string";
    case DType::kResource:
      return "resource";
    default:
      return "invalid";
  }
}

StatusOr<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64,
                  DType::kBool, DType::kFloat64, DType::kUInt8, DType::kString, DType::kResource}) {
    if (DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError("unknown dtype \"" + std::string(name) +
                                    "\"; use float32, float16, bfloat16, float64, int32, int64, "
                                    "bool or uint8");
}

bool IsFloatingPoint(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16 ||
         d == DType::kFloat64;
}

bool IsInteger(DType d) { return d == DType::kInt32 || d == DType::kInt64 || d == DType::kUInt8; }

}  // namespace recsdk
