// math_kernels.cc: CPU kernels for elementwise arithmetic, comparisons, reductions and BiasAdd.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "src/device/cpu/fast_kernels.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

template <typename T>
T FloorModValue(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    const T r = std::fmod(x, y);
    return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? r + y : r;
  } else {
    const T r = y == 0 ? 0 : x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
  }
}

template <typename T>
T FloorDivValue(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::floor(x / y);
  } else {
    if (y == 0) return 0;
    T q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return q;
  }
}

// Binary elementwise op with broadcasting; Out is the output element type.
template <typename T, typename Out, typename F>
Status BinaryOp(OpKernelContext& ctx, F f) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  RECSDK_ASSIGN_OR_RETURN(Shape shape, RuntimeBroadcast(ctx, a.shape(), b.shape()));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, shape));
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  Out* o = out->data<Out>();
  const int64_t n = out->num_elements();
  if (a.shape() == b.shape()) {
    ParallelFor(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
    });
  } else if (b.num_elements() == 1) {
    const T yv = y[0];
    ParallelFor(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(x[i], yv);
    });
  } else if (a.num_elements() == 1) {
    const T xv = x[0];
    ParallelFor(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(xv, y[i]);
    });
  } else {
    std::vector<int64_t> strides[2] = {BroadcastStrides(a.shape(), shape),
                                       BroadcastStrides(b.shape(), shape)};
    ForEachBroadcast<2>(shape, strides,
                        [&](int64_t start, const int64_t* offs, int64_t len, const int64_t* st) {
                          const T* xr = x + offs[0];
                          const T* yr = y + offs[1];
                          Out* orow = o + start;
                          if (st[0] == 1 && st[1] == 1) {
                            for (int64_t j = 0; j < len; ++j) orow[j] = f(xr[j], yr[j]);
                          } else if (st[0] == 1 && st[1] == 0) {
                            for (int64_t j = 0; j < len; ++j) orow[j] = f(xr[j], yr[0]);
                          } else if (st[0] == 0 && st[1] == 1) {
                            for (int64_t j = 0; j < len; ++j) orow[j] = f(xr[0], yr[j]);
                          } else {
                            for (int64_t j = 0; j < len; ++j)
                              orow[j] = f(xr[j * st[0]], yr[j * st[1]]);
                          }
                        });
  }
  return absl::OkStatus();
}

template <typename F>
void RegisterBinary(KernelRegistry& r, const char* op, std::vector<DType> types, F f) {
  r.RegisterFn(op, kCpu, types, [f](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      return BinaryOp<T, T>(ctx, [&](T x, T y) { return static_cast<T>(f(x, y)); });
    });
  });
}

template <typename F>
void RegisterCompare(KernelRegistry& r, const char* op, F f, CompareF32Fn FastKernels::*fast) {
  r.RegisterFn(op, kCpu, kNumericTypes, [f, fast](OpKernelContext& ctx) {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (fast != nullptr && a.dtype() == DType::kFloat32 && a.shape() == b.shape()) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, a.shape()));
      const float* x = a.data<float>();
      const float* y = b.data<float>();
      bool* o = out->data<bool>();
      ParallelFor(a.num_elements(), kElementwiseGrain,
                  [&](int64_t s, int64_t e) { (Fast().*fast)(x + s, y + s, o + s, e - s); });
      return absl::OkStatus();
    }
    return DispatchNumeric(ctx, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return BinaryOp<T, bool>(ctx, [&](T x, T y) { return f(x, y); });
    });
  });
}

// Unary float op via a scalar function.
template <typename F>
void RegisterUnary(KernelRegistry& r, const char* op, std::vector<DType> types, F f) {
  r.RegisterFn(op, kCpu, types, [f](OpKernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
    return DispatchNumeric(ctx, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = x.data<T>();
      T* o = out->data<T>();
      // Shared by the unary ops: only LeakyRelu declares alpha, only Gelu approximate.
      const NodeAttrs attrs(ctx.node());
      const double alpha = attrs.Declares("alpha") ? attrs.Float("alpha") : 0.0;
      const bool approximate = attrs.Declares("approximate") && attrs.Bool("approximate");
      ParallelFor(x.num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i)
          o[i] = static_cast<T>(f(in[i], static_cast<T>(alpha), approximate));
      });
      return absl::OkStatus();
    });
  });
}

