// array_kernels.cc: CPU kernels for sources, casts and shape manipulation.
#include <cstring>

#include "src/device/cpu/bf16_gemm.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

size_t ElemSize(const Tensor& t) { return DTypeSize(t.dtype()); }

// Row-major strides in elements.
std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.rank(), 1);
  for (int i = s.rank() - 2; i >= 0; --i) st[i] = st[i + 1] * s.dim(i + 1);
  return st;
}

Status ReshapeTo(OpKernelContext& ctx, const Shape& target_or_partial) {
  const Tensor& x = ctx.input(0);
  Shape target = target_or_partial;
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target.dim(i) < 0) {
      unknown = i;
    } else {
      known *= target.dim(i);
    }
  }
  if (unknown >= 0) {
    if (known == 0 || x.num_elements() % known != 0) {
      return ctx.Error("cannot reshape {} ({} elements) to {}", x.shape().ToString(),
                       x.num_elements(), target.ToString());
    }
    target.set_dim(unknown, x.num_elements() / known);
  }
  auto r = x.Reshape(target);
  if (!r.ok()) return ctx.Error("{}", r.status().message());
  ctx.set_output(0, *r);
  return absl::OkStatus();
}

template <typename To, typename From>
To ConvertValue(From v) {
  if constexpr (std::is_same_v<From, float16> || std::is_same_v<From, bfloat16>) {
    return ConvertValue<To>(v.ToFloat());
  } else if constexpr (std::is_same_v<To, float16> || std::is_same_v<To, bfloat16>) {
    return To::FromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

template <typename Fn>
Status DispatchAll(const OpKernelContext& ctx, DType d, Fn&& fn) {
  switch (d) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kFloat16:
      return fn(float16{});
    case DType::kBFloat16:
      return fn(bfloat16{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      return fn(int64_t{});
    case DType::kBool:
      return fn(bool{});
    case DType::kUInt8:
      return fn(uint8_t{});
    default:
      return ctx.Error("cannot cast {}", DTypeName(d));
  }
}

Status CastKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType to = ctx.node().output_dtype(0);
  if (x.dtype() == to) {
    ctx.set_output(0, x);
    return absl::OkStatus();
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  if (x.dtype() == DType::kFloat32 && to == DType::kBFloat16) {  // mixed precision's hot cast
    const float* src = x.data<float>();
    auto* dst = reinterpret_cast<uint16_t*>(out->data<bfloat16>());
    ParallelFor(x.num_elements(), kElementwiseGrain,
                [&](int64_t b, int64_t e) { ConvertF32ToBf16(src + b, dst + b, e - b); });
    return absl::OkStatus();
  }
  return DispatchAll(ctx, x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    return DispatchAll(ctx, to, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = x.data<From>();
      To* dst = out->data<To>();
      ParallelFor(x.num_elements(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = ConvertValue<To>(src[i]);
      });
      return absl::OkStatus();
    });
  });
}

Status FillWith(OpKernelContext& ctx, const Shape& shape, double value) {
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, shape));
  return DispatchAll(ctx, out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = ConvertValue<T>(value);
    T* p = out->data<T>();
    for (int64_t i = 0; i < out->num_elements(); ++i) p[i] = v;
    return absl::OkStatus();
  });
}

// Copies a slice [begin, begin+size) of `src` (shape src_shape) into dst (contiguous, size dims),
// or the reverse when `scatter` (dst is the big tensor).
void CopyBlock(const char* src, const Shape& src_shape, char* dst, const Shape& dst_shape,
               const std::vector<int64_t>& begin, size_t elem, bool scatter) {
  // Iterate over all rows of the small tensor; copy the last dimension as a run.
  const Shape& small = scatter ? src_shape : dst_shape;
  const Shape& big = scatter ? dst_shape : src_shape;
  const int rank = small.rank();
  if (small.num_elements() == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  const auto big_strides = Strides(big);
  const int64_t inner = small.dim(rank - 1);
  const int64_t rows = small.num_elements() / inner;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, big_off = begin[rank - 1];
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % small.dim(d);
      rem /= small.dim(d);
      big_off += (idx + begin[d]) * big_strides[d];
    }
    const int64_t small_off = r * inner;
    if (scatter) {
      std::memcpy(dst + big_off * elem, src + small_off * elem, inner * elem);
    } else {
      std::memcpy(dst + small_off * elem, src + big_off * elem, inner * elem);
    }
  }
}

