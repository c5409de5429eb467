// bf16_gemm.cc: the bfloat16 GEMM (AVX-512 BF16 and its reference twin) and the float32 ->
// bfloat16 conversion. See bf16_gemm.h for the numerics every path shares.
//
// CPU dispatch: the AVX-512 BF16 code is compiled with a function-level target attribute and
// runs only after HasBf16DotProducts() checked the CPU. The library's per-ISA object files
// (*_isa.cc) are built for AVX2 and AVX-512 F/BW/DQ/VL; adding BF16 to the avx512 variant would
// make every AVX-512 kernel require it, so these few functions carry their own target instead.
#include "src/device/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/common/cpu_features.h"
#include "src/device/cpu/kernel_util.h"

namespace recsdk::internal {
namespace {

// DAZ / FTZ as VDPBF16PS applies them: a value whose exponent field is zero becomes signed zero.
inline float FlushDenormal(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  return std::bit_cast<float>(u);
}
inline float Bf16ToF32Daz(uint16_t v) {
  return FlushDenormal(std::bit_cast<float>(static_cast<uint32_t>(v) << 16));
}

inline uint16_t At(const uint16_t* x, int64_t ld, bool trans, int64_t row, int64_t col) {
  return trans ? x[col * ld + row] : x[row * ld + col];
}

// Geometry of the fast kernel: a micro-tile is kRows rows by kPanels panels of 16 columns; the
// k dimension is taken in blocks of kKcPairs pairs (2 * 256 values) so one block of the packed
// B panels (256 pairs x 64 columns x 4 bytes = 64 KiB) stays in L2 while the rows stream by.
constexpr int kPanel = 16;
constexpr int kPanels = 4;
constexpr int kRows = 4;
constexpr int64_t kKcPairs = 256;
// A task computes a tile of this many rows and columns over the whole k.
constexpr int64_t kTileRows = 64;
constexpr int64_t kTileCols = kPanel * kPanels * 4;

#define RECSDK_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Micro: C[R, up to P*16] (+)= A[R, pairs] . Bpanels over `pairs` k pairs. `a` points at the
// first pair of the block in row 0 (rows lda apart, in uint16 units); `bp` at the block in panel 0
// (panels panel_stride apart). `first`: start from zero instead of C.
template <int R, int P>
RECSDK_BF16_TARGET void Micro(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* bp,
                              int64_t panel_stride, float* c, int64_t ldc, bool first,
                              int64_t cols) {
  __mmask16 mask[P];
  for (int j = 0; j < P; ++j) {
    const int64_t v = std::clamp<int64_t>(cols - j * kPanel, 0, kPanel);
    mask[j] = static_cast<__mmask16>((1u << v) - 1u);
  }
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < P; ++j) {
      acc[r][j] =
          first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[j], c + r * ldc + j * kPanel);
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i b[P];
    for (int j = 0; j < P; ++j) b[j] = _mm512_loadu_si512(bp + j * panel_stride + p * 2 * kPanel);
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof(pair));
      const __m512i av = _mm512_set1_epi32(static_cast<int>(pair));
      for (int j = 0; j < P; ++j) {
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], reinterpret_cast<__m512bh>(av),
                                     reinterpret_cast<__m512bh>(b[j]));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < P; ++j) _mm512_mask_storeu_ps(c + r * ldc + j * kPanel, mask[j], acc[r][j]);
  }
}

using MicroFn = void (*)(int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, float*,
                         int64_t, bool, int64_t);

template <int R>
constexpr MicroFn kMicroRow[kPanels] = {Micro<R, 1>, Micro<R, 2>, Micro<R, 3>, Micro<R, 4>};
constexpr const MicroFn* kMicro[kRows] = {kMicroRow<1>, kMicroRow<2>, kMicroRow<3>, kMicroRow<4>};

// Packed operands of one product: A as rows of k pairs (possibly A itself), B as 16-column panels
// of k pairs: element (pair p, column j, e) of panel q is B[2p + e, 16q + j], zero outside B.
// The buffers live in the thread's Scratch, kept across products: a fresh vector per product cost
// a zero-fill and, past glibc's mmap threshold (a transposed 4096 x 512 A is 4 MiB), fresh pages
// on every call. A product started on a thread whose scratch is in use (TBB may run another op's
// task on a thread that waits inside ParallelFor) packs into buffers of its own.
struct Scratch {
  std::vector<uint16_t> a, b;
  bool busy = false;
};

