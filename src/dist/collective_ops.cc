// collective_ops.cc: AllReduceMean, its builder, gradient and CPU kernel.
//
// One node per list of tensors, one collective per node: the kernel packs its inputs into one
// buffer (a single input is reduced in its output directly), all-reduces it with ReduceOp::kMean
// through the process communicator, and unpacks. Packing costs one copy of the gradients per
// step; one collective instead of one per variable saves a latency (tens of microseconds under
// MPI) per variable, and the order of one node's tensors is fixed by the graph, the same on every
// rank.
//
// The call's tag carries the node's name and no step: the Session's run count is not the same on
// every rank (a rank may run extra evaluation steps), and tags must agree across ranks. An error
// names this rank's run count instead.
//
// Threading: the kernel runs on the Session's threads; the process communicator serialises the
// collectives (process_communicator.h).
#include "src/dist/collective_ops.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/device/table_resource.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"
#include "src/graph/graph_access.h"
#include "src/graph/op_registry.h"

namespace recsdk {
namespace dist {
namespace {

using internal::InferenceContext;
using internal::OpKernel;
using internal::OpKernelContext;

Status AllReduceMeanShape(InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != DType::kFloat32) {
      return c.Error(
          "{} is {}; the all-reduce averages float32 tensors (dense gradients): cast it to "
          "float32 first",
          c.InputDesc(i), DTypeName(c.input_dtype(i)));
    }
    c.AddOutput(DType::kFloat32, c.input_shape(i));
  }
  return absl::OkStatus();
}

// The gradient of output i on every rank is averaged: d(sum_r loss_r)/d(x_i on this rank) is
// sum_r g_r / N. Outputs without a gradient are left out of the node; every rank builds the
// same graph, so every rank leaves out the same ones.
Status AllReduceMeanGrad(const Scope& scope, const Node& node,
                         const std::vector<Output>& grad_outputs,
                         std::vector<Output>* grad_inputs) {
  std::vector<Output> grads;
  std::vector<int> which;
  for (int i = 0; i < static_cast<int>(grad_outputs.size()); ++i) {
    if (!grad_outputs[i].valid()) continue;
    grads.push_back(grad_outputs[i]);
    which.push_back(i);
  }
  grad_inputs->assign(node.num_inputs(), Output());
  if (grads.empty()) return absl::OkStatus();
  const std::vector<Output> reduced = AllReduceMean(scope, grads);
  if (!scope.ok()) return scope.status();
  for (size_t k = 0; k < which.size(); ++k) (*grad_inputs)[which[k]] = reduced[k];
  return absl::OkStatus();
}

class AllReduceMeanKernel final : public OpKernel {
 public:
  Status Compute(OpKernelContext& ctx) override {
    const int n = ctx.num_inputs();
    int64_t total = 0;
    std::vector<float*> outs(n);
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx.input(i);
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(i, in.shape()));
      outs[i] = out->data<float>();
      total += in.num_elements();
    }
    absl::Span<float> buffer;
    if (n == 1) {
      const Tensor& in = ctx.input(0);
      std::copy_n(in.data<float>(), in.num_elements(), outs[0]);
      buffer = absl::Span<float>(outs[0], static_cast<size_t>(total));
    } else {
      scratch_.resize(static_cast<size_t>(total));
      float* p = scratch_.data();
      for (int i = 0; i < n; ++i) {
        const Tensor& in = ctx.input(i);
        p = std::copy_n(in.data<float>(), in.num_elements(), p);
      }
      buffer = absl::Span<float>(scratch_);
    }
    const std::string& label = ctx.node().name();
    Status s = WithWorkerCommunicator([&](Communicator& comm, const DistributedOptions& o) {
      return comm.AllReduce(buffer, ReduceOp::kMean, DeadlineAfterSeconds(o.collective_timeout_s),
                            CallTag{-1, label});
    });
    if (!s.ok()) {
      return Status(s.code(),
                    fmt::format("{} (the mean of {} float32 elements over the ranks, in this "
                                "rank's Session::Run #{})",
                                s.message(), total, ctx.step_id()));
    }
    if (n > 1) {
      const float* p = scratch_.data();
      for (int i = 0; i < n; ++i) {
        const int64_t count = ctx.input(i).num_elements();
        std::copy_n(p, count, outs[i]);
        p += count;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<float> scratch_;  // the packed inputs; kept between steps (Compute never overlaps)
};

}  // namespace

void RegisterCollectiveOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Stateful: its value depends on the other ranks, so it is never constant-folded, and two
    // nodes are never merged (each rank must issue the same collectives).
    internal::OpRegistry::Global().Register(
        {.type = kAllReduceMeanOp,
         .inputs = {"tensors+"},
         .outputs = {"means+"},
         // The first two are set by DistributedOptimizer on the node it makes, the third by the
         // session pass tailing_optimization when the session's option agrees
         // (tailing_all_reduce.cc).
         .attrs = {internal::Attr("distributed_optimizer", AttrValue::Type::kBool, false),
                   internal::Attr("is_tailing_optimization", AttrValue::Type::kBool, false),
                   internal::Attr("tailing_confirmed", AttrValue::Type::kBool, false)},
         .shape_fn = AllReduceMeanShape,
         .grad_fn = AllReduceMeanGrad,
         .stateful = true});
    internal::KernelRegistry::Global().Register(
        kAllReduceMeanOp, internal::kCpu, DType::kFloat32,
        [](const Node& node) -> StatusOr<std::unique_ptr<OpKernel>> {
          // Marked by a DistributedOptimizer with is_tailing_optimization but not confirmed by
          // the session pass tailing_optimization: the session's option is false.
          if (node.BoolAttr("is_tailing_optimization") && !node.BoolAttr("tailing_confirmed")) {
            return TailingMismatch(node.name(), false);
          }
          return std::unique_ptr<OpKernel>(std::make_unique<AllReduceMeanKernel>());
        });
    // Every Session's tables are sharded over the ranks when there are several
    // (sharded_table.h); in a world of one they stay as they are.
    internal::SetTableDecorator(MaybeShardTable);
    RegisterTableExchangeOps();
    RegisterBucketAllReduce();
    RegisterTailingAllReduce();
    RegisterOrderCollectivesPass();
  });
}

}  // namespace dist

// The builder chains each AllReduceMean node of a graph to the previous one by a control input,
// so that one Session issues them in build order on every rank (the executor could otherwise run
// two independent ones in either order, or at once).
std::vector<Output> AllReduceMean(const Scope& scope, const std::vector<Output>& tensors) {
  dist::RegisterCollectiveOps();
  std::vector<Output> outputs(tensors.size());
  if (!scope.ok()) return outputs;
  Graph* g = scope.graph();
  std::shared_ptr<void>& slot =
      internal::GraphAccess::BuilderState(*g, "recsdk/dist/last_all_reduce");
  if (!slot) slot = std::make_shared<Node*>(nullptr);
  Node** last = static_cast<Node**>(slot.get());
  const Scope s = *last == nullptr ? scope : scope.WithControlDependencies({*last});
  Node* node = s.AddNode(dist::kAllReduceMeanOp, tensors, {}, "AllReduceMean");
  if (node == nullptr) return outputs;
  *last = node;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) outputs[i] = Output(node, i);
  return outputs;
}

}  // namespace recsdk