Status ConcatKernel(OpKernelContext& ctx) {
  const int n = ctx.num_inputs();
  const Tensor& first = ctx.input(0);
  int axis = static_cast<int>(ctx.node().IntAttr("axis"));
  if (axis < 0) axis += first.rank();
  Shape out_shape = first.shape();
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    for (int d = 0; d < first.rank(); ++d) {
      if (d != axis && t.dim(d) != first.dim(d)) {
        return ctx.Error("input {} has shape {} but input 0 has {}; only axis {} may differ", i,
                         t.shape().ToString(), first.shape().ToString(), axis);
      }
    }
    total += t.dim(axis);
  }
  out_shape.set_dim(axis, total);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  std::vector<int64_t> begin(first.rank(), 0);
  for (int i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    CopyBlock(static_cast<const char*>(t.raw_data()), t.shape(),
              static_cast<char*>(out->raw_data()), out_shape, begin, ElemSize(t), true);
    begin[axis] += t.dim(axis);
  }
  return absl::OkStatus();
}

Status ConcatGradKernel(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  int axis = static_cast<int>(ctx.node().IntAttr("axis"));
  if (axis < 0) axis += dy.rank();
  std::vector<int64_t> begin(dy.rank(), 0);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input(i).shape();
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(i - 1, s));
    CopyBlock(static_cast<const char*>(dy.raw_data()), dy.shape(),
              static_cast<char*>(out->raw_data()), s, begin, ElemSize(dy), false);
    begin[axis] += s.dim(axis);
  }
  return absl::OkStatus();
}

Status SplitVKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int axis = static_cast<int>(ctx.node().IntAttr("axis"));
  if (axis < 0) axis += x.rank();
  std::vector<int64_t> sizes = ctx.node().IntsAttr("sizes");
  int64_t known = 0;
  int unknown = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) {
      unknown = static_cast<int>(i);
    } else {
      known += sizes[i];
    }
  }
  if (unknown >= 0) sizes[unknown] = x.dim(axis) - known;
  if ((unknown >= 0 && sizes[unknown] < 0) || (unknown < 0 && known != x.dim(axis))) {
    return ctx.Error("split sizes do not add up to dimension {} ({}) of {}", axis, x.dim(axis),
                     x.shape().ToString());
  }
  std::vector<int64_t> begin(x.rank(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape s = x.shape();
    s.set_dim(axis, sizes[i]);
    RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                            ctx.allocate_output_uninitialized(static_cast<int>(i), s));
    CopyBlock(static_cast<const char*>(x.raw_data()), x.shape(),
              static_cast<char*>(out->raw_data()), s, begin, ElemSize(x), false);
    begin[axis] += sizes[i];
  }
  return absl::OkStatus();
}

StatusOr<Shape> SliceShape(const OpKernelContext& ctx, const Shape& in,
                           const std::vector<int64_t>& begin, const std::vector<int64_t>& size) {
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t s = size[i] < 0 ? in.dim(i) - begin[i] : size[i];
    if (begin[i] < 0 || s < 0 || begin[i] + s > in.dim(i)) {
      return ctx.Error("slice begin {} size {} is out of bounds for dimension {} of {}", begin[i],
                       size[i], i, in.ToString());
    }
    out.AddDim(s);
  }
  return out;
}

Status SliceKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto begin = ctx.node().IntsAttr("begin");
  RECSDK_ASSIGN_OR_RETURN(Shape s, SliceShape(ctx, x.shape(), begin, ctx.node().IntsAttr("size")));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, s));
  CopyBlock(static_cast<const char*>(x.raw_data()), x.shape(), static_cast<char*>(out->raw_data()),
            s, begin, ElemSize(x), false);
  return absl::OkStatus();
}

