// random.h: counter-based random numbers (Philox4x32-10).
//
// A Philox stream is a pure function of (seed, counter), so a value depends only on where it is
// in the stream, never on which thread drew it or how work was split. Initializers, Dropout and
// the table's per-key initial rows use it so runs reproduce bit for bit. Thread-safe (no state).
#ifndef RECSDK_COMMON_RANDOM_H_
#define RECSDK_COMMON_RANDOM_H_

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "src/common/cpu_features.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace recsdk::internal {

// Philox4x32Blocks: the Philox4x32-10 blocks of the kBlocks consecutive counters counter_lo,
// counter_lo + 1,
// ... (same counter_hi) into out[4 * b .. 4 * b + 3], computed side by side: the blocks'
// rounds are independent, so the multiplies overlap instead of waiting on each other.
template <int kBlocks>
inline void Philox4x32Blocks(uint64_t key, uint64_t counter_lo, uint64_t counter_hi,
                             uint32_t* out) {
  uint32_t c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  for (int b = 0; b < kBlocks; ++b) {
    const uint64_t lo = counter_lo + static_cast<uint64_t>(b);
    c0[b] = static_cast<uint32_t>(lo);
    c1[b] = static_cast<uint32_t>(lo >> 32);
    c2[b] = static_cast<uint32_t>(counter_hi);
    c3[b] = static_cast<uint32_t>(counter_hi >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int b = 0; b < kBlocks; ++b) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[b];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[b];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[b] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = static_cast<uint32_t>(p1);
      c3[b] = static_cast<uint32_t>(p0);
      c0[b] = n0;
      c2[b] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int b = 0; b < kBlocks; ++b) {
    out[4 * b] = c0[b];
    out[4 * b + 1] = c1[b];
    out[4 * b + 2] = c2[b];
    out[4 * b + 3] = c3[b];
  }
}

// Philox4x32: 4 random 32-bit words for each 128-bit counter under a 64-bit key (Philox4x32-10,
// as in Random123; tests/common/random_test.cc checks its known-answer vector).
inline std::array<uint32_t, 4> Philox4x32(uint64_t key, uint64_t counter_lo,
                                          uint64_t counter_hi = 0) {
  std::array<uint32_t, 4> out;
  Philox4x32Blocks<1>(key, counter_lo, counter_hi, out.data());
  return out;
}

#if defined(__SSE2__)
// PhiloxSse: 4 * kGroups consecutive blocks in SSE2 registers, one block per 32-bit lane (the
// groups' rounds interleave). The same words as the scalar template (tests/common/
// random_test.cc), ~2.3x faster for 4 blocks where GCC does not vectorise the template itself
// (a second group gained nothing more here: the multiplies' throughput, not their latency, is
// the limit).
template <int kGroups>
inline void PhiloxSse(uint64_t key, uint64_t counter_lo, uint64_t counter_hi, uint32_t* out) {
  const __m128i lo32 = _mm_set1_epi64x(0xFFFFFFFFll);
  const __m128i m0 = _mm_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m128i m1 = _mm_set1_epi32(static_cast<int>(0xCD9E8D57u));
  // Per lane: the high and low 32 bits of the 64-bit product a * m.
  auto mul = [lo32](__m128i a, __m128i m, __m128i* hi, __m128i* lo) {
    const __m128i even = _mm_mul_epu32(a, m);                     // lanes 0, 2
    const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), m);  // lanes 1, 3
    *lo = _mm_or_si128(_mm_and_si128(even, lo32), _mm_slli_epi64(odd, 32));
    *hi = _mm_or_si128(_mm_srli_epi64(even, 32), _mm_andnot_si128(lo32, odd));
  };
  __m128i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    alignas(16) uint32_t lo_words[4], hi_words[4];
    for (int b = 0; b < 4; ++b) {
      const uint64_t lo = counter_lo + static_cast<uint64_t>(4 * g + b);
      lo_words[b] = static_cast<uint32_t>(lo);
      hi_words[b] = static_cast<uint32_t>(lo >> 32);
    }
    c0[g] = _mm_load_si128(reinterpret_cast<const __m128i*>(lo_words));
    c1[g] = _mm_load_si128(reinterpret_cast<const __m128i*>(hi_words));
    c2[g] = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(counter_hi)));
    c3[g] = _mm_set1_epi32(static_cast<int>(static_cast<uint32_t>(counter_hi >> 32)));
  }
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m128i vk0 = _mm_set1_epi32(static_cast<int>(k0));
    const __m128i vk1 = _mm_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < kGroups; ++g) {
      __m128i hi0, lo0, hi1, lo1;
      mul(c0[g], m0, &hi0, &lo0);
      mul(c2[g], m1, &hi1, &lo1);
      c0[g] = _mm_xor_si128(_mm_xor_si128(hi1, c1[g]), vk0);
      c1[g] = lo1;
      c2[g] = _mm_xor_si128(_mm_xor_si128(hi0, c3[g]), vk1);
      c3[g] = lo0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Transpose: out[4b .. 4b+3] = block b's (c0, c1, c2, c3).
  for (int g = 0; g < kGroups; ++g) {
    const __m128i t0 = _mm_unpacklo_epi32(c0[g], c1[g]), t1 = _mm_unpackhi_epi32(c0[g], c1[g]);
    const __m128i t2 = _mm_unpacklo_epi32(c2[g], c3[g]), t3 = _mm_unpackhi_epi32(c2[g], c3[g]);
    __m128i* o = reinterpret_cast<__m128i*>(out) + 4 * g;
    _mm_storeu_si128(o, _mm_unpacklo_epi64(t0, t2));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi64(t0, t2));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi64(t1, t3));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi64(t1, t3));
  }
}
template <>
inline void Philox4x32Blocks<4>(uint64_t key, uint64_t counter_lo, uint64_t counter_hi,
                                uint32_t* out) {
  PhiloxSse<1>(key, counter_lo, counter_hi, out);
}
#endif

