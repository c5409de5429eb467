// mixed_precision.cc: the session pass "mixed_precision" (order 300), what precision_mode
// allow_mix_precision (and the other low-precision modes) do on the CPU backend.
//
// What it rewrites: every float32 MatMul and BatchMatMul of the Session's graph (except those
// whose inner dimension is statically below 32, where bfloat16 does not pay), forward and
// backward alike (autodiff has already built the backward pass in float32 when the Session is
// created), becomes BF16MatMul / BF16BatchMatMul: both operands go through a Cast to bfloat16
// and the product accumulates and returns float32 (bf16_gemm.h: AVX-512 BF16 dot products). One
// Cast per distinct operand, so a weight read by the forward product and by the input-gradient
// product is rounded once per step. The products are where the gain is: they are the bulk of a
// step's arithmetic and the only ops with a bfloat16 kernel here.
//
// What stays float32, on purpose: variables (the master weights) and every optimizer update and
// slot, since the casts read the float32 values each step and the updates write float32; the
// gathered and pooled embeddings until they enter the first layer's product (the pooling is a
// sum, and reductions stay float32); bias adds, activations, losses, softmax, exp/log and
// normalisation (numerically sensitive; their inputs come out of the products as float32). The
// embedding tables and their sparse optimizers never see bfloat16.
//
// Modes (SessionConfig::precision_mode / precision_mode_v2) that enable it: allow_mix_precision,
// force_fp16, and v2's mixed_bfloat16, mixed_float16, fp16 and cube_fp16in_fp32out. On this
// backend they mean the same rewrite: the products are the only ops with a low-precision kernel,
// so "force" has nothing more to force, and float16 runs as bfloat16 because AVX-512 has dot
// products for bfloat16 (VDPBF16PS) but none for float16 on the CPUs this targets (AVX512-FP16
// exists only on Sapphire Rapids and later); bfloat16 also keeps float32's exponent range, so
// loss scaling is optional rather than required. allow_fp32_to_fp16, must_keep_origin_dtype and
// v2's origin disable the pass.
//
// On a CPU without AVX-512 BF16 the pass still runs, so results are the same bits on every
// machine; the products then run the exact scalar emulation, slower than float32, and the pass
// logs a warning saying so.
//
// Threading: like Graph, single-threaded.
#include <map>
#include <set>
#include <utility>

#include "fmt/format.h"
#include "recsdk/ops.h"
#include "recsdk/scope.h"
#include "src/common/status_macros.h"
#include "src/session/passes/pass_manager.h"

namespace recsdk::internal {

bool MixedPrecisionEnabled(const SessionConfig& config) {
  static const std::set<std::string> kModes = {
      "allow_mix_precision", "force_fp16", "mixed_bfloat16",
      "mixed_float16",       "fp16",       "cube_fp16in_fp32out"};
  return kModes.contains(config.precision_mode) || kModes.contains(config.precision_mode_v2);
}

namespace {

// kMinInnerDim: products summing fewer terms stay float32. Packing the operands costs more than
// the dot products save there: DLRM's first bottom layer (k = 13) ran 0.84x as fast in bfloat16
// (benchmarks/precision_bench BM_Gemm/4096/512/13), while k >= 256 ran 1.5-2.4x faster.
constexpr int64_t kMinInnerDim = 32;

// InnerDim: the statically known k of a MatMul/BatchMatMul, or -1.
int64_t InnerDim(const Node& n) {
  const Shape& a = n.input(0).shape();
  if (a.rank() < 2) return -1;
  const bool t = n.type() == "MatMul" ? n.BoolAttr("transpose_a") : n.BoolAttr("adj_x");
  return t ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
}

class MixedPrecisionPass final : public GraphPass {
 public:
  bool Enabled(const PassContext& ctx) const override { return MixedPrecisionEnabled(ctx.config); }

  Status Run(const PassContext&, Graph* graph) override {
    const std::vector<Node*> original = graph->nodes();
    std::map<std::pair<int, int>, Output> casts;     // operand -> its bfloat16 cast
    std::map<int, std::vector<Node*>> casts_before;  // product id -> casts it needs first
    Scope root(graph);
    auto cast = [&](Node* product, const Output& x) -> Output {
      const auto key = std::make_pair(x.node->id(), x.index);
      if (auto it = casts.find(key); it != casts.end()) return it->second;
      const Scope s = root.WithDevice(x.node->device())
                          .WithOpName(graph->UniqueName(x.node->name() + "/to_bf16"));
      const Output c = ops::Cast(s, x, DType::kBFloat16);
      if (c.valid()) {
        casts[key] = c;
        casts_before[product->id()].push_back(c.node);
      }
      return c;
    };
    int rewritten = 0;
    for (Node* n : original) {
      const bool matmul = n->type() == "MatMul", batch = n->type() == "BatchMatMul";
      if (!(matmul || batch) || n->input(0).dtype() != DType::kFloat32 ||
          n->input(1).dtype() != DType::kFloat32) {
        continue;
      }
      if (const int64_t k = InnerDim(*n); k >= 0 && k < kMinInnerDim) continue;
      const Output a = cast(n, n->input(0));
      const Output b = cast(n, n->input(1));
      if (!a.valid() || !b.valid()) return root.status();
      n->ReplaceOp(matmul ? "BF16MatMul" : "BF16BatchMatMul", {a, b}, n->attrs());
      ++rewritten;
    }
    if (rewritten == 0) return absl::OkStatus();
    // The casts were appended; put each before the first product that reads it.
    std::vector<Node*> order;
    std::set<Node*> placed;
    for (Node* n : original) {
      if (auto it = casts_before.find(n->id()); it != casts_before.end()) {
        for (Node* c : it->second) {
          if (placed.insert(c).second) order.push_back(c);
        }
      }
      order.push_back(n);
    }
    RECSDK_RETURN_IF_ERROR(graph->Reorder(order));
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<GraphPass> MakeMixedPrecisionPass() {
  return std::make_unique<MixedPrecisionPass>();
}

}  // namespace recsdk::internal
