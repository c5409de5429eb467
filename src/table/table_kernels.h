// table_kernels.h: the sparse optimizers' batch update loops, compiled once per instruction set
// (table_kernels_isa.cc) and picked at run time by the CPU's features. Their plain reference twin
// is RowUpdater (sparse_optimizers_impl.h); tests/table/table_kernels_test.cc checks every
// variant is bitwise equal to it. Thread-safe (each call touches only the rows it is given).
#ifndef RECSDK_TABLE_TABLE_KERNELS_H_
#define RECSDK_TABLE_TABLE_KERNELS_H_

#include <cstdint>

#include "src/common/cpu_features.h"

namespace recsdk::internal {

// *Rows: row ids below 0xFFFFFFFE live at base + id * row_bytes; sentinel ids are skipped.
// *Addrs: rows by address; nullptr is skipped. grads is [n, dim]. Rows are [dim | slots].
using SgdRowsFn = void (*)(char* base, int64_t row_bytes, const uint32_t* rows, int64_t n,
                           const float* grads, int64_t dim, float lr, float wd);
using SgdAddrsFn = void (*)(float* const* addrs, int64_t row_bytes, int64_t n, const float* grads,
                            int64_t dim, float lr, float wd);
// wd: the coupled weight decay of every kernel (g + wd * w; 0 disables), as RowUpdater's.
using AdagradRowsFn = void (*)(char* base, int64_t row_bytes, const uint32_t* rows, int64_t n,
                               const float* grads, int64_t dim, float lr, float eps, float wd);
using AdagradAddrsFn = void (*)(float* const* addrs, int64_t row_bytes, int64_t n,
                                const float* grads, int64_t dim, float lr, float eps, float wd);
using LazyAdamRowsFn = void (*)(char* base, int64_t row_bytes, const uint32_t* rows, int64_t n,
                                const float* grads, int64_t dim, float b1, float b2, float eps,
                                float lr_t, float wd);
using LazyAdamAddrsFn = void (*)(float* const* addrs, int64_t row_bytes, int64_t n,
                                 const float* grads, int64_t dim, float b1, float b2, float eps,
                                 float lr_t, float wd);

struct TableKernels {
  Isa isa;
  SgdRowsFn sgd_rows;
  SgdAddrsFn sgd_addrs;
  AdagradRowsFn adagrad_rows;
  AdagradAddrsFn adagrad_addrs;
  LazyAdamRowsFn lazy_adam_rows;
  LazyAdamAddrsFn lazy_adam_addrs;
};

// TableFast: the variant for the best ISA of this CPU (see BestIsa()).
const TableKernels& TableFast();
// TableFastFor: the variant for `isa` (baseline when that variant was not built).
const TableKernels& TableFastFor(Isa isa);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TABLE_KERNELS_H_
