// tailing_all_reduce.cc: the session pass "tailing_optimization" (order 945, after
// bucket_all_reduce, before order_collectives), the spec's is_tailing_optimization: the last
// bucket of the dense gradients' all-reduce runs in the background while the work that does not
// need it runs (the "communication hangover" of the spec).
//
// Why a split into two ops. A collective is a blocking call inside its kernel, so with the
// default executor (one node at a time) nothing runs beside the last bucket's reduction, whatever
// the graph's dependencies say; and after it every update of the step waits in line. The pass
// turns the last bucket (the AllReduceMean of highest id that a DistributedOptimizer marked with
// is_tailing_optimization) into AllReduceStart, which packs the gradients, hands the reduction to
// a background thread and returns once that thread holds the process communicator, and
// AllReduceWait (the old node, keeping its name and outputs, so its readers are untouched),
// which ends when the reduction has. The graph is renumbered with Start at the bucket's place
// and Wait as late as its readers allow, so what does not depend on the last bucket — the
// optimizer updates of the earlier buckets' variables, the sparse table updates, metrics — comes
// between them in the id order and runs while the last bucket is on the wire, on one stream as
// on several.
//
// One order of collectives per step: Start (not Wait) is the collective in order_collectives'
// chains, and Start returns only once its thread holds the process communicator, so a
// collective chained after it (a sharded table's gradient exchange) reaches the communicator
// after the reduction on every rank: it queues behind it (one mutex) instead of overtaking it.
//
// Results: the reduction and the updates compute exactly what they computed before; only when
// they run changes, so training is bit for bit the same as without the option.
//
// The pairing (the spec: "must be used in pair with NPUOptimizer Constructor and the value must
// be the same"): DistributedOptimizerOptions::is_tailing_optimization marks the node the
// optimizer makes; the pass fails Session::Create, at any world size, when a mark differs from
// SessionConfig::is_tailing_optimization, naming both settings: this pass (which runs when the
// session's option is true) refuses an unmarked node and confirms the marked ones
// ("tailing_confirmed"); AllReduceMean's kernel refuses a marked node left unconfirmed.
//
// Threading: the pass is single-threaded like Graph. AllReduceStart's kernel owns one background
// thread (started on first use, joined when the Session's kernels go); the in-flight reduction is
// shared with AllReduceWait through a process-wide table of tickets under a mutex.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/dist/collective_ops.h"
#include "src/dist/deadline.h"
#include "src/dist/graph_order.h"
#include "src/dist/process_communicator.h"
#include "src/graph/op_registry.h"
#include "src/session/passes/pass_manager.h"

namespace recsdk::dist {
namespace {

using internal::OpKernel;
using internal::OpKernelContext;

// kWaitSlackS: what AllReduceWait waits beyond the reduction's own deadline (the communicator
// fails the reduction at collective_timeout_s; the slack covers unpacking and scheduling).
constexpr double kWaitSlackS = 10.0;

// InFlight: one reduction handed to the background thread.
struct InFlight {
  std::string label;            // the node's name, for the call tag and errors
  std::vector<float> buffer;    // the packed gradients, then their means
  std::vector<Tensor> outputs;  // the means, unpacked by the thread
  std::vector<int64_t> counts;  // elements per output
  int64_t run = 0;              // the Session::Run count of Start, for errors
  std::mutex mu;
  std::condition_variable cv;
  bool holding = false;  // the thread holds the communicator (or has finished)
  bool done = false;
  double timeout_s = 300.0;  // collective_timeout_s, known once the thread holds it
  Status status;
};

// Tickets: AllReduceStart's output names its InFlight for AllReduceWait.
struct Tickets {
  std::mutex mu;
  int64_t next = 1;
  std::map<int64_t, std::shared_ptr<InFlight>> live;
};

Tickets& GlobalTickets() {
  static Tickets* tickets = new Tickets;  // never destroyed: kernels may outlive statics
  return *tickets;
}

void Reduce(InFlight& job) {
  Status s = WithWorkerCommunicator([&](Communicator& comm, const DistributedOptions& o) {
    {
      std::lock_guard<std::mutex> lock(job.mu);
      job.timeout_s = o.collective_timeout_s;
      job.holding = true;
    }
    job.cv.notify_all();
    return comm.AllReduce(absl::Span<float>(job.buffer), ReduceOp::kMean,
                          DeadlineAfterSeconds(o.collective_timeout_s), CallTag{-1, job.label});
  });
  if (s.ok()) {
    const float* p = job.buffer.data();
    for (size_t i = 0; i < job.outputs.size(); ++i) {
      std::copy_n(p, job.counts[i], job.outputs[i].data<float>());
      p += job.counts[i];
    }
  } else {
    s = Status(s.code(), fmt::format("{} (the mean of {} float32 elements over the ranks, in the "
                                     "background of this rank's Session::Run #{})",
                                     s.message(), job.buffer.size(), job.run));
  }
  {
    std::lock_guard<std::mutex> lock(job.mu);
    job.status = std::move(s);
    job.holding = true;
    job.done = true;
  }
  job.cv.notify_all();
}

// AllReduceStartKernel: packs the inputs, queues the reduction on its thread, and returns the
// ticket once the thread holds the communicator.
class AllReduceStartKernel final : public OpKernel {
 public:
  ~AllReduceStartKernel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    // Cannot hang: the thread wakes for stop_ at once (Loop), and a reduction in flight, its only
    // other wait, ends by the call's deadline (collective_timeout_s).
    if (thread_.joinable()) thread_.join();
    // A run that failed between Start and Wait left its ticket in the process-wide table.
    if (last_ticket_ != 0) {
      Tickets& t = GlobalTickets();
      std::lock_guard<std::mutex> lock(t.mu);
      t.live.erase(last_ticket_);
    }
  }