// PhiloxStreamBlocks: the first `blocks` blocks (counters 0 .. blocks - 1, counter_hi `stream`)
// of each of n streams: out[4 * (i * blocks + b) .. + 3] = block b of the stream under key
// keys[i], i.e. the first 4 * blocks words PhiloxStream(keys[i], stream) draws. For many short
// streams at once (a table's new rows, one stream per key): with AVX-512, 16 blocks of different
// keys go through the rounds side by side in the lanes (~5x the per-row streams); otherwise
// stream by stream. PhiloxStreamBlocksFor picks the variant (tests compare them).
void PhiloxStreamBlocks(const uint64_t* keys, size_t n, int blocks, uint64_t stream, uint32_t* out);
void PhiloxStreamBlocksFor(Isa isa, const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                           uint32_t* out);

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
const ZigguratTables* BuildZiggurat();  // random.cc; call Ziggurat() instead
// Ziggurat: the tables, built on first use. Inline so a sampler's loop pays one load for them.
inline const ZigguratTables& Ziggurat() {
  static const ZigguratTables* const tables = BuildZiggurat();
  return *tables;
}

// PhiloxStream: draws values in order from (key, stream id); cheap to create per row or per
// block of elements.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t key, uint64_t stream) : key_(key), stream_(stream) {}

  uint32_t NextBits() {
    if (used_ == available_) Refill();
    return words_[used_++];
  }
  float Uniform() { return UniformFloat(NextBits()); }
  // Normal: a standard normal by the ziggurat method. One 32-bit word gives the layer (7 bits),
  // the sign (1 bit) and a 24-bit magnitude; about 98.8% of draws take that one word and no
  // transcendental function (~2x the rate of Box-Muller's log, sqrt and cos per value, see
  // benchmarks/random_bench.cc; it matters to tables that initialise millions of new rows). The
  // rest test the curve or draw from the tail (Marsaglia's exponential rejection) with more
  // words.
  float Normal() {
    return SampleNormal([this] { return NextBits(); });
  }
  // TruncatedNormal: a standard normal redrawn until it lies within two standard deviations.
  float TruncatedNormal() {
    return SampleTruncatedNormal([this] { return NextBits(); });
  }

 private:
  template <typename NextWord>
  static float SampleNormal(NextWord&& next) {
    const ZigguratTables& z = Ziggurat();
    for (;;) {
      const uint32_t u = next();
      const uint32_t layer = u & 127u;
      const uint32_t m = u >> 8;
      // The sign goes straight into the float's sign bit: a branch on it would mispredict half
      // the time (that alone cost ~40% of the sampler).
      const uint32_t sign = (u & 128u) << 24;
      auto with_sign = [sign](float v) {
        return std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ sign);
      };
      const float x = static_cast<float>(m) * z.width[layer];
      if (m < z.accept[layer]) [[likely]] {
        return with_sign(x);
      }
      if (layer == 0) return with_sign(static_cast<float>(Tail(next)));
      const double y = z.density[layer] + static_cast<double>(UniformFloat(next())) *
                                              (z.density[layer - 1] - z.density[layer]);
      if (y < std::exp(-0.5 * static_cast<double>(x) * static_cast<double>(x))) {
        return with_sign(x);
      }
    }
  }
  template <typename NextWord>
  static float SampleTruncatedNormal(NextWord&& next) {
    for (;;) {
      const float v = SampleNormal(next);
      if (v >= -2.0f && v <= 2.0f) return v;
    }
  }
  // Tail: x >= r from the normal's tail, by Marsaglia's rejection from an exponential (uniforms
  // in (0, 1], safe for log).
  template <typename NextWord>
  static double Tail(NextWord&& next) {
    constexpr double r = ZigguratTables::kTail;
    auto open_uniform = [&] { return (static_cast<double>(next() >> 8) + 1.0) * 0x1.0p-24; };
    for (;;) {
      const double a = -std::log(open_uniform()) / r;
      const double b = -std::log(open_uniform());
      if (b + b >= a * a) return r + a;
    }
  }

  // Refill: the next words of the stream (used_ = 0). The first refill computes one block (4
  // words: many streams, one per element, need no more); later ones four blocks at once, at
  // under half the cost per word. Words are those of consecutive counters either way.
  __attribute__((noinline)) void Refill() {
    if (counter_ == 0) {
      Philox4x32Blocks<1>(key_, counter_, stream_, words_.data());
      counter_ += 1;
      available_ = 4;
    } else {
      Philox4x32Blocks<4>(key_, counter_, stream_, words_.data());
      counter_ += 4;
      available_ = 16;
    }
    used_ = 0;
  }

  uint64_t key_;
  uint64_t stream_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 16> words_{};
  int used_ = 0;
  int available_ = 0;
};

// BoxMullerNormal: the textbook sampler (two uniforms, log, sqrt, cos), kept as the baseline the
// ziggurat is measured against (benchmarks/random_bench.cc) and a second opinion in tests.
inline float BoxMullerNormal(PhiloxStream& s) {
  const float u1 = (static_cast<float>(s.NextBits() >> 8) + 1.0f) * 0x1.0p-24f;
  const float u2 = s.Uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_RANDOM_H_