struct Packed {
  int64_t pairs = 0;
  int64_t panels = 0;
  Scratch* scratch = nullptr;
  uint16_t* b = nullptr;
  const uint16_t* a = nullptr;
  int64_t lda = 0;
};

// Grow: v holds at least n values (new ones are written before they are read).
uint16_t* Grow(std::vector<uint16_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void PackB(int64_t k, int64_t n, const uint16_t* b, int64_t ldb, bool tb, Packed* pk,
           bool parallel) {
  pk->b = Grow(pk->scratch->b, static_cast<size_t>(pk->panels * pk->pairs * 2 * kPanel));
  auto pack = [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      uint16_t* out = pk->b + q * pk->pairs * 2 * kPanel;
      const int64_t cols = std::min<int64_t>(kPanel, n - q * kPanel);
      for (int64_t p = 0; p < pk->pairs; ++p) {
        for (int e = 0; e < 2; ++e) {
          const int64_t kk = 2 * p + e;
          uint16_t* o = out + p * 2 * kPanel + e;
          // Zero outside B: the pad of an odd k and the columns past n of the last panel.
          const int64_t have = kk < k ? cols : 0;
          for (int64_t j = 0; j < have; ++j) o[2 * j] = At(b, ldb, tb, kk, q * kPanel + j);
          for (int64_t j = have; j < kPanel; ++j) o[2 * j] = 0;
        }
      }
    }
  };
  if (parallel) {
    ParallelFor(pk->panels, 4, pack);
  } else {
    pack(0, pk->panels);
  }
}

// TransposePairs16: out rows i0 .. i0 + 15 (as 32-bit pairs, `pairs` apart) get pairs p0 .. p0 + 15
// of a transposed A: pair (i, p) = (A^T[i, 2p], A^T[i, 2p + 1]) = (a[2p][i], a[2p + 1][i]). Two
// source rows make one 16 x 16 matrix row of pairs, and the matrix is transposed in registers
// (unpacks of 32- and 64-bit elements, then 128-bit lane shuffles), so every load and store is a
// whole line.
// GCC 12's AVX-512 headers start several intrinsics from _mm512_undefined_epi32(), a
// self-initialised variable, which -Wuninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
RECSDK_BF16_TARGET void TransposePairs16(const uint16_t* a, int64_t lda, int64_t i0, int64_t p0,
                                         uint16_t* out, int64_t pairs) {
  __m512i r[16], t[16];
  for (int q = 0; q < 16; ++q) {
    const uint16_t* lo = a + (2 * (p0 + q)) * lda + i0;
    const __m512i even =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)));
    const __m512i odd =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + lda)));
    r[q] = _mm512_or_si512(even, _mm512_slli_epi32(odd, 16));  // lane i: pair (i0 + i, p0 + q)
  }
  for (int q = 0; q < 8; ++q) {
    t[2 * q] = _mm512_unpacklo_epi32(r[2 * q], r[2 * q + 1]);
    t[2 * q + 1] = _mm512_unpackhi_epi32(r[2 * q], r[2 * q + 1]);
  }
  // Now r[4g + j], 128-bit lane l, holds column 4l + j of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  for (int j = 0; j < 4; ++j) {
    const __m512i a01 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44);
    const __m512i a23 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xEE);
    const __m512i b01 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44);
    const __m512i b23 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xEE);
    const __m512i col[4] = {
        _mm512_shuffle_i32x4(a01, b01, 0x88), _mm512_shuffle_i32x4(a01, b01, 0xDD),
        _mm512_shuffle_i32x4(a23, b23, 0x88), _mm512_shuffle_i32x4(a23, b23, 0xDD)};
    for (int l = 0; l < 4; ++l) {
      _mm512_storeu_si512(o + (i0 + 4 * l + j) * pairs + p0, col[l]);
    }
  }
}
#pragma GCC diagnostic pop

