// fuse_dense.cc: the "fuse_dense" pass (order 400), switched on by naming it in
// SessionConfig::enable_scope_fusion_passes. It turns MatMul -> BiasAdd (-> Relu) into one
// FusedDense node (src/graph/ops/fused_ops.cc), whose kernel adds the bias and applies the ReLU
// to each row block of the product right after computing it, while the block is in cache: two
// full passes over the [batch, units] activations fewer per layer, and one buffer fewer.
//
// It runs on the Session's graph after autodiff, so the backward graph is already there: the
// ReluGrad nodes of the fused ReLU read the pre-activation (the BiasAdd output); they are rewired
// to read the fused output instead, which has the same sign pattern (relu(z) > 0 exactly where
// z > 0), so the pre-activation is no longer kept alive for the backward pass. A chain is fused
// only when the MatMul has no transposes and its product feeds nothing but the BiasAdd, and the
// ReLU only when the pre-activation feeds nothing but the Relu and its ReluGrads; otherwise the
// BiasAdd alone becomes FusedDense with activation "none". The replaced node keeps its name, so
// fetches and "name:index" references still work; the MatMul (and BiasAdd) it bypasses stay in
// the graph, unused, and the executor never runs them. The node ids keep their order (FusedDense
// takes the place of the last node of the chain, after all its inputs). The fused node's
// "fused_from" attribute lists the ops it replaced (src/graph/fused_from.h), so a dump and
// compare-dumps can say what it stands for.
#include <map>
#include <utility>
#include <vector>

#include "src/graph/fused_from.h"
#include "src/session/passes/pass_manager.h"

namespace recsdk::internal {
namespace {

using Consumers = std::map<std::pair<const Node*, int>, std::vector<std::pair<Node*, int>>>;

Consumers ConsumersOf(const Graph& graph) {
  Consumers out;
  for (Node* node : graph.nodes()) {
    for (int i = 0; i < node->num_inputs(); ++i) {
      const Output& in = node->input(i);
      out[{in.node, in.index}].push_back({node, i});
    }
  }
  return out;
}

Status FuseDense(Graph* graph) {
  const Consumers consumers = ConsumersOf(*graph);
  auto uses = [&](const Node* n, int i) -> const std::vector<std::pair<Node*, int>>& {
    static const std::vector<std::pair<Node*, int>> kNone;
    auto it = consumers.find({n, i});
    return it == consumers.end() ? kNone : it->second;
  };
  for (Node* bias : graph->nodes()) {
    if (bias->type() != "BiasAdd") continue;
    const Node* mm = bias->input(0).node;
    // BF16MatMul: the mixed_precision pass (order 300) ran first; the fused node then takes the
    // bfloat16 operands and its kernel runs the bfloat16 product.
    if ((mm->type() != "MatMul" && mm->type() != "BF16MatMul") || mm->BoolAttr("transpose_a") ||
        mm->BoolAttr("transpose_b")) {
      continue;
    }
    const DType dtype = bias->output_dtype(0);
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64) continue;
    if (uses(mm, 0).size() != 1 || bias->input(1).shape().rank() != 1) continue;
    const std::vector<Output> inputs = {mm->input(0), mm->input(1), bias->input(1)};
    // The ReLU joins when the pre-activation feeds only one Relu and that Relu's gradients.
    Node* relu = nullptr;
    std::vector<Node*> relu_grads;
    bool only_relu = true;
    for (const auto& [consumer, index] : uses(bias, 0)) {
      if (consumer->type() == "Relu" && relu == nullptr) {
        relu = consumer;
      } else if (consumer->type() == "ReluGrad" && index == 0) {
        relu_grads.push_back(consumer);
      } else {
        only_relu = false;
      }
    }
    bool fuse_relu = relu != nullptr && only_relu && relu->num_inputs() == 1;
    for (const Node* g : relu_grads) fuse_relu = fuse_relu && g->id() > relu->id();
    // fused_from: what the node stands for, for dumps and compare-dumps (src/graph/fused_from.h).
    std::vector<std::string> replaced = {FusedFromEntry(*mm), FusedFromEntry(*bias)};
    if (fuse_relu) {
      replaced.push_back(FusedFromEntry(*relu));
      relu->ReplaceOp("FusedDense", inputs,
                      {{"activation", AttrValue(std::string("relu"))},
                       {kFusedFromAttr, AttrValue(std::move(replaced))}});
      for (Node* g : relu_grads) g->set_input(0, relu->output(0));
    } else {
      bias->ReplaceOp("FusedDense", inputs,
                      {{"activation", AttrValue(std::string("none"))},
                       {kFusedFromAttr, AttrValue(std::move(replaced))}});
    }
  }
  return absl::OkStatus();
}

class FuseDensePass final : public GraphPass {
 public:
  bool Enabled(const PassContext& ctx) const override {
    return FusionPassEnabled(ctx.config, "fuse_dense");
  }
  Status Run(const PassContext&, Graph* graph) override { return FuseDense(graph); }
};

}  // namespace

std::unique_ptr<GraphPass> MakeFuseDensePass() { return std::make_unique<FuseDensePass>(); }

}  // namespace recsdk::internal
