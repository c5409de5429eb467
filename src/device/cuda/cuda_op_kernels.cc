// cuda_op_kernels.cc: the "cuda" device's op kernels: the ops of the DLRM and little_demo samples
// that recsdk_cuda has CUDA kernels for (cuda_kernels.h), plus the ops that move no data (views,
// handles, NoOp) and the variable updates. Each kernel checks shapes, allocates its outputs in
// device memory through its context and enqueues its launches on the device's compute stream; it
// returns before the GPU runs them (errors of the launch at once, of the run at the next wait).
//
// The table ops that read and update rows are in cuda_table_kernels.cc. What has no kernel here
// runs on the host under mix_compile_mode (the placement pass inserts the copies): the key stage
// and the key work of lookups, TableGradAggregate, initialisers (RandomUniform, Fill, Cast) and
// the other ops without a CUDA kernel. Ops on variables never do (the placement rule: they run
// where the variable lives, or the session fails naming them).
//
// Cases a registered op's CUDA kernel does not cover are computed on the host inside the op's own
// kernel (RunOnHost: inputs copied to the host, the CPU kernel, outputs copied back), correct and
// slow: Add/Sub/Mul with broadcasting; ReduceSum/ReduceMean/ReduceSumGrad over axes that are not
// one contiguous block; Transpose other than 2-D {1, 0}; FusedDense with an activation other than
// none or relu; AssignAdd/AssignSub of a non-float32 variable (the int64 global step).
// Variables live in device memory, so every op that writes one runs here: ApplyMomentum and
// ApplyRmsProp have no CUDA kernel and are staged through the host (RunUpdateOnHost). Otherwise
// only float32 kernels are registered (the samples' dtype); other dtypes go to the host.
#include <cuda_runtime.h>

#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/cuda/cuda_device.h"
#include "src/device/cuda/cuda_error.h"
#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_op_util.h"
#include "src/device/resource_mgr.h"

namespace recsdk::cuda {

using internal::KernelRegistry;
using internal::OpKernelContext;

StatusOr<Stream*> StreamOf(OpKernelContext& ctx) {
  Stream* s = ComputeStreamOf(ctx.device());
  if (s == nullptr) {
    return absl::InternalError(
        fmt::format("op \"{}\" ({}): a cuda kernel runs on {}, which is not a cuda device",
                    ctx.node().name(), ctx.node().type(), ctx.device()->name()));
  }
  return s;
}

// OnHost: `t` readable by the host (a copy through the device when it is in device memory).
StatusOr<Tensor> OnHost(OpKernelContext& ctx, const Tensor& t) {
  if (t.on_host() || t.dtype() == DType::kResource || t.num_elements() == 0) return t;
  RECSDK_ASSIGN_OR_RETURN(Tensor host, Tensor::Create(t.dtype(), t.shape()));
  RECSDK_RETURN_IF_ERROR(ctx.device()->data_transfer().CopyDeviceToHost(t, &host));
  return host;
}

// RunOnHost: the node's CPU kernel on host copies of its inputs, its outputs copied back to the
// device (set_output uploads host tensors). Never for ops that write resources.
Status RunOnHost(OpKernelContext& ctx) {
  const Node& node = ctx.node();
  internal::Device* host = HostDeviceOf(ctx.device());
  const internal::KernelFactory* factory =
      KernelRegistry::Global().Find(node.type(), "cpu", internal::KernelDType(node), "");
  if (host == nullptr || factory == nullptr) {
    return absl::InternalError(fmt::format(
        "op \"{}\" ({}): this case is computed on the host, but {}", node.name(), node.type(),
        host == nullptr ? "the device has no host device" : "the host has no kernel for it"));
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<internal::OpKernel> kernel, (*factory)(node));
  std::vector<Tensor> inputs;
  inputs.reserve(static_cast<size_t>(ctx.num_inputs()));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(Tensor t, OnHost(ctx, ctx.input(i)));
    inputs.push_back(std::move(t));
  }
  std::vector<const Tensor*> pointers;
  for (const Tensor& t : inputs) pointers.push_back(&t);
  std::vector<Tensor> outputs(static_cast<size_t>(node.num_outputs()));
  OpKernelContext host_ctx(node, host, ctx.resources(), ctx.step_id(), ctx.graph_seed(),
                           std::move(pointers), &outputs);
  RECSDK_RETURN_IF_ERROR(kernel->Compute(host_ctx));
  for (int o = 0; o < node.num_outputs(); ++o) {
    if (outputs[o].IsInitialized()) ctx.set_output(o, std::move(outputs[o]));
  }
  return absl::OkStatus();
}

