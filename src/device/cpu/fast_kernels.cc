// fast_kernels.cc: the run-time dispatch table over the ISA variants.
#include "src/device/cpu/fast_kernels.h"

#define RECSDK_DECLARE_VARIANT(isa)                                                               \
  extern "C" {                                                                                    \
  void recsdk_fast_kernels_isa_##isa##_sgemm(int64_t, int64_t, int64_t, const float*, int64_t,    \
                                             bool, const float*, int64_t, bool, float*, int64_t); \
  void recsdk_fast_kernels_isa_##isa##_less_f32(const float*, const float*, bool*, int64_t);      \
  void recsdk_fast_kernels_isa_##isa##_greater_f32(const float*, const float*, bool*, int64_t);   \
  void recsdk_fast_kernels_isa_##isa##_floormod_f32(const float*, const float*, float*, int64_t); \
  void recsdk_fast_kernels_isa_##isa##_where_f32(const bool*, const float*, const float*, float*, \
                                                 int64_t);                                        \
  }
#define RECSDK_VARIANT_TABLE(isa_enum, isa)                                                        \
  FastKernels {                                                                                    \
    isa_enum, recsdk_fast_kernels_isa_##isa##_sgemm, recsdk_fast_kernels_isa_##isa##_less_f32,     \
        recsdk_fast_kernels_isa_##isa##_greater_f32, recsdk_fast_kernels_isa_##isa##_floormod_f32, \
        recsdk_fast_kernels_isa_##isa##_where_f32                                                  \
  }

RECSDK_DECLARE_VARIANT(baseline)
#ifndef RECSDK_NO_ISA_VARIANTS
RECSDK_DECLARE_VARIANT(avx2)
RECSDK_DECLARE_VARIANT(avx512)
#endif

namespace recsdk::internal {

const FastKernels& FastFor(Isa isa) {
  static const FastKernels baseline = RECSDK_VARIANT_TABLE(Isa::kBaseline, baseline);
#ifndef RECSDK_NO_ISA_VARIANTS
  static const FastKernels avx2 = RECSDK_VARIANT_TABLE(Isa::kAvx2, avx2);
  static const FastKernels avx512 = RECSDK_VARIANT_TABLE(Isa::kAvx512, avx512);
  if (isa == Isa::kAvx512) return avx512;
  if (isa == Isa::kAvx2) return avx2;
#else
  (void)isa;
#endif
  return baseline;
}

const FastKernels& Fast() {
  static const FastKernels& k = FastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal

// The macros end here: in a unity build the next file of the batch may use the same names.
#undef RECSDK_DECLARE_VARIANT
#undef RECSDK_VARIANT_TABLE
