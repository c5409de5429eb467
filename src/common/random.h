// random.h: counter-based random numbers (Philox4x32-10).
//
// A Philox stream is a pure function of (seed, counter), so a value depends only on where it is
// in the stream, never on which thread drew it or how work was split. Initializers, Dropout and
// the table's per-key initial rows use it so runs reproduce bit for bit. Thread-safe (no state).
#ifndef RECSDK_COMMON_RANDOM_H_
#define RECSDK_COMMON_RANDOM_H_

#include <array>
#include <cmath>
#include <cstdint>

namespace recsdk::internal {

// Philox4x32: 4 random 32-bit words for each 128-bit counter under a 64-bit key.
inline std::array<uint32_t, 4> Philox4x32(uint64_t key, uint64_t counter_lo,
                                          uint64_t counter_hi = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) from 24 random bits (exactly representable in float).
inline float UniformFloat(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }

// PhiloxStream: draws values in order from (key, stream id); cheap to create per row or per
// block of elements.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t key, uint64_t stream) : key_(key), stream_(stream) {}

  uint32_t NextBits() {
    if (used_ == 4) {
      block_ = Philox4x32(key_, counter_++, stream_);
      used_ = 0;
    }
    return block_[used_++];
  }
  float Uniform() { return UniformFloat(NextBits()); }
  // Normal: Box-Muller on two uniforms (the first shifted away from zero).
  float Normal() {
    const float u1 = (static_cast<float>(NextBits() >> 8) + 1.0f) * 0x1.0p-24f;
    const float u2 = Uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
  }
  // TruncatedNormal: a standard normal redrawn until it lies within two standard deviations.
  float TruncatedNormal() {
    for (;;) {
      const float v = Normal();
      if (v >= -2.0f && v <= 2.0f) return v;
    }
  }

 private:
  uint64_t key_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_RANDOM_H_