// Unary gradient op (ref, dy) -> dx, elementwise.
template <typename F>
void RegisterUnaryGrad(KernelRegistry& r, const char* op, F f) {
  r.RegisterFn(op, kCpu, kFloatTypes, [f](OpKernelContext& ctx) {
    const Tensor& ref = ctx.input(0);
    const Tensor& dy = ctx.input(1);
    if (ref.shape() != dy.shape()) {
      return ctx.Error("shapes differ: {} vs {}", ref.shape().ToString(), dy.shape().ToString());
    }
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, ref.shape()));
    return DispatchFloat(ctx, ref.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* a = ref.data<T>();
      const T* g = dy.data<T>();
      T* o = out->data<T>();
      const NodeAttrs attrs(ctx.node());
      const T alpha = static_cast<T>(attrs.Declares("alpha") ? attrs.Float("alpha") : 0.0);
      const bool approximate = attrs.Declares("approximate") && attrs.Bool("approximate");
      ParallelFor(ref.num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = f(a[i], g[i], alpha, approximate);
      });
      return absl::OkStatus();
    });
  });
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename T>
T GeluValue(T x, bool approximate) {
  if (approximate) {
    const T inner = static_cast<T>(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(kInvSqrt2)));
}

template <typename T>
T GeluDerivative(T x, bool approximate) {
  if (approximate) {
    const T c = static_cast<T>(kSqrt2OverPi);
    const T inner = c * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(inner);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
  }
  const T cdf = T(0.5) * (T(1) + std::erf(x * static_cast<T>(kInvSqrt2)));
  const T pdf = static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

template <typename T>
T SigmoidValue(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

// Reductions. `kind`: 0 sum, 1 mean, 2 max.
// SumRun: the sum of row[0, count). Runs of at least 64 are summed as 16 lane sums (element j
// into lane j mod 16), then the lanes in order, then the tail: an order that vectorises (a
// sequential sum waits on each add's latency: 9% of the embedding-only race's step) and is fixed
// whatever the thread count. Shorter runs are summed in order.
template <typename T>
T SumRun(const T* row, int64_t count) {
  constexpr int kLanes = 16;
  T acc = 0;
  int64_t j = 0;
  if (count >= 4 * kLanes) {
    T lanes[kLanes] = {};
    for (; j + kLanes <= count; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += row[j + l];
    }
    for (int l = 0; l < kLanes; ++l) acc += lanes[l];
  }
  for (; j < count; ++j) acc += row[j];
  return acc;
}

template <typename T>
Status ReduceTyped(OpKernelContext& ctx, int kind) {
  const Tensor& x = ctx.input(0);
  const int rank = x.rank();
  std::vector<int64_t> axes = ctx.node().IntsAttr("axes");
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  Shape keep, out_shape;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    keep.AddDim(reduced[i] ? 1 : x.dim(i));
    if (reduced[i]) {
      count *= x.dim(i);
      if (ctx.node().BoolAttr("keep_dims")) out_shape.AddDim(1);
    } else {
      out_shape.AddDim(x.dim(i));
    }
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, out_shape));
  T* o = out->data<T>();
  const T* in = x.data<T>();
  const int64_t n_out = out->num_elements();
  // ReduceMax starts from -Inf (a row of -Inf reduces to -Inf, not to the lowest finite value)
  // and keeps a NaN once it meets one, as TensorFlow's does.
  constexpr T kMaxStart = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                               : std::numeric_limits<T>::lowest();
  if (kind == 2) {
    if (count == 0) return ctx.Error("ReduceMax over an empty axis of {}", x.shape().ToString());
    for (int64_t i = 0; i < n_out; ++i) o[i] = kMaxStart;
  }
  if (x.num_elements() == 0) return absl::OkStatus();
  // Fast path: reducing only the last axes -> contiguous inner blocks.
  int first_reduced = rank;
  while (first_reduced > 0 && reduced[first_reduced - 1]) --first_reduced;
  bool suffix_only = true;
  for (int i = 0; i < first_reduced; ++i) suffix_only &= !reduced[i];
  if (suffix_only) {
    ParallelFor(n_out, GrainPerItem(count), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        const T* row = in + i * count;
        if (kind == 2) {
          T m = kMaxStart;
          for (int64_t j = 0; j < count; ++j) m = MaxNaN(m, row[j]);
          o[i] = m;
        } else {
          o[i] = SumRun(row, count);
        }
      }
    });
  } else {
    std::vector<int64_t> strides = BroadcastStrides(keep, x.shape());
    const int64_t inner = x.dim(rank - 1);
    const int64_t rows = x.num_elements() / inner;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, off = 0;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t idx = rem % x.dim(d);
        rem /= x.dim(d);
        off += idx * strides[d];
      }
      const T* row = in + r * inner;
      const int64_t st = strides[rank - 1];
      for (int64_t j = 0; j < inner; ++j) {
        T& dst = o[off + j * st];
        dst = kind == 2 ? MaxNaN(dst, row[j]) : dst + row[j];
      }
    }
  }
  if (kind == 1 && count > 0) {
    for (int64_t i = 0; i < n_out; ++i) o[i] /= static_cast<T>(count);
  }
  return absl::OkStatus();
}

