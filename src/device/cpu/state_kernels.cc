// state_kernels.cc: variables and the dense optimizers' fused updates.
//
// Updates are copy-on-write: when a read of the variable from this step still holds its buffer,
// the update writes a fresh buffer from the variable pool, so every op of a step sees one value.
#include <cmath>
#include <cstring>

#include "src/common/learning_rate_schedule.h"
#include "src/device/cpu/dense_update_kernels.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

StatusOr<VariableResource*> VarInput(OpKernelContext& ctx, int i) {
  Resource* r = ResourceFromTensor(ctx.input(i));
  auto* v = dynamic_cast<VariableResource*>(r);
  if (v == nullptr) return ctx.Error("input {} is not a variable handle", i);
  return v;
}

// Writable: the variable's value, made private to the variable (copied if a reader shares it).
// Caller holds v->mu.
StatusOr<Tensor*> Writable(OpKernelContext& ctx, VariableResource* v, const std::string& name) {
  if (!v->initialized()) {
    return absl::FailedPreconditionError(
        fmt::format("op \"{}\" ({}): variable \"{}\" is not initialised; run the init op "
                    "(GlobalVariablesInitializer) first",
                    ctx.node().name(), ctx.node().type(), name));
  }
  if (v->value.BufferRefCount() > 1) {
    RECSDK_ASSIGN_OR_RETURN(
        Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(v->dtype(), v->shape()));
    std::memcpy(fresh.raw_data(), v->value.raw_data(), v->value.TotalBytes());
    v->value = fresh;
  }
  return &v->value;
}

std::string HandleName(const OpKernelContext& ctx, int i) {
  return ctx.node().input(i).node->name();
}

Status CheckGradShape(OpKernelContext& ctx, VariableResource* v, const Tensor& g) {
  if (g.shape() != v->shape() || g.dtype() != v->dtype()) {
    return ctx.Error("value {} {} does not match variable \"{}\" {} {}", DTypeName(g.dtype()),
                     g.shape().ToString(), HandleName(ctx, 0), DTypeName(v->dtype()),
                     v->shape().ToString());
  }
  return absl::OkStatus();
}

// Assign / AssignAdd / AssignSub. kind: 0 assign, 1 add, 2 sub.
Status AssignKernel(OpKernelContext& ctx, int kind) {
  RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, 0));
  const Tensor& value = ctx.input(1);
  RECSDK_RETURN_IF_ERROR(CheckGradShape(ctx, v, value));
  std::lock_guard<std::mutex> lock(v->mu);
  if (kind == 0) {
    if (!v->initialized() || v->value.BufferRefCount() > 1) {
      RECSDK_ASSIGN_OR_RETURN(
          Tensor fresh, ctx.device()->variable_allocator().AllocateTensor(v->dtype(), v->shape()));
      v->value = fresh;
    }
    std::memcpy(v->value.raw_data(), value.raw_data(), value.TotalBytes());
    return absl::OkStatus();
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * t, Writable(ctx, v, HandleName(ctx, 0)));
  return DispatchNumeric(ctx, v->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = t->data<T>();
    const T* src = value.data<T>();
    for (int64_t i = 0; i < t->num_elements(); ++i)
      dst[i] = kind == 1 ? dst[i] + src[i] : dst[i] - src[i];
    return absl::OkStatus();
  });
}

// Runs `update(var, slots..., grad, n)` on float data of every handle input after locking them.
template <typename Fn>
Status ApplyUpdate(OpKernelContext& ctx, int num_handles, Fn update) {
  std::vector<VariableResource*> vars;
  for (int i = 0; i < num_handles; ++i) {
    RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, i));
    vars.push_back(v);
  }
  const Tensor& grad = ctx.input(num_handles);
  for (int i = 0; i < num_handles; ++i) {
    if (grad.shape() != vars[i]->shape() || grad.dtype() != vars[i]->dtype()) {
      return ctx.Error("gradient {} {} does not match \"{}\" {} {}", DTypeName(grad.dtype()),
                       grad.shape().ToString(), HandleName(ctx, i), DTypeName(vars[i]->dtype()),
                       vars[i]->shape().ToString());
    }
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  for (VariableResource* v : vars) locks.emplace_back(v->mu);
  std::vector<Tensor*> ts;
  for (int i = 0; i < num_handles; ++i) {
    RECSDK_ASSIGN_OR_RETURN(Tensor * t, Writable(ctx, vars[i], HandleName(ctx, i)));
    ts.push_back(t);
  }
  return DispatchFloat(ctx, grad.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T*> ptrs;
    for (Tensor* t : ts) ptrs.push_back(t->data<T>());
    const T* g = grad.data<T>();
    const int64_t n = grad.num_elements();
    ParallelFor(n, kElementwiseGrain, [&](int64_t s, int64_t e) { update(ptrs, g, s, e); });
    return absl::OkStatus();
  });
}