// PackA: A is used in place when its rows already are runs of k pairs (not transposed, k and lda
// even); otherwise copied into rows of 2 * pairs values with a zero pad. A transposed A (the
// weight gradient's X^T, read down its columns) is transposed 16 x 16 pairs at a time in
// registers; a column-by-column copy, reading a new line for every element, was 13% of a
// bfloat16 DLRM step. Edges that do not fill a block are copied element by element.
void PackA(int64_t m, int64_t k, const uint16_t* a, int64_t lda, bool ta, Packed* pk,
           bool parallel) {
  if (!ta && k % 2 == 0 && lda % 2 == 0) {
    pk->a = a;
    pk->lda = lda;
    return;
  }
  const int64_t pairs = pk->pairs, width = 2 * pairs;
  uint16_t* out = Grow(pk->scratch->a, static_cast<size_t>(m * width));
  constexpr int64_t kBlock = 16;
  const int64_t full_pairs = k / 2 / kBlock * kBlock;  // pairs covered by whole blocks
  auto pack = [&](int64_t b0, int64_t b1) {
    for (int64_t i0 = b0 * kBlock; i0 < std::min(m, b1 * kBlock); i0 += kBlock) {
      const int64_t i1 = std::min(m, i0 + kBlock);
      for (int64_t i = i0; i < i1; ++i) {
        if (width > k) out[i * width + k] = 0;  // the pad of an odd k
      }
      if (!ta) {
        for (int64_t i = i0; i < i1; ++i) std::copy_n(a + i * lda, k, out + i * width);
        continue;
      }
      int64_t done = 0;  // values of k copied for every row of the block
      if (i1 - i0 == kBlock) {
        for (int64_t p0 = 0; p0 < full_pairs; p0 += kBlock) {
          TransposePairs16(a, lda, i0, p0, out, pairs);
        }
        done = 2 * full_pairs;
      }
      for (int64_t kk = done; kk < k; ++kk) {
        const uint16_t* src = a + kk * lda;
        for (int64_t i = i0; i < i1; ++i) out[i * width + kk] = src[i];
      }
    }
  };
  const int64_t blocks = (m + kBlock - 1) / kBlock;
  if (parallel) {
    ParallelFor(blocks, 2, pack);
  } else {
    pack(0, blocks);
  }
  pk->a = out;
  pk->lda = width;
}

// Tile: rows [r0, r1) and columns [c0, c1) of C (c0 a multiple of 16) over the whole k.
void Tile(const Packed& pk, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* c,
          int64_t ldc) {
  const int64_t panel_stride = pk.pairs * 2 * kPanel;
  for (int64_t p0 = 0; p0 < pk.pairs; p0 += kKcPairs) {
    const int64_t pairs = std::min(kKcPairs, pk.pairs - p0);
    for (int64_t col = c0; col < c1; col += kPanel * kPanels) {
      const int64_t cols = std::min<int64_t>({kPanel * kPanels, c1 - col, n - col});
      const int panels = static_cast<int>((cols + kPanel - 1) / kPanel);
      const uint16_t* bp = pk.b + (col / kPanel) * panel_stride + p0 * 2 * kPanel;
      for (int64_t r = r0; r < r1; r += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
        kMicro[rows - 1][panels - 1](pairs, pk.a + r * pk.lda + 2 * p0, pk.lda, bp, panel_stride,
                                     c + r * ldc + col, ldc, p0 == 0, cols);
      }
    }
  }
}

void FastGemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool ta,
              const uint16_t* b, int64_t ldb, bool tb, float* c, int64_t ldc, bool parallel) {
  thread_local Scratch mine;
  Scratch own;  // when this thread's scratch is in use by a product further up its stack
  Scratch* scratch = mine.busy ? &own : &mine;
  scratch->busy = true;
  struct Release {
    Scratch* s;
    ~Release() { s->busy = false; }
  } release{scratch};
  Packed pk;
  pk.scratch = scratch;
  pk.pairs = (k + 1) / 2;
  pk.panels = (n + kPanel - 1) / kPanel;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  parallel = parallel && flops >= 2e6;
  PackB(k, n, b, ldb, tb, &pk, parallel);
  PackA(m, k, a, lda, ta, &pk, parallel);
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  const int64_t col_tiles = (n + kTileCols - 1) / kTileCols;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t rt = t / col_tiles, ct = t % col_tiles;
      Tile(pk, n, rt * kTileRows, std::min(m, (rt + 1) * kTileRows), ct * kTileCols,
           std::min(n, (ct + 1) * kTileCols), c, ldc);
    }
  };
  if (parallel) {
    ParallelFor(row_tiles * col_tiles, 1, run);
  } else {
    run(0, row_tiles * col_tiles);
  }
}

