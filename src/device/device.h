// device.h: the backend interface.
//
// A Device is where ops run: it owns memory pools (graph-scoped tensors and variables, each with
// its configured limit), moves data to and from the host, and offers kernels through the
// KernelRegistry under its type name. Backends register a factory by name with an explicit call
// at runtime start (RegisterCpuBackend); the Session picks one by SessionConfig::device. No
// vendor header appears here: an accelerator backend lives in its own folder and target.
// Threading: a Device is used by one Session; its allocators are thread-safe.
#ifndef RECSDK_DEVICE_DEVICE_H_
#define RECSDK_DEVICE_DEVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/tensor.h"
#include "src/device/allocator.h"

namespace recsdk::internal {

// DataTransfer: copies between host and device memory. The destination is allocated by the
// caller with the source's dtype and shape (InvalidArgument otherwise, naming both); the copy
// overwrites its bytes and leaves the source untouched. Zero-element tensors copy nothing.
class DataTransfer {
 public:
  virtual ~DataTransfer() = default;
  virtual Status CopyHostToDevice(const Tensor& host, Tensor* device) = 0;
  virtual Status CopyDeviceToHost(const Tensor& device, Tensor* host) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // type: the registry name ("cpu"); name: "cpu:0".
  const std::string& type() const { return type_; }
  int index() const { return index_; }
  std::string name() const { return type_ + ":" + std::to_string(index_); }

  LimitedAllocator& graph_allocator() { return graph_allocator_; }
  LimitedAllocator& variable_allocator() { return variable_allocator_; }
  virtual DataTransfer& data_transfer() = 0;
  // Synchronize waits until every queued operation finished. Backends without queues are done.
  virtual Status Synchronize() { return absl::OkStatus(); }
  // IntraOpThreads: how many threads one kernel may use.
  virtual int IntraOpThreads() const { return 1; }

 protected:
  Device(std::string type, int index, const SessionConfig& config)
      : type_(std::move(type)),
        index_(index),
        graph_allocator_("graph_memory_max_size", config.graph_memory_max_size),
        variable_allocator_("variable_memory_max_size", config.variable_memory_max_size) {}

 private:
  std::string type_;
  int index_;
  LimitedAllocator graph_allocator_;
  LimitedAllocator variable_allocator_;
};

using DeviceFactory = std::function<StatusOr<std::unique_ptr<Device>>(const SessionConfig&)>;

// DeviceRegistry: backends by type name. Thread-safe.
class DeviceRegistry {
 public:
  static DeviceRegistry& Global();
  void Register(const std::string& type, DeviceFactory factory);
  StatusOr<std::unique_ptr<Device>> Create(const std::string& type,
                                           const SessionConfig& config) const;
  std::vector<std::string> Types() const;
};

// RegisterCpuBackend registers the "cpu" device and its kernels (idempotent).
void RegisterCpuBackend();

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_DEVICE_H_
