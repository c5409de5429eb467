// device.h: the backend interface.
//
// A Device is where ops run: it owns memory pools (graph-scoped tensors and variables, each with
// its configured limit) in its own memory kind, runs work on streams (stream.h), moves data to and
// from the host (DataTransfer), and offers kernels through the KernelRegistry under its type name
// (or another backend's, KernelRegistry::AddAlias). A device whose memory is not the host's
// (MemoryKind::kDevice) never has its bytes read by the host: the placement pass inserts copy ops
// where an edge crosses memory spaces, and the Session copies feeds in and fetches out. Backends
// register a factory by name with an explicit call at runtime start (RegisterCpuBackend); the
// Session picks one by SessionConfig::device. No vendor header appears here: an accelerator backend
// lives in its own folder and target. Threading: a Device is used by one Session; its allocators
// are thread-safe.
#ifndef RECSDK_DEVICE_DEVICE_H_
#define RECSDK_DEVICE_DEVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/tensor.h"
#include "src/device/allocator.h"
#include "src/device/stream.h"
#include "src/device/tier_memory.h"

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
  // memory_kind: where this device's tensors live.
  MemoryKind memory_kind() const { return graph_allocator_.memory_kind(); }
  virtual DataTransfer& data_transfer() = 0;
  // compute_stream: where kernels run; copy_stream: where host<->device copies run (the compute
  // stream on backends with one queue).
  virtual Stream& compute_stream() { return default_stream_; }
  virtual Stream& copy_stream() { return compute_stream(); }
  // Synchronize waits until every queued operation finished. Backends without queues are done.
  virtual Status Synchronize() { return absl::OkStatus(); }
  // IntraOpThreads: how many threads one kernel may use.
  virtual int IntraOpThreads() const { return 1; }
  // tier_swaps: the rows its device tiers moved and the waits that took (tier_memory.h).
  TierSwapCounters& tier_swaps() { return tier_swaps_; }
  // CreateTableTierMemory: where the device tier of a tiered table (`rows` rows of `row_floats`
  // floats; `label` names the table) lives on this device: null (the default) keeps it in the
  // table's host slab, right when the device's table kernels read host memory (the CPU device, a
  // backend whose table ops run on the host); a device whose table kernels read its own memory
  // returns memory of its own (CreateTransferTierMemory, or a backend's faster one).
  virtual StatusOr<std::unique_ptr<DeviceTierMemory>> CreateTableTierMemory(
      int64_t /*rows*/, int /*row_floats*/, const std::string& /*label*/) {
    return std::unique_ptr<DeviceTierMemory>();
  }

 protected:
  // Device: pools of the configured limits over `memory` (host memory by default).
  Device(std::string type, int index, const SessionConfig& config,
         std::shared_ptr<Allocator> memory = HostAllocator())
      : type_(std::move(type)),
        index_(index),
        graph_allocator_("graph_memory_max_size", config.graph_memory_max_size, memory),
        variable_allocator_("variable_memory_max_size", config.variable_memory_max_size, memory),
        default_stream_(name() + "/compute") {}

 private:
  std::string type_;
  int index_;
  LimitedAllocator graph_allocator_;
  LimitedAllocator variable_allocator_;
  SyncStream default_stream_;
  TierSwapCounters tier_swaps_;
};

using DeviceFactory = std::function<StatusOr<std::unique_ptr<Device>>(const SessionConfig&)>;

// DeviceRegistry: backends by type name, with the memory kind of each (the placement pass needs
// it before any device exists). Thread-safe.
class DeviceRegistry {
 public:
  static DeviceRegistry& Global();
  void Register(const std::string& type, DeviceFactory factory,
                MemoryKind memory = MemoryKind::kHost);
  // Memory: the registered type's memory kind; NotFound naming the registered types otherwise.
  StatusOr<MemoryKind> Memory(const std::string& type) const;
  StatusOr<std::unique_ptr<Device>> Create(const std::string& type,
                                           const SessionConfig& config) const;
  std::vector<std::string> Types() const;
};

// RegisterCpuBackend registers the "cpu" device and its kernels (idempotent).
void RegisterCpuBackend();

// RegisterSeparateMemoryBackend registers "separate_memory": the CPU kernels on a device whose
// memory is a distinct arena the host cannot touch outside the device's own work
// (separate_memory/separate_memory_device.h). Idempotent; needs RegisterCpuBackend first.
void RegisterSeparateMemoryBackend();

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_DEVICE_H_
