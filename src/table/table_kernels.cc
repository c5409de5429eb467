// table_kernels.cc: the run-time dispatch table over the ISA variants of the table's update
// kernels (table_kernels_isa.cc).
#include "src/table/table_kernels.h"

#include <cstdint>

#include "src/common/isa_dispatch.h"

#define RECSDK_TABLE_KERNELS_DECLARE(isa)                                                          \
  extern "C" {                                                                                     \
  void recsdk_table_kernels_isa_##isa##_sgd_rows(char*, int64_t, const uint32_t*, int64_t,         \
                                                 const float*, int64_t, float, float);             \
  void recsdk_table_kernels_isa_##isa##_sgd_addrs(float* const*, int64_t, int64_t, const float*,   \
                                                  int64_t, float, float);                          \
  void recsdk_table_kernels_isa_##isa##_adagrad_rows(char*, int64_t, const uint32_t*, int64_t,     \
                                                     const float*, int64_t, float, float, float);  \
  void recsdk_table_kernels_isa_##isa##_adagrad_addrs(float* const*, int64_t, int64_t,             \
                                                      const float*, int64_t, float, float, float); \
  void recsdk_table_kernels_isa_##isa##_lazy_adam_rows(char*, int64_t, const uint32_t*, int64_t,   \
                                                       const float*, int64_t, float, float, float, \
                                                       float, float);                              \
  void recsdk_table_kernels_isa_##isa##_lazy_adam_addrs(float* const*, int64_t, int64_t,           \
                                                        const float*, int64_t, float, float,       \
                                                        float, float, float);                      \
  }
#define RECSDK_TABLE_KERNELS_TABLE(isa_enum, isa)                                                  \
  TableKernels {                                                                                   \
    isa_enum, recsdk_table_kernels_isa_##isa##_sgd_rows,                                           \
        recsdk_table_kernels_isa_##isa##_sgd_addrs, recsdk_table_kernels_isa_##isa##_adagrad_rows, \
        recsdk_table_kernels_isa_##isa##_adagrad_addrs,                                            \
        recsdk_table_kernels_isa_##isa##_lazy_adam_rows,                                           \
        recsdk_table_kernels_isa_##isa##_lazy_adam_addrs                                           \
  }

RECSDK_ISA_DECLARE_VARIANTS(RECSDK_TABLE_KERNELS_DECLARE)

namespace recsdk::internal {

const TableKernels& TableFastFor(Isa isa) {
  static const IsaVariants<TableKernels> variants(
      RECSDK_ISA_VARIANT_TABLES(RECSDK_TABLE_KERNELS_TABLE));
  return variants.For(isa);
}

const TableKernels& TableFast() {
  static const TableKernels& k = TableFastFor(BestIsa());
  return k;
}

}  // namespace recsdk::internal

// The macros end here: in a unity build the next file of the batch may use the same names.
#undef RECSDK_TABLE_KERNELS_DECLARE
#undef RECSDK_TABLE_KERNELS_TABLE
