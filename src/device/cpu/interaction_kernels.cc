// interaction_kernels.cc: CPU kernels of DLRM's dot interaction and their reference twins.
//
// Per sample the F vectors (27 x 16 floats = 1.7 KB in the race model) stay in L1, so the work
// is F(F-1)/2 short dot products (forward) or as many scaled row additions (gradient); the batch
// is split over threads. The fused op replaces Concat + BatchMatMul (a full F x F Gram matrix,
// twice the needed dots) + Reshape + a constant-index Gather whose gradient was a serial loop.
// 16-d float vectors (the race model) go to the per-ISA kernels of interaction_isa.cc.
// Threading: pure functions; the kernels use the session's intra-op arena through ParallelFor.
#include "src/device/cpu/interaction_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "src/common/isa_dispatch.h"
#include "src/device/cpu/kernel_util.h"

// The 16-d float kernels of interaction_isa.cc, one per ISA variant.
#define RECSDK_DECLARE_INTERACTION(isa)                                                          \
  extern "C" {                                                                                   \
  bool recsdk_interaction_isa_##isa##_forward_f32_d16(const float*, int64_t, int64_t, int64_t,   \
                                                      float*);                                   \
  bool recsdk_interaction_isa_##isa##_grad_f32_d16(const float*, const float*, int64_t, int64_t, \
                                                   int64_t, float*);                             \
  }
RECSDK_ISA_DECLARE_VARIANTS(RECSDK_DECLARE_INTERACTION)
#define RECSDK_INTERACTION_TABLE(isa_enum, isa)               \
  InteractionD16 {                                            \
    isa_enum, recsdk_interaction_isa_##isa##_forward_f32_d16, \
        recsdk_interaction_isa_##isa##_grad_f32_d16           \
  }

namespace recsdk::internal {
namespace {

struct InteractionD16 {
  Isa isa;
  bool (*forward)(const float*, int64_t, int64_t, int64_t, float*);
  bool (*grad)(const float*, const float*, int64_t, int64_t, int64_t, float*);
};

const InteractionD16& D16Kernels() {
  static const IsaVariants<InteractionD16> variants(
      RECSDK_ISA_VARIANT_TABLES(RECSDK_INTERACTION_TABLE));
  static const InteractionD16& k = variants.For(BestIsa());
  return k;
}

}  // namespace

template <typename T>
void DotInteractionReference(const T* x, int64_t batch, int64_t f, int64_t d, T* out) {
  const int64_t pairs = f * (f - 1) / 2;
  for (int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * f * d;
    int64_t p = 0;
    for (int64_t i = 1; i < f; ++i) {
      for (int64_t j = 0; j < i; ++j, ++p) {
        T acc = 0;
        for (int64_t k = 0; k < d; ++k) acc += xb[i * d + k] * xb[j * d + k];
        out[b * pairs + p] = acc;
      }
    }
  }
}

template <typename T>
void DotInteractionGradReference(const T* x, const T* dy, int64_t batch, int64_t f, int64_t d,
                                 T* dx) {
  const int64_t pairs = f * (f - 1) / 2;
  std::fill(dx, dx + batch * f * d, T(0));
  for (int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * f * d;
    T* gb = dx + b * f * d;
    int64_t p = 0;
    for (int64_t i = 1; i < f; ++i) {
      for (int64_t j = 0; j < i; ++j, ++p) {
        const T g = dy[b * pairs + p];
        for (int64_t k = 0; k < d; ++k) {
          gb[i * d + k] += g * xb[j * d + k];
          gb[j * d + k] += g * xb[i * d + k];
        }
      }
    }
  }
}

namespace {

// kD > 0: the vector length fixed at compile time (the loops become a few SIMD instructions);
// kD == 0: `d` at run time.
template <typename T, int kD>
void ForwardRange(const T* x, int64_t begin, int64_t end, int64_t f, int64_t dd, T* out) {
  const int64_t d = kD > 0 ? kD : dd;
  const int64_t pairs = f * (f - 1) / 2;
  for (int64_t b = begin; b < end; ++b) {
    const T* xb = x + b * f * d;
    T* ob = out + b * pairs;
    for (int64_t i = 1; i < f; ++i) {
      const T* xi = xb + i * d;
      for (int64_t j = 0; j < i; ++j) {
        const T* xj = xb + j * d;
        T acc = 0;
        for (int64_t k = 0; k < d; ++k) acc += xi[k] * xj[k];
        *ob++ = acc;
      }
    }
  }
}

template <typename T, int kD>
void GradRange(const T* x, const T* dy, int64_t begin, int64_t end, int64_t f, int64_t dd, T* dx) {
  const int64_t d = kD > 0 ? kD : dd;
  const int64_t pairs = f * (f - 1) / 2;
  for (int64_t b = begin; b < end; ++b) {
    const T* xb = x + b * f * d;
    const T* gy = dy + b * pairs;
    T* gb = dx + b * f * d;
    // Row i's gradient gathers every pair it is in: (i, j) for j < i and (j, i) for j > i; the
    // pair (i, j) sits at i(i-1)/2 + j. Each row is written once, so no zero-fill pass.
    for (int64_t i = 0; i < f; ++i) {
      T acc[kD > 0 ? kD : 1];
      T* a = kD > 0 ? acc : gb + i * d;
      for (int64_t k = 0; k < d; ++k) a[k] = 0;
      const T* row_pairs = gy + i * (i - 1) / 2;
      for (int64_t j = 0; j < i; ++j) {
        const T g = row_pairs[j];
        const T* xj = xb + j * d;
        for (int64_t k = 0; k < d; ++k) a[k] += g * xj[k];
      }
      for (int64_t j = i + 1; j < f; ++j) {
        const T g = gy[j * (j - 1) / 2 + i];
        const T* xj = xb + j * d;
        for (int64_t k = 0; k < d; ++k) a[k] += g * xj[k];
      }
      if (kD > 0) std::memcpy(gb + i * d, acc, sizeof(T) * d);
    }
  }
}

// Samples per parallel chunk: enough work (~32k multiply-adds) to amortise a task.
int64_t Grain(int64_t f, int64_t d) { return GrainPerItem(f * f * d / 2); }

template <typename T>
Status ForwardKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t batch = x.dim(0), f = x.dim(1), d = x.dim(2);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output_uninitialized(0, Shape{batch, f * (f - 1) / 2}));
  DotInteractionFast<T>(x.data<T>(), batch, f, d, out->data<T>());
  return absl::OkStatus();
}

template <typename T>
Status GradKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  const int64_t batch = x.dim(0), f = x.dim(1), d = x.dim(2);
  if (dy.dim(0) != batch || dy.dim(1) != f * (f - 1) / 2) {
    return ctx.Error("gradient {} does not match features {}: it must be [{}, {}]",
                     dy.shape().ToString(), x.shape().ToString(), batch, f * (f - 1) / 2);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output_uninitialized(0, x.shape()));
  DotInteractionGradFast<T>(x.data<T>(), dy.data<T>(), batch, f, d, dx->data<T>());
  return absl::OkStatus();
}

}  // namespace

template <typename T>
void DotInteractionFast(const T* x, int64_t batch, int64_t f, int64_t d, T* out) {
  ParallelFor(batch, Grain(f, d), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      if (d == 16 && D16Kernels().forward(x, b, e, f, out)) return;
    }
    if (d == 16) {
      ForwardRange<T, 16>(x, b, e, f, d, out);
    } else {
      ForwardRange<T, 0>(x, b, e, f, d, out);
    }
  });
}

template <typename T>
void DotInteractionGradFast(const T* x, const T* dy, int64_t batch, int64_t f, int64_t d, T* dx) {
  ParallelFor(batch, Grain(f, d), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      if (d == 16 && D16Kernels().grad(x, dy, b, e, f, dx)) return;
    }
    if (d == 16) {
      GradRange<T, 16>(x, dy, b, e, f, d, dx);
    } else {
      GradRange<T, 0>(x, dy, b, e, f, d, dx);
    }
  });
}

template <typename T>
void BatchOuterProductReference(const T* a, const T* b, int64_t rows, int64_t h, int64_t f, T* z) {
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < f; ++j) z[(n * h + i) * f + j] = a[n * h + i] * b[n * f + j];
}

template <typename T>
void BatchOuterProductGradReference(const T* a, const T* b, const T* dz, int64_t rows, int64_t h,
                                    int64_t f, T* da, T* db) {
  std::fill(da, da + rows * h, T(0));
  std::fill(db, db + rows * f, T(0));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < f; ++j) {
        da[n * h + i] += dz[(n * h + i) * f + j] * b[n * f + j];
        db[n * f + j] += dz[(n * h + i) * f + j] * a[n * h + i];
      }
}

namespace {

// Rows per parallel chunk: ~16k products per task.
int64_t OuterGrain(int64_t h, int64_t f) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, h * f));
}

}  // namespace

template <typename T>
void BatchOuterProductFast(const T* a, const T* b, int64_t rows, int64_t h, int64_t f, T* z) {
  ParallelFor(rows, OuterGrain(h, f), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* bn = b + n * f;
      T* zn = z + n * h * f;
      for (int64_t i = 0; i < h; ++i) {
        const T ai = a[n * h + i];
        for (int64_t j = 0; j < f; ++j) zn[i * f + j] = ai * bn[j];
      }
    }
  });
}

template <typename T>
void BatchOuterProductGradFast(const T* a, const T* b, const T* dz, int64_t rows, int64_t h,
                               int64_t f, T* da, T* db) {
  ParallelFor(rows, OuterGrain(h, f), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* an = a + n * h;
      const T* bn = b + n * f;
      T* dbn = db + n * f;
      std::fill(dbn, dbn + f, T(0));
      for (int64_t i = 0; i < h; ++i) {
        const T* row = dz + (n * h + i) * f;
        T acc = 0;
        for (int64_t j = 0; j < f; ++j) {
          acc += row[j] * bn[j];
          dbn[j] += row[j] * an[i];
        }
        da[n * h + i] = acc;
      }
    }
  });
}

#define RECSDK_INSTANTIATE(T)                                                                      \
  template void BatchOuterProductReference<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);  \
  template void BatchOuterProductGradReference<T>(const T*, const T*, const T*, int64_t, int64_t,  \
                                                  int64_t, T*, T*);                                \
  template void BatchOuterProductFast<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);       \
  template void BatchOuterProductGradFast<T>(const T*, const T*, const T*, int64_t, int64_t,       \
                                             int64_t, T*, T*);                                     \
  template void DotInteractionReference<T>(const T*, int64_t, int64_t, int64_t, T*);               \
  template void DotInteractionGradReference<T>(const T*, const T*, int64_t, int64_t, int64_t, T*); \
  template void DotInteractionFast<T>(const T*, int64_t, int64_t, int64_t, T*);                    \
  template void DotInteractionGradFast<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);
RECSDK_INSTANTIATE(float)
RECSDK_INSTANTIATE(double)
#undef RECSDK_INSTANTIATE

namespace {

template <typename T>
Status OuterKernel(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dim(0) != b.dim(0)) {
    return ctx.Error("{} and {} must have the same number of rows", a.shape().ToString(),
                     b.shape().ToString());
  }
  const int64_t rows = a.dim(0), h = a.dim(1), f = b.dim(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * z, ctx.allocate_output_uninitialized(0, Shape{rows, h * f}));
  BatchOuterProductFast<T>(a.data<T>(), b.data<T>(), rows, h, f, z->data<T>());
  return absl::OkStatus();
}

template <typename T>
Status OuterGradKernel(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const Tensor& dz = ctx.input(2);
  const int64_t rows = a.dim(0), h = a.dim(1), f = b.dim(1);
  if (b.dim(0) != rows || dz.dim(0) != rows || dz.dim(1) != h * f) {
    return ctx.Error("gradient {} does not match {} and {}: it must be [{}, {}]",
                     dz.shape().ToString(), a.shape().ToString(), b.shape().ToString(), rows,
                     h * f);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * da, ctx.allocate_output_uninitialized(0, a.shape()));
  RECSDK_ASSIGN_OR_RETURN(Tensor * db, ctx.allocate_output_uninitialized(1, b.shape()));
  BatchOuterProductGradFast<T>(a.data<T>(), b.data<T>(), dz.data<T>(), rows, h, f, da->data<T>(),
                               db->data<T>());
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuInteractionKernels(KernelRegistry& r) {
  r.RegisterFn("BatchOuterProduct", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return OuterKernel<decltype(t)>(ctx); });
  });
  r.RegisterFn("BatchOuterProductGrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return OuterGradKernel<decltype(t)>(ctx); });
  });
  r.RegisterFn("DotInteraction", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return ForwardKernel<decltype(t)>(ctx); });
  });
  r.RegisterFn("DotInteractionGrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return GradKernel<decltype(t)>(ctx); });
  });
}

}  // namespace recsdk::internal

// The macros end here: in a unity build the next file of the batch may use the same names.
#undef RECSDK_DECLARE_INTERACTION
#undef RECSDK_INTERACTION_TABLE
