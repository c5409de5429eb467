// bf16_gemm.h: bfloat16 matrix products with float32 accumulation (the mixed-precision GEMM) and
// the float32 -> bfloat16 conversion that feeds them.
//
// Numerics, shared by every path so results are the same bits on every CPU: each output is a
// float32 sum over k taken in order, two terms at a time the way VDPBF16PS takes them (for the
// pair k = 2p, 2p+1: acc += a[2p+1]*b[2p+1], then acc += a[2p]*b[2p], each add rounded to nearest
// even). A product of two bfloat16 values is exact in float32, so only the adds round. Like the
// instruction, bfloat16 inputs below 2^-126 in magnitude count as zero (DAZ) and an accumulator
// that falls below it is flushed to a signed zero (FTZ).
//
// Paths: with AVX-512 BF16 (Zen 4, Cooper Lake, Sapphire Rapids and later) the kernel packs B into
// 16-column panels of k pairs and runs VDPBF16PS, 32 multiply-adds per instruction against
// float32 FMA's 16. Without it, Bf16Gemm runs Bf16GemmReference (same bits, several times slower
// than the float32 GEMM; HasBf16DotProducts() lets callers say so). Bf16GemmReference is the
// plain twin the tests compare the fast path with bit for bit.
//
// Threading: pure functions. Bf16Gemm splits the output into tiles over oneTBB (each output is
// computed by one task in the fixed order above, so results do not depend on the thread count);
// Bf16GemmReference and Bf16GemmSingleThread run on the calling thread.
#ifndef RECSDK_DEVICE_CPU_BF16_GEMM_H_
#define RECSDK_DEVICE_CPU_BF16_GEMM_H_

#include <cstdint>

namespace recsdk::internal {

// HasBf16DotProducts: whether this CPU has AVX-512 BF16 (and the AVX-512 F/BW/VL it needs), and
// RECSDK_ISA does not lower the ISA below avx512. Cached after the first call.
bool HasBf16DotProducts();

// Bf16Gemm: C[m,n] = op(A) op(B) in float32, where A and B hold bfloat16 bit patterns, row-major
// with row strides lda and ldb as stored (op = transpose when the flag is set) and C has row
// stride ldc. C is overwritten. m, n, k >= 0.
void Bf16Gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
              const uint16_t* b, int64_t ldb, bool trans_b, float* c, int64_t ldc);
// Bf16GemmSingleThread: the same on the calling thread (for callers that split work themselves,
// such as a batched product).
void Bf16GemmSingleThread(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          bool trans_a, const uint16_t* b, int64_t ldb, bool trans_b, float* c,
                          int64_t ldc);
// Bf16GemmReference: the scalar twin (see the file comment for the order it sums in).
void Bf16GemmReference(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                       bool trans_a, const uint16_t* b, int64_t ldb, bool trans_b, float* c,
                       int64_t ldc);

// ConvertF32ToBf16: y[i] = bfloat16(x[i]) rounded to nearest even, NaN kept a quiet NaN; the same
// bits as bfloat16::FromFloat, in a loop the compiler vectorises. Single-threaded.
void ConvertF32ToBf16(const float* x, uint16_t* y, int64_t n);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_BF16_GEMM_H_
