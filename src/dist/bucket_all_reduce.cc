// bucket_all_reduce.cc: the session pass "bucket_all_reduce" (order 940), the spec's
// hcom_parallel: the dense gradients' all-reduce in buckets that start while backward still runs.
//
// Without it (hcom_parallel false, the default) DistributedOptimizer's one AllReduceMean node
// waits for every gradient, so the reduction starts after backward. With hcom_parallel true and
// several ranks, the pass splits each AllReduceMean of two or more tensors into up to
// kAllReduceBuckets AllReduceMean nodes, in backward order: the tensors sorted by the id of the
// node that produces them (backward makes the gradients of the top layers first, so they have
// the lower ids), cut into contiguous buckets of about equal bytes. Each bucket's node takes
// the place just after its last gradient in the id order, so order_collectives (950) chains the
// buckets in backward order between the step's other collectives, the same on every rank, and
// the executor can reduce a top bucket while it still computes the gradients of lower layers
// (stream_max_parallel_num > 1 runs independent nodes at once; with one stream the buckets
// still run in order, only without overlap). Readers of the old node's outputs read the buckets'
// instead; the old node becomes an AllReduceBuckets, which forwards the buckets' outputs in its
// old order, so a fetch of "AllReduceMean:i" still works.
//
// Results: each element is reduced exactly as before (the mean of the ranks' values: at two
// ranks (a + b) / 2 whatever the bucket), so two ranks train bit for bit as with
// hcom_parallel false; at more ranks MPI may add in another order for another message size, so
// results agree to rounding.
//
// Threading: like Graph, single-threaded.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/dist/collective_ops.h"
#include "src/dist/graph_order.h"
#include "src/graph/op_registry.h"
#include "src/session/passes/pass_manager.h"

namespace recsdk::dist {
namespace {

// TensorBytes: a float32 tensor's bytes by its inferred shape (an unknown dimension counts 1).
int64_t TensorBytes(const Output& o) {
  int64_t n = 1;
  const Shape& shape = o.shape();
  for (int d = 0; d < shape.rank(); ++d) n *= std::max<int64_t>(shape.dim(d), 1);
  return 4 * n;
}

// SplitAllReduce: replaces `node` by its buckets; their priorities in the new id order go to
// `placed`.
Status SplitAllReduce(Graph* graph, Node* node, std::vector<std::pair<Node*, int64_t>>* placed) {
  const int n = node->num_inputs();
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node->input(a).node->id() < node->input(b).node->id();
  });
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += TensorBytes(node->input(i));
  const int buckets = std::min(kAllReduceBuckets, n);
  // Contiguous cuts in backward order, each bucket about total / buckets bytes, none empty.
  std::vector<std::vector<int>> members(static_cast<size_t>(buckets));
  int64_t seen = 0;
  size_t k = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    const int remaining_inputs = n - static_cast<int>(j);
    const int remaining_buckets = buckets - static_cast<int>(k);
    if (!members[k].empty() && k + 1 < members.size() &&
        (remaining_inputs <= remaining_buckets - 1 ||
         seen * buckets >= total * static_cast<int64_t>(k + 1))) {
      ++k;
    }
    members[k].push_back(order[j]);
    seen += TensorBytes(node->input(order[j]));
  }
  std::vector<Output> outputs(static_cast<size_t>(n));
  for (size_t b = 0; b < members.size(); ++b) {
    if (members[b].empty()) continue;
    NodeSpec spec;
    spec.name = graph->UniqueName(fmt::format("{}/bucket{}", node->name(), b));
    spec.type = kAllReduceMeanOp;
    spec.device = node->device();
    spec.control_inputs = node->control_inputs();
    spec.attrs = node->attrs();  // DistributedOptimizer's marks (tailing_all_reduce.cc)
    int last = 0;
    for (int i : members[b]) {
      spec.inputs.push_back(node->input(i));
      last = std::max(last, node->input(i).node->id());
    }
    RECSDK_ASSIGN_OR_RETURN(Node * bucket, graph->AddNode(std::move(spec)));
    for (size_t j = 0; j < members[b].size(); ++j) {
      outputs[static_cast<size_t>(members[b][j])] = Output(bucket, static_cast<int>(j));
    }
    placed->emplace_back(bucket, 2 * int64_t{last} + 1);
  }
  for (Node* reader : graph->nodes()) {
    if (reader == node) continue;
    for (int i = 0; i < reader->num_inputs(); ++i) {
      const Output& in = reader->input(i);
      if (in.node == node) reader->set_input(i, outputs[static_cast<size_t>(in.index)]);
    }
  }
  node->ReplaceOp(kAllReduceBucketsOp, std::move(outputs), {});
  return absl::OkStatus();
}

class BucketAllReducePass final : public internal::GraphPass {
 public:
  bool Enabled(const internal::PassContext& ctx) const override {
    if (!ctx.config.hcom_parallel) return false;
    const StatusOr<int> size = get_rank_size();
    return size.ok() && *size > 1;
  }

  Status Run(const internal::PassContext&, Graph* graph) override {
    std::vector<Node*> reductions;
    for (Node* n : graph->nodes()) {
      if (n->type() == kAllReduceMeanOp && n->num_inputs() >= 2) reductions.push_back(n);
    }
    if (reductions.empty()) return absl::OkStatus();
    std::vector<std::pair<Node*, int64_t>> placed;
    for (Node* n : reductions) RECSDK_RETURN_IF_ERROR(SplitAllReduce(graph, n, &placed));
    return ReorderByPriority(graph, placed);
  }
};

Status ForwardShape(internal::InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) c.AddOutput(c.input_dtype(i), c.input_shape(i));
  return absl::OkStatus();
}

Status ForwardKernel(internal::OpKernelContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) ctx.set_output(i, ctx.input(i));
  return absl::OkStatus();
}

}  // namespace

void RegisterBucketAllReduce() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::OpRegistry::Global().Register({.type = kAllReduceBucketsOp,
                                             .inputs = {"tensors+"},
                                             .outputs = {"tensors_out+"},
                                             .shape_fn = ForwardShape,
                                             .no_gradient = true});
    internal::KernelRegistry::Global().RegisterFn(kAllReduceBucketsOp, internal::kCpu,
                                                  {DType::kInvalid}, ForwardKernel);
    const Status s = internal::PassRegistry::Global().Register(
        {"bucket_all_reduce", 940, internal::PassPhase::kSession,
         "hcom_parallel with several ranks: each AllReduceMean of several gradients becomes "
         "buckets in backward order, reduced while backward still runs",
         [] { return std::unique_ptr<internal::GraphPass>(new BucketAllReducePass); }});
    RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
  });
}

}  // namespace recsdk::dist
