// bf16_kernels.cc: CPU kernels of the mixed-precision and loss-scaling ops (precision_ops.cc):
// BF16MatMul and BF16BatchMatMul over bf16_gemm.h, AllFinite and ControlGate.
//
// Threading: stateless kernels; BF16MatMul splits its product across oneTBB (bf16_gemm.h), a
// batched product splits over the batch. Results never depend on the thread count.
#include <atomic>
#include <cmath>

#include "src/common/logging.h"
#include "src/device/cpu/bf16_gemm.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

const uint16_t* Bits(const Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data<bfloat16>());
}

Status Bf16MatMulKernel(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.node().BoolAttr("transpose_a"), tb = ctx.node().BoolAttr("transpose_b");
  if (a.rank() != 2 || b.rank() != 2 || a.dtype() != DType::kBFloat16 ||
      b.dtype() != DType::kBFloat16) {
    return ctx.Error("operands must be bfloat16 matrices, got {} {} and {} {}",
                     DTypeName(a.dtype()), a.shape().ToString(), DTypeName(b.dtype()),
                     b.shape().ToString());
  }
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != kb) {
    return ctx.Error("inner dimensions differ: a {} (transpose_a={}) vs b {} (transpose_b={})",
                     a.shape().ToString(), ta, b.shape().ToString(), tb);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, Shape{m, n}));
  Bf16Gemm(m, n, k, Bits(a), a.dim(1), ta, Bits(b), b.dim(1), tb, out->data<float>(), n);
  return absl::OkStatus();
}

// FusedDenseBf16: act(a w + b) with a, w bfloat16 and b float32: the bfloat16 product, then the
// bias and ReLU on each row block. The same float32 operations as BF16MatMul -> BiasAdd -> Relu,
// so the same bits, with one buffer and two ops fewer.
Status FusedDenseBf16Kernel(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  if (a.rank() != 2 || w.rank() != 2 || bias.rank() != 1 || a.dim(1) != w.dim(0) ||
      bias.dim(0) != w.dim(1) || w.dtype() != DType::kBFloat16 || bias.dtype() != DType::kFloat32) {
    return ctx.Error(
        "shapes {} {} x {} {} + {} {} do not fit a bfloat16 [m,k] x [k,n] + float32 [n] layer",
        DTypeName(a.dtype()), a.shape().ToString(), DTypeName(w.dtype()), w.shape().ToString(),
        DTypeName(bias.dtype()), bias.shape().ToString());
  }
  const int64_t m = a.dim(0), k = a.dim(1), n = w.dim(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{m, n}));
  float* c = out->data<float>();
  Bf16Gemm(m, n, k, Bits(a), k, false, Bits(w), n, false, c, n);
  const float* b = bias.data<float>();
  const bool relu = NodeAttrs(ctx.node()).String("activation") == "relu";
  ParallelFor(m, GrainPerItem(n),
              [&](int64_t r0, int64_t r1) { AddBiasRows(c, b, n, r0, r1, relu); });
  return absl::OkStatus();
}

Status Bf16BatchMatMulKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const bool ax = ctx.node().BoolAttr("adj_x"), ay = ctx.node().BoolAttr("adj_y");
  const int r = x.rank();
  if (r < 2 || y.rank() != r || x.dtype() != DType::kBFloat16 || y.dtype() != DType::kBFloat16) {
    return ctx.Error("operands must be bfloat16 of one rank >= 2, got {} {} and {} {}",
                     DTypeName(x.dtype()), x.shape().ToString(), DTypeName(y.dtype()),
                     y.shape().ToString());
  }
  int64_t batch = 1;
  Shape out_shape;
  for (int i = 0; i < r - 2; ++i) {
    if (x.dim(i) != y.dim(i))
      return ctx.Error("batch dims differ: {} vs {}", x.shape().ToString(), y.shape().ToString());
    batch *= x.dim(i);
    out_shape.AddDim(x.dim(i));
  }
  const int64_t m = ax ? x.dim(r - 1) : x.dim(r - 2), k = ax ? x.dim(r - 2) : x.dim(r - 1);
  const int64_t ky = ay ? y.dim(r - 1) : y.dim(r - 2), n = ay ? y.dim(r - 2) : y.dim(r - 1);
  if (k != ky)
    return ctx.Error("inner dimensions differ: {} vs {}", x.shape().ToString(),
                     y.shape().ToString());
  out_shape.AddDim(m);
  out_shape.AddDim(n);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, out_shape));
  const uint16_t* xs = Bits(x);
  const uint16_t* ys = Bits(y);
  float* os = out->data<float>();
  const int64_t ldx = x.dim(r - 1), ldy = y.dim(r - 1);
  ParallelFor(batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      Bf16GemmSingleThread(m, n, k, xs + bi * m * k, ldx, ax, ys + bi * k * n, ldy, ay,
                           os + bi * m * n, n);
    }
  });
  return absl::OkStatus();
}

