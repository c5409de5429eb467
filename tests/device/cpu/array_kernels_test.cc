// array_kernels_test.cc: the CPU Cast kernel (src/device/cpu/array_kernels.cc) to and from
// float16 and bfloat16, run through a Session: rounding to nearest even (normal, subnormal and
// overflow cases), signed zeros, infinities and NaNs, exact round trips of every 16-bit pattern,
// and the integer and bool casts that go through the half types.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t Bits(float value) { return std::bit_cast<uint32_t>(value); }

// Cast runs Cast(x -> to) in a fresh Session on the CPU backend.
Tensor Cast(const Tensor& x, DType to) {
  Graph g;
  Scope root(&g);
  ops::Cast(root.WithOpName("y"), ops::Placeholder(root.WithOpName("x"), x.dtype(), x.shape()), to);
  auto session = Session::Create(g);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return Tensor();
  auto out = (*session)->Run({{"x", x}}, {"y"});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return Tensor();
  EXPECT_EQ((*out)[0].dtype(), to);
  EXPECT_EQ((*out)[0].shape(), x.shape());
  return (*out)[0];
}

// HalfTensor: a 1-D float16 or bfloat16 tensor holding the given bit patterns.
template <typename Half>
Tensor HalfTensor(const std::vector<uint16_t>& bits) {
  Tensor t(DTypeOf<Half>::value, Shape{static_cast<int64_t>(bits.size())});
  for (size_t i = 0; i < bits.size(); ++i) t.data<Half>()[i].bits = bits[i];
  return t;
}

template <typename Half>
std::vector<uint16_t> HalfBits(const Tensor& t) {
  std::vector<uint16_t> out;
  if (!t.IsInitialized()) return out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.data<Half>()[i].bits);
  return out;
}

std::vector<float> Floats(const Tensor& t) {
  if (!t.IsInitialized()) return {};
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

struct ToHalfCase {
  const char* what;
  float value;
  uint16_t bits;
};

// Casts every case's value in one tensor and compares the bit patterns.
template <typename Half>
void ExpectCastToHalf(const std::vector<ToHalfCase>& cases) {
  std::vector<float> values;
  for (const ToHalfCase& c : cases) values.push_back(c.value);
  const std::vector<uint16_t> got =
      HalfBits<Half>(Cast(Tensor::Vector<float>(values), DTypeOf<Half>::value));
  ASSERT_EQ(got.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i], cases[i].bits)
        << cases[i].what << ": " << cases[i].value << std::hex << " (float bits 0x"
        << Bits(cases[i].value) << ") gave 0x" << got[i] << ", want 0x" << cases[i].bits;
  }
}

TEST(CastKernelTest, Float32ToFloat16RoundsToNearestEven) {
  const float one_ulp = std::ldexp(1.0f, -10);  // float16 spacing in [1, 2)
  const float half_ulp = std::ldexp(1.0f, -11);
  const float tiny = std::ldexp(1.0f, -24);  // smallest float16 subnormal
  ExpectCastToHalf<float16>({
      {"one", 1.0f, 0x3c00},
      {"negative", -2.5f, 0xc100},
      {"0.1 rounds down to 0.0999755859375", 0.1f, 0x2e66},
      {"1/3 rounds up to 0.333251953125", 1.0f / 3.0f, 0x3555},
      {"tie between 1 and 1+ulp goes to even 1", 1.0f + half_ulp, 0x3c00},
      {"tie between 1+ulp and 1+2ulp goes to even 1+2ulp", 1.0f + one_ulp + half_ulp, 0x3c02},
      {"just above the tie rounds up", std::nextafter(1.0f + half_ulp, 2.0f), 0x3c01},
      {"just below the tie rounds down", std::nextafter(1.0f + half_ulp, 0.0f), 0x3c00},
      {"tie in [2048, 4096), spacing 2, goes down to even", 2049.0f, 0x6800},
      {"tie in [2048, 4096), spacing 2, goes up to even", 2051.0f, 0x6802},
      {"largest finite", 65504.0f, 0x7bff},
      {"below the overflow tie stays finite", std::nextafter(65520.0f, 0.0f), 0x7bff},
      {"the overflow tie goes to even, which is infinity", 65520.0f, 0x7c00},
      {"overflow", 1e10f, 0x7c00},
      {"negative overflow", -1e10f, 0xfc00},
      {"smallest normal", std::ldexp(1.0f, -14), 0x0400},
      {"tie between largest subnormal and smallest normal goes to even normal",
       std::ldexp(1.0f, -14) - tiny / 2, 0x0400},
      {"largest subnormal", std::ldexp(1.0f, -14) - tiny, 0x03ff},
      {"smallest subnormal", tiny, 0x0001},
      {"tie between 0 and the smallest subnormal goes to even 0", tiny / 2, 0x0000},
      {"just above that tie rounds up", std::nextafter(tiny / 2, 1.0f), 0x0001},
      {"tie between subnormals 1 and 2 goes to even 2", 3 * tiny / 2, 0x0002},
      {"underflow keeps the sign", -1e-10f, 0x8000},
      {"positive zero", 0.0f, 0x0000},
      {"negative zero", -0.0f, 0x8000},
      {"infinity", std::numeric_limits<float>::infinity(), 0x7c00},
      {"negative infinity", -std::numeric_limits<float>::infinity(), 0xfc00},
  });
}