namespace {

std::vector<std::string>& MutableOps() {
  static auto* ops = new std::vector<std::string>();
  return *ops;
}

}  // namespace

void RegisterCudaOp(KernelRegistry& r, const char* op, std::vector<DType> dtypes,
                    internal::LambdaKernel::Fn fn) {
  r.RegisterFn(op, kCudaDeviceType, std::move(dtypes), std::move(fn));
  MutableOps().push_back(op);
}

namespace {

using internal::Fill;
using internal::VariableResource;

void Reg(KernelRegistry& r, const char* op, std::vector<DType> dtypes,
         internal::LambdaKernel::Fn fn) {
  RegisterCudaOp(r, op, std::move(dtypes), std::move(fn));
}

const float* F(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* F(Tensor* t) { return static_cast<float*>(t->raw_data()); }

Status SameShape(OpKernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return absl::OkStatus();
  return ctx.Error("shapes differ: {} vs {}", a.shape().ToString(), b.shape().ToString());
}

// --- dense math -------------------------------------------------------------------------------

// Product: C [m, n] = op(A) op(B) into `out` (allocated here), for MatMul and FusedDense.
StatusOr<Tensor*> Product(OpKernelContext& ctx, Stream& s, const Tensor& a, bool ta,
                          const Tensor& b, bool tb) {
  if (a.rank() != 2 || b.rank() != 2) {
    return ctx.Error("inputs must be matrices, got {} and {}", a.shape().ToString(),
                     b.shape().ToString());
  }
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != kb) {
    return ctx.Error("inner dimensions differ: {} x {} (transpose_a {}, transpose_b {})",
                     a.shape().ToString(), b.shape().ToString(), ta, tb);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{m, n}));
  GemmOperand ga{a.raw_data(), std::max<int64_t>(1, a.dim(1)), ta};
  GemmOperand gb{b.raw_data(), std::max<int64_t>(1, b.dim(1)), tb};
  RECSDK_RETURN_IF_ERROR(
      Gemm(s, GemmInput::kFloat32, m, n, k, ga, gb, F(out), std::max<int64_t>(1, n)));
  return out;
}

Status MatMulKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  return Product(ctx, *s, ctx.input(0), ctx.node().BoolAttr("transpose_a"), ctx.input(1),
                 ctx.node().BoolAttr("transpose_b"))
      .status();
}

Status FusedDenseKernel(OpKernelContext& ctx) {
  const std::string act = ctx.node().StringAttr("activation", "none");
  if (act != "none" && act != "relu") return RunOnHost(ctx);
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& bias = ctx.input(2);
  const Tensor& w = ctx.input(1);
  if (bias.rank() != 1 || w.rank() != 2 || bias.dim(0) != w.dim(1)) {
    return ctx.Error("bias {} does not fit weights {}", bias.shape().ToString(),
                     w.shape().ToString());
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, Product(ctx, *s, ctx.input(0), false, w, false));
  return BiasAdd(*s, F(out), F(bias), F(out), out->dim(0), out->dim(1),
                 act == "relu" ? Activation::kRelu : Activation::kNone);
}

Status BiasAddKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const int64_t c = b.num_elements();
  if (b.rank() != 1 || x.rank() == 0 || x.dim(x.rank() - 1) != c) {
    return ctx.Error("bias of {} elements does not match the last dimension of {}", c,
                     x.shape().ToString());
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  if (x.num_elements() == 0) return absl::OkStatus();
  return BiasAdd(*s, F(x), F(b), F(out), x.num_elements() / c, c);
}

Status BiasAddGradKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& dy = ctx.input(0);
  if (dy.rank() == 0) return ctx.Error("the gradient must have at least one dimension");
  const int64_t c = dy.dim(dy.rank() - 1);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{c}));
  if (c == 0) return absl::OkStatus();
  return Reduce(*s, ReduceKind::kSum, F(dy), 1, dy.num_elements() / c, c, F(out));
}

void RegisterUnary(KernelRegistry& r, const char* op, UnaryOp kind) {
  Reg(r, op, {DType::kFloat32}, [kind](OpKernelContext& ctx) -> Status {
    RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
    const Tensor& x = ctx.input(0);
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
    return Unary(*s, kind, F(x), F(out), x.num_elements());
  });
}

