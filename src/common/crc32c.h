// crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) as used by TFRecord framing,
// recsdk's binary record files and checkpoints. Uses SSE4.2 crc32 instructions when the CPU has
// them, otherwise a slicing-by-8 table. Thread-safe (pure functions; the tables are built once).
#ifndef RECSDK_COMMON_CRC32C_H_
#define RECSDK_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace recsdk::internal {

// Crc32cExtend continues a CRC-32C over more bytes: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(std::string_view s) { return Crc32c(s.data(), s.size()); }
// Crc32cPortable: the table implementation, exposed so tests compare both paths.
uint32_t Crc32cPortableExtend(uint32_t crc, const void* data, size_t n);

// MaskCrc / UnmaskCrc: TFRecord's masking, so a CRC stored next to data that contains CRCs does
// not checksum to a fixed point.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_CRC32C_H_
