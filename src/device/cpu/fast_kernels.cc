// fast_kernels.cc: the run-time dispatch table over the ISA variants.
#include "src/device/cpu/fast_kernels.h"

#include "src/common/isa_dispatch.h"

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

RECSDK_ISA_DECLARE_VARIANTS(RECSDK_DECLARE_VARIANT)

namespace recsdk::internal {

const FastKernels& FastFor(Isa isa) {
  static const IsaVariants<FastKernels> variants(RECSDK_ISA_VARIANT_TABLES(RECSDK_VARIANT_TABLE));
  return variants.For(isa);
}

const FastKernels& Fast() {
  static const FastKernels& k = FastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal

// The macros end here: in a unity build the next file of the batch may use the same names.
#undef RECSDK_DECLARE_VARIANT
#undef RECSDK_VARIANT_TABLE