void RegisterUnaryGrad(KernelRegistry& r, const char* op, UnaryOp kind) {
  Reg(r, op, {DType::kFloat32}, [kind](OpKernelContext& ctx) -> Status {
    RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
    const Tensor& ref = ctx.input(0);
    const Tensor& dy = ctx.input(1);
    RECSDK_RETURN_IF_ERROR(SameShape(ctx, ref, dy));
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, ref.shape()));
    return UnaryGrad(*s, kind, F(ref), F(dy), F(out), ref.num_elements());
  });
}

void RegisterBinary(KernelRegistry& r, const char* op, BinaryOp kind) {
  Reg(r, op, {DType::kFloat32}, [kind](OpKernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (x.shape() != y.shape()) return RunOnHost(ctx);  // broadcasting: no CUDA kernel yet
    RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
    return Binary(*s, kind, F(x), F(y), F(out), x.num_elements());
  });
}

Status AddNKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  if (ctx.num_inputs() == 0) return ctx.Error("needs at least one input");
  std::vector<const float*> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    RECSDK_RETURN_IF_ERROR(SameShape(ctx, ctx.input(0), ctx.input(i)));
    inputs.push_back(F(ctx.input(i)));
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, ctx.input(0).shape()));
  if (out->num_elements() == 0) return absl::OkStatus();
  return AddN(*s, inputs, F(out), out->num_elements());
}

void RegisterReduce(KernelRegistry& r, const char* op, ReduceKind kind) {
  Reg(r, op, {DType::kFloat32}, [kind](OpKernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    const std::vector<int64_t> axes = ctx.node().IntsAttr("axes");
    std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
    for (int64_t a : axes) {
      const int64_t i = a < 0 ? a + rank : a;
      if (i < 0 || i >= rank)
        return ctx.Error("axis {} is out of range for {}", a, x.shape().ToString());
      reduced[static_cast<size_t>(i)] = true;
    }
    int first = -1, last = -1;
    for (int i = 0; i < rank; ++i) {
      if (!reduced[static_cast<size_t>(i)]) continue;
      if (first < 0) first = i;
      last = i;
    }
    for (int i = first; first >= 0 && i <= last; ++i) {
      if (!reduced[static_cast<size_t>(i)]) return RunOnHost(ctx);  // not one block of axes
    }
    int64_t outer = 1, axis = 1, inner = 1;
    Shape out_shape;
    for (int i = 0; i < rank; ++i) {
      const bool red = reduced[static_cast<size_t>(i)];
      (first < 0 || i < first ? outer : i > last ? inner : axis) *= x.dim(i);
      if (!red) {
        out_shape.AddDim(x.dim(i));
      } else if (ctx.node().BoolAttr("keep_dims")) {
        out_shape.AddDim(1);
      }
    }
    RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
    if (out->num_elements() == 0) return absl::OkStatus();
    return Reduce(*s, kind, F(x), outer, axis, inner, F(out));
  });
}

// ReduceSumGrad: dy (the reduced shape) broadcast back to x's shape, times 1 / count for a mean
// (the CPU's scale, computed the same way in float32).
Status ReduceSumGradKernel(OpKernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const int rank = x.rank();
  const std::vector<int64_t> axes = ctx.node().IntsAttr("axes");
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    const int64_t i = a < 0 ? a + rank : a;
    if (i < 0 || i >= rank)
      return ctx.Error("axis {} is out of range for {}", a, x.shape().ToString());
    reduced[static_cast<size_t>(i)] = true;
  }
  int first = -1, last = -1;
  for (int i = 0; i < rank; ++i) {
    if (!reduced[static_cast<size_t>(i)]) continue;
    if (first < 0) first = i;
    last = i;
  }
  for (int i = first; first >= 0 && i <= last; ++i) {
    if (!reduced[static_cast<size_t>(i)]) return RunOnHost(ctx);  // not one block of axes
  }
  int64_t outer = 1, axis = 1, inner = 1;
  for (int i = 0; i < rank; ++i) {
    (first < 0 || i < first ? outer : i > last ? inner : axis) *= x.dim(i);
  }
  if (dy.num_elements() != outer * inner) {
    return ctx.Error("gradient {} does not fit {} reduced over the node's {} axes",
                     dy.shape().ToString(), x.shape().ToString(), axes.size());
  }
  const float scale =
      ctx.node().BoolAttr("mean") && axis > 0 ? 1.0f / static_cast<float>(axis) : 1.0f;
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  if (out->num_elements() == 0) return absl::OkStatus();
  return Broadcast(*s, F(dy), outer, axis, inner, scale, F(out));
}

