// table_kernels_isa.cc: the sparse optimizers' batch update loops, compiled once per instruction
// set like every *_isa.cc file: plainly (baseline SSE2, 4 floats a vector) and with
// RECSDK_ISA_SUFFIX=avx2 / avx512 and their -m flags (8 / 16 floats), keeping only the suffixed
// entry points global (cmake/RecsdkOptions.cmake); table_kernels.cc holds the dispatch table.
//
// Each entry point walks a batch of rows (by row id in a slab, or by address), prefetching rows
// ahead for writing, and applies one optimizer step per row with explicit vector sqrt and divide.
// The arithmetic is the reference kernels' (src/table/sparse_optimizers.cc) operation by operation,
// with no fused multiply-add: sqrt, divide, multiply and add are correctly rounded, so every
// variant is bitwise equal to the reference twin (tests/table/table_kernels_test.cc checks it).
#include <cstddef>
#include <cstdint>

#include "src/common/prefetch.h"
#include "src/common/simd_f32.h"

// No fused multiply-add anywhere: the variants must round like the reference twin. This file is
// compiled alone (per-source options keep it out of unity batches), so the pragma stays here.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define RECSDK_TK_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_TK_CAT3(a, b, c) RECSDK_TK_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_TABLE_KERNEL(name) \
  RECSDK_TK_CAT3(recsdk_table_kernels_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_TABLE_KERNEL(name) RECSDK_TK_CAT3(recsdk_table_kernels_isa_, baseline, _##name)
#endif

namespace {

using namespace recsdk::internal::simd;  // NOLINT: the vector of this file's ISA

// Rows prefetched ahead of the one being updated: with 2-3 lines per row this keeps ~32-48 lines
// in flight, enough to cover DRAM latency on one core.
constexpr int64_t kAhead = 16;

inline void PrefetchW(const float* p, int64_t bytes) {
  recsdk::internal::PrefetchLinesWrite(p, static_cast<size_t>(bytes));
}

// Walks the batch: row_at(i) is row i's address or nullptr (skipped).
template <typename RowAt, typename Update>
inline void Walk(RowAt row_at, int64_t n, const float* grads, int64_t dim, int64_t row_bytes,
                 Update update) {
  for (int64_t i = 0; i < n && i < kAhead; ++i) {
    if (const float* p = row_at(i)) PrefetchW(p, row_bytes);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      if (const float* p = row_at(i + kAhead)) PrefetchW(p, row_bytes);
    }
    if (float* p = row_at(i)) update(p, grads + i * dim);
  }
}

struct Sgd {
  int64_t dim;
  float lr, wd;
  void operator()(float* __restrict w, const float* __restrict g) const {
    int64_t i = 0;
    const V vlr = Set1(lr);
    if (wd == 0.0f) {
      for (; i + kW <= dim; i += kW) Store(w + i, Sub(Load(w + i), Mul(vlr, Load(g + i))));
      for (; i < dim; ++i) w[i] -= lr * g[i];
    } else {
      const V vwd = Set1(wd);
      for (; i + kW <= dim; i += kW) {
        const V x = Load(w + i);
        Store(w + i, Sub(x, Mul(vlr, Add(Load(g + i), Mul(vwd, x)))));
      }
      for (; i < dim; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    }
  }
};

// Coupled weight decay, as the reference's: g + wd * w, or g itself when wd == 0.
inline V DecayedGrad(const float* g, const float* w, V vwd, bool decay) {
  return decay ? Add(Load(g), Mul(vwd, Load(w))) : Load(g);
}

struct Adagrad {
  int64_t dim;
  float lr, eps, wd;
  void operator()(float* __restrict w, const float* __restrict g) const {
    float* __restrict acc = w + dim;
    const V vlr = Set1(lr);
    const V veps = Set1(eps);
    const V vwd = Set1(wd);
    const bool decay = wd != 0.0f;
    int64_t i = 0;
    for (; i + kW <= dim; i += kW) {
      const V gi = DecayedGrad(g + i, w + i, vwd, decay);
      const V a = Add(Load(acc + i), Mul(gi, gi));
      Store(acc + i, a);
      Store(w + i, Sub(Load(w + i), Div(Mul(vlr, gi), Add(Sqrt(a), veps))));
    }
    for (; i < dim; ++i) {
      const float gi = decay ? g[i] + wd * w[i] : g[i];
      const float a = acc[i] + gi * gi;
      acc[i] = a;
      w[i] -= lr * gi / (SqrtS(a) + eps);
    }
  }
};

struct LazyAdam {
  int64_t dim;
  float b1, b2, eps, lr_t, wd;
  void operator()(float* __restrict w, const float* __restrict g) const {
    float* __restrict m = w + dim;
    float* __restrict v = w + 2 * dim;
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    const V vb1 = Set1(b1), vb2 = Set1(b2), vc1 = Set1(c1), vc2 = Set1(c2), veps = Set1(eps),
            vlr = Set1(lr_t), vwd = Set1(wd);
    const bool decay = wd != 0.0f;
    int64_t i = 0;
    for (; i + kW <= dim; i += kW) {
      const V gi = DecayedGrad(g + i, w + i, vwd, decay);
      const V mi = Add(Mul(vb1, Load(m + i)), Mul(vc1, gi));
      const V vi = Add(Mul(vb2, Load(v + i)), Mul(Mul(vc2, gi), gi));
      Store(m + i, mi);
      Store(v + i, vi);
      Store(w + i, Sub(Load(w + i), Div(Mul(vlr, mi), Add(Sqrt(vi), veps))));
    }
    for (; i < dim; ++i) {
      const float gi = decay ? g[i] + wd * w[i] : g[i];
      const float mi = b1 * m[i] + c1 * gi;
      const float vi = b2 * v[i] + c2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      w[i] -= lr_t * mi / (SqrtS(vi) + eps);
    }
  }
};

// Row ids at or above this are sentinels (EmbeddingTable::kDefaultRow, kPaddingRow).
constexpr uint32_t kFirstSentinel = 0xFFFFFFFEu;

struct ById {
  char* base;
  int64_t row_bytes;
  const uint32_t* rows;
  float* operator()(int64_t i) const {
    const uint32_t r = rows[i];
    return r >= kFirstSentinel
               ? nullptr
               : reinterpret_cast<float*>(base + static_cast<uint64_t>(r) * row_bytes);
  }
};

struct ByAddr {
  float* const* addrs;
  float* operator()(int64_t i) const { return addrs[i]; }
};

}  // namespace

extern "C" {

// *_rows: rows[i] < kFirstSentinel is at base + rows[i] * row_bytes; sentinels are skipped.
// *_addrs: addrs[i] is a row's address; nullptr is skipped. grads is [n, dim].
void RECSDK_TABLE_KERNEL(sgd_rows)(char* base, int64_t row_bytes, const uint32_t* rows, int64_t n,
                                   const float* grads, int64_t dim, float lr, float wd) {
  Walk(ById{base, row_bytes, rows}, n, grads, dim, row_bytes, Sgd{dim, lr, wd});
}
void RECSDK_TABLE_KERNEL(sgd_addrs)(float* const* addrs, int64_t row_bytes, int64_t n,
                                    const float* grads, int64_t dim, float lr, float wd) {
  Walk(ByAddr{addrs}, n, grads, dim, row_bytes, Sgd{dim, lr, wd});
}
void RECSDK_TABLE_KERNEL(adagrad_rows)(char* base, int64_t row_bytes, const uint32_t* rows,
                                       int64_t n, const float* grads, int64_t dim, float lr,
                                       float eps, float wd) {
  Walk(ById{base, row_bytes, rows}, n, grads, dim, row_bytes, Adagrad{dim, lr, eps, wd});
}
void RECSDK_TABLE_KERNEL(adagrad_addrs)(float* const* addrs, int64_t row_bytes, int64_t n,
                                        const float* grads, int64_t dim, float lr, float eps,
                                        float wd) {
  Walk(ByAddr{addrs}, n, grads, dim, row_bytes, Adagrad{dim, lr, eps, wd});
}
void RECSDK_TABLE_KERNEL(lazy_adam_rows)(char* base, int64_t row_bytes, const uint32_t* rows,
                                         int64_t n, const float* grads, int64_t dim, float b1,
                                         float b2, float eps, float lr_t, float wd) {
  Walk(ById{base, row_bytes, rows}, n, grads, dim, row_bytes, LazyAdam{dim, b1, b2, eps, lr_t, wd});
}
void RECSDK_TABLE_KERNEL(lazy_adam_addrs)(float* const* addrs, int64_t row_bytes, int64_t n,
                                          const float* grads, int64_t dim, float b1, float b2,
                                          float eps, float lr_t, float wd) {
  Walk(ByAddr{addrs}, n, grads, dim, row_bytes, LazyAdam{dim, b1, b2, eps, lr_t, wd});
}

}  // extern "C"

#undef RECSDK_TABLE_KERNEL
#undef RECSDK_TK_CAT3
#undef RECSDK_TK_CAT3_INNER
