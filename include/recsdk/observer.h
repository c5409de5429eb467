// recsdk/observer.h: watching the executor run a graph.
//
// An ExecutionObserver sees every node a Session::Run executes, just before and just after its
// kernel, with the node, its device, the executing thread, timestamps and the input and output
// tensors. Observers are chosen per run (RunOptions::observers in session.h); a run without
// observers pays nothing for the feature (one empty check per node). Profiling, dumps, overflow
// detection and exception dumps (src/precision/dump_observer.h) use this interface.
//
// Threading: with stream_max_parallel_num "DNN_V100:N", N > 1, nodes run concurrently and the
// callbacks of different nodes arrive concurrently from different threads: an observer must be
// thread-safe then. BeforeRun and AfterRun are called on the thread that called Session::Run.
// Callbacks must not call back into the Session.
#ifndef RECSDK_OBSERVER_H_
#define RECSDK_OBSERVER_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/status.h"
#include "recsdk/tensor.h"

namespace recsdk {

// NodeExecution: one node's execution as an observer sees it. Pointers are valid only during the
// callback.
struct NodeExecution {
  const Node* node = nullptr;  // in the session's graph (after its passes)
  std::string_view device;     // the device's name, e.g. "cpu:0"
  int thread = 0;              // index of the executing thread in the session's thread pool
  int64_t step = 0;            // the session's step counter (completed Run calls)
  int64_t start_ns = 0;        // steady clock, nanoseconds; set in both callbacks
  int64_t end_ns = 0;          // set in AfterNode only
  // inputs: the node's input tensors, in input order; valid during the callback only.
  const std::vector<const Tensor*>* inputs = nullptr;
  const std::vector<Tensor>* outputs = nullptr;  // set in AfterNode only
  // to_host: copies a tensor of this node from its device's memory to the host (set by the
  // Session; use ToHost).
  const std::function<StatusOr<Tensor>(const Tensor&)>* to_host = nullptr;

  // ToHost: `t` (one of inputs or outputs) as the host can read it: `t` itself when it is in
  // host memory (always, with the CPU backend), otherwise a copy from the device. Read tensors'
  // values only through it: a device tensor's bytes are not the host's to read.
  StatusOr<Tensor> ToHost(const Tensor& t) const {
    if (t.on_host() || to_host == nullptr) return t;
    return (*to_host)(t);
  }
};

// ExecutionObserver: the callbacks a Session::Run makes around every node it executes. Every
// callback has an empty default; override those you need.
class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  // BeforeRun / AfterRun: around one Session::Run; `status` is the run's result.
  virtual void BeforeRun(int64_t step) { (void)step; }
  virtual void AfterRun(int64_t step, const Status& status) {
    (void)step;
    (void)status;
  }
  // BeforeNode / AfterNode: around one node's kernel. AfterNode is not called for a node whose
  // kernel failed: OnNodeError is, instead.
  virtual void BeforeNode(const NodeExecution& exec) { (void)exec; }
  virtual void AfterNode(const NodeExecution& exec) { (void)exec; }
  // OnNodeError: the node's kernel returned `*error` (already naming the op), which the Run will
  // return. exec.inputs are the node's inputs; exec.outputs whatever the kernel had produced (some
  // may be uninitialized). An observer may add to the message (never change the code), e.g. to say
  // where it saved the inputs; observers are called in order and see earlier ones' additions.
  virtual void OnNodeError(const NodeExecution& exec, Status* error) {
    (void)exec;
    (void)error;
  }
};

}  // namespace recsdk

#endif  // RECSDK_OBSERVER_H_