Status SigmoidCeKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& z = ctx.input(0);
  const Tensor& x = ctx.input(1);
  if (z.shape() != x.shape()) {
    return ctx.Error("labels {} and logits {} differ in shape", z.shape().ToString(),
                     x.shape().ToString());
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, x.shape()));
  return SigmoidCrossEntropy(*s, F(z), F(x), F(out), x.num_elements());
}

Status DotInteractionKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& x = ctx.input(0);
  if (x.rank() != 3)
    return ctx.Error("input must be [batch, features, dim], got {}", x.shape().ToString());
  const int64_t batch = x.dim(0), f = x.dim(1), d = x.dim(2);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output_uninitialized(0, Shape{batch, f * (f - 1) / 2}));
  if (out->num_elements() == 0) return absl::OkStatus();
  return DotInteraction(*s, F(x), batch, f, d, F(out));
}

Status DotInteractionGradKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  if (x.rank() != 3)
    return ctx.Error("input must be [batch, features, dim], got {}", x.shape().ToString());
  const int64_t batch = x.dim(0), f = x.dim(1), d = x.dim(2);
  if (dy.rank() != 2 || dy.dim(0) != batch || dy.dim(1) != f * (f - 1) / 2) {
    return ctx.Error("gradient {} does not match features {}: it must be [{}, {}]",
                     dy.shape().ToString(), x.shape().ToString(), batch, f * (f - 1) / 2);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output_uninitialized(0, x.shape()));
  if (dx->num_elements() == 0) return absl::OkStatus();
  return DotInteractionGrad(*s, F(x), F(dy), batch, f, d, F(dx));
}

// --- joins and views --------------------------------------------------------------------------

// Columns: the tensor as [rows, cols] around `axis`: rows = dims before it, cols = the rest.
int64_t ColsFrom(const Shape& s, int axis) {
  int64_t c = 1;
  for (int i = axis; i < s.rank(); ++i) c *= s.dim(i);
  return c;
}

Status ConcatKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& first = ctx.input(0);
  int axis = static_cast<int>(ctx.node().IntAttr("axis"));
  if (axis < 0) axis += first.rank();
  if (axis < 0 || axis >= first.rank())
    return ctx.Error("axis is out of range for {}", first.shape().ToString());
  Shape out_shape = first.shape();
  int64_t total = 0, rows = 1;
  for (int d = 0; d < axis; ++d) rows *= first.dim(d);
  std::vector<ConcatInput> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    if (t.rank() != first.rank())
      return ctx.Error("input {} has rank {}, input 0 {}", i, t.rank(), first.rank());
    for (int d = 0; d < first.rank(); ++d) {
      if (d != axis && t.dim(d) != first.dim(d)) {
        return ctx.Error("input {} has shape {} but input 0 has {}; only axis {} may differ", i,
                         t.shape().ToString(), first.shape().ToString(), axis);
      }
    }
    total += t.dim(axis);
    if (t.num_elements() > 0) inputs.push_back(ConcatInput{F(t), ColsFrom(t.shape(), axis)});
  }
  out_shape.set_dim(axis, total);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, out_shape));
  if (out->num_elements() == 0) return absl::OkStatus();
  return ConcatColumns(*s, inputs, rows, F(out));
}

// ConcatGrad: dy split back into the inputs' shapes along the axis (strided device copies).
Status ConcatGradKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& dy = ctx.input(0);
  int axis = static_cast<int>(ctx.node().IntAttr("axis"));
  if (axis < 0) axis += dy.rank();
  if (axis < 0 || axis >= dy.rank())
    return ctx.Error("axis is out of range for {}", dy.shape().ToString());
  int64_t rows = 1;
  for (int d = 0; d < axis; ++d) rows *= dy.dim(d);
  const int64_t total_cols = ColsFrom(dy.shape(), axis);
  int64_t col = 0;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Shape& shape = ctx.input(i).shape();
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(i - 1, shape));
    const int64_t cols = ColsFrom(shape, axis);
    if (shape.rank() != dy.rank() || col + cols > total_cols ||
        shape.num_elements() != rows * cols) {
      return ctx.Error("input {} {} does not fit the gradient {} along axis {}", i,
                       shape.ToString(), dy.shape().ToString(), axis);
    }
    if (out->num_elements() > 0) {
      RECSDK_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpy2DAsync(out->raw_data(), static_cast<size_t>(cols) * sizeof(float), F(dy) + col,
                            static_cast<size_t>(total_cols) * sizeof(float),
                            static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows),
                            cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s->native())),
          "ConcatGrad: cudaMemcpy2DAsync"));
    }
    col += cols;
  }
  return absl::OkStatus();
}

