// tier_memory.cc: CreateTransferTierMemory, the device tier memory any device can give (its
// variable pool and its DataTransfer).
#include "src/device/tier_memory.h"

#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/device.h"

namespace recsdk::internal {
namespace {

// kTierCopyWait: how long a swap waits for the copies it queued.
constexpr absl::Duration kTierCopyWait = absl::Minutes(2);

// HostRowsView: host memory the caller owns, as a tensor buffer (the host side of a copy).
class HostRowsView final : public TensorBuffer {
 public:
  HostRowsView(void* data, size_t bytes) : TensorBuffer(data, bytes) {}
};

// DeviceRowsBuffer: the rows' device memory, owned (freed with the allocator it came from).
class DeviceRowsBuffer final : public TensorBuffer {
 public:
  DeviceRowsBuffer(std::shared_ptr<Allocator> memory, void* data, size_t bytes)
      : TensorBuffer(data, bytes), memory_(std::move(memory)) {}
  ~DeviceRowsBuffer() override { memory_->Free(data(), size()); }
  DeviceRowsBuffer(const DeviceRowsBuffer&) = delete;
  DeviceRowsBuffer& operator=(const DeviceRowsBuffer&) = delete;
  MemoryKind memory_kind() const override { return memory_->kind(); }

 private:
  std::shared_ptr<Allocator> memory_;
};

class TransferTierMemory final : public DeviceTierMemory {
 public:
  TransferTierMemory(Device& device, std::unique_ptr<MemoryCharge> charge,
                     std::shared_ptr<TensorBuffer> rows, uint32_t capacity, int row_floats,
                     std::string label)
      : device_(device),
        charge_(std::move(charge)),
        rows_(std::move(rows)),
        capacity_(capacity),
        row_floats_(row_floats),
        label_(std::move(label)) {}

  float* rows() const override { return static_cast<float*>(rows_->data()); }
  int row_floats() const override { return row_floats_; }
  uint32_t capacity() const override { return capacity_; }

  Status Read(absl::Span<const uint32_t> slots, float* out) override {
    return Copy(slots, out, /*to_device=*/false);
  }
  Status Write(absl::Span<const uint32_t> slots, const float* in) override {
    return Copy(slots, const_cast<float*>(in), /*to_device=*/true);
  }
  StatusOr<std::shared_ptr<Event>> ComputeFence() override {
    return device_.compute_stream().Record();
  }

 private:
  // Copy: the rows of `slots` between the device and `host`, one DataTransfer copy per run of
  // consecutive slots (in the given order, so a slot written twice keeps the later row), on the
  // copy stream after the compute work queued so far; compute queued later waits for the copies.
  Status Copy(absl::Span<const uint32_t> slots, float* host, bool to_device) {
    const char* what = to_device ? "Write" : "Read";
    for (uint32_t s : slots) {
      if (s >= capacity_) {
        return absl::InvalidArgumentError(fmt::format(
            "device tier of {}: {} of slot {}, past its {} rows", label_, what, s, capacity_));
      }
    }
    if (slots.empty()) return absl::OkStatus();
    Stream& compute = device_.compute_stream();
    Stream& copy = device_.copy_stream();
    const bool own_copy_stream = &compute != &copy;
    if (own_copy_stream) {
      RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> before, compute.Record());
      RECSDK_RETURN_IF_ERROR(copy.WaitFor(*before));
    }
    const size_t row_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
    DataTransfer& transfer = device_.data_transfer();
    Status status = copy.Run([&]() -> Status {
      size_t i = 0;
      while (i < slots.size()) {
        size_t n = 1;
        while (i + n < slots.size() && slots[i + n] == slots[i] + n) ++n;
        const Shape shape{static_cast<int64_t>(n), row_floats_};
        Tensor device_rows(DType::kFloat32, shape, rows_, slots[i] * row_bytes);
        Tensor host_rows(DType::kFloat32, shape,
                         std::make_shared<HostRowsView>(host + i * row_floats_, n * row_bytes));
        RECSDK_RETURN_IF_ERROR(to_device ? transfer.CopyHostToDevice(host_rows, &device_rows)
                                         : transfer.CopyDeviceToHost(device_rows, &host_rows));
        i += n;
      }
      return absl::OkStatus();
    });
    if (!status.ok()) {
      return Status(status.code(), fmt::format("device tier of {}: {} of {} rows: {}", label_, what,
                                               slots.size(), status.message()));
    }
    // The host buffer is the caller's again on return, and compute after this sees the rows.
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, copy.Record());
    if (own_copy_stream) RECSDK_RETURN_IF_ERROR(compute.WaitFor(*done));
    return done->Wait(kTierCopyWait);
  }

  Device& device_;
  std::unique_ptr<MemoryCharge> charge_;  // the rows' bytes in the variable pool's count
  std::shared_ptr<TensorBuffer> rows_;
  uint32_t capacity_;
  int row_floats_;
  std::string label_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceTierMemory>> CreateTransferTierMemory(
    Device& device, std::shared_ptr<Allocator> memory, int64_t rows, int row_floats,
    const std::string& label) {
  if (rows <= 0 || rows > int64_t{0xFFFFFFFF} || row_floats <= 0) {
    return absl::InvalidArgumentError(
        fmt::format("device tier of {}: {} rows of {} floats; need 0 < rows < 2^32 and "
                    "row_floats > 0",
                    label, rows, row_floats));
  }
  const size_t row_bytes = static_cast<size_t>(row_floats) * sizeof(float);
  const size_t bytes = static_cast<size_t>(rows) * row_bytes;
  // Charged exactly, as the host slab is (not rounded to the pool's size classes).
  RECSDK_ASSIGN_OR_RETURN(
      std::unique_ptr<MemoryCharge> charge,
      device.variable_allocator().Charge(
          static_cast<int64_t>(bytes),
          fmt::format("the device tier of {} ({} rows of {} bytes, in {} memory)", label, rows,
                      row_bytes, device.name())));
  void* p = memory->Allocate(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("the device tier of {} ({} rows of {} bytes): {} has no {} bytes free; lower "
                    "device_vocabulary_size",
                    label, rows, row_bytes, device.name(), bytes));
  }
  auto buffer = std::make_shared<DeviceRowsBuffer>(std::move(memory), p, bytes);
  return std::unique_ptr<DeviceTierMemory>(
      std::make_unique<TransferTierMemory>(device, std::move(charge), std::move(buffer),
                                           static_cast<uint32_t>(rows), row_floats, label));
}

}  // namespace recsdk::internal