template <typename T>
bool Finite(const Tensor& t) {
  const T* p = t.data<T>();
  const int64_t n = t.num_elements();
  // x - x is 0 for finite x and NaN for Inf and NaN; summing keeps the loop branch-free.
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += p[i] - p[i];
  return acc == 0;
}

Status AllFiniteKernel(OpKernelContext& ctx) {
  bool finite = true;
  for (int i = 0; i < ctx.num_inputs() && finite; ++i) {
    const Tensor& t = ctx.input(i);
    switch (t.dtype()) {
      case DType::kFloat32:
        finite = Finite<float>(t);
        break;
      case DType::kFloat64:
        finite = Finite<double>(t);
        break;
      default:
        return ctx.Error("input {} is {}; AllFinite checks float32 and float64", i,
                         DTypeName(t.dtype()));
    }
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, Shape{}));
  out->data<bool>()[0] = finite;
  return absl::OkStatus();
}

Status ControlGateKernel(OpKernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  if (c.dtype() != DType::kBool || c.num_elements() != 1)
    return ctx.Error("condition must be a bool scalar, got {} {}", DTypeName(c.dtype()),
                     c.shape().ToString());
  if (!c.data<bool>()[0]) ctx.SkipControlDependents();
  return absl::OkStatus();
}

// WarnWithoutBf16Dots: a bfloat16 product's kernel, after saying once per process when this CPU
// runs it as an exact scalar emulation (the mixed_precision pass chose bfloat16 for a model; how
// fast this machine runs it is the CPU backend's business).
KernelFactory WarnWithoutBf16Dots(LambdaKernel::Fn fn) {
  return [fn = std::move(fn)](const Node&) -> StatusOr<std::unique_ptr<OpKernel>> {
    static std::atomic<bool> warned{false};
    if (!HasBf16DotProducts() && !warned.exchange(true)) {
      LogWarning(
          "mixed_precision: this CPU has no AVX-512 BF16 dot products (or RECSDK_ISA lowers the "
          "ISA); the bfloat16 products run an exact scalar emulation, slower than float32. Use "
          "precision_mode must_keep_origin_dtype on this machine for speed");
    }
    return std::unique_ptr<OpKernel>(std::make_unique<LambdaKernel>(fn));
  };
}

}  // namespace

void RegisterCpuBf16Kernels(KernelRegistry& r) {
  r.Register("BF16MatMul", kCpu, DType::kBFloat16, WarnWithoutBf16Dots(Bf16MatMulKernel));
  r.Register("FusedDense", kCpu, DType::kBFloat16, WarnWithoutBf16Dots(FusedDenseBf16Kernel));
  r.Register("BF16BatchMatMul", kCpu, DType::kBFloat16, WarnWithoutBf16Dots(Bf16BatchMatMulKernel));
  r.RegisterFn("AllFinite", kCpu, {DType::kFloat32, DType::kFloat64}, AllFiniteKernel);
  r.RegisterFn("ControlGate", kCpu, {DType::kBool}, ControlGateKernel);
}

}  // namespace recsdk::internal