// Broadcasts the reduced gradient back over the reduced axes of x.
template <typename T>
Status ReduceGradTyped(OpKernelContext& ctx, bool is_max) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const int rank = x.rank();
  std::vector<int64_t> axes = ctx.node().IntsAttr("axes");
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  Shape keep;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    keep.AddDim(reduced[i] ? 1 : x.dim(i));
    if (reduced[i]) count *= x.dim(i);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  const std::vector<int64_t> strides = BroadcastStrides(keep, x.shape());
  const T* g = dy.data<T>();
  const T* in = x.data<T>();
  T* o = out->data<T>();
  const T* y = is_max ? ctx.input(2).data<T>() : nullptr;
  std::vector<T> ties;
  if (is_max) ties.assign(keep.num_elements(), T(0));
  auto offset_of = [&](int64_t i) {
    int64_t rem = i, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % x.dim(d);
      rem /= x.dim(d);
      off += idx * strides[d];
    }
    return off;
  };
  const int64_t n = x.num_elements();
  if (is_max) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = offset_of(i);
      if (in[i] == y[off]) ties[off] += 1;
    }
    // A NaN maximum (its slice held a NaN) matches no input: its whole slice gets NaN, as
    // TensorFlow's 0/0 tie count gives, instead of a silent zero gradient.
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = offset_of(i);
      o[i] = IsNaN(y[off]) ? y[off] : (in[i] == y[off] ? g[off] / ties[off] : T(0));
    }
  } else {
    const bool mean = ctx.node().BoolAttr("mean");
    const T scale = mean && count > 0 ? T(1) / static_cast<T>(count) : T(1);
    // One offset per row of the last dimension (not per element: its divisions were most of a
    // step of a model with a summed loss); along the row dy is either one value (the last
    // dimension was reduced) or a contiguous run.
    const int64_t inner = rank == 0 ? 1 : x.dim(rank - 1);
    const int64_t inner_stride = rank == 0 ? 0 : strides[rank - 1];
    const int64_t rows = inner == 0 ? 0 : n / inner;
    ParallelFor(rows, GrainPerItem(inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = g + offset_of(r * inner);
        T* dst = o + r * inner;
        if (inner_stride == 0) {
          std::fill_n(dst, inner, src[0] * scale);
        } else {
          for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * inner_stride] * scale;
        }
      }
    });
  }
  return absl::OkStatus();
}

template <typename T>
Status BiasAddTyped(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const int64_t c = b.num_elements();
  if (x.rank() == 0 || x.dim(x.rank() - 1) != c) {
    return ctx.Error("bias of {} elements does not match the last dimension of {}", c,
                     x.shape().ToString());
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  const int64_t rows = c == 0 ? 0 : x.num_elements() / c;
  const T* in = x.data<T>();
  const T* bias = b.data<T>();
  T* o = out->data<T>();
  ParallelFor(rows, GrainPerItem(c), [&](int64_t s, int64_t e) {
    for (int64_t r = s; r < e; ++r) {
      for (int64_t j = 0; j < c; ++j) o[r * c + j] = in[r * c + j] + bias[j];
    }
  });
  return absl::OkStatus();
}

template <typename T>
Status BiasAddGradTyped(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const int64_t c = dy.dim(dy.rank() - 1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, Shape{c}));
  const int64_t rows = c == 0 ? 0 : dy.num_elements() / c;
  BlockedColumnSums(dy.data<T>(), rows, c, out->data<T>());
  return absl::OkStatus();
}

template <typename T>
Status WhereTyped(OpKernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& a = ctx.input(1);
  const Tensor& b = ctx.input(2);
  RECSDK_ASSIGN_OR_RETURN(Shape s1, RuntimeBroadcast(ctx, a.shape(), b.shape()));
  RECSDK_ASSIGN_OR_RETURN(Shape shape, RuntimeBroadcast(ctx, c.shape(), s1));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, shape));
  const bool* cond = c.data<bool>();
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  T* o = out->data<T>();
  if (c.shape() == shape && a.shape() == shape && b.shape() == shape) {
    if constexpr (std::is_same_v<T, float>) {
      ParallelFor(out->num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
        Fast().where_f32(cond + s, x + s, y + s, o + s, e - s);
      });
    } else {
      ParallelFor(out->num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = cond[i] ? x[i] : y[i];
      });
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> strides[3] = {BroadcastStrides(c.shape(), shape),
                                     BroadcastStrides(a.shape(), shape),
                                     BroadcastStrides(b.shape(), shape)};
  ForEachBroadcast<3>(
      shape, strides, [&](int64_t start, const int64_t* offs, int64_t len, const int64_t* st) {
        for (int64_t j = 0; j < len; ++j) {
          o[start + j] =
              cond[offs[0] + j * st[0]] ? x[offs[1] + j * st[1]] : y[offs[2] + j * st[2]];
        }
      });
  return absl::OkStatus();
}

