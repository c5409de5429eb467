// interaction_isa.cc: DLRM dot interaction kernels for 16-d float vectors, compiled once per ISA
// (baseline, AVX2, AVX-512; cmake/RecsdkOptions.cmake keeps only the suffixed entry points
// global) and picked at run time in interaction_kernels.cc. These are the race model's shapes
// (27 vectors of 16 floats); other shapes use the templates in interaction_kernels.cc.
//
// Forward: per sample the F x F Gram matrix as F rows of F (padded to kPad) lanes, each row one
// broadcast-multiply-add per vector element against the transposed vectors, so there are no
// horizontal sums; only the lower triangle is stored (DLRM pair order (1,0), (2,0), (2,1), ...).
// Gradient: dx_i = sum_j S_ij x_j with S the symmetric matrix of the pair gradients (zero
// diagonal), a row of 16 lanes accumulated over j. Pure functions over a range of samples.
#include <cstdint>
#include <cstring>

#define RECSDK_CAT3_INNER(a, b, c) a##b##c
#define RECSDK_CAT3(a, b, c) RECSDK_CAT3_INNER(a, b, c)
#ifdef RECSDK_ISA_SUFFIX
#define RECSDK_INTERACTION(name) RECSDK_CAT3(recsdk_interaction_isa_, RECSDK_ISA_SUFFIX, _##name)
#else
#define RECSDK_INTERACTION(name) RECSDK_CAT3(recsdk_interaction_isa_, baseline, _##name)
#endif

namespace {

constexpr int kD = 16;

template <int kPad>
void Forward(const float* x, int64_t begin, int64_t end, int64_t f, float* out) {
  const int64_t pairs = f * (f - 1) / 2;
  alignas(64) float xt[kD][kPad];
  alignas(64) float row[kPad];
  std::memset(xt, 0, sizeof(xt));
  for (int64_t b = begin; b < end; ++b) {
    const float* xb = x + b * f * kD;
    for (int64_t j = 0; j < f; ++j) {
      for (int k = 0; k < kD; ++k) xt[k][j] = xb[j * kD + k];
    }
    float* ob = out + b * pairs;
    for (int64_t i = 1; i < f; ++i) {
      const float* xi = xb + i * kD;
      for (int j = 0; j < kPad; ++j) row[j] = 0;
      for (int k = 0; k < kD; ++k) {
        const float v = xi[k];
        for (int j = 0; j < kPad; ++j) row[j] += v * xt[k][j];
      }
      std::memcpy(ob, row, sizeof(float) * i);
      ob += i;
    }
  }
}

// Sixteen floats as one value: one zmm register under AVX-512, two ymm under AVX2, four xmm in
// the baseline build. Written explicitly because the compiler, left alone, vectorised the wrong
// loop of the gradient (across rows, with shuffles: 10% of the DLRM step).
typedef float V16 __attribute__((vector_size(64)));

template <int kPad>
void Grad(const float* x, const float* dy, int64_t begin, int64_t end, int64_t f, float* dx) {
  const int64_t pairs = f * (f - 1) / 2;
  alignas(64) float s[kPad][kPad];
  for (int64_t b = begin; b < end; ++b) {
    const float* xb = x + b * f * kD;
    const float* gy = dy + b * pairs;
    for (int64_t i = 0; i < f; ++i) {
      s[i][i] = 0;
      for (int64_t j = 0; j < i; ++j) s[i][j] = s[j][i] = gy[i * (i - 1) / 2 + j];
    }
    float* gb = dx + b * f * kD;
    for (int64_t i = 0; i < f; ++i) {
      V16 acc = {};
      for (int64_t j = 0; j < f; ++j) {
        V16 xj;  // loaded in place: a function returning V16 would change the baseline ABI
        std::memcpy(&xj, xb + j * kD, sizeof(xj));
        acc += s[i][j] * xj;
      }
      std::memcpy(gb + i * kD, &acc, sizeof(acc));
    }
  }
}

}  // namespace

extern "C" {

// forward_f32_d16 / grad_f32_d16: samples [begin, end) of x [batch, f, 16]; f <= 64. Return
// false (doing nothing) for a larger f.
bool RECSDK_INTERACTION(forward_f32_d16)(const float* x, int64_t begin, int64_t end, int64_t f,
                                         float* out) {
  if (f <= 32) {
    Forward<32>(x, begin, end, f, out);
  } else if (f <= 64) {
    Forward<64>(x, begin, end, f, out);
  } else {
    return false;
  }
  return true;
}

bool RECSDK_INTERACTION(grad_f32_d16)(const float* x, const float* dy, int64_t begin, int64_t end,
                                      int64_t f, float* dx) {
  if (f <= 32) {
    Grad<32>(x, dy, begin, end, f, dx);
  } else if (f <= 64) {
    Grad<64>(x, dy, begin, end, f, dx);
  } else {
    return false;
  }
  return true;
}

}  // extern "C"