Status TransposeKernel(OpKernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto perm = ctx.node().IntsAttr("perm");
  if (x.rank() != 2 || perm != std::vector<int64_t>{1, 0}) return RunOnHost(ctx);
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output_uninitialized(0, Shape{x.dim(1), x.dim(0)}));
  if (out->num_elements() == 0) return absl::OkStatus();
  return Transpose2D(*s, F(x), x.dim(0), x.dim(1), F(out));
}

// ReshapeTo: the input's buffer under `target` (one dimension may be -1).
Status ReshapeTo(OpKernelContext& ctx, Shape target) {
  const Tensor& x = ctx.input(0);
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
  ctx.set_output(0, *std::move(r));
  return absl::OkStatus();
}

// --- variables --------------------------------------------------------------------------------

StatusOr<VariableResource*> VarInput(OpKernelContext& ctx, int i) {
  auto* v = dynamic_cast<VariableResource*>(internal::ResourceFromTensor(ctx.input(i)));
  if (v == nullptr) return ctx.Error("input {} is not a variable handle", i);
  return v;
}

std::string HandleName(const OpKernelContext& ctx, int i) {
  return ctx.node().input(i).node->name();
}

Status NotInitialized(OpKernelContext& ctx, int i) {
  return absl::FailedPreconditionError(
      fmt::format("op \"{}\" ({}): variable \"{}\" is not initialised; run the init op "
                  "(GlobalVariablesInitializer) first",
                  ctx.node().name(), ctx.node().type(), HandleName(ctx, i)));
}

// Writable: the variable's value, private to it (copied on the device when a reader of this
// step still shares its buffer). Caller holds v->mu.
StatusOr<Tensor*> Writable(OpKernelContext& ctx, Stream& s, VariableResource* v, int i) {
  if (!v->initialized()) return NotInitialized(ctx, i);
  if (v->value.BufferRefCount() > 1) {
    RECSDK_ASSIGN_OR_RETURN(Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(
                                              v->dtype(), v->shape(), Fill::kUninitialized));
    RECSDK_RETURN_IF_ERROR(CopyDeviceToDevice(s, fresh.raw_data(), v->value.raw_data(),
                                              static_cast<int64_t>(v->value.TotalBytes())));
    v->value = std::move(fresh);
  }
  return &v->value;
}

Status CheckValue(OpKernelContext& ctx, VariableResource* v, const Tensor& g, int i) {
  if (g.shape() != v->shape() || g.dtype() != v->dtype()) {
    return ctx.Error("value {} {} does not match variable \"{}\" {} {}", DTypeName(g.dtype()),
                     g.shape().ToString(), HandleName(ctx, i), DTypeName(v->dtype()),
                     v->shape().ToString());
  }
  return absl::OkStatus();
}

Status AssignKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, 0));
  const Tensor& value = ctx.input(1);
  RECSDK_RETURN_IF_ERROR(CheckValue(ctx, v, value, 0));
  std::lock_guard<std::mutex> lock(v->mu);
  if (!v->initialized() || v->value.BufferRefCount() > 1) {
    RECSDK_ASSIGN_OR_RETURN(Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(
                                              v->dtype(), v->shape(), Fill::kUninitialized));
    v->value = std::move(fresh);
  }
  return CopyDeviceToDevice(*s, v->value.raw_data(), value.raw_data(),
                            static_cast<int64_t>(value.TotalBytes()));
}

// AssignAddOnHost: value +/- input for a variable of an integer or float64 dtype (the global
// step): both through the host, the result into a fresh buffer of the variable pool.
template <typename T>
Status AssignAddOnHost(OpKernelContext& ctx, VariableResource* v, bool add) {
  RECSDK_ASSIGN_OR_RETURN(Tensor cur, OnHost(ctx, v->value));
  RECSDK_ASSIGN_OR_RETURN(Tensor delta, OnHost(ctx, ctx.input(1)));
  RECSDK_ASSIGN_OR_RETURN(Tensor sum, Tensor::Create(v->dtype(), v->shape()));
  for (int64_t i = 0; i < sum.num_elements(); ++i) {
    sum.data<T>()[i] =
        add ? cur.data<T>()[i] + delta.data<T>()[i] : cur.data<T>()[i] - delta.data<T>()[i];
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(
                                            v->dtype(), v->shape(), Fill::kUninitialized));
  RECSDK_RETURN_IF_ERROR(ctx.device()->data_transfer().CopyHostToDevice(sum, &fresh));
  v->value = std::move(fresh);
  return absl::OkStatus();
}