TEST(CastKernelTest, Float32ToBFloat16RoundsToNearestEven) {
  ExpectCastToHalf<bfloat16>({
      {"one", 1.0f, 0x3f80},
      {"negative", -2.5f, 0xc020},
      {"0.1 rounds up", 0.1f, 0x3dcd},
      {"tie between 1 and 1+ulp goes to even 1", FromBits(0x3f808000), 0x3f80},
      {"tie between 1+ulp and 1+2ulp goes to even 1+2ulp", FromBits(0x3f818000), 0x3f82},
      {"just above the tie rounds up", FromBits(0x3f808001), 0x3f81},
      {"just below the tie rounds down", FromBits(0x3f807fff), 0x3f80},
      {"largest bfloat16 stays finite", FromBits(0x7f7f7fff), 0x7f7f},
      {"float max rounds to infinity", std::numeric_limits<float>::max(), 0x7f80},
      {"subnormal tie goes to even", FromBits(0x00018000), 0x0002},
      {"smallest float subnormal rounds to zero", FromBits(0x00000001), 0x0000},
      {"negative zero", -0.0f, 0x8000},
      {"infinity", std::numeric_limits<float>::infinity(), 0x7f80},
      {"negative infinity", -std::numeric_limits<float>::infinity(), 0xff80},
  });
}

// A NaN must stay a NaN, including a signalling NaN whose payload lies only in the low 16 bits
// (truncating it would make infinity), and keep its sign.
TEST(CastKernelTest, NanStaysNanInBothHalfTypes) {
  const std::vector<float> nans = {std::numeric_limits<float>::quiet_NaN(), FromBits(0x7f800001),
                                   FromBits(0xff800001), FromBits(0x7fffffff)};
  const std::vector<uint16_t> h =
      HalfBits<float16>(Cast(Tensor::Vector<float>(nans), DType::kFloat16));
  const std::vector<uint16_t> b =
      HalfBits<bfloat16>(Cast(Tensor::Vector<float>(nans), DType::kBFloat16));
  ASSERT_EQ(h.size(), nans.size());
  ASSERT_EQ(b.size(), nans.size());
  for (size_t i = 0; i < nans.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "float bits 0x" << std::hex << Bits(nans[i]));
    EXPECT_EQ(h[i] & 0x7c00, 0x7c00);
    EXPECT_NE(h[i] & 0x03ff, 0) << "float16 0x" << std::hex << h[i] << " is not a NaN";
    EXPECT_EQ(h[i] >> 15, Bits(nans[i]) >> 31);
    EXPECT_EQ(b[i] & 0x7f80, 0x7f80);
    EXPECT_NE(b[i] & 0x007f, 0) << "bfloat16 0x" << std::hex << b[i] << " is not a NaN";
    EXPECT_EQ(b[i] >> 15, Bits(nans[i]) >> 31);
  }
}