Status SliceGradKernel(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.shape()));
  CopyBlock(static_cast<const char*>(dy.raw_data()), dy.shape(),
            static_cast<char*>(out->raw_data()), x.shape(), ctx.node().IntsAttr("begin"),
            ElemSize(dy), true);
  return absl::OkStatus();
}

Status TransposeKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto perm = ctx.node().IntsAttr("perm");
  Shape out_shape;
  for (int64_t p : perm) out_shape.AddDim(x.dim(static_cast<int>(p)));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  const int rank = x.rank();
  const auto in_strides = Strides(x.shape());
  std::vector<int64_t> src_strides(rank);
  for (int i = 0; i < rank; ++i) src_strides[i] = in_strides[perm[i]];
  const size_t elem = ElemSize(x);
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out->raw_data());
  const int64_t total = out->num_elements();
  ParallelFor(total, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i, off = 0;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t idx = rem % out_shape.dim(d);
        rem /= out_shape.dim(d);
        off += idx * src_strides[d];
      }
      std::memcpy(dst + i * elem, src + off * elem, elem);
    }
  });
  return absl::OkStatus();
}

Status TileKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto m = ctx.node().IntsAttr("multiples");
  Shape out_shape;
  for (int i = 0; i < x.rank(); ++i) out_shape.AddDim(x.dim(i) * m[i]);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  const int rank = x.rank();
  const auto in_strides = Strides(x.shape());
  const size_t elem = ElemSize(x);
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out->raw_data());
  for (int64_t i = 0; i < out->num_elements(); ++i) {
    int64_t rem = i, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % out_shape.dim(d);
      rem /= out_shape.dim(d);
      off += (idx % x.dim(d)) * in_strides[d];
    }
    std::memcpy(dst + i * elem, src + off * elem, elem);
  }
  return absl::OkStatus();
}

template <typename T>
Status TileGradTyped(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.shape()));
  const int rank = x.rank();
  const auto in_strides = Strides(x.shape());
  const T* g = dy.data<T>();
  T* o = out->data<T>();
  for (int64_t i = 0; i < dy.num_elements(); ++i) {
    int64_t rem = i, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % dy.dim(d);
      rem /= dy.dim(d);
      off += (idx % x.dim(d)) * in_strides[d];
    }
    o[off] += g[i];
  }
  return absl::OkStatus();
}

// GatherView: params as [outer, n, inner] around the gather axis.
struct GatherView {
  int axis = 0;
  int64_t outer = 1, n = 0, inner = 1;
};
GatherView ViewForGather(const Shape& params, int64_t axis_attr) {
  GatherView v;
  v.axis = static_cast<int>(axis_attr < 0 ? axis_attr + params.rank() : axis_attr);
  for (int i = 0; i < params.rank(); ++i) {
    if (i < v.axis) v.outer *= params.dim(i);
    if (i == v.axis) v.n = params.dim(i);
    if (i > v.axis) v.inner *= params.dim(i);
  }
  return v;
}

template <typename Index>
Status GatherTyped(OpKernelContext& ctx) {
  const Tensor& params = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const GatherView v = ViewForGather(params.shape(), NodeAttrs(ctx.node()).Int("axis"));
  Shape out_shape;
  for (int i = 0; i < v.axis; ++i) out_shape.AddDim(params.dim(i));
  for (int i = 0; i < indices.rank(); ++i) out_shape.AddDim(indices.dim(i));
  for (int i = v.axis + 1; i < params.rank(); ++i) out_shape.AddDim(params.dim(i));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  const size_t row_bytes = static_cast<size_t>(v.inner) * ElemSize(params);
  const Index* idx = indices.data<Index>();
  const int64_t k = indices.num_elements();
  const char* src = static_cast<const char*>(params.raw_data());
  char* dst = static_cast<char*>(out->raw_data());
  for (int64_t i = 0; i < k; ++i) {
    if (idx[i] < 0 || idx[i] >= v.n) {
      return ctx.Error("index {} at position {} is out of range [0, {}) of axis {}",
                       static_cast<int64_t>(idx[i]), i, v.n, v.axis);
    }
  }
  // Rows of the output: (o, i) reads params row (o, idx[i]).
  ParallelFor(v.outer * k, GrainPerItem(static_cast<int64_t>(row_bytes), 64 * 1024),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  const int64_t o = r / k, i = r % k;
                  std::memcpy(dst + r * row_bytes, src + (o * v.n + idx[i]) * row_bytes, row_bytes);
                }
              });
  return absl::OkStatus();
}