void RegisterAssignAdd(KernelRegistry& r, const char* op, bool add) {
  Reg(r, op, {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32},
      [add](OpKernelContext& ctx) -> Status {
        RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
        RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, 0));
        const Tensor& value = ctx.input(1);
        RECSDK_RETURN_IF_ERROR(CheckValue(ctx, v, value, 0));
        std::lock_guard<std::mutex> lock(v->mu);
        if (!v->initialized()) return NotInitialized(ctx, 0);
        switch (v->dtype()) {
          case DType::kFloat32: {
            RECSDK_ASSIGN_OR_RETURN(Tensor * t, Writable(ctx, *s, v, 0));
            return Binary(*s, add ? BinaryOp::kAdd : BinaryOp::kSub, F(*t), F(value), F(t),
                          t->num_elements());
          }
          case DType::kFloat64:
            return AssignAddOnHost<double>(ctx, v, add);
          case DType::kInt64:
            return AssignAddOnHost<int64_t>(ctx, v, add);
          case DType::kInt32:
            return AssignAddOnHost<int32_t>(ctx, v, add);
          default:
            return ctx.Error("dtype {} has no cuda kernel", DTypeName(v->dtype()));
        }
      });
}

// LearningRate: the node's learning_rate times its optional float64 multiplier input `index`.
StatusOr<double> LearningRate(OpKernelContext& ctx, int index) {
  const double lr = ctx.node().FloatAttr("learning_rate");
  if (ctx.num_inputs() <= index) return lr;
  RECSDK_ASSIGN_OR_RETURN(Tensor m, OnHost(ctx, ctx.input(index)));
  if (m.dtype() != DType::kFloat64 || m.num_elements() != 1) {
    return ctx.Error("learning-rate multiplier must be a float64 scalar, got {} {}",
                     DTypeName(m.dtype()), m.shape().ToString());
  }
  return lr * m.scalar<double>();
}

// Update: locks the `handles` variables, checks the gradient (input `handles`) against each and
// calls `apply` with their writable values.
template <typename Apply>
Status Update(OpKernelContext& ctx, int handles, Apply apply) {
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  std::vector<VariableResource*> vars;
  const Tensor& grad = ctx.input(handles);
  for (int i = 0; i < handles; ++i) {
    RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, i));
    if (grad.shape() != v->shape() || grad.dtype() != v->dtype()) {
      return ctx.Error("gradient {} {} does not match \"{}\" {} {}", DTypeName(grad.dtype()),
                       grad.shape().ToString(), HandleName(ctx, i), DTypeName(v->dtype()),
                       v->shape().ToString());
    }
    vars.push_back(v);
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  for (VariableResource* v : vars) locks.emplace_back(v->mu);
  std::vector<float*> p;
  for (int i = 0; i < handles; ++i) {
    RECSDK_ASSIGN_OR_RETURN(Tensor * t, Writable(ctx, *s, vars[static_cast<size_t>(i)], i));
    p.push_back(F(t));
  }
  if (grad.num_elements() == 0) return absl::OkStatus();
  return apply(*s, p, F(grad), grad.num_elements());
}

Status ApplyGradientDescentKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 2));
  return Update(ctx, 1, [&](Stream& s, std::vector<float*>& p, const float* g, int64_t n) {
    return DenseSgd(s, p[0], g, n, static_cast<float>(lr));
  });
}

Status ApplyAdagradKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 3));
  const double eps = ctx.node().FloatAttr("epsilon");
  return Update(ctx, 2, [&](Stream& s, std::vector<float*>& p, const float* g, int64_t n) {
    return DenseAdagrad(s, p[0], p[1], g, n, static_cast<float>(lr), static_cast<float>(eps));
  });
}

Status ApplyAdamKernel(OpKernelContext& ctx) {
  const Node& node = ctx.node();
  RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 5));
  const double b1 = node.FloatAttr("beta1"), b2 = node.FloatAttr("beta2");
  const double eps = node.FloatAttr("epsilon"), wd = node.FloatAttr("weight_decay");
  RECSDK_ASSIGN_OR_RETURN(Tensor step, OnHost(ctx, ctx.input(4)));
  if (step.dtype() != DType::kInt64 || step.num_elements() != 1) {
    return ctx.Error("step must be an int64 scalar");
  }
  const double t = static_cast<double>(step.scalar<int64_t>() + 1);
  const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
  DenseAdamStep params;
  params.b1 = static_cast<float>(b1);
  params.b2 = static_cast<float>(b2);
  params.c1 = static_cast<float>(1 - b1);
  params.c2 = static_cast<float>(1 - b2);
  params.eps = static_cast<float>(eps);
  params.lr_t = static_cast<float>(lr_t);
  params.decay = static_cast<float>(lr * wd);
  params.weight_decay = wd != 0;
  return Update(ctx, 3, [&](Stream& s, std::vector<float*>& p, const float* g, int64_t n) {
    return DenseAdam(s, p[0], p[1], p[2], g, n, params);
  });
}