TEST(CastKernelTest, Float16ToFloat32IsExact) {
  const std::vector<float> got =
      Floats(Cast(HalfTensor<float16>({0x3c00, 0xc000, 0x3c01, 0x0001, 0x03ff, 0x0400, 0x7bff,
                                       0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01}),
                  DType::kFloat32));
  ASSERT_EQ(got.size(), 12u);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -2.0f);
  EXPECT_EQ(got[2], 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(got[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(got[4], 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(got[5], std::ldexp(1.0f, -14));
  EXPECT_EQ(got[6], 65504.0f);
  EXPECT_EQ(Bits(got[7]), 0x80000000u);  // -0.0 keeps its sign
  EXPECT_EQ(got[8], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[9], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[10]));
  EXPECT_TRUE(std::isnan(got[11]));  // the smallest payload is not lost
}

TEST(CastKernelTest, BFloat16ToFloat32IsExact) {
  const std::vector<float> got =
      Floats(Cast(HalfTensor<bfloat16>({0x3f80, 0x3f81, 0xc020, 0x0001, 0x7f7f, 0x8000, 0x7f80,
                                        0xff80, 0x7fc0, 0x7f81}),
                  DType::kFloat32));
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 1.0078125f);
  EXPECT_EQ(got[2], -2.5f);
  EXPECT_EQ(Bits(got[3]), 0x00010000u);
  EXPECT_EQ(Bits(got[4]), 0x7f7f0000u);
  EXPECT_EQ(Bits(got[5]), 0x80000000u);
  EXPECT_EQ(got[6], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[7], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[8]));
  EXPECT_TRUE(std::isnan(got[9]));
}

