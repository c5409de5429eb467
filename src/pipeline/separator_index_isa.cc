// separator_index_isa.cc: IndexSeparators' block compare, compiled once per instruction set like
// every *_isa.cc file (plainly, and with RECSDK_ISA_SUFFIX=avx2 / avx512 and their -m flags,
// keeping only the suffixed entry points global; cmake/RecsdkOptions.cmake). The baseline build
// compares 16 bytes at a time (SSE2), the others 32 (AVX2, with POPCNT). separator_index.cc
// dispatches.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#define RECSDK_SEP_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_SEP_CAT3(a, b, c) RECSDK_SEP_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_SEP_KERNEL(name) \
  RECSDK_SEP_CAT3(recsdk_separator_index_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_SEP_KERNEL(name) RECSDK_SEP_CAT3(recsdk_separator_index_isa_, baseline, _##name)
#endif

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

#if defined(__AVX2__)
size_t Index(const char* base, const char* p, const char* end, char a, char b, uint32_t* out) {
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
#else
size_t Index(const char* base, const char* p, const char* end, char a, char b, uint32_t* out) {
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

#endif

#undef RECSDK_SEP_FLATTEN

}  // namespace

extern "C" size_t RECSDK_SEP_KERNEL(index)(const char* base, const char* p, const char* end, char a,
                                           char b, uint32_t* out) {
  return Index(base, p, end, a, b, out);
}

#undef RECSDK_SEP_KERNEL
#undef RECSDK_SEP_CAT3
#undef RECSDK_SEP_CAT3_INNER
