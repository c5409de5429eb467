// resource_mgr.h: state that outlives a step (variables; tables add their own resources).
//
// A Session owns one ResourceMgr. Handle ops look resources up by name and pass them along as
// kResource tensors holding a Resource pointer. Thread-safe: the map is guarded; each resource
// guards its own contents.
#ifndef RECSDK_DEVICE_RESOURCE_MGR_H_
#define RECSDK_DEVICE_RESOURCE_MGR_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "recsdk/tensor.h"

namespace recsdk::internal {

class Resource {
 public:
  virtual ~Resource() = default;
  virtual std::string DebugString() const = 0;
};

// VariableResource: a dense variable's current value. Writers replace or update `value` under
// `mu`; readers take a Tensor copy (sharing the buffer) under `mu`.
class VariableResource final : public Resource {
 public:
  VariableResource(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {}
  std::string DebugString() const override;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }

  std::mutex mu;
  Tensor value;  // uninitialised until the first Assign
  bool initialized() const { return value.IsInitialized(); }

 private:
  DType dtype_;
  Shape shape_;
};

class LimitedAllocator;
class DataTransfer;
class Device;

class ResourceMgr {
 public:
  // set_data_transfer: how variables' bytes cross between host memory and the device's (the
  // Session sets its device's with the variable pool). Null (the default): host memory only.
  void set_data_transfer(DataTransfer* transfer) { transfer_ = transfer; }
  // ToHost: `t` as the host can read it: `t` itself when it is in host memory, otherwise a host
  // copy through the device (what a checkpoint, an export or a broadcast reads a variable with).
  StatusOr<Tensor> ToHost(const Tensor& t) const;
  // ReadVariable: the value of variable `name` in host memory (a copy through the device when it
  // lives in device memory); an uninitialised Tensor when there is no such initialised variable.
  StatusOr<Tensor> ReadVariable(const std::string& name) const;
  // ToDevice: host tensor `t` where the device's variables live: `t` itself when the variable
  // pool is host memory, otherwise a copy in the variable pool (what a restore assigns).
  StatusOr<Tensor> ToDevice(const Tensor& t) const;
  // variable_allocator: the pool that memory resources map themselves (a tiered table's device
  // tier) is charged to (LimitedAllocator::Charge); null (the default) charges nothing. The
  // Session sets its device's pool before creating any resource.
  void set_variable_allocator(LimitedAllocator* a) { variable_allocator_ = a; }
  LimitedAllocator* variable_allocator() const { return variable_allocator_; }
  // device: the Session's device, which tables made from now on ask for their device tier's
  // memory (Device::CreateTableTierMemory); null (the default): host memory.
  void set_device(Device* device) { device_ = device; }
  Device* device() const { return device_; }
  // process_local_tables: the tables made from now on are this process's alone, never sharded
  // over the ranks of a job (the table decorator is not applied): a Predictor serving a bundle
  // answers its own requests, with no collective. Default false.
  void set_process_local_tables(bool local) { process_local_tables_ = local; }
  bool process_local_tables() const { return process_local_tables_; }
  // LookupOrCreate returns the resource named `name`, creating it with `make` if absent.
  Resource* LookupOrCreate(const std::string& name,
                           const std::function<std::unique_ptr<Resource>()>& make);
  Resource* Lookup(const std::string& name) const;
  void Clear();
  template <typename Fn>
  void ForEach(Fn fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, r] : resources_) fn(name, r.get());
  }

 private:
  LimitedAllocator* variable_allocator_ = nullptr;
  Device* device_ = nullptr;
  DataTransfer* transfer_ = nullptr;
  bool process_local_tables_ = false;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Resource>> resources_;
};

// Resource handles travel as scalar kResource tensors holding the pointer.
Tensor MakeResourceTensor(Resource* resource);
Resource* ResourceFromTensor(const Tensor& t);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_RESOURCE_MGR_H_
