// random_isa.cc: PhiloxStreamBlocks' loop over keys and blocks, compiled once per instruction set
// like every *_isa.cc file (plainly, and with RECSDK_ISA_SUFFIX=avx2 / avx512 and their -m flags;
// cmake/RecsdkOptions.cmake). The AVX-512 build runs 16 blocks at a time; the others run the
// scalar Philox4x32Blocks block by block. Integer arithmetic only: every variant gives the same
// bits (tests/common/random_test.cc compares each with PhiloxStream). random.cc dispatches.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "src/common/random.h"

#define RECSDK_RANDOM_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_RANDOM_CAT3(a, b, c) RECSDK_RANDOM_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_RANDOM_KERNEL(name) \
  RECSDK_RANDOM_CAT3(recsdk_random_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_RANDOM_KERNEL(name) RECSDK_RANDOM_CAT3(recsdk_random_isa_, baseline, _##name)
#endif

namespace {

using recsdk::internal::Philox4x32Blocks;

#if defined(__AVX512F__)
// 16 lanes, lane j = block (stream i, counter b) of the flattened pair list: per-lane keys and
// counters, the same rounds as Philox4x32Blocks. A 32 x 32 -> 64 multiply of all lanes takes two
// vpmuludq (even lanes, then the odd ones shifted down) and blends of their halves.
void StreamBlocks(const uint64_t* keys, size_t n, int blocks, uint64_t stream, uint32_t* out) {
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
#else
void StreamBlocks(const uint64_t* keys, size_t n, int blocks, uint64_t stream, uint32_t* out) {
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < blocks; ++b) {
      Philox4x32Blocks<1>(keys[i], static_cast<uint64_t>(b), stream, out + 4 * (i * blocks + b));
    }
  }
}

#endif

}  // namespace

extern "C" void RECSDK_RANDOM_KERNEL(stream_blocks)(const uint64_t* keys, size_t n, int blocks,
                                                    uint64_t stream, uint32_t* out) {
  StreamBlocks(keys, n, blocks, stream, out);
}

#undef RECSDK_RANDOM_KERNEL
#undef RECSDK_RANDOM_CAT3
#undef RECSDK_RANDOM_CAT3_INNER