// LearningRate: the node's learning_rate times its optional multiplier input at `index`.
StatusOr<double> LearningRate(OpKernelContext& ctx, int index) {
  const double lr = ctx.node().FloatAttr("learning_rate");
  if (ctx.num_inputs() <= index) return lr;
  const Tensor& m = ctx.input(index);
  if (m.dtype() != DType::kFloat64 || m.num_elements() != 1) {
    return ctx.Error("learning-rate multiplier must be a float64 scalar, got {} {}",
                     DTypeName(m.dtype()), m.shape().ToString());
  }
  return lr * m.scalar<double>();
}

}  // namespace

void RegisterCpuStateKernels(KernelRegistry& r) {
  const DType any = DType::kInvalid;
  r.RegisterFn("VarHandle", kCpu, {any}, [](OpKernelContext& ctx) {
    const Node& n = ctx.node();
    Resource* res = ctx.resources()->LookupOrCreate(n.name(), [&] {
      return std::make_unique<VariableResource>(n.DTypeAttr("dtype"), n.ShapeAttr("shape"));
    });
    ctx.set_output(0, MakeResourceTensor(res));
    return absl::OkStatus();
  });
  r.RegisterFn("ReadVariable", kCpu, {any}, [](OpKernelContext& ctx) {
    RECSDK_ASSIGN_OR_RETURN(VariableResource * v, VarInput(ctx, 0));
    std::lock_guard<std::mutex> lock(v->mu);
    if (!v->initialized()) {
      return absl::FailedPreconditionError(
          fmt::format("op \"{}\": variable \"{}\" is not initialised; run the init op "
                      "(GlobalVariablesInitializer) first",
                      ctx.node().name(), HandleName(ctx, 0)));
    }
    ctx.set_output(0, v->value);
    return absl::OkStatus();
  });
  r.RegisterFn("Assign", kCpu, {any}, [](OpKernelContext& ctx) { return AssignKernel(ctx, 0); });
  r.RegisterFn("AssignAdd", kCpu, {any}, [](OpKernelContext& ctx) { return AssignKernel(ctx, 1); });
  r.RegisterFn("AssignSub", kCpu, {any}, [](OpKernelContext& ctx) { return AssignKernel(ctx, 2); });

  r.RegisterFn("LearningRateMultiplier", kCpu, {any}, [](OpKernelContext& ctx) {
    const NodeAttrs n(ctx.node());  // absent attributes read as the declared defaults
    const Tensor& step = ctx.input(0);
    if (step.num_elements() != 1) return ctx.Error("step must be an int64 scalar");
    ctx.set_output(
        0, Tensor::Scalar<double>(LearningRateMultiplierAt(
               step.scalar<int64_t>(), n.Int("warmup_steps"), n.Int("decay"), n.Int("decay_steps"),
               n.Float("decay_rate"), n.Bool("staircase"), n.Float("alpha"))));
    return absl::OkStatus();
  });
  r.RegisterFn("ApplyGradientDescent", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 2));
    return ApplyUpdate(ctx, 1, [lr](auto& p, auto* g, int64_t s, int64_t e) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      for (int64_t i = s; i < e; ++i) p[0][i] -= static_cast<T>(lr) * g[i];
    });
  });
  r.RegisterFn("ApplyMomentum", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 3));
    const double mu = ctx.node().FloatAttr("momentum");
    const bool nesterov = ctx.node().BoolAttr("use_nesterov");
    return ApplyUpdate(ctx, 2, [=](auto& p, auto* g, int64_t s, int64_t e) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      for (int64_t i = s; i < e; ++i) {
        p[1][i] = static_cast<T>(mu) * p[1][i] + g[i];
        p[0][i] -= nesterov ? static_cast<T>(lr) * (g[i] + static_cast<T>(mu) * p[1][i])
                            : static_cast<T>(lr) * p[1][i];
      }
    });
  });
  r.RegisterFn("ApplyAdagrad", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 3));
    const double eps = ctx.node().FloatAttr("epsilon");
    return ApplyUpdate(ctx, 2, [=](auto& p, auto* g, int64_t s, int64_t e) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      if constexpr (std::is_same_v<T, float>) {
        // The vector loop of dense_update_kernels.h, bitwise equal to the one below.
        DenseUpdateFast().adagrad(p[0] + s, p[1] + s, g + s, e - s, static_cast<float>(lr),
                                  static_cast<float>(eps));
        return;
      }
      for (int64_t i = s; i < e; ++i) {
        p[1][i] += g[i] * g[i];
        p[0][i] -= static_cast<T>(lr) * g[i] / (std::sqrt(p[1][i]) + static_cast<T>(eps));
      }
    });
  });
  r.RegisterFn("ApplyAdam", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    const Node& n = ctx.node();
    RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 5));
    const double b1 = n.FloatAttr("beta1"), b2 = n.FloatAttr("beta2");
    const double eps = n.FloatAttr("epsilon"), wd = n.FloatAttr("weight_decay");
    const Tensor& step = ctx.input(4);
    if (step.dtype() != DType::kInt64 || step.num_elements() != 1)
      return ctx.Error("step must be an int64 scalar");
    const double t = static_cast<double>(step.scalar<int64_t>() + 1);
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    return ApplyUpdate(ctx, 3, [=](auto& p, auto* g, int64_t s, int64_t e) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      if constexpr (std::is_same_v<T, float>) {
        // The vector loop of dense_update_kernels.h, bitwise equal to the one below.
        const AdamParams params{static_cast<float>(b1),      static_cast<float>(b2),
                                static_cast<float>(1 - b1),  static_cast<float>(1 - b2),
                                static_cast<float>(eps),     static_cast<float>(lr_t),
                                static_cast<float>(lr * wd), wd != 0};
        DenseUpdateFast().adam(p[0] + s, p[1] + s, p[2] + s, g + s, e - s, params);
        return;
      }
      for (int64_t i = s; i < e; ++i) {
        if (wd != 0) p[0][i] -= static_cast<T>(lr * wd) * p[0][i];
        p[1][i] = static_cast<T>(b1) * p[1][i] + static_cast<T>(1 - b1) * g[i];
        p[2][i] = static_cast<T>(b2) * p[2][i] + static_cast<T>(1 - b2) * g[i] * g[i];
        p[0][i] -= static_cast<T>(lr_t) * p[1][i] / (std::sqrt(p[2][i]) + static_cast<T>(eps));
      }
    });
  });
  r.RegisterFn("ApplyRmsProp", kCpu, kFloatTypes, [](OpKernelContext& ctx) {
    const Node& n = ctx.node();
    RECSDK_ASSIGN_OR_RETURN(const double lr, LearningRate(ctx, 5));
    const double rho = n.FloatAttr("rho"), mom = n.FloatAttr("momentum");
    const double eps = n.FloatAttr("epsilon");
    const bool centered = n.BoolAttr("centered");
    return ApplyUpdate(ctx, 4, [=](auto& p, auto* g, int64_t s, int64_t e) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
      for (int64_t i = s; i < e; ++i) {
        p[1][i] = static_cast<T>(rho) * p[1][i] + static_cast<T>(1 - rho) * g[i] * g[i];
        T denom = p[1][i];
        if (centered) {
          p[3][i] = static_cast<T>(rho) * p[3][i] + static_cast<T>(1 - rho) * g[i];
          denom -= p[3][i] * p[3][i];
        }
        p[2][i] = static_cast<T>(mom) * p[2][i] +
                  static_cast<T>(lr) * g[i] / std::sqrt(denom + static_cast<T>(eps));
        p[0][i] -= p[2][i];
      }
    });
  });
}

}  // namespace recsdk::internal
