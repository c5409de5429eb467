// random.cc: the ziggurat tables of PhiloxStream::Normal (built once, on first use, by a
// thread-safe static; read-only afterwards) and the batched streams of PhiloxStreamBlocks.
#include "src/common/random.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace recsdk::internal {
namespace {

ZigguratTables MakeZiggurat() {
  constexpr int kLayers = 128;
  constexpr double r = ZigguratTables::kTail;
  constexpr double v = 9.91256303526217e-3;  // area of each layer (and of the base with tail)
  constexpr double kScale = 16777216.0;      // 2^24: the magnitude's range
  double x[kLayers];                         // right edges; x[0] is not a layer edge
  x[kLayers - 1] = r;
  for (int i = kLayers - 2; i >= 1; --i) {
    x[i] = std::sqrt(-2.0 * std::log(v / x[i + 1] + std::exp(-0.5 * x[i + 1] * x[i + 1])));
  }
  const double base = v / std::exp(-0.5 * r * r);  // width of the base strip
  ZigguratTables z;
  z.width[0] = static_cast<float>(base / kScale);
  z.accept[0] = static_cast<uint32_t>(r / base * kScale);
  z.density[0] = 1.0;
  for (int i = 1; i < kLayers; ++i) {
    z.width[i] = static_cast<float>(x[i] / kScale);
    z.accept[i] = i == 1 ? 0u : static_cast<uint32_t>(x[i - 1] / x[i] * kScale);
    z.density[i] = std::exp(-0.5 * x[i] * x[i]);
  }
  return z;
}

}  // namespace

const ZigguratTables* BuildZiggurat() {
  static const ZigguratTables tables = MakeZiggurat();
  return &tables;
}

namespace {

void StreamBlocksScalar(const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                        uint32_t* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < blocks; ++b) {
      Philox4x32Blocks<1>(keys[i], static_cast<uint64_t>(b), stream, out + 4 * (i * blocks + b));
    }
  }
}

#ifndef RECSDK_NO_ISA_VARIANTS
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
// 16 lanes, lane j = block (stream i, counter b) of the flattened pair list: per-lane keys and
// counters, the same rounds as Philox4x32Blocks. A 32 x 32 -> 64 multiply of all lanes takes two
// vpmuludq (even lanes, then the odd ones shifted down) and blends of their halves.
void StreamBlocksAvx512(const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                        uint32_t* out) {
  const size_t total = n * static_cast<size_t>(blocks);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  constexpr __mmask16 kOdd = 0xAAAA;
  auto mul = [](__m512i a, __m512i m, __m512i* hi, __m512i* lo) {
    const __m512i even = _mm512_mul_epu32(a, m);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *lo = _mm512_mask_blend_epi32(kOdd, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(kOdd, _mm512_srli_epi64(even, 32), odd);
  };
  const __m512i s_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
  const __m512i s_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
  alignas(64) uint32_t k_lo[16], k_hi[16], ctr[16], w[4][16];
  for (size_t p0 = 0; p0 < total; p0 += 16) {
    const size_t lanes = std::min<size_t>(16, total - p0);
    for (size_t j = 0; j < 16; ++j) {
      const size_t p = p0 + std::min(j, lanes - 1);
      const uint64_t key = keys[p / static_cast<size_t>(blocks)];
      k_lo[j] = static_cast<uint32_t>(key);
      k_hi[j] = static_cast<uint32_t>(key >> 32);
      ctr[j] = static_cast<uint32_t>(p % static_cast<size_t>(blocks));
    }
    __m512i c0 = _mm512_load_si512(ctr), c1 = _mm512_setzero_si512(), c2 = s_lo, c3 = s_hi;
    __m512i k0 = _mm512_load_si512(k_lo), k1 = _mm512_load_si512(k_hi);
    const __m512i w0 = _mm512_set1_epi32(static_cast<int>(0x9E3779B9u));
    const __m512i w1 = _mm512_set1_epi32(static_cast<int>(0xBB67AE85u));
    for (int round = 0; round < 10; ++round) {
      __m512i hi0, lo0, hi1, lo1;
      mul(c0, m0, &hi0, &lo0);
      mul(c2, m1, &hi1, &lo1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), k0);
      c1 = lo1;
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), k1);
      c3 = lo0;
      k0 = _mm512_add_epi32(k0, w0);
      k1 = _mm512_add_epi32(k1, w1);
    }
    _mm512_store_si512(w[0], c0);
    _mm512_store_si512(w[1], c1);
    _mm512_store_si512(w[2], c2);
    _mm512_store_si512(w[3], c3);
    uint32_t* o = out + 4 * p0;
    for (size_t j = 0; j < lanes; ++j) {
      o[4 * j] = w[0][j];
      o[4 * j + 1] = w[1][j];
      o[4 * j + 2] = w[2][j];
      o[4 * j + 3] = w[3][j];
    }
  }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // RECSDK_NO_ISA_VARIANTS

}  // namespace

void PhiloxStreamBlocksFor(Isa isa, const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                           uint32_t* out) {
  if (n == 0 || blocks <= 0) return;
#ifndef RECSDK_NO_ISA_VARIANTS
  if (isa == Isa::kAvx512) return StreamBlocksAvx512(keys, n, blocks, stream, out);
#else
  (void)isa;
#endif
  StreamBlocksScalar(keys, n, blocks, stream, out);
}

void PhiloxStreamBlocks(const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                        uint32_t* out) {
  static const Isa isa = BestIsa();
  PhiloxStreamBlocksFor(isa, keys, n, blocks, stream, out);
}

}  // namespace recsdk::internal
