// gemm.h: the float32 matrix multiply behind MatMul, BatchMatMul and the fused dense ops.
//
// ParallelSgemm picks the fastest backend measured on the DLRM shapes (benchmarks/gemm_bench.cc,
// BM_DlrmGemm): oneDNN's JIT sgemm when Debian's libdnnl2 is present at run time (loaded with
// dlopen, so it is neither a build nor a link dependency), else the ISA-dispatched Eigen kernel
// of fast_kernels.h. Either way the work is split into at most four row blocks of C (chosen by the
// shape alone, so the bits do not depend on the thread count), so each operand is packed at most
// four times per multiply rather than once per 256-row block as before. RECSDK_GEMM=eigen in the
// environment forces the Eigen backend (for A/B runs). SgemmReference is the plain oracle the tests
// compare against.
//
// Thread-safe; ParallelSgemm uses the calling task arena's threads.
#ifndef RECSDK_DEVICE_CPU_GEMM_H_
#define RECSDK_DEVICE_CPU_GEMM_H_

#include <cstdint>
#include <functional>

namespace recsdk::internal {

enum class GemmBackend { kEigen, kOneDnn };

// GemmBackendName: "eigen" or "onednn".
const char* GemmBackendName(GemmBackend backend);
// BestGemmBackend: the backend ParallelSgemm uses in this process.
GemmBackend BestGemmBackend();
// OneDnnAvailable: whether libdnnl could be loaded (and RECSDK_GEMM does not say eigen).
bool OneDnnAvailable();

// SingleSgemm: row-major C[m,n] = op(A) op(B) on the calling thread; lda/ldb/ldc are row
// strides as stored. kOneDnn falls back to Eigen when oneDNN is unavailable.
void SingleSgemm(GemmBackend backend, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 bool trans_a, const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc);

// ParallelSgemm: row-major C[m,n] = op(A) op(B) for contiguous operands (lda = columns of A as
// stored), split into row blocks run on the arena's threads.
// `epilogue`, when set, runs on rows [r0, r1) of C right after that row block's product, on the
// same thread, while the block is still in cache (fused bias and activation).
using GemmEpilogue = std::function<void(int64_t r0, int64_t r1)>;
void ParallelSgemm(GemmBackend backend, int64_t m, int64_t n, int64_t k, const float* a,
                   bool trans_a, const float* b, bool trans_b, float* c,
                   const GemmEpilogue& epilogue = nullptr);
inline void ParallelSgemm(int64_t m, int64_t n, int64_t k, const float* a, bool trans_a,
                          const float* b, bool trans_b, float* c,
                          const GemmEpilogue& epilogue = nullptr) {
  ParallelSgemm(BestGemmBackend(), m, n, k, a, trans_a, b, trans_b, c, epilogue);
}

// GemmPlan: how ParallelSgemm runs one product: the backend and the number of blocks of C, by
// rows or (split_columns) by columns, each block one task (1 = the calling thread alone).
// auto_tune_mode's GemmTuner (gemm_tuner.h) measures plans per shape; DefaultGemmPlan is the
// choice without tuning.
struct GemmPlan {
  GemmBackend backend = GemmBackend::kEigen;
  int parts = 1;
  bool split_columns = false;
  bool operator==(const GemmPlan&) const = default;
};
// DefaultGemmPlan: BestGemmBackend() and 1, 2 or 4 blocks of at least 64 rows (a multiple of 16),
// one block below 2 MFLOP. Depends on the shape only, never on the thread count.
GemmPlan DefaultGemmPlan(int64_t m, int64_t n, int64_t k);
// ParallelSgemm with an explicit plan. Blocks are multiples of 16 rows or columns, so fewer than
// `parts` run when C is small. With split_columns the epilogue runs once, on all rows, after
// every block.
void ParallelSgemm(const GemmPlan& plan, int64_t m, int64_t n, int64_t k, const float* a,
                   bool trans_a, const float* b, bool trans_b, float* c,
                   const GemmEpilogue& epilogue = nullptr);

// SgemmReference: the oracle, a plain triple loop accumulating in double.
void SgemmReference(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a,
                    const float* b, int64_t ldb, bool trans_b, float* c, int64_t ldc);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_GEMM_H_
