// simd_f32.h: the float vector of the instruction set a *_isa.cc file is compiled for, for the
// ISA variants of update loops (table_kernels_isa.cc, dense_update_isa.cc). recsdk_isa_variants
// compiles such a file plainly (baseline SSE2: 4 floats a vector) and with the AVX2 (8) and
// AVX-512 (16) flags, so __AVX512F__ / __AVX2__ pick the width here. Only correctly rounded
// operations (no fused multiply-add), so every width rounds like a scalar loop.
//
// Include only from *_isa.cc files: everything is in an unnamed namespace, because the same
// names mean a different width in each variant (the variants' symbols are localised, and each
// *_isa.cc compiles alone, never in a unity batch: its per-source options keep it out).
#ifndef RECSDK_COMMON_SIMD_F32_H_
#define RECSDK_COMMON_SIMD_F32_H_

#include <immintrin.h>

namespace recsdk::internal::simd {
namespace {

#if defined(__AVX512F__)
using V = __m512;
constexpr int kW = 16;
inline V Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V Set1(float x) { return _mm512_set1_ps(x); }
inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V Div(V a, V b) { return _mm512_div_ps(a, b); }
inline V Sqrt(V a) { return _mm512_sqrt_ps(a); }
#elif defined(__AVX2__)
using V = __m256;
constexpr int kW = 8;
inline V Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V Set1(float x) { return _mm256_set1_ps(x); }
inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V Div(V a, V b) { return _mm256_div_ps(a, b); }
inline V Sqrt(V a) { return _mm256_sqrt_ps(a); }
#else
using V = __m128;
constexpr int kW = 4;
inline V Load(const float* p) { return _mm_loadu_ps(p); }
inline void Store(float* p, V v) { _mm_storeu_ps(p, v); }
inline V Set1(float x) { return _mm_set1_ps(x); }
inline V Add(V a, V b) { return _mm_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm_sub_ps(a, b); }
inline V Mul(V a, V b) { return _mm_mul_ps(a, b); }
inline V Div(V a, V b) { return _mm_div_ps(a, b); }
inline V Sqrt(V a) { return _mm_sqrt_ps(a); }
#endif

// Scalar sqrt for tails: the SSE instruction, no errno path (arguments are never negative).
inline float SqrtS(float x) { return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x))); }

}  // namespace
}  // namespace recsdk::internal::simd

#endif  // RECSDK_COMMON_SIMD_F32_H_