template <typename T>
Status AddNTyped(OpKernelContext& ctx) {
  const Tensor& first = ctx.input(0);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i).shape() != first.shape()) {
      return ctx.Error("input {} has shape {} but input 0 has {}", i,
                       ctx.input(i).shape().ToString(), first.shape().ToString());
    }
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, first.shape()));
  T* o = out->data<T>();
  std::vector<const T*> in(static_cast<size_t>(ctx.num_inputs()));
  for (int k = 0; k < ctx.num_inputs(); ++k) in[k] = ctx.input(k).data<T>();
  // Up to four inputs per pass over the chunk (one write of o per pass instead of one per input),
  // each element summed left to right as ((in0 + in1) + in2) + ..., the order of one input at a
  // time, so the bits do not change.
  ParallelFor(first.num_elements(), kElementwiseGrain, [&](int64_t s, int64_t e) {
    const T* acc = in[0];
    size_t k = 1;
    do {
      const size_t group = std::min<size_t>(4, in.size() - k);
      const T* a = group > 0 ? in[k] : nullptr;
      const T* b = group > 1 ? in[k + 1] : nullptr;
      const T* c = group > 2 ? in[k + 2] : nullptr;
      const T* d = group > 3 ? in[k + 3] : nullptr;
      switch (group) {
        case 0:
          for (int64_t i = s; i < e; ++i) o[i] = acc[i];
          break;
        case 1:
          for (int64_t i = s; i < e; ++i) o[i] = acc[i] + a[i];
          break;
        case 2:
          for (int64_t i = s; i < e; ++i) o[i] = (acc[i] + a[i]) + b[i];
          break;
        case 3:
          for (int64_t i = s; i < e; ++i) o[i] = ((acc[i] + a[i]) + b[i]) + c[i];
          break;
        default:
          for (int64_t i = s; i < e; ++i) o[i] = (((acc[i] + a[i]) + b[i]) + c[i]) + d[i];
          break;
      }
      acc = o;
      k += group;
    } while (k < in.size());
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuMathKernels(KernelRegistry& r) {
  RegisterBinary(r, "Add", kNumericTypes, [](auto x, auto y) { return x + y; });
  RegisterBinary(r, "Sub", kNumericTypes, [](auto x, auto y) { return x - y; });
  RegisterBinary(r, "Mul", kNumericTypes, [](auto x, auto y) { return x * y; });
  RegisterBinary(r, "Div", kNumericTypes, [](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      return y == 0 ? T(0) : FloorDivValue(x, y);
    } else {
      return x / y;
    }
  });
  RegisterBinary(r, "Maximum", kNumericTypes, [](auto x, auto y) { return MaxNaN(x, y); });
  RegisterBinary(r, "Minimum", kNumericTypes, [](auto x, auto y) { return MinNaN(x, y); });
  RegisterBinary(r, "Pow", kNumericTypes, [](auto x, auto y) {
    using T = decltype(x);
    return static_cast<T>(std::pow(x, y));
  });
  RegisterBinary(r, "FloorDiv", kNumericTypes, [](auto x, auto y) { return FloorDivValue(x, y); });
  r.RegisterFn("FloorMod", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() == DType::kFloat32 && a.shape() == b.shape()) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, a.shape()));
      const float* x = a.data<float>();
      const float* y = b.data<float>();
      float* o = out->data<float>();
      ParallelFor(a.num_elements(), kElementwiseGrain,
                  [&](int64_t s, int64_t e) { Fast().floormod_f32(x + s, y + s, o + s, e - s); });
      return absl::OkStatus();
    }
    return DispatchNumeric(ctx, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return BinaryOp<T, T>(ctx, [](T x, T y) { return FloorModValue(x, y); });
    });
  });
  RegisterCompare(
      r, "Less", [](auto x, auto y) { return x < y; }, &FastKernels::less_f32);
  RegisterCompare(
      r, "Greater", [](auto x, auto y) { return x > y; }, &FastKernels::greater_f32);
  RegisterCompare(
      r, "LessEqual", [](auto x, auto y) { return x <= y; }, nullptr);
  RegisterCompare(
      r, "GreaterEqual", [](auto x, auto y) { return x >= y; }, nullptr);
  RegisterCompare(
      r, "Equal", [](auto x, auto y) { return x == y; }, nullptr);
  r.RegisterFn("Where", kCpu, {DType::kInvalid}, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(1).dtype(),
                           [&](auto tag) { return WhereTyped<decltype(tag)>(ctx); });
  });
  r.RegisterFn("AddN", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return AddNTyped<decltype(tag)>(ctx); });
  });

  RegisterUnary(r, "Neg", kNumericTypes, [](auto x, auto, bool) { return -x; });
  RegisterUnary(r, "Square", kNumericTypes, [](auto x, auto, bool) { return x * x; });
  RegisterUnary(r, "Abs", kNumericTypes, [](auto x, auto, bool) { return x < 0 ? -x : x; });
  RegisterUnary(r, "Sign", kNumericTypes, [](auto x, auto, bool) {
    using T = decltype(x);
    return IsNaN(x) ? x : static_cast<T>((x > T(0)) - (x < T(0)));
  });
  RegisterUnary(r, "Sqrt", kFloatTypes, [](auto x, auto, bool) { return std::sqrt(x); });
  RegisterUnary(r, "Rsqrt", kFloatTypes, [](auto x, auto, bool) { return 1 / std::sqrt(x); });
  RegisterUnary(r, "Exp", kFloatTypes, [](auto x, auto, bool) { return std::exp(x); });
  RegisterUnary(r, "Log", kFloatTypes, [](auto x, auto, bool) { return std::log(x); });
  RegisterUnary(r, "Relu", kFloatTypes, [](auto x, auto, bool) { return ReluValue(x); });
  RegisterUnary(r, "LeakyRelu", kFloatTypes,
                [](auto x, auto alpha, bool) { return x > 0 ? x : alpha * x; });
  RegisterUnary(r, "Sigmoid", kFloatTypes, [](auto x, auto, bool) { return SigmoidValue(x); });
  RegisterUnary(r, "Tanh", kFloatTypes, [](auto x, auto, bool) { return std::tanh(x); });
  RegisterUnary(r, "Gelu", kFloatTypes,
                [](auto x, auto, bool approx) { return GeluValue(x, approx); });

  RegisterUnaryGrad(r, "SqrtGrad",
                    [](auto y, auto g, auto, bool) { return g * decltype(y)(0.5) / y; });
  RegisterUnaryGrad(r, "RsqrtGrad",
                    [](auto y, auto g, auto, bool) { return decltype(y)(-0.5) * g * y * y * y; });
  RegisterUnaryGrad(r, "ReluGrad", [](auto x, auto g, auto, bool) { return ReluGradValue(x, g); });
  RegisterUnaryGrad(r, "LeakyReluGrad", [](auto x, auto g, auto alpha, bool) {
    return x > 0 ? g : (IsNaN(x) ? x : alpha * g);
  });
  RegisterUnaryGrad(r, "SigmoidGrad", [](auto y, auto g, auto, bool) { return g * y * (1 - y); });
  RegisterUnaryGrad(r, "TanhGrad", [](auto y, auto g, auto, bool) { return g * (1 - y * y); });
  RegisterUnaryGrad(r, "GeluGrad", [](auto x, auto g, auto, bool approx) {
    return g * GeluDerivative(x, approx);
  });

  for (int kind = 0; kind < 3; ++kind) {
    const char* op = kind == 0 ? "ReduceSum" : kind == 1 ? "ReduceMean" : "ReduceMax";
    r.RegisterFn(op, kCpu, kNumericTypes, [kind](OpKernelContext& ctx) {
      return DispatchNumeric(ctx, ctx.input(0).dtype(),
                             [&](auto tag) { return ReduceTyped<decltype(tag)>(ctx, kind); });
    });
  }
  r.RegisterFn("ReduceSumGrad", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return ReduceGradTyped<decltype(tag)>(ctx, false); });
  });
  r.RegisterFn("ReduceMaxGrad", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return ReduceGradTyped<decltype(tag)>(ctx, true); });
  });
  r.RegisterFn("BiasAdd", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return BiasAddTyped<decltype(tag)>(ctx); });
  });
  r.RegisterFn("BiasAddGrad", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return BiasAddGradTyped<decltype(tag)>(ctx); });
  });
}

}  // namespace recsdk::internal
