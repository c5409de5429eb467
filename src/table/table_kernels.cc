// table_kernels.cc: the ISA variants of the table's update kernels (table_kernels_body.inc,
// compiled here once per instruction set) and the run-time dispatch table over them.
#include "src/table/table_kernels.h"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "src/common/prefetch.h"

// ISA variants: GCC compiles the body under `#pragma GCC target`, clang (the fuzz and sanitizer
// builds) under `#pragma clang attribute` with the same target list, so every compiler builds and
// dispatches the same three variants.
// No fused multiply-add anywhere in the kernels: the variants must round like the reference twin.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define RECSDK_TK_NS tk_baseline
#define RECSDK_TK_WIDTH 4
#include "src/table/table_kernels_body.inc"
#undef RECSDK_TK_NS
#undef RECSDK_TK_WIDTH

#ifndef RECSDK_NO_ISA_VARIANTS
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define RECSDK_TK_NS tk_avx2
#define RECSDK_TK_WIDTH 8
#include "src/table/table_kernels_body.inc"
#undef RECSDK_TK_NS
#undef RECSDK_TK_WIDTH
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(                                                    \
    __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c")
#endif
#define RECSDK_TK_NS tk_avx512
#define RECSDK_TK_WIDTH 16
#include "src/table/table_kernels_body.inc"
#undef RECSDK_TK_NS
#undef RECSDK_TK_WIDTH
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#define RECSDK_TABLE_VARIANT(isa_enum, ns)                                                    \
  TableKernels {                                                                              \
    isa_enum, ns::SgdRows, ns::SgdAddrs, ns::AdagradRows, ns::AdagradAddrs, ns::LazyAdamRows, \
        ns::LazyAdamAddrs                                                                     \
  }

namespace recsdk::internal {

const TableKernels& TableFastFor(Isa isa) {
  static const TableKernels baseline = RECSDK_TABLE_VARIANT(Isa::kBaseline, tk_baseline);
#ifndef RECSDK_NO_ISA_VARIANTS
  static const TableKernels avx2 = RECSDK_TABLE_VARIANT(Isa::kAvx2, tk_avx2);
  static const TableKernels avx512 = RECSDK_TABLE_VARIANT(Isa::kAvx512, tk_avx512);
  if (isa == Isa::kAvx512) return avx512;
  if (isa == Isa::kAvx2) return avx2;
#else
  (void)isa;
#endif
  return baseline;
}

const TableKernels& TableFast() {
  static const TableKernels& k = TableFastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal
