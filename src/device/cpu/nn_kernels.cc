// nn_kernels.cc: softmax, dropout and the losses.
#include <cmath>

#include "src/common/random.h"
#include "src/device/cpu/interaction_kernels.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

// Views a tensor as [outer, axis, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisView ViewAround(const Shape& s, int64_t axis_attr) {
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + s.rank() : axis_attr);
  AxisView v;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < axis) v.outer *= s.dim(i);
    if (i == axis) v.n = s.dim(i);
    if (i > axis) v.inner *= s.dim(i);
  }
  return v;
}

template <typename T>
Status SoftmaxTyped(OpKernelContext& ctx, bool log) {
  const Tensor& x = ctx.input(0);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  const AxisView v = ViewAround(x.shape(), NodeAttrs(ctx.node()).Int("axis"));
  const T* in = x.data<T>();
  T* o = out->data<T>();
  ParallelFor(v.outer * v.inner, GrainPerItem(v.n, 4096), [&](int64_t s, int64_t e) {
    for (int64_t r = s; r < e; ++r) {
      const int64_t base = (r / v.inner) * v.n * v.inner + r % v.inner;
      T m = std::numeric_limits<T>::lowest();
      for (int64_t j = 0; j < v.n; ++j) m = std::max(m, in[base + j * v.inner]);
      T sum = 0;
      for (int64_t j = 0; j < v.n; ++j) sum += std::exp(in[base + j * v.inner] - m);
      const T lse = m + std::log(sum);
      for (int64_t j = 0; j < v.n; ++j) {
        const T lv = in[base + j * v.inner] - lse;
        o[base + j * v.inner] = log ? lv : std::exp(lv);
      }
    }
  });
  return absl::OkStatus();
}

// SoftmaxGrad: dx = y * (dy - sum(dy * y)); LogSoftmaxGrad: dx = dy - exp(y) * sum(dy).
template <typename T>
Status SoftmaxGradTyped(OpKernelContext& ctx, bool log) {
  const Tensor& y = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, y.shape()));
  const AxisView v = ViewAround(y.shape(), NodeAttrs(ctx.node()).Int("axis"));
  const T* yp = y.data<T>();
  const T* g = dy.data<T>();
  T* o = out->data<T>();
  for (int64_t r = 0; r < v.outer * v.inner; ++r) {
    const int64_t base = (r / v.inner) * v.n * v.inner + r % v.inner;
    T acc = 0;
    for (int64_t j = 0; j < v.n; ++j) {
      const int64_t i = base + j * v.inner;
      acc += log ? g[i] : g[i] * yp[i];
    }
    for (int64_t j = 0; j < v.n; ++j) {
      const int64_t i = base + j * v.inner;
      o[i] = log ? g[i] - std::exp(yp[i]) * acc : yp[i] * (g[i] - acc);
    }
  }
  return absl::OkStatus();
}

template <typename T>
Status DropoutTyped(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double rate = ctx.node().FloatAttr("rate");
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  RECSDK_ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output_uninitialized(1, x.shape()));
  const uint64_t seed = DeriveSeed(ctx.graph_seed(), ctx.node().IntAttr("seed"), ctx.node().name());
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* in = x.data<T>();
  T* o = out->data<T>();
  T* mk = mask->data<T>();
  const int64_t n = x.num_elements();
  // Element i uses word i%4 of Philox block i/4 under (seed, step): independent of threading.
  ParallelFor((n + 3) / 4, kElementwiseGrain / 4, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      const auto words =
          Philox4x32(seed, static_cast<uint64_t>(blk), static_cast<uint64_t>(ctx.step_id()));
      for (int j = 0; j < 4; ++j) {
        const int64_t i = blk * 4 + j;
        if (i >= n) break;
        const bool keep = UniformFloat(words[j]) >= rate;
        mk[i] = keep ? scale : T(0);
        o[i] = in[i] * mk[i];
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
Status SigmoidCeTyped(OpKernelContext& ctx) {
  const Tensor& z = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (z.shape() != x.shape()) {
    return ctx.Error("labels {} and logits {} differ in shape", z.shape().ToString(),
                     x.shape().ToString());
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  const T* zp = z.data<T>();
  const T* xp = x.data<T>();
  T* o = out->data<T>();
  ParallelFor(x.num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const T v = xp[i];
      o[i] = std::max(v, T(0)) - v * zp[i] + std::log1p(std::exp(-std::abs(v)));
    }
  });
  return absl::OkStatus();
}

template <typename T>
Status SoftmaxCeTyped(OpKernelContext& ctx) {
  const Tensor& labels = ctx.input(0);
  const Tensor& logits = ctx.input(1);
  if (labels.shape() != logits.shape()) {
    return ctx.Error("labels {} and logits {} differ in shape", labels.shape().ToString(),
                     logits.shape().ToString());
  }
  Shape loss_shape = logits.shape();
  loss_shape.RemoveDim(loss_shape.rank() - 1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output_uninitialized(0, loss_shape));
  RECSDK_ASSIGN_OR_RETURN(Tensor * back, ctx.allocate_output_uninitialized(1, logits.shape()));
  const int64_t n = logits.dim(logits.rank() - 1);
  const int64_t rows = n == 0 ? 0 : logits.num_elements() / n;
  const T* lp = labels.data<T>();
  const T* xp = logits.data<T>();
  T* l = loss->data<T>();
  T* bp = back->data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = xp + r * n;
    const T* z = lp + r * n;
    T m = std::numeric_limits<T>::lowest();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - m);
    const T lse = m + std::log(sum);
    T acc = 0;
    for (int64_t j = 0; j < n; ++j) {
      acc -= z[j] * (x[j] - lse);
      bp[r * n + j] = std::exp(x[j] - lse) - z[j];
    }
    l[r] = acc;
  }
  return absl::OkStatus();
}

// DcnCross: x0 * (y + bias) + xl, y = xl W the cross layer's product (one pass instead of
// BiasAdd, Mul and Add).
template <typename T>
Status DcnCrossTyped(OpKernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const Tensor& xl = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const Tensor& bias = ctx.input(3);
  if (x0.rank() != 2 || xl.shape() != x0.shape() || y.shape() != x0.shape() || bias.rank() != 1 ||
      bias.dim(0) != x0.dim(1)) {
    return ctx.Error("x0 {}, xl {}, y {} and bias {} must be [batch, d] three times and [d]",
                     x0.shape().ToString(), xl.shape().ToString(), y.shape().ToString(),
                     bias.shape().ToString());
  }
  const int64_t rows = x0.dim(0), d = x0.dim(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x0.shape()));
  const T *a = x0.data<T>(), *l = xl.data<T>(), *p = y.data<T>(), *b = bias.data<T>();
  T* o = out->data<T>();
  ParallelFor(rows, GrainPerItem(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < d; ++j) {
        const int64_t i = r * d + j;
        o[i] = a[i] * (p[i] + b[j]) + l[i];
      }
    }
  });
  return absl::OkStatus();
}

// DcnCrossGrad: (x0, y, bias, g) -> (dx0 = g * (y + bias), dy = g * x0, dbias = column sums of
// dy); xl's gradient is g itself. The values and the bias sum's order are those of the composed
// Mul / BiasAdd gradients.
template <typename T>
Status DcnCrossGradTyped(OpKernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  const Tensor& g = ctx.input(3);
  if (x0.rank() != 2 || y.shape() != x0.shape() || g.shape() != x0.shape() || bias.rank() != 1 ||
      bias.dim(0) != x0.dim(1)) {
    return ctx.Error("x0 {}, y {}, g {} and bias {} must be [batch, d] three times and [d]",
                     x0.shape().ToString(), y.shape().ToString(), g.shape().ToString(),
                     bias.shape().ToString());
  }
  const int64_t rows = x0.dim(0), d = x0.dim(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * dx0, ctx.allocate_output_uninitialized(0, x0.shape()));
  RECSDK_ASSIGN_OR_RETURN(Tensor * dy, ctx.allocate_output_uninitialized(1, x0.shape()));
  RECSDK_ASSIGN_OR_RETURN(Tensor * db, ctx.allocate_output(2, bias.shape()));
  const T *a = x0.data<T>(), *p = y.data<T>(), *b = bias.data<T>(), *gr = g.data<T>();
  T *da = dx0->data<T>(), *dp = dy->data<T>();
  ParallelFor(rows, GrainPerItem(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < d; ++j) {
        const int64_t i = r * d + j;
        da[i] = gr[i] * (p[i] + b[j]);
        dp[i] = gr[i] * a[i];
      }
    }
  });
  BlockedColumnSums(dp, rows, d, db->data<T>());
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuNnKernels(KernelRegistry& r) {
  r.RegisterFn("DcnCross", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return DcnCrossTyped<decltype(t)>(ctx); });
  });
  r.RegisterFn("DcnCrossGrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return DcnCrossGradTyped<decltype(t)>(ctx); });
  });
  RegisterCpuInteractionKernels(r);
  r.RegisterFn("Softmax", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return SoftmaxTyped<decltype(t)>(ctx, false); });
  });
  r.RegisterFn("LogSoftmax", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return SoftmaxTyped<decltype(t)>(ctx, true); });
  });
  r.RegisterFn("SoftmaxGrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return SoftmaxGradTyped<decltype(t)>(ctx, false); });
  });
  r.RegisterFn("LogSoftmaxGrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return SoftmaxGradTyped<decltype(t)>(ctx, true); });
  });
  r.RegisterFn("Dropout", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(0).dtype(),
                         [&](auto t) { return DropoutTyped<decltype(t)>(ctx); });
  });
  r.RegisterFn("SigmoidCrossEntropyWithLogits", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(1).dtype(),
                         [&](auto t) { return SigmoidCeTyped<decltype(t)>(ctx); });
  });
  r.RegisterFn("SoftmaxCrossEntropyWithLogits", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    return DispatchFloat(ctx, ctx.input(1).dtype(),
                         [&](auto t) { return SoftmaxCeTyped<decltype(t)>(ctx); });
  });
}

}  // namespace recsdk::internal
