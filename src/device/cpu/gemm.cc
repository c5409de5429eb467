// gemm.cc: see gemm.h. oneDNN is reached through dlopen: its sgemm runs on OpenMP, so each
// calling thread first limits its own OpenMP team to one thread (the split across threads is
// ours, on oneTBB), which keeps OpenMP from starting threads that would compete with oneTBB's.
#include "src/device/cpu/gemm.h"

#include <dlfcn.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "src/common/parallel_for.h"
#include "src/device/cpu/fast_kernels.h"

namespace recsdk::internal {
namespace {

// dnnl_sgemm (oneDNN 2.x, row-major): C = alpha op(A) op(B) + beta C; returns dnnl_status_t.
using DnnlSgemmFn = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                            float* c, int64_t ldc);
using OmpSetNumThreadsFn = void (*)(int);

struct OneDnn {
  DnnlSgemmFn sgemm = nullptr;
  OmpSetNumThreadsFn omp_set_num_threads = nullptr;
};

const OneDnn& LoadOneDnn() {
  static const OneDnn lib = [] {
    OneDnn l;
    const char* force = std::getenv("RECSDK_GEMM");
    if (force != nullptr && std::strcmp(force, "eigen") == 0) return l;
    void* dnnl = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (dnnl == nullptr) return l;
    auto sgemm = reinterpret_cast<DnnlSgemmFn>(dlsym(dnnl, "dnnl_sgemm"));
    // The OpenMP runtime libdnnl was linked against is loaded with it.
    void* omp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto set_threads =
        omp == nullptr ? nullptr
                       : reinterpret_cast<OmpSetNumThreadsFn>(dlsym(omp, "omp_set_num_threads"));
    if (sgemm == nullptr || set_threads == nullptr) return l;  // cannot keep it single-threaded
    l.sgemm = sgemm;
    l.omp_set_num_threads = set_threads;
    return l;
  }();
  return lib;
}

bool OneDnnSgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool ta,
                 const float* b, int64_t ldb, bool tb, float* c, int64_t ldc) {
  const OneDnn& lib = LoadOneDnn();
  if (lib.sgemm == nullptr) return false;
  thread_local bool single = false;
  if (!single) {
    lib.omp_set_num_threads(1);
    single = true;
  }
  return lib.sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc) ==
         0;
}

// TransposeInto: dst[k, n] = src[n, k]^T (row-major), in 4 x 4 SSE blocks (x86-64 baseline) along
// strips of 4 rows of src, the edges element by element.
void TransposeInto(const float* src, int64_t n, int64_t k, float* dst) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* s0 = src + j * k;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      __m128 r0 = _mm_loadu_ps(s0 + p), r1 = _mm_loadu_ps(s0 + k + p);
      __m128 r2 = _mm_loadu_ps(s0 + 2 * k + p), r3 = _mm_loadu_ps(s0 + 3 * k + p);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(dst + p * n + j, r0);
      _mm_storeu_ps(dst + (p + 1) * n + j, r1);
      _mm_storeu_ps(dst + (p + 2) * n + j, r2);
      _mm_storeu_ps(dst + (p + 3) * n + j, r3);
    }
    for (; p < k; ++p) {
      for (int64_t i = 0; i < 4; ++i) dst[p * n + j + i] = s0[i * k + p];
    }
  }
  for (; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) dst[p * n + j] = src[j * k + p];
  }
}

}  // namespace

const char* GemmBackendName(GemmBackend backend) {
  return backend == GemmBackend::kOneDnn ? "onednn" : "eigen";
}

bool OneDnnAvailable() { return LoadOneDnn().sgemm != nullptr; }

GemmBackend BestGemmBackend() {
  static const GemmBackend best = OneDnnAvailable() ? GemmBackend::kOneDnn : GemmBackend::kEigen;
  return best;
}

void SingleSgemm(GemmBackend backend, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 bool trans_a, const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc) {
  if (backend == GemmBackend::kOneDnn &&
      OneDnnSgemm(m, n, k, a, lda, trans_a, b, ldb, trans_b, c, ldc)) {
    return;
  }
  Fast().sgemm(m, n, k, a, lda, trans_a, b, ldb, trans_b, c, ldc);
}

