// separator_index.cc: see separator_index.h. The SIMD block compare is compiled for the baseline
// (SSE2) and, on x86-64, for AVX2 + POPCNT + BMI, picked once by BestIsa().
#include "src/pipeline/separator_index.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "src/common/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace recsdk::internal {
namespace {

// Scalar mask of the separators among the n (< 64) bytes at p.
inline uint64_t TailMask(const char* p, ptrdiff_t n, char a, char b) {
  uint64_t m = 0;
  for (ptrdiff_t i = 0; i < n; ++i) m |= static_cast<uint64_t>(p[i] == a || p[i] == b) << i;
  return m;
}

// Flatten: writes base_offset + the position of each set bit of mask, 8 at a time without a
// branch per bit (entries past the count are scratch, overwritten next time). Returns the count.
#define RECSDK_SEP_FLATTEN(out, base_offset, mask, count)          \
  do {                                                             \
    uint64_t m_ = (mask);                                          \
    const uint32_t b_ = (base_offset);                             \
    const int n_ = (count);                                        \
    uint32_t* o_ = (out);                                          \
    for (int k_ = 0; k_ < 8; ++k_) {                               \
      o_[k_] = b_ + static_cast<uint32_t>(std::countr_zero(m_));   \
      m_ &= m_ - 1;                                                \
    }                                                              \
    if (n_ > 8) {                                                  \
      for (int k_ = 8; k_ < 16; ++k_) {                            \
        o_[k_] = b_ + static_cast<uint32_t>(std::countr_zero(m_)); \
        m_ &= m_ - 1;                                              \
      }                                                            \
      for (int k_ = 16; k_ < n_; ++k_) {                           \
        o_[k_] = b_ + static_cast<uint32_t>(std::countr_zero(m_)); \
        m_ &= m_ - 1;                                              \
      }                                                            \
    }                                                              \
  } while (0)

size_t IndexBaseline(const char* base, const char* p, const char* end, char a, char b,
                     uint32_t* out) {
  uint32_t* o = out;
#if defined(__SSE2__)
  const __m128i va = _mm_set1_epi8(a);
  const __m128i vb = _mm_set1_epi8(b);
  for (; end - p >= 64; p += 64) {
    uint64_t m = 0;
    for (int i = 0; i < 4; ++i) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
      const __m128i eq = _mm_or_si128(_mm_cmpeq_epi8(c, va), _mm_cmpeq_epi8(c, vb));
      m |= static_cast<uint64_t>(static_cast<uint16_t>(_mm_movemask_epi8(eq))) << (16 * i);
    }
    const int n = std::popcount(m);
    RECSDK_SEP_FLATTEN(o, static_cast<uint32_t>(p - base), m, n);
    o += n;
  }
#endif
  for (; p < end; p += 64) {
    const uint64_t m = TailMask(p, std::min<ptrdiff_t>(64, end - p), a, b);
    const int n = std::popcount(m);
    RECSDK_SEP_FLATTEN(o, static_cast<uint32_t>(p - base), m, n);
    o += n;
  }
  return static_cast<size_t>(o - out);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// A target attribute (not #pragma GCC target, which clang ignores) so GCC and clang both build it.
__attribute__((target("avx2,popcnt,bmi"))) size_t IndexAvx2(const char* base, const char* p,
                                                            const char* end, char a, char b,
                                                            uint32_t* out) {
  uint32_t* o = out;
  const __m256i va = _mm256_set1_epi8(a);
  const __m256i vb = _mm256_set1_epi8(b);
  for (; end - p >= 64; p += 64) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const uint32_t m0 = static_cast<uint32_t>(_mm256_movemask_epi8(
        _mm256_or_si256(_mm256_cmpeq_epi8(c0, va), _mm256_cmpeq_epi8(c0, vb))));
    const uint32_t m1 = static_cast<uint32_t>(_mm256_movemask_epi8(
        _mm256_or_si256(_mm256_cmpeq_epi8(c1, va), _mm256_cmpeq_epi8(c1, vb))));
    const uint64_t m = m0 | (static_cast<uint64_t>(m1) << 32);
    const int n = static_cast<int>(_mm_popcnt_u64(m));
    RECSDK_SEP_FLATTEN(o, static_cast<uint32_t>(p - base), m, n);
    o += n;
  }
  for (; p < end; p += 64) {
    const uint64_t m = TailMask(p, std::min<ptrdiff_t>(64, end - p), a, b);
    const int n = static_cast<int>(_mm_popcnt_u64(m));
    RECSDK_SEP_FLATTEN(o, static_cast<uint32_t>(p - base), m, n);
    o += n;
  }
  return static_cast<size_t>(o - out);
}
#define RECSDK_SEP_HAVE_AVX2 1
#endif

using IndexFn = size_t (*)(const char*, const char*, const char*, char, char, uint32_t*);

IndexFn PickIndex() {
#ifdef RECSDK_SEP_HAVE_AVX2
  if (BestIsa() >= Isa::kAvx2) return IndexAvx2;
#endif
  return IndexBaseline;
}

}  // namespace

size_t IndexSeparators(const char* base, const char* p, const char* end, char a, char b,
                       uint32_t* out) {
  static const IndexFn fn = PickIndex();
  return fn(base, p, end, a, b, out);
}

size_t CountByte(const char* p, const char* end, char c) {
  size_t n = 0;
#if defined(__SSE2__)
  const __m128i vc = _mm_set1_epi8(c);
  const __m128i zero = _mm_setzero_si128();
  while (end - p >= 16) {
    // Byte counters (each compare adds 1 by subtracting -1) folded every 255 steps.
    __m128i acc = zero;
    for (int i = 0; i < 255 && end - p >= 16; ++i, p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(v, vc));
    }
    const __m128i sums = _mm_sad_epu8(acc, zero);
    n += static_cast<size_t>(_mm_cvtsi128_si64(sums)) +
         static_cast<size_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  for (; p < end; ++p) n += *p == c;
  return n;
}

size_t IndexSeparatorsBaseline(const char* base, const char* p, const char* end, char a, char b,
                               uint32_t* out) {
  return IndexBaseline(base, p, end, a, b, out);
}

}  // namespace recsdk::internal
