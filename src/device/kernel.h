// kernel.h: op kernels and the kernel registry.
//
// A kernel computes one node on one device. The registry maps (op type, device type, dtype,
// implementation mode) to a factory; the dtype is the node's first non-resource input dtype
// (else its first output's), and kInvalid registers a kernel for every dtype. The
// implementation mode ("high_performance", "high_precision") picks a variant where a backend
// has one; "" is the default variant. Kernels are created once per node per Session and may
// cache attributes. Compute may be called concurrently for different nodes, never for the same
// node (steps run one at a time).
#ifndef RECSDK_DEVICE_KERNEL_H_
#define RECSDK_DEVICE_KERNEL_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "fmt/format.h"
#include "recsdk/graph.h"
#include "src/common/status_macros.h"
#include "src/device/device.h"
#include "src/device/resource_mgr.h"

namespace recsdk::internal {

class OpKernelContext {
 public:
  OpKernelContext(const Node& node, Device* device, ResourceMgr* resources, int64_t step_id,
                  int64_t graph_seed, std::vector<const Tensor*> inputs,
                  std::vector<Tensor>* outputs)
      : node_(node),
        device_(device),
        resources_(resources),
        step_id_(step_id),
        graph_seed_(graph_seed),
        inputs_(std::move(inputs)),
        outputs_(outputs) {}

  const Node& node() const { return node_; }
  Device* device() const { return device_; }
  ResourceMgr* resources() const { return resources_; }
  int64_t step_id() const { return step_id_; }
  int64_t graph_seed() const { return graph_seed_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Tensor& input(int i) const { return *inputs_[i]; }
  const std::vector<const Tensor*>& inputs() const { return inputs_; }

  // allocate_output: a zero-filled tensor of the node's output dtype, counted against the
  // device's graph memory.
  StatusOr<Tensor*> allocate_output(int i, const Shape& shape) {
    return allocate_output(i, shape, node_.output_dtype(i));
  }
  StatusOr<Tensor*> allocate_output(int i, const Shape& shape, DType dtype,
                                    Fill fill = Fill::kZero);
  // allocate_output_uninitialized: as allocate_output without the zero-fill, for kernels that
  // write every element of the output (the buffer may hold a previous step's values).
  StatusOr<Tensor*> allocate_output_uninitialized(int i, const Shape& shape) {
    return allocate_output(i, shape, node_.output_dtype(i), Fill::kUninitialized);
  }
  // set_output: forward an existing tensor (e.g. an input or a variable's value). On a device
  // whose memory is not the host's, a host tensor the kernel built (a constant, a scalar) is
  // copied into the device's memory first, as a device kernel would upload it.
  void set_output(int i, Tensor t);
  Tensor* output(int i) { return &(*outputs_)[i]; }

  // SkipControlDependents: the nodes that take a control input from this node do not run in this
  // step, nor their data consumers (ControlGate; the executor reads the flag after Compute).
  void SkipControlDependents() { skip_control_dependents_ = true; }
  bool skip_control_dependents() const { return skip_control_dependents_; }

  // Error: InvalidArgument prefixed with the node name and type.
  template <typename... Args>
  Status Error(fmt::format_string<Args...> format, Args&&... args) const {
    return absl::InvalidArgumentError(fmt::format("op \"{}\" ({}): ", node_.name(), node_.type()) +
                                      fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  const Node& node_;
  Device* device_;
  ResourceMgr* resources_;
  int64_t step_id_;
  int64_t graph_seed_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor>* outputs_;
  bool skip_control_dependents_ = false;
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual Status Compute(OpKernelContext& ctx) = 0;
};

// LambdaKernel: a stateless kernel from a function.
class LambdaKernel final : public OpKernel {
 public:
  using Fn = std::function<Status(OpKernelContext&)>;
  explicit LambdaKernel(Fn fn) : fn_(std::move(fn)) {}
  Status Compute(OpKernelContext& ctx) override { return fn_(ctx); }

 private:
  Fn fn_;
};

using KernelFactory = std::function<StatusOr<std::unique_ptr<OpKernel>>(const Node&)>;

class KernelRegistry {
 public:
  static KernelRegistry& Global();

  void Register(const std::string& op, const std::string& device, DType dtype,
                KernelFactory factory, const std::string& impl_mode = "");
  // RegisterFn: a stateless kernel for each listed dtype.
  void RegisterFn(const std::string& op, const std::string& device, std::vector<DType> dtypes,
                  LambdaKernel::Fn fn, const std::string& impl_mode = "");
  // AddAlias: `device` also runs every kernel registered for `kernels_of` (a backend that reuses
  // another's kernels on its own memory, as the separate-memory test device reuses the CPU's).
  // Its own registrations come first.
  void AddAlias(const std::string& device, const std::string& kernels_of);
  // Find: the device's own kernels, then its alias's; exact dtype first, then the dtype
  // wildcard; `impl_mode` first, then the default.
  const KernelFactory* Find(const std::string& op, const std::string& device, DType dtype,
                            const std::string& impl_mode) const;
  // DTypesFor: the dtypes registered for (op, device), for messages.
  std::vector<DType> DTypesFor(const std::string& op, const std::string& device) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, DType, std::string>, KernelFactory> kernels_;
  std::map<std::string, std::string> aliases_;  // device -> the device whose kernels it reuses
};

// RegisterCopyKernels: CopyHostToDevice and CopyDeviceToHost for `device`, through its
// DataTransfer and streams (copy_kernels.cc). A backend whose memory is not the host's calls it.
void RegisterCopyKernels(KernelRegistry& r, const std::string& device);

// KernelDType: the dtype a node's kernel is looked up by.
DType KernelDType(const Node& node);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_KERNEL_H_
