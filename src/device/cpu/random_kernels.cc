// random_kernels.cc: RandomUniform, RandomNormal, TruncatedNormal. Each run of a node draws a new
// stream (the session's run count, OpKernelContext::step_id, is part of the key, as for
// Dropout), and values depend only on the seed, the run and the element index, never on the
// thread count. Keying on the session's count rather than a count kept in the kernel makes the
// run count the whole RNG state, which checkpoints save (Session::SetRunCount).
#include <atomic>

#include "src/common/hash.h"
#include "src/common/random.h"
#include "src/device/cpu/kernel_util.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

class RandomKernel final : public OpKernel {
 public:
  explicit RandomKernel(int kind) : kind_(kind) {}

  Status Compute(OpKernelContext& ctx) override {
    const Node& n = ctx.node();
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, n.ShapeAttr("shape")));
    const uint64_t key = CombineSeeds(DeriveSeed(ctx.graph_seed(), n.IntAttr("seed"), n.name()),
                                      static_cast<uint64_t>(ctx.step_id()));
    const double a = n.FloatAttr("a"), b = n.FloatAttr("b");
    return DispatchFloat(ctx, out->dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* o = out->data<T>();
      ParallelFor(out->num_elements(), 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
          PhiloxStream stream(key, static_cast<uint64_t>(i));
          double v;
          if (kind_ == 0) {
            v = a + (b - a) * stream.Uniform();
          } else if (kind_ == 1) {
            v = a + b * stream.Normal();
          } else {
            v = a + b * stream.TruncatedNormal();
          }
          o[i] = static_cast<T>(v);
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  int kind_;
};

}  // namespace

void RegisterCpuRandomKernels(KernelRegistry& r) {
  const char* types[] = {"RandomUniform", "RandomNormal", "TruncatedNormal"};
  for (int kind = 0; kind < 3; ++kind) {
    r.Register(types[kind], kCpu, DType::kInvalid,
               [kind](const Node&) -> StatusOr<std::unique_ptr<OpKernel>> {
                 return std::unique_ptr<OpKernel>(new RandomKernel(kind));
               });
  }
}

}  // namespace recsdk::internal