// RunUpdateOnHost: a dense optimizer without a CUDA kernel (Momentum, RMSProp) computed on the
// host: the first `handles` inputs are variables in device memory; host copies of them go to the
// CPU kernel as stand-in variables, and the updated values come back into fresh buffers of the
// variable pool. Correct and slow (every step copies the variables both ways); the samples' SGD,
// Adagrad and Adam have CUDA kernels.
Status RunUpdateOnHost(OpKernelContext& ctx, int handles) {
  const Node& node = ctx.node();
  internal::Device* host = HostDeviceOf(ctx.device());
  const internal::KernelFactory* factory =
      KernelRegistry::Global().Find(node.type(), "cpu", internal::KernelDType(node), "");
  if (host == nullptr || factory == nullptr) {
    return absl::InternalError(
        fmt::format("op \"{}\" ({}): no host device or host kernel to "
                    "compute it on",
                    node.name(), node.type()));
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<internal::OpKernel> kernel, (*factory)(node));
  std::vector<VariableResource*> vars;
  for (int i = 0; i < handles; ++i) {
    RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, i));
    vars.push_back(v);
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  for (VariableResource* v : vars) locks.emplace_back(v->mu);
  std::vector<std::unique_ptr<VariableResource>> stand_ins;
  std::vector<Tensor> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (i < handles) {
      VariableResource* v = vars[static_cast<size_t>(i)];
      if (!v->initialized()) return NotInitialized(ctx, i);
      auto stand_in = std::make_unique<VariableResource>(v->dtype(), v->shape());
      RECSDK_ASSIGN_OR_RETURN(stand_in->value, OnHost(ctx, v->value));
      // A private host copy: the CPU kernel may update it in place.
      if (stand_in->value.BufferRefCount() > 1) stand_in->value = stand_in->value.Copy();
      inputs.push_back(internal::MakeResourceTensor(stand_in.get()));
      stand_ins.push_back(std::move(stand_in));
    } else {
      RECSDK_ASSIGN_OR_RETURN(Tensor t, OnHost(ctx, ctx.input(i)));
      inputs.push_back(std::move(t));
    }
  }
  std::vector<const Tensor*> pointers;
  for (const Tensor& t : inputs) pointers.push_back(&t);
  std::vector<Tensor> outputs(static_cast<size_t>(node.num_outputs()));
  OpKernelContext host_ctx(node, host, ctx.resources(), ctx.step_id(), ctx.graph_seed(),
                           std::move(pointers), &outputs);
  RECSDK_RETURN_IF_ERROR(kernel->Compute(host_ctx));
  for (int i = 0; i < handles; ++i) {
    VariableResource* v = vars[static_cast<size_t>(i)];
    RECSDK_ASSIGN_OR_RETURN(Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(
                                              v->dtype(), v->shape(), Fill::kUninitialized));
    RECSDK_RETURN_IF_ERROR(ctx.device()->data_transfer().CopyHostToDevice(
        stand_ins[static_cast<size_t>(i)]->value, &fresh));
    v->value = std::move(fresh);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterCudaKernels(KernelRegistry& r) {
  const DType any = DType::kInvalid;
  const std::vector<DType> f32 = {DType::kFloat32};
  // Dense math: CUDA kernels (cuda_kernels.h).
  Reg(r, "MatMul", f32, MatMulKernel);
  Reg(r, "FusedDense", f32, FusedDenseKernel);
  Reg(r, "BiasAdd", f32, BiasAddKernel);
  Reg(r, "BiasAddGrad", f32, BiasAddGradKernel);
  RegisterUnary(r, "Relu", UnaryOp::kRelu);
  RegisterUnary(r, "Sigmoid", UnaryOp::kSigmoid);
  RegisterUnary(r, "Tanh", UnaryOp::kTanh);
  RegisterUnary(r, "Neg", UnaryOp::kNeg);
  RegisterUnaryGrad(r, "ReluGrad", UnaryOp::kRelu);
  RegisterUnaryGrad(r, "SigmoidGrad", UnaryOp::kSigmoid);
  RegisterUnaryGrad(r, "TanhGrad", UnaryOp::kTanh);
  RegisterBinary(r, "Add", BinaryOp::kAdd);
  RegisterBinary(r, "Sub", BinaryOp::kSub);
  RegisterBinary(r, "Mul", BinaryOp::kMul);
  Reg(r, "AddN", f32, AddNKernel);
  RegisterReduce(r, "ReduceSum", ReduceKind::kSum);
  RegisterReduce(r, "ReduceMean", ReduceKind::kMean);
  Reg(r, "ReduceSumGrad", f32, ReduceSumGradKernel);
  for (const auto& [op, value] : {std::pair<const char*, float>{"OnesLike", 1.0f},
                                  std::pair<const char*, float>{"ZerosLike", 0.0f}}) {
    Reg(r, op, f32, [value](OpKernelContext& ctx) -> Status {
      RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
      RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                              ctx.allocate_output_uninitialized(0, ctx.input(0).shape()));
      return cuda::Fill(*s, value, F(out), out->num_elements());
    });
  }
  Reg(r, "SigmoidCrossEntropyWithLogits", f32, SigmoidCeKernel);
  Reg(r, "DotInteraction", f32, DotInteractionKernel);
  Reg(r, "DotInteractionGrad", f32, DotInteractionGradKernel);
  Reg(r, "Concat", f32, ConcatKernel);
  Reg(r, "ConcatGrad", f32, ConcatGradKernel);
  Reg(r, "Transpose", f32, TransposeKernel);
  // Ops that move no data: views of their input's buffer, resource handles, nothing.
  for (const char* op : {"Identity", "StopGradient"}) {
    Reg(r, op, {any}, [](OpKernelContext& ctx) {
      ctx.set_output(0, ctx.input(0));
      return absl::OkStatus();
    });
  }
  Reg(r, "NoOp", {any}, [](OpKernelContext&) { return absl::OkStatus(); });
  Reg(r, "Reshape", {any}, [](OpKernelContext& ctx) {
    const auto dims = ctx.node().IntsAttr("shape");
    return ReshapeTo(ctx, Shape(absl::MakeConstSpan(dims)));
  });
  Reg(r, "ReshapeLike", {any},
      [](OpKernelContext& ctx) { return ReshapeTo(ctx, ctx.input(1).shape()); });
  // Variables live in device memory (the variable pool): their ops run here.
  Reg(r, "VarHandle", {any}, [](OpKernelContext& ctx) {
    const Node& n = ctx.node();
    internal::Resource* res = ctx.resources()->LookupOrCreate(n.name(), [&] {
      return std::make_unique<VariableResource>(n.DTypeAttr("dtype"), n.ShapeAttr("shape"));
    });
    ctx.set_output(0, internal::MakeResourceTensor(res));
    return absl::OkStatus();
  });
  Reg(r, "ReadVariable", {any}, [](OpKernelContext& ctx) -> Status {
    RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, 0));
    std::lock_guard<std::mutex> lock(v->mu);
    if (!v->initialized()) return NotInitialized(ctx, 0);
    ctx.set_output(0, v->value);
    return absl::OkStatus();
  });
  Reg(r, "Assign", {any}, AssignKernel);
  RegisterAssignAdd(r, "AssignAdd", true);
  RegisterAssignAdd(r, "AssignSub", false);
  Reg(r, "ApplyGradientDescent", f32, ApplyGradientDescentKernel);
  Reg(r, "ApplyAdagrad", f32, ApplyAdagradKernel);
  Reg(r, "ApplyAdam", f32, ApplyAdamKernel);
  // Every other op that writes a variable must run here too (a host kernel would write GPU memory
  // in place): the dense optimizers without a CUDA kernel, staged through the host.
  Reg(r, "ApplyMomentum", {DType::kFloat32, DType::kFloat64},
      [](OpKernelContext& ctx) { return RunUpdateOnHost(ctx, 2); });
  Reg(r, "ApplyRmsProp", {DType::kFloat32, DType::kFloat64},
      [](OpKernelContext& ctx) { return RunUpdateOnHost(ctx, 4); });
  // The table ops that read and update rows (cuda_table_kernels.cc).
  RegisterCudaTableKernels(r);
}

const std::vector<std::string>& CudaKernelOps() { return MutableOps(); }

}  // namespace recsdk::cuda
