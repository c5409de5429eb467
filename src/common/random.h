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

// ZigguratTables: the 128 layers of Marsaglia and Tsang's ziggurat for the standard normal's
// right half (built once, on first use, in random.cc). Layer i >= 1 is the rectangle [0, x_i] x
// [f(x_i), f(x_{i-1})] with x_0 = 0 and x_127 = r = 3.4426..., the start of the tail; layer 0 is
// the base strip of the same area, [0, v / f(r)] x [0, f(r)], whose part beyond r is the tail.
// width[i] = x_i / 2^24 (layer 0: v / f(r) / 2^24), so a 24-bit magnitude m maps to x = m *
// width[i]; accept[i] = the m below which x lies under the curve for certain (x < x_{i-1}).
struct ZigguratTables {
  static constexpr double kTail = 3.442619855899;  // r
  float width[128];
  uint32_t accept[128];
  double density[128];  // f(x_i) = exp(-x_i^2 / 2); density[0] = f(0) = 1
};
const ZigguratTables& Ziggurat();

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
  // Normal: a standard normal by the ziggurat method. One 32-bit word gives the layer (7 bits),
  // the sign (1 bit) and a 24-bit magnitude; about 98.8% of draws take that one word and no
  // transcendental function (~4x faster than Box-Muller's log, sqrt and cos per value, which
  // matters to tables that initialise millions of new rows). The rest test the curve or draw
  // from the tail (Marsaglia's exponential rejection) with more words.
  float Normal() {
    const ZigguratTables& z = Ziggurat();
    for (;;) {
      const uint32_t u = NextBits();
      const uint32_t layer = u & 127u;
      const uint32_t m = u >> 8;
      const float sign = (u & 128u) != 0 ? -1.0f : 1.0f;
      const float x = static_cast<float>(m) * z.width[layer];
      if (m < z.accept[layer]) return sign * x;
      if (layer == 0) return sign * static_cast<float>(Tail());
      const double y = z.density[layer] +
                       static_cast<double>(Uniform()) * (z.density[layer - 1] - z.density[layer]);
      if (y < std::exp(-0.5 * static_cast<double>(x) * static_cast<double>(x))) return sign * x;
    }
  }
  // TruncatedNormal: a standard normal redrawn until it lies within two standard deviations.
  float TruncatedNormal() {
    for (;;) {
      const float v = Normal();
      if (v >= -2.0f && v <= 2.0f) return v;
    }
  }

 private:
  // OpenUniform: uniform in (0, 1], safe for log.
  double OpenUniform() { return (static_cast<double>(NextBits() >> 8) + 1.0) * 0x1.0p-24; }
  // Tail: x >= r from the normal's tail, by Marsaglia's rejection from an exponential.
  double Tail() {
    constexpr double r = ZigguratTables::kTail;
    for (;;) {
      const double a = -std::log(OpenUniform()) / r;
      const double b = -std::log(OpenUniform());
      if (b + b >= a * a) return r + a;
    }
  }

  uint64_t key_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

// BoxMullerNormal: the textbook sampler (two uniforms, log, sqrt, cos), kept as the baseline the
// ziggurat is measured against (benchmarks/host_ops_bench.cc) and a second opinion in tests.
inline float BoxMullerNormal(PhiloxStream& s) {
  const float u1 = (static_cast<float>(s.NextBits() >> 8) + 1.0f) * 0x1.0p-24f;
  const float u2 = s.Uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_RANDOM_H_
