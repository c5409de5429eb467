// Tests of CRC-32C (src/pipeline/crc32c.cc): known vectors, both implementations, masking.
#include "src/pipeline/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);  // RFC 3720 B.4
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(inc), 0x46DD794Eu);
}

TEST(Crc32cTest, PortableMatchesFastAndExtends) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 131 + 7));
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 999, 1000}) {
    EXPECT_EQ(Crc32cPortableExtend(0, data.data(), n), Crc32c(data.data(), n)) << n;
    const uint32_t a = Crc32c(data.data(), n / 3);
    EXPECT_EQ(Crc32cExtend(a, data.data() + n / 3, n - n / 3), Crc32c(data.data(), n)) << n;
  }
}

TEST(Crc32cTest, MaskRoundTrips) {
  for (uint32_t v : {0u, 1u, 0xE3069283u, 0xffffffffu}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(v)), v);
    EXPECT_NE(MaskCrc(v), v);
  }
}

}  // namespace
}  // namespace recsdk::internal