template <typename T, typename Index>
Status GatherGradTyped(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& params = ctx.input(2);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, params.shape()));
  const GatherView v = ViewForGather(params.shape(), NodeAttrs(ctx.node()).Int("axis"));
  const int64_t row = v.inner, k = indices.num_elements();
  const Index* idx = indices.data<Index>();
  const T* g = dy.data<T>();
  T* o = out->data<T>();
  // Distinct outer slices never share a destination row, so they run in parallel; within one,
  // repeated indices add in index order (deterministic).
  ParallelFor(v.outer, GrainPerItem(k * row), [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      for (int64_t i = 0; i < k; ++i) {
        T* dst = o + (s * v.n + static_cast<int64_t>(idx[i])) * row;
        const T* src = g + (s * k + i) * row;
        for (int64_t j = 0; j < row; ++j) dst[j] += src[j];
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
Status SumToShapeTyped(OpKernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  if (g.shape() == target) {
    ctx.set_output(0, g);
    return absl::OkStatus();
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, target));
  std::vector<int64_t> strides[1] = {BroadcastStrides(target, g.shape())};
  T* o = out->data<T>();
  const T* src = g.data<T>();
  // Sequential: several rows may add into one output element.
  const int rank = g.rank();
  if (rank == 0) {
    o[0] = src[0];
    return absl::OkStatus();
  }
  const int64_t inner = g.dim(rank - 1);
  const int64_t rows = inner == 0 ? 0 : g.num_elements() / inner;
  const int64_t st = strides[0][rank - 1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % g.dim(d);
      rem /= g.dim(d);
      off += idx * strides[0][d];
    }
    const T* row = src + r * inner;
    if (st == 0) {
      T acc = 0;
      for (int64_t j = 0; j < inner; ++j) acc += row[j];
      o[off] += acc;
    } else {
      for (int64_t j = 0; j < inner; ++j) o[off + j] += row[j];
    }
  }
  return absl::OkStatus();
}

Status BroadcastToShapeKernel(OpKernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  if (g.shape() == target) {
    ctx.set_output(0, g);
    return absl::OkStatus();
  }
  RECSDK_ASSIGN_OR_RETURN(Shape s, RuntimeBroadcast(ctx, g.shape(), target));
  if (s != target)
    return ctx.Error("cannot broadcast {} to {}", g.shape().ToString(), target.ToString());
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, target));
  std::vector<int64_t> strides[1] = {BroadcastStrides(g.shape(), target)};
  const size_t elem = ElemSize(g);
  const char* src = static_cast<const char*>(g.raw_data());
  char* dst = static_cast<char*>(out->raw_data());
  ForEachBroadcast<1>(
      target, strides, [&](int64_t o, const int64_t* offs, int64_t n, const int64_t* st) {
        for (int64_t j = 0; j < n; ++j)
          std::memcpy(dst + (o + j) * elem, src + (offs[0] + j * st[0]) * elem, elem);
      });
  return absl::OkStatus();
}

}  // namespace

StatusOr<Shape> RuntimeBroadcast(const OpKernelContext& ctx, const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      return ctx.Error("shapes {} and {} cannot be broadcast (dimension {}: {} vs {})",
                       a.ToString(), b.ToString(), i, da, db);
    }
    out.AddDim(da == 1 ? db : da);
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.rank(), 0);
  int64_t stride = 1;
  for (int i = in.rank() - 1; i >= 0; --i) {
    const int o = out.rank() - in.rank() + i;
    st[o] = in.dim(i) == 1 && out.dim(o) != 1 ? 0 : stride;
    stride *= in.dim(i);
  }
  return st;
}

