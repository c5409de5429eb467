// matmul_kernels.cc: MatMul and BatchMatMul. float32 goes through ParallelSgemm (gemm.h: oneDNN
// or the ISA-dispatched Eigen kernel, one block per thread); float64 uses Eigen directly.
#include <Eigen/Core>
#include <algorithm>

#include "src/device/cpu/gemm.h"
#include "src/device/cpu/gemm_tuner.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

template <typename T>
void GemmEigen(int64_t m, int64_t n, int64_t k, const T* a, bool ta, const T* b, bool tb, T* c) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const Mat> am(a, ta ? k : m, ta ? m : k);
  Eigen::Map<const Mat> bm(b, tb ? n : k, tb ? k : n);
  Eigen::Map<Mat> cm(c, m, n);
  if (!ta && !tb) cm.noalias() = am * bm;
  if (!ta && tb) cm.noalias() = am * bm.transpose();
  if (ta && !tb) cm.noalias() = am.transpose() * bm;
  if (ta && tb) cm.noalias() = am.transpose() * bm.transpose();
}

template <typename T>
void Gemm(Device* device, int64_t m, int64_t n, int64_t k, const T* a, bool ta, const T* b, bool tb,
          T* c) {
  if constexpr (std::is_same_v<T, float>) {
    RunGemm(device, GemmShape{0, m, n, k, ta, tb}, a, b, c);
  } else {
    GemmEigen<T>(m, n, k, a, ta, b, tb, c);
  }
}

template <typename T>
Status MatMulTyped(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.node().BoolAttr("transpose_a"), tb = ctx.node().BoolAttr("transpose_b");
  if (a.rank() != 2 || b.rank() != 2)
    return ctx.Error("inputs must be matrices, got {} and {}", a.shape().ToString(),
                     b.shape().ToString());
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != kb) {
    return ctx.Error("inner dimensions differ: a {} (transpose_a={}) vs b {} (transpose_b={})",
                     a.shape().ToString(), ta, b.shape().ToString(), tb);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{m, n}));
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    std::fill_n(out->data<T>(), m * n, T(0));
    return absl::OkStatus();
  }
  Gemm<T>(ctx.device(), m, n, k, a.data<T>(), ta, b.data<T>(), tb, out->data<T>());
  return absl::OkStatus();
}

template <typename T>
Status BatchMatMulTyped(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const bool ax = ctx.node().BoolAttr("adj_x"), ay = ctx.node().BoolAttr("adj_y");
  const int r = x.rank();
  if (r < 2 || y.rank() != r)
    return ctx.Error("ranks differ or < 2: {} vs {}", x.shape().ToString(), y.shape().ToString());
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
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  if (k == 0) {
    std::fill_n(out->data<T>(), out->num_elements(), T(0));
    return absl::OkStatus();
  }
  const T* xs = x.data<T>();
  const T* ys = y.data<T>();
  T* os = out->data<T>();
  if constexpr (std::is_same_v<T, float>) {
    RunGemm(ctx.device(), GemmShape{batch, m, n, k, ax, ay}, xs, ys, os);
  } else {
    ParallelFor(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi) {
        GemmEigen<T>(m, n, k, xs + bi * m * k, ax, ys + bi * k * n, ay, os + bi * m * n);
      }
    });
  }
  return absl::OkStatus();
}

// FusedDense: act(a w + b). The bias and ReLU run per row block right after its product.
template <typename T>
Status FusedDenseTyped(OpKernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  const std::string act = NodeAttrs(ctx.node()).String("activation");
  if (a.rank() != 2 || w.rank() != 2 || bias.rank() != 1 || a.dim(1) != w.dim(0) ||
      bias.dim(0) != w.dim(1)) {
    return ctx.Error("shapes {} x {} + {} do not fit a [m,k] x [k,n] + [n] dense layer",
                     a.shape().ToString(), w.shape().ToString(), bias.shape().ToString());
  }
  const int64_t m = a.dim(0), k = a.dim(1), n = w.dim(1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{m, n}));
  if (m == 0 || n == 0) return absl::OkStatus();
  T* c = out->data<T>();
  const T* b = bias.data<T>();
  const bool relu = act == "relu";
  auto epilogue = [&](int64_t r0, int64_t r1) { AddBiasRows(c, b, n, r0, r1, relu); };

  if (k == 0) {
    std::fill_n(c, m * n, T(0));
    epilogue(0, m);
  } else if constexpr (std::is_same_v<T, float>) {
    RunGemm(ctx.device(), GemmShape{0, m, n, k, false, false}, a.data<T>(), w.data<T>(), c,
            epilogue);
  } else {
    GemmEigen<T>(m, n, k, a.data<T>(), false, w.data<T>(), false, c);
    epilogue(0, m);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuMatMulKernels(KernelRegistry& r) {
  r.RegisterFn("FusedDense", kCpu, {DType::kFloat32}, FusedDenseTyped<float>);
  r.RegisterFn("FusedDense", kCpu, {DType::kFloat64}, FusedDenseTyped<double>);
  r.RegisterFn("MatMul", kCpu, {DType::kFloat32}, MatMulTyped<float>);
  r.RegisterFn("MatMul", kCpu, {DType::kFloat64}, MatMulTyped<double>);
  r.RegisterFn("BatchMatMul", kCpu, {DType::kFloat32}, BatchMatMulTyped<float>);
  r.RegisterFn("BatchMatMul", kCpu, {DType::kFloat64}, BatchMatMulTyped<double>);
}

}  // namespace recsdk::internal