  Status Compute(OpKernelContext& ctx) override {
    auto job = std::make_shared<InFlight>();
    job->label = ctx.node().name();
    job->run = ctx.step_id();
    int64_t total = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) total += ctx.input(i).num_elements();
    job->buffer.resize(static_cast<size_t>(total));
    float* p = job->buffer.data();
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& in = ctx.input(i);
      RECSDK_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(DType::kFloat32, in.shape()));
      job->outputs.push_back(std::move(out));
      job->counts.push_back(in.num_elements());
      p = std::copy_n(in.data<float>(), in.num_elements(), p);
    }
    int64_t ticket = 0;
    {
      Tickets& t = GlobalTickets();
      std::lock_guard<std::mutex> lock(t.mu);
      // A run that failed between Start and Wait left its ticket behind: drop it.
      if (last_ticket_ != 0) t.live.erase(last_ticket_);
      ticket = t.next++;
      t.live[ticket] = job;
    }
    last_ticket_ = ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
      queue_.push_back(job);
    }
    cv_.notify_all();
    // The thread reaches the communicator after any reduction still queued (a failed run's) and
    // after the collective that holds it now, each bounded by its deadline.
    {
      std::unique_lock<std::mutex> lock(job->mu);
      const Deadline deadline = DeadlineAfterSeconds(2 * (job->timeout_s + kWaitSlackS));
      if (!job->cv.wait_until(lock, deadline, [&] { return job->holding; })) {
        return absl::DeadlineExceededError(fmt::format(
            "op \"{}\" (AllReduceStart): the background all-reduce did not reach the process "
            "communicator within {} s; another collective holds it",
            job->label, 2 * (job->timeout_s + kWaitSlackS)));
      }
      if (job->done && !job->status.ok()) return job->status;
    }
    ctx.set_output(0, Tensor::Scalar<int64_t>(ticket));
    return absl::OkStatus();
  }

 private:
  void Loop() {
    for (;;) {
      std::shared_ptr<InFlight> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // No deadline: an idle worker of this kernel waiting for its next job, not for another
        // process; the kernel's destructor sets stop_ and notifies, which ends the wait.
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        job = std::move(queue_.front());
        queue_.erase(queue_.begin());
      }
      Reduce(*job);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<InFlight>> queue_;
  bool stop_ = false;
  std::thread thread_;
  int64_t last_ticket_ = 0;  // touched by Compute only (Compute never overlaps itself)
};

// AllReduceWaitKernel: waits for the ticket's reduction and outputs its means.
Status AllReduceWaitKernel(OpKernelContext& ctx) {
  const int64_t ticket = ctx.input(0).scalar<int64_t>();
  std::shared_ptr<InFlight> job;
  {
    Tickets& t = GlobalTickets();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.live.find(ticket);
    if (it == t.live.end()) {
      return absl::InternalError(fmt::format(
          "op \"{}\" (AllReduceWait): ticket {} names no reduction in flight; this is a bug",
          ctx.node().name(), ticket));
    }
    job = std::move(it->second);
    t.live.erase(it);
  }
  std::unique_lock<std::mutex> lock(job->mu);
  const double wait_s = job->timeout_s + kWaitSlackS;
  if (!job->cv.wait_until(lock, DeadlineAfterSeconds(wait_s), [&] { return job->done; })) {
    return absl::DeadlineExceededError(
        fmt::format("op \"{}\" (AllReduceWait): the background all-reduce did not end within {} s",
                    ctx.node().name(), wait_s));
  }
  RECSDK_RETURN_IF_ERROR(job->status);
  if (static_cast<int>(job->outputs.size()) != ctx.num_inputs() - 1) {
    return absl::InternalError(
        fmt::format("op \"{}\" (AllReduceWait): {} means for {} outputs; this is a bug",
                    ctx.node().name(), job->outputs.size(), ctx.num_inputs() - 1));
  }
  for (size_t i = 0; i < job->outputs.size(); ++i) {
    ctx.set_output(static_cast<int>(i), job->outputs[i]);
  }
  return absl::OkStatus();
}

Status StartShape(internal::InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != DType::kFloat32) {
      return c.Error("{} is {}; the all-reduce averages float32 tensors", c.InputDesc(i),
                     DTypeName(c.input_dtype(i)));
    }
  }
  c.AddOutput(DType::kInt64, Shape{});
  return absl::OkStatus();
}