bool DetectBf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    return false;
  }
  // RECSDK_ISA=baseline|avx2 lowers BestIsa() below avx512; the bf16 path follows it.
  return BestIsa() == Isa::kAvx512;
#else
  return false;
#endif
}

void ZeroC(int64_t m, int64_t n, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
}

}  // namespace

bool HasBf16DotProducts() {
  static const bool has = DetectBf16();
  return has;
}

void Bf16GemmReference(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                       bool trans_a, const uint16_t* b, int64_t ldb, bool trans_b, float* c,
                       int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; 2 * p < k; ++p) {
        const int64_t lo = 2 * p, hi = 2 * p + 1;
        // A missing odd term (k odd) is a zero product, as the zero-padded pair gives it.
        const float hi_term = hi < k ? Bf16ToF32Daz(At(a, lda, trans_a, i, hi)) *
                                           Bf16ToF32Daz(At(b, ldb, trans_b, hi, j))
                                     : 0.0f;
        acc = FlushDenormal(acc + hi_term);
        acc = FlushDenormal(acc + Bf16ToF32Daz(At(a, lda, trans_a, i, lo)) *
                                      Bf16ToF32Daz(At(b, ldb, trans_b, lo, j)));
      }
      c[i * ldc + j] = acc;
    }
  }
}

void Bf16GemmSingleThread(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          bool trans_a, const uint16_t* b, int64_t ldb, bool trans_b, float* c,
                          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ZeroC(m, n, c, ldc);
  if (HasBf16DotProducts()) {
    FastGemm(m, n, k, a, lda, trans_a, b, ldb, trans_b, c, ldc, /*parallel=*/false);
  } else {
    Bf16GemmReference(m, n, k, a, lda, trans_a, b, ldb, trans_b, c, ldc);
  }
}

void Bf16Gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
              const uint16_t* b, int64_t ldb, bool trans_b, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ZeroC(m, n, c, ldc);
  if (HasBf16DotProducts()) {
    FastGemm(m, n, k, a, lda, trans_a, b, ldb, trans_b, c, ldc, /*parallel=*/true);
    return;
  }
  // The reference path, split by rows (each output still sums in the one order).
  ParallelFor(m, GrainPerItem(n * k, 65536), [&](int64_t r0, int64_t r1) {
    const uint16_t* ab = trans_a ? a + r0 : a + r0 * lda;
    Bf16GemmReference(r1 - r0, n, k, ab, lda, trans_a, b, ldb, trans_b, c + r0 * ldc, ldc);
  });
}

namespace {

// ConvertAvx512: ConvertF32ToBf16's rounding on 16 lanes, for n a multiple of 16 (the library's
// baseline build only vectorises the scalar loop for SSE2, which has no 32 -> 16-bit narrowing: it
// was 7% of a bfloat16 DLRM step).
__attribute__((target("avx512f,avx512bw"))) void ConvertAvx512(const float* x, uint16_t* y,
                                                               int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet_bit = _mm512_set1_epi32(0x40);
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    const __m512i f = _mm512_loadu_si512(x + i);
    const __m512i hi = _mm512_srli_epi32(f, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(f, bias), _mm512_and_si512(hi, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(f, abs_mask), inf);
    const __m512i v = _mm512_mask_or_epi32(rounded, nan, hi, quiet_bit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(v));
  }
}

}  // namespace

void ConvertF32ToBf16(const float* x, uint16_t* y, int64_t n) {
  static const bool avx512 = BestIsa() == Isa::kAvx512;
  if (avx512) {
    const int64_t whole = n / 16 * 16;
    ConvertAvx512(x, y, whole);
    x += whole;
    y += whole;
    n -= whole;
  }
  // bfloat16::FromFloat's rounding, written branch-free so the loop vectorises.
  for (int64_t i = 0; i < n; ++i) {
    uint32_t f;
    std::memcpy(&f, x + i, sizeof(f));
    const bool nan = (f & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
    const uint32_t quiet = (f >> 16) | 0x40u;
    y[i] = static_cast<uint16_t>(nan ? quiet : rounded);
  }
}

}  // namespace recsdk::internal
