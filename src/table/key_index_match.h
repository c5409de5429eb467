// key_index_match.h: the SSE2 match of a key against a KeyIndex bucket, shared by Find
// (key_index.cc) and the baseline batch lookup (key_index_isa.cc).
#ifndef RECSDK_TABLE_KEY_INDEX_MATCH_H_
#define RECSDK_TABLE_KEY_INDEX_MATCH_H_

#include <immintrin.h>

#include <cstdint>

namespace recsdk::internal::key_index_match {

// SSE2 (every x86-64): four 16-byte loads per bucket, [k0 k1] [k2 k3] [k4 | r0 r1] [r2 r3 r4 |
// flags]. A 64-bit compare is a 32-bit compare ANDed with itself with its halves swapped; the key
// matches are then moved onto their rows' dword lanes, ANDed with row + 1, and ORed together.
inline __m128i Eq64Sse2(__m128i a, __m128i b) {
  const __m128i e = _mm_cmpeq_epi32(a, b);
  return _mm_and_si128(e, _mm_shuffle_epi32(e, _MM_SHUFFLE(2, 3, 0, 1)));
}

inline __m128i MatchSse2(const void* bucket, __m128i key) {
  const __m128i* p = static_cast<const __m128i*>(bucket);
  const __m128i one = _mm_set1_epi32(1);
  const __m128i k4_r0_r1 = _mm_load_si128(p + 2);
  const __m128i r2_r3_r4 = _mm_load_si128(p + 3);
  const __m128i m01 = Eq64Sse2(_mm_load_si128(p), key);
  const __m128i m23 = Eq64Sse2(_mm_load_si128(p + 1), key);
  const __m128i m4 = Eq64Sse2(k4_r0_r1, key);
  // Lanes 2, 3 of the third load are r0, r1: their masks are m01's dwords 0 and 2.
  const __m128i on_r0_r1 =
      _mm_and_si128(_mm_shuffle_epi32(m01, _MM_SHUFFLE(2, 0, 0, 0)), _mm_set_epi32(-1, -1, 0, 0));
  // Lanes 0, 1, 2 of the fourth load are r2, r3, r4: masks m23's dwords 0, 2 and m4's dword 0.
  const __m128i on_r2_r4 =
      _mm_and_si128(_mm_castps_si128(_mm_shuffle_ps(_mm_castsi128_ps(m23), _mm_castsi128_ps(m4),
                                                    _MM_SHUFFLE(0, 0, 2, 0))),
                    _mm_set_epi32(0, -1, -1, -1));
  return _mm_or_si128(_mm_and_si128(on_r0_r1, _mm_add_epi32(k4_r0_r1, one)),
                      _mm_and_si128(on_r2_r4, _mm_add_epi32(r2_r3_r4, one)));
}

inline uint32_t OrLanes(__m128i v) {
  v = _mm_or_si128(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_or_si128(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(v));
}
}  // namespace recsdk::internal::key_index_match

#endif  // RECSDK_TABLE_KEY_INDEX_MATCH_H_