// Every one of the 65536 bit patterns goes to float32 and back unchanged (NaNs stay NaNs).
template <typename Half>
void ExpectExactRoundTrip(uint16_t exponent_mask, uint16_t mantissa_mask) {
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const Tensor wide = Cast(HalfTensor<Half>(all), DType::kFloat32);
  const std::vector<uint16_t> back = HalfBits<Half>(Cast(wide, DTypeOf<Half>::value));
  ASSERT_EQ(back.size(), all.size());
  int mismatches = 0;
  for (uint32_t i = 0; i < all.size(); ++i) {
    const bool nan = (all[i] & exponent_mask) == exponent_mask && (all[i] & mantissa_mask) != 0;
    const bool back_nan =
        (back[i] & exponent_mask) == exponent_mask && (back[i] & mantissa_mask) != 0;
    const bool ok = nan ? back_nan && (back[i] >> 15) == (all[i] >> 15) : back[i] == all[i];
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "0x" << all[i] << " -> " << wide.data<float>()[i] << " -> 0x"
                    << back[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(CastKernelTest, Float16RoundTripThroughFloat32IsExact) {
  ExpectExactRoundTrip<float16>(0x7c00, 0x03ff);
}

TEST(CastKernelTest, BFloat16RoundTripThroughFloat32IsExact) {
  ExpectExactRoundTrip<bfloat16>(0x7f80, 0x007f);
}

// A float32 that a half type holds exactly survives float32 -> half -> float32.
TEST(CastKernelTest, RepresentableFloat32SurvivesTheHalfTypes) {
  const std::vector<float> values = {0.0f,
                                     1.0f,
                                     -1.5f,
                                     0.375f,
                                     1024.0f,
                                     -65504.0f,
                                     0.5f,
                                     std::ldexp(1.0f, -24),
                                     std::ldexp(3.0f, -20)};
  EXPECT_EQ(Floats(Cast(Cast(Tensor::Vector<float>(values), DType::kFloat16), DType::kFloat32)),
            values);
  const std::vector<float> bvalues = {
      0.0f,       1.0f, -1.5f, 0.375f, 256.0f, std::ldexp(1.0f, -126), std::ldexp(1.0f, 127),
      -0.0078125f};
  EXPECT_EQ(Floats(Cast(Cast(Tensor::Vector<float>(bvalues), DType::kBFloat16), DType::kFloat32)),
            bvalues);
}

// Integers and bools reach the half types through float32 rounding, and leave them with C++
// conversion (truncation toward zero).
TEST(CastKernelTest, IntegersAndBoolsThroughHalfTypes) {
  // float16 holds every integer up to 2048; above, ties go to even.
  EXPECT_EQ(HalfBits<float16>(
                Cast(Tensor::Vector<int32_t>({2048, 2049, 2051, -3, 70000}), DType::kFloat16)),
            (std::vector<uint16_t>{0x6800, 0x6800, 0x6802, 0xc200, 0x7c00}));
  // bfloat16 holds every integer up to 256.
  EXPECT_EQ(
      HalfBits<bfloat16>(Cast(Tensor::Vector<int64_t>({256, 257, 259, -1}), DType::kBFloat16)),
      (std::vector<uint16_t>{0x4380, 0x4380, 0x4382, 0xbf80}));
  // 2.5, -2.5, 65504, 0.75 as float16 -> int32 truncates toward zero.
  const Tensor as_int = Cast(HalfTensor<float16>({0x4100, 0xc100, 0x7bff, 0x3a00}), DType::kInt32);
  ASSERT_TRUE(as_int.IsInitialized());
  EXPECT_EQ(std::vector<int32_t>(as_int.data<int32_t>(), as_int.data<int32_t>() + 4),
            (std::vector<int32_t>{2, -2, 65504, 0}));
  // bool: zero of either sign is false, anything else true.
  const Tensor as_bool = Cast(HalfTensor<bfloat16>({0x0000, 0x8000, 0x3f00, 0x0001}), DType::kBool);
  ASSERT_TRUE(as_bool.IsInitialized());
  EXPECT_EQ(std::vector<bool>(as_bool.data<bool>(), as_bool.data<bool>() + 4),
            (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(HalfBits<float16>(Cast(Tensor::Vector<bool>({true, false}), DType::kFloat16)),
            (std::vector<uint16_t>{0x3c00, 0x0000}));
  // Between the two half types: float16 1 + 2^-10 is below bfloat16's precision.
  EXPECT_EQ(
      HalfBits<bfloat16>(Cast(HalfTensor<float16>({0x3c01, 0x3e00, 0x7c00}), DType::kBFloat16)),
      (std::vector<uint16_t>{0x3f80, 0x3fc0, 0x7f80}));
}

TEST(GatherAxisTest, GathersAlongAnyAxisAndRejectsOutOfRange) {
  Graph g;
  Scope s(&g);
  // params [2, 3, 2] = 0..11; gather axis 1 with indices [2, 0] -> [2, 2, 2].
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Output p = ops::Const(s, *Tensor::FromValues<float>(Shape{2, 3, 2}, absl::MakeConstSpan(v)));
  Output y = ops::Gather(s, p, ops::Const(s, Tensor::Vector<int64_t>({2, 0})), 1);
  Output last = ops::Gather(s, p, ops::Const(s, Tensor::Vector<int32_t>({1})), -1);
  Output bad = ops::Gather(s, p, ops::Const(s, Tensor::Vector<int64_t>({3})), 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(last.shape(), (Shape{2, 3, 1}));
  auto session = *Session::Create(g);
  auto out = session->Run({}, {y, last});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> want_y = {4, 5, 0, 1, 10, 11, 6, 7};
  const std::vector<float> want_last = {1, 3, 5, 7, 9, 11};
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*out)[0].data<float>()[i], want_y[i]) << i;
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*out)[1].data<float>()[i], want_last[i]) << i;
  auto err = session->Run({}, {bad});
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("out of range [0, 3) of axis 1"), std::string::npos)
      << err.status();
  Graph g2;
  Scope s2(&g2);
  ops::Gather(s2, ops::Const(s2, 1.0f), ops::Const(s2, Tensor::Vector<int64_t>({0})), 0);
  EXPECT_FALSE(s2.ok());  // a scalar has no axis to gather along
}

}  // namespace
}  // namespace recsdk
