// hash.h: stable hashes for seeds and fingerprints. Unlike absl::Hash these never change between
// processes or builds, so seeds derived from names reproduce run after run. Thread-safe.
#ifndef RECSDK_COMMON_HASH_H_
#define RECSDK_COMMON_HASH_H_

#include <cstdint>
#include <string_view>

namespace recsdk::internal {

// Mix64: the SplitMix64 finaliser, a bijection on 64-bit values with good avalanche.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Fingerprint64: FNV-1a of the bytes, then mixed.
inline uint64_t Fingerprint64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return Mix64(h);
}

inline uint64_t CombineSeeds(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b)); }

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_HASH_H_
