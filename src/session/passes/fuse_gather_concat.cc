// fuse_gather_concat.cc: the "fuse_gather_concat" pass (order 410), switched on by naming it in
// SessionConfig::enable_scope_fusion_passes. The usual input of a ranking model's first layer is
// Concat([pooled lookup of table 1, ..., pooled lookup of table N, dense features], axis 1). Each
// pooled TableGather fills its own [batch, dim] buffer (zeroed when allocated) and the Concat
// copies them all again; the pass turns that Concat into one TableGatherConcat node
// (src/session/table_ops.cc; its kernel src/device/cpu/table_op_kernels.cc) whose kernel pools each
// table's rows straight into its columns of the [batch, width] output: one buffer instead of N + 1,
// and one pass over the activations fewer.
//
// A Concat is fused when it is float32, rank 2, along axis 1, has static widths for its dense
// inputs, and at least one input comes from a fusable TableGather: pooled (a combiner), without
// padding_mask, and with every output read only by this Concat or by its gradient's ConcatGrad
// (which reads them only for their shapes); control inputs on the gathers (a table update waits
// for the reads of its rows) move to the fused node. The gradient's ConcatGrad becomes a SplitV of
// the same widths, so it no longer needs the gathers' outputs, and the gathers, now unused, never
// run (the executor runs only what the fetches need); their backward (TableGradAggregate reads the
// restore indices and the gradient slices, not the gathered rows) is unchanged. The replaced
// nodes keep their names, so fetches still work; the fused node's "fused_from" attribute lists
// the gathers and the Concat it replaced (src/graph/fused_from.h). The fused result is bit-for-bit
// the unfused one: the same sums in the same order, written to a different place.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "src/graph/fused_from.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {
namespace {

using UsesByNode = std::map<const Node*, std::vector<std::pair<Node*, int>>>;

UsesByNode UsesByNodeOf(const Graph& graph) {
  UsesByNode out;
  for (Node* node : graph.nodes()) {
    for (int i = 0; i < node->num_inputs(); ++i) out[node->input(i).node].push_back({node, i});
  }
  return out;
}

bool SameOutput(const Output& a, const Output& b) { return a.node == b.node && a.index == b.index; }

// IsGradOf: `grad` is the ConcatGrad of `concat`: its inputs after the gradient are the concat's.
bool IsGradOf(const Node* grad, const Node* concat) {
  if (grad->type() != "ConcatGrad" || grad->num_inputs() != concat->num_inputs() + 1) return false;
  for (int i = 0; i < concat->num_inputs(); ++i) {
    if (!SameOutput(grad->input(i + 1), concat->input(i))) return false;
  }
  return true;
}

// FusableGather: a pooled gather without masks whose outputs only `concat` and its gradients
// read.
bool FusableGather(const Node* gather, const Node* concat, const UsesByNode& consumers) {
  if (gather->type() != kTableGatherOp || gather->BoolAttr("padding_mask")) return false;
  const std::string combiner = gather->StringAttr("combiner");
  if (combiner.empty() || combiner == "none") return false;
  auto it = consumers.find(gather);
  if (it == consumers.end()) return false;
  for (const auto& [consumer, index] : it->second) {
    if (consumer != concat && !(index > 0 && IsGradOf(consumer, concat))) return false;
  }
  return true;
}

Status FuseGatherConcat(Graph* graph) {
  const UsesByNode consumers = UsesByNodeOf(*graph);
  for (Node* concat : graph->nodes()) {
    if (concat->type() != "Concat" || concat->output_dtype(0) != DType::kFloat32) continue;
    const Shape& out_shape = concat->output_shape(0);
    const int64_t axis = concat->IntAttr("axis");
    if (out_shape.rank() != 2 || (axis != 1 && axis != -1)) continue;
    std::vector<Output> inputs;
    std::vector<int64_t> kinds, dims, widths;
    std::vector<std::string> combiners;
    std::vector<const Node*> fused;  // the gathers whose work moves into the fused node
    bool ok = true;
    int gathers = 0;
    for (const Output& in : concat->inputs()) {
      const Node* src = in.node;
      if (FusableGather(src, concat, consumers)) {
        const int f = in.index;
        inputs.push_back(src->input(0));      // handle
        inputs.push_back(src->input(1));      // unique rows
        inputs.push_back(src->input(2 + f));  // this feature's restore indices
        kinds.push_back(1);
        dims.push_back(src->IntAttr("dim"));
        combiners.push_back(src->StringAttr("combiner"));
        widths.push_back(src->IntAttr("dim"));
        if (std::find(fused.begin(), fused.end(), src) == fused.end()) fused.push_back(src);
        ++gathers;
        continue;
      }
      const int64_t w = in.shape().rank() == 2 ? in.shape().dim(1) : -1;
      if (w < 0 || in.dtype() != DType::kFloat32) {
        ok = false;  // SplitV needs every width
        break;
      }
      inputs.push_back(in);
      kinds.push_back(0);
      widths.push_back(w);
    }
    if (!ok || gathers == 0) continue;
    // The gradients first: IsGradOf compares against the Concat's inputs as they are now.
    std::vector<Node*> grads;
    for (const Output& in : concat->inputs()) {
      auto uses = consumers.find(in.node);
      if (uses == consumers.end()) continue;
      for (const auto& [consumer, index] : uses->second) {
        if (index > 0 && IsGradOf(consumer, concat) &&
            std::find(grads.begin(), grads.end(), consumer) == grads.end()) {
          grads.push_back(consumer);
        }
      }
    }
    for (Node* g : grads) {
      g->ReplaceOp("SplitV", {g->input(0)},
                   {{"axis", AttrValue(int64_t{1})}, {"sizes", AttrValue(widths)}});
    }
    // Table updates wait for the gathers that read the table (control inputs); they now wait
    // for the fused node, which does those reads.
    for (const Node* gather : fused) {
      for (Node* node : graph->nodes()) node->ReplaceControlInput(gather, concat);
    }
    // fused_from: the gathers and the Concat, for dumps and compare-dumps (fused_from.h).
    std::vector<std::string> replaced;
    for (const Node* gather : fused) replaced.push_back(FusedFromEntry(*gather));
    replaced.push_back(FusedFromEntry(*concat));
    concat->ReplaceOp(kTableGatherConcatOp, inputs,
                      {{"segment_kinds", AttrValue(kinds)},
                       {"combiners", AttrValue(combiners)},
                       {"dims", AttrValue(dims)},
                       {kFusedFromAttr, AttrValue(std::move(replaced))}});
  }
  return absl::OkStatus();
}

class FuseGatherConcatPass final : public GraphPass {
 public:
  bool Enabled(const PassContext& ctx) const override {
    return FusionPassEnabled(ctx.config, "fuse_gather_concat");
  }
  Status Run(const PassContext& ctx, Graph* graph) override {
    (void)ctx;
    return FuseGatherConcat(graph);
  }
};

}  // namespace

std::unique_ptr<GraphPass> MakeFuseGatherConcatPass() {
  return std::make_unique<FuseGatherConcatPass>();
}

}  // namespace recsdk::internal