void RegisterCpuArrayKernels(KernelRegistry& r) {
  const DType any = DType::kInvalid;
  r.RegisterFn("Placeholder", kCpu, {any}, [](OpKernelContext& ctx) {
    return absl::InvalidArgumentError(fmt::format(
        "placeholder \"{}\" ({} {}) must be fed: pass it in Run's feeds", ctx.node().name(),
        DTypeName(ctx.node().output_dtype(0)), ctx.node().output_shape(0).ToString()));
  });
  r.RegisterFn("Const", kCpu, {any}, [](OpKernelContext& ctx) {
    ctx.set_output(0, *ctx.node().FindAttr("value")->get_if<Tensor>());
    return absl::OkStatus();
  });
  for (const char* op : {"Identity", "StopGradient"}) {
    r.RegisterFn(op, kCpu, {any}, [](OpKernelContext& ctx) {
      ctx.set_output(0, ctx.input(0));
      return absl::OkStatus();
    });
  }
  r.RegisterFn("NoOp", kCpu, {any}, [](OpKernelContext&) { return absl::OkStatus(); });
  r.RegisterFn("ZerosLike", kCpu, {any},
               [](OpKernelContext& ctx) { return FillWith(ctx, ctx.input(0).shape(), 0); });
  r.RegisterFn("OnesLike", kCpu, {any},
               [](OpKernelContext& ctx) { return FillWith(ctx, ctx.input(0).shape(), 1); });
  r.RegisterFn("Fill", kCpu, {any}, [](OpKernelContext& ctx) {
    const Tensor& v = ctx.input(0);
    RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                            ctx.allocate_output_uninitialized(0, ctx.node().ShapeAttr("shape")));
    const size_t elem = DTypeSize(v.dtype());
    char* dst = static_cast<char*>(out->raw_data());
    for (int64_t i = 0; i < out->num_elements(); ++i)
      std::memcpy(dst + i * elem, v.raw_data(), elem);
    return absl::OkStatus();
  });
  r.RegisterFn("Cast", kCpu, {any}, CastKernel);
  r.RegisterFn("Concat", kCpu, {any}, ConcatKernel);
  r.RegisterFn("ConcatGrad", kCpu, {any}, ConcatGradKernel);
  r.RegisterFn("SplitV", kCpu, {any}, SplitVKernel);
  r.RegisterFn("Slice", kCpu, {any}, SliceKernel);
  r.RegisterFn("SliceGrad", kCpu, {any}, SliceGradKernel);
  r.RegisterFn("Reshape", kCpu, {any}, [](OpKernelContext& ctx) {
    const auto dims = ctx.node().IntsAttr("shape");
    return ReshapeTo(ctx, Shape(absl::MakeConstSpan(dims)));
  });
  r.RegisterFn("ReshapeLike", kCpu, {any},
               [](OpKernelContext& ctx) { return ReshapeTo(ctx, ctx.input(1).shape()); });
  r.RegisterFn("Transpose", kCpu, {any}, TransposeKernel);
  r.RegisterFn("Tile", kCpu, {any}, TileKernel);
  r.RegisterFn("TileGrad", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return TileGradTyped<decltype(tag)>(ctx); });
  });
  r.RegisterFn("Gather", kCpu, {any}, [](OpKernelContext& ctx) {
    return ctx.input(1).dtype() == DType::kInt32 ? GatherTyped<int32_t>(ctx)
                                                 : GatherTyped<int64_t>(ctx);
  });
  r.RegisterFn("GatherGrad", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      return ctx.input(1).dtype() == DType::kInt32 ? GatherGradTyped<T, int32_t>(ctx)
                                                   : GatherGradTyped<T, int64_t>(ctx);
    });
  });
  r.RegisterFn("SumToShapeOf", kCpu, kNumericTypes, [](OpKernelContext& ctx) {
    return DispatchNumeric(ctx, ctx.input(0).dtype(),
                           [&](auto tag) { return SumToShapeTyped<decltype(tag)>(ctx); });
  });
  r.RegisterFn("BroadcastToShapeOf", kCpu, {any}, BroadcastToShapeKernel);
}

}  // namespace recsdk::internal