GemmPlan DefaultGemmPlan(int64_t m, int64_t n, int64_t k) {
  // At most four blocks, each at least 64 rows: each operand is packed at most four times per
  // multiply. Four blocks keep two threads balanced on the DLRM shapes, including the weight
  // gradients' short C (367 rows). Never three: on two threads one would run two of them while
  // the other waits (the DCNv2 weight gradients' C of 221 rows gave 160 rows against 61); two
  // blocks of 112 and 109 rows split it evenly.
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  constexpr int64_t kMaxParts = 4;
  const int64_t parts = flops < 2e6 ? 1 : std::clamp<int64_t>(m / 64, 1, kMaxParts);
  return {BestGemmBackend(), static_cast<int>(parts == 3 ? 2 : parts)};
}

void ParallelSgemm(GemmBackend backend, int64_t m, int64_t n, int64_t k, const float* a,
                   bool trans_a, const float* b, bool trans_b, float* c,
                   const GemmEpilogue& epilogue) {
  GemmPlan plan = DefaultGemmPlan(m, n, k);
  plan.backend = backend;
  ParallelSgemm(plan, m, n, k, a, trans_a, b, trans_b, c, epilogue);
}

void ParallelSgemm(const GemmPlan& plan, int64_t m, int64_t n, int64_t k, const float* a,
                   bool trans_a, const float* b, bool trans_b, float* c,
                   const GemmEpilogue& epilogue) {
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  // Row blocks of C, each a multiple of 16 rows (the kernels' vector tiles stay full). The split
  // depends on the plan and shape only, never on the thread count, so results are bitwise the
  // same at any number of threads (parallel_for.h's determinism rule); one block per chunk.
  const int64_t parts = std::max(plan.parts, 1);
  if (parts <= 1) {
    SingleSgemm(plan.backend, m, n, k, a, lda, trans_a, b, ldb, trans_b, c, n);
    if (epilogue) epilogue(0, m);
    return;
  }
  const int64_t extent = plan.split_columns ? n : m;
  const int64_t block = ((extent + parts - 1) / parts + 15) & ~int64_t{15};
  // op(B) = B^T split by rows of C: oneDNN packs B^T again for every block, and its transposed
  // packing is the slow one (4 blocks of [512, 221] x [221, 256]^T: 0.465 ms against 0.368 ms for
  // the same product untransposed). Transposing B once into a buffer and running the blocks
  // untransposed saves most of it. The buffer is this thread's, taken out of its slot for the
  // call (the arena may run another product on this thread while this one waits: that one finds
  // the slot empty and allocates its own) and put back after, so steady steps reuse warm pages.
  thread_local std::vector<float> spare;
  std::vector<float> b_transposed;
  if (trans_b && !plan.split_columns && plan.backend == GemmBackend::kOneDnn &&
      (m + block - 1) / block > 1) {
    b_transposed = std::move(spare);
    spare.clear();
    b_transposed.resize(static_cast<size_t>(k * n));
    TransposeInto(b, n, k, b_transposed.data());
    b = b_transposed.data();
    trans_b = false;
  }
  const int64_t ldb_used = trans_b ? k : n;
  auto product = [&](int64_t p) {
    const int64_t s = std::min(extent, p * block), e = std::min(extent, s + block);
    if (s >= e) return;
    if (plan.split_columns) {
      // C[:, s:e] = op(A) op(B)[:, s:e]: B's columns s.. start at b + s (or row s of B^T).
      const float* bb = trans_b ? b + s * ldb : b + s;
      SingleSgemm(plan.backend, m, e - s, k, a, lda, trans_a, bb, ldb, trans_b, c + s, n);
      return;
    }
    const float* ab = trans_a ? a + s : a + s * lda;
    SingleSgemm(plan.backend, e - s, n, k, ab, lda, trans_a, b, ldb_used, trans_b, c + s * n, n);
    if (epilogue) epilogue(s, e);
  };
  ParallelFor(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) product(p);
  });
  if (plan.split_columns && epilogue) epilogue(0, m);
  if (b_transposed.capacity() > spare.capacity()) spare = std::move(b_transposed);
}

void SgemmReference(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a,
                    const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += static_cast<double>(av) * bv;
      }
      c[i * ldc + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace recsdk::internal