// Wait's inputs: the ticket, then the gradients Start reduces (for their shapes; their values
// are not read).
Status WaitShape(internal::InferenceContext& c) {
  for (int i = 1; i < c.num_inputs(); ++i) c.AddOutput(DType::kFloat32, c.input_shape(i));
  return absl::OkStatus();
}

class TailingOptimizationPass final : public internal::GraphPass {
 public:
  bool Enabled(const internal::PassContext& ctx) const override {
    return ctx.config.is_tailing_optimization;
  }

  Status Run(const internal::PassContext& ctx, Graph* graph) override {
    Node* last = nullptr;
    for (Node* n : graph->nodes()) {
      if (n->type() != kAllReduceMeanOp || !n->BoolAttr("distributed_optimizer")) continue;
      if (!n->BoolAttr("is_tailing_optimization")) return TailingMismatch(n->name(), true);
      // The other half of the check: AllReduceMean's kernel refuses a node the optimizer marked
      // that no session with the option confirmed (this pass does not run without it).
      n->SetAttr("tailing_confirmed", true);
      if (last == nullptr || n->id() > last->id()) last = n;
    }
    // hcom_parallel false is refused by SessionConfig::Validate; in one process nothing is in
    // flight to overlap.
    if (!ctx.config.hcom_parallel || last == nullptr) return absl::OkStatus();
    const StatusOr<int> size = get_rank_size();
    if (!size.ok() || *size <= 1) return absl::OkStatus();
    return SplitLast(graph, last);
  }

 private:
  static Status SplitLast(Graph* graph, Node* last) {
    NodeSpec spec;
    spec.name = graph->UniqueName(last->name() + "/start");
    spec.type = kAllReduceStartOp;
    spec.device = last->device();
    spec.inputs = last->inputs();
    spec.control_inputs = last->control_inputs();
    RECSDK_ASSIGN_OR_RETURN(Node * start, graph->AddNode(std::move(spec)));
    std::vector<Output> wait_inputs = {Output(start, 0)};
    for (const Output& in : last->inputs()) wait_inputs.push_back(in);
    const int64_t place = 2 * int64_t{last->id()} - 1;  // Start where the bucket was
    // The old node becomes Wait: its name, outputs and readers stay. Its control inputs (the
    // previous collective) are Start's now; Wait keeps them too, which adds no order.
    last->ReplaceOp(kAllReduceWaitOp, std::move(wait_inputs), {});
    // Wait as late as its readers allow: among the ready nodes the executor's order takes the
    // least priority first, so every node that does not need the last bucket goes before it.
    return ReorderByPriority(graph,
                             {{start, place}, {last, std::numeric_limits<int64_t>::max() / 2}});
  }
};

}  // namespace

Status TailingMismatch(std::string_view node, bool session) {
  return absl::InvalidArgumentError(fmt::format(
      "SessionConfig.is_tailing_optimization is {} but the DistributedOptimizer that made "
      "\"{}\" has DistributedOptimizerOptions.is_tailing_optimization {}; the two are one "
      "setting (the spec's session option and its NPUOptimizer argument): set both to the same "
      "value",
      session, node, !session));
}

void RegisterTailingAllReduce() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::OpRegistry& r = internal::OpRegistry::Global();
    // Stateful: never folded or merged; each rank must issue the same collectives.
    r.Register({.type = kAllReduceStartOp,
                .inputs = {"tensors+"},
                .outputs = {"ticket"},
                .shape_fn = StartShape,
                .no_gradient = true,
                .stateful = true});
    r.Register({.type = kAllReduceWaitOp,
                .inputs = {"ticket", "tensors+"},
                .outputs = {"means+"},
                .shape_fn = WaitShape,
                .no_gradient = true,
                .stateful = true});
    internal::KernelRegistry& k = internal::KernelRegistry::Global();
    k.Register(kAllReduceStartOp, internal::kCpu, DType::kFloat32,
               [](const Node&) -> StatusOr<std::unique_ptr<OpKernel>> {
                 return std::unique_ptr<OpKernel>(std::make_unique<AllReduceStartKernel>());
               });
    k.RegisterFn(kAllReduceWaitOp, internal::kCpu, {DType::kInvalid}, AllReduceWaitKernel);
    const Status s = internal::PassRegistry::Global().Register(
        {"tailing_optimization", 945, internal::PassPhase::kSession,
         "is_tailing_optimization (with hcom_parallel and several ranks): the last all-reduce "
         "bucket runs in the background (AllReduceStart / AllReduceWait) while the updates that "
         "do not need it run; checks DistributedOptimizerOptions.is_tailing_optimization against "
         "the session's",
         [] { return std::unique_ptr<internal::GraphPass>(new TailingOptimizationPass); }});
    RECSDK_CHECK_MSG(s.ok(), std::string(s.message()));
  });
}

}  // namespace recsdk::dist
