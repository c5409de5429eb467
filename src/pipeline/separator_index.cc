// separator_index.cc: see separator_index.h. The SIMD block compare (separator_index_isa.cc) is
// compiled per instruction set and picked once by BestIsa().
#include "src/pipeline/separator_index.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "src/common/isa_dispatch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define RECSDK_SEP_DECLARE(isa)                                                        \
  extern "C" size_t recsdk_separator_index_isa_##isa##_index(const char*, const char*, \
                                                             const char*, char, char, uint32_t*);
RECSDK_ISA_DECLARE_VARIANTS(RECSDK_SEP_DECLARE)
#undef RECSDK_SEP_DECLARE

namespace recsdk::internal {
namespace {

using IndexFn = size_t (*)(const char*, const char*, const char*, char, char, uint32_t*);

struct SeparatorKernels {
  Isa isa;
  IndexFn index;
};

// AVX-512 CPUs run the AVX2 build, as before the variants moved to separator_index_isa.cc.
IndexFn PickIndex() {
#define RECSDK_SEP_TABLE(isa_enum, isa) \
  SeparatorKernels { isa_enum, recsdk_separator_index_isa_##isa##_index }
  static const IsaVariants<SeparatorKernels> variants(RECSDK_ISA_VARIANT_TABLES(RECSDK_SEP_TABLE));
#undef RECSDK_SEP_TABLE
  return variants.For(std::min(BestIsa(), Isa::kAvx2)).index;
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
  return recsdk_separator_index_isa_baseline_index(base, p, end, a, b, out);
}

}  // namespace recsdk::internal
