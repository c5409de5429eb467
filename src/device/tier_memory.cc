// tier_memory.cc: CreateTransferTierMemory, the device tier memory any device can give (its
// variable pool and its DataTransfer). Write queues its copy on the copy stream (Stream::Enqueue)
// with the staged rows and returns; Read waits for its copy; ComputeAfterWrites orders the compute
// stream after the queued ones. Threading: tier_memory.h's; pending_ has its own mutex.
#include "src/device/tier_memory.h"

#include <mutex>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/device.h"

namespace recsdk::internal {
namespace {

// kTierCopyWait: how long the host waits for a swap's copies (a Read; queued swap-ins when the
// memory goes away).
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

// CopyRuns: the rows of `slots` between the device rows `rows` and `host`, one DataTransfer copy
// per run of consecutive slots, in the given order (so a slot written twice keeps the later row).
Status CopyRuns(DataTransfer& transfer, const std::shared_ptr<TensorBuffer>& rows,
                absl::Span<const uint32_t> slots, float* host, int row_floats, bool to_device) {
  const size_t row_bytes = static_cast<size_t>(row_floats) * sizeof(float);
  size_t i = 0;
  while (i < slots.size()) {
    size_t n = 1;
    while (i + n < slots.size() && slots[i + n] == slots[i] + n) ++n;
    const Shape shape{static_cast<int64_t>(n), row_floats};
    Tensor device_rows(DType::kFloat32, shape, rows, slots[i] * row_bytes);
    Tensor host_rows(DType::kFloat32, shape,
                     std::make_shared<HostRowsView>(host + i * row_floats, n * row_bytes));
    RECSDK_RETURN_IF_ERROR(to_device ? transfer.CopyHostToDevice(host_rows, &device_rows)
                                     : transfer.CopyDeviceToHost(device_rows, &host_rows));
    i += n;
  }
  return absl::OkStatus();
}

// StagedRows: a swap-in's slots and rows, owned by its queued copy until the copy has run.
struct StagedRows {
  std::vector<uint32_t> slots;
  std::vector<float> rows;
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
  // The queued swap-ins write rows_ (they hold it alive, but its bytes leave the variable pool's
  // count with charge_): they land first, the host waiting for them with a deadline.
  ~TransferTierMemory() override {
    for (const std::shared_ptr<Event>& e : TakePending()) {
      if (e->Done()) continue;
      device_.tier_swaps().swap_in_host_waits.fetch_add(1, std::memory_order_relaxed);
      (void)e->Wait(kTierCopyWait);  // a failed copy: the rows are going away anyway
    }
  }
  TransferTierMemory(const TransferTierMemory&) = delete;
  TransferTierMemory& operator=(const TransferTierMemory&) = delete;

  float* rows() const override { return static_cast<float*>(rows_->data()); }
  int row_floats() const override { return row_floats_; }
  uint32_t capacity() const override { return capacity_; }

  Status Read(absl::Span<const uint32_t> slots, float* out) override {
    RECSDK_RETURN_IF_ERROR(CheckSlots(slots, "Read"));
    if (slots.empty()) return absl::OkStatus();
    Stream& copy = device_.copy_stream();
    RECSDK_RETURN_IF_ERROR(CopyAfterCompute());
    // Run: after the swap-ins queued before it (a slot written then read back gets its new row).
    Status status = copy.Run([&]() -> Status {
      return CopyRuns(device_.data_transfer(), rows_, slots, out, row_floats_,
                      /*to_device=*/false);
    });
    if (!status.ok()) return Named(status, "Read", slots.size());
    // The host reads `out` next (the host tier takes the rows): it waits for the copy.
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, copy.Record());
    TierSwapCounters& c = device_.tier_swaps();
    c.swap_out_host_waits.fetch_add(1, std::memory_order_relaxed);
    if (Status s = done->Wait(kTierCopyWait); !s.ok()) {
      return Status(s.code(), fmt::format("device tier of {}: waiting (at most {}) for the Read of "
                                          "{} rows on {}: {}",
                                          label_, absl::FormatDuration(kTierCopyWait), slots.size(),
                                          copy.name(), s.message()));
    }
    c.swap_out_rows.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
    c.swap_out_bytes.fetch_add(static_cast<int64_t>(slots.size() * RowBytes()),
                               std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // ReadAsync: Read's copy into rows the queued copy shares with the result, enqueued (after the
  // compute work so far and the swap-ins before it), no host wait.
  StatusOr<PendingRows> ReadAsync(absl::Span<const uint32_t> slots, SwapOutOrder order) override {
    RECSDK_RETURN_IF_ERROR(CheckSlots(slots, "ReadAsync"));
    PendingRows pending{nullptr, std::make_shared<std::vector<float>>(
                                     slots.size() * static_cast<size_t>(row_floats_))};
    if (slots.empty()) return pending;
    Stream& copy = device_.copy_stream();
    if (order == SwapOutOrder::kAfterQueuedCompute) RECSDK_RETURN_IF_ERROR(CopyAfterCompute());
    DataTransfer* transfer = &device_.data_transfer();
    auto from = std::make_shared<std::vector<uint32_t>>(slots.begin(), slots.end());
    Status status = copy.Enqueue(
        [transfer, rows = rows_, from, out = pending.rows, row_floats = row_floats_]() -> Status {
          return CopyRuns(*transfer, rows, *from, out->data(), row_floats, /*to_device=*/false);
        });
    if (!status.ok()) return Named(status, "ReadAsync", slots.size());
    RECSDK_ASSIGN_OR_RETURN(pending.done, copy.Record());
    TierSwapCounters& c = device_.tier_swaps();
    c.swap_out_rows.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
    c.swap_out_bytes.fetch_add(static_cast<int64_t>(slots.size() * RowBytes()),
                               std::memory_order_relaxed);
    return pending;
  }

  Status WaitRead(const PendingRows& pending) override {
    if (pending.done == nullptr || pending.done->Done()) {
      // Done() only says the event passed; the wait reports a copy that failed.
      return pending.done == nullptr ? absl::OkStatus() : pending.done->Wait(kTierCopyWait);
    }
    device_.tier_swaps().swap_out_host_waits.fetch_add(1, std::memory_order_relaxed);
    if (Status s = pending.done->Wait(kTierCopyWait); !s.ok()) {
      return Status(s.code(), fmt::format("device tier of {}: waiting (at most {}) for a swap-out "
                                          "of {} rows on {}: {}",
                                          label_, absl::FormatDuration(kTierCopyWait),
                                          pending.rows->size() / static_cast<size_t>(row_floats_),
                                          device_.copy_stream().name(), s.message()));
    }
    return absl::OkStatus();
  }

  // Write: stages the rows, queues their copy and returns; the copy's event waits in pending_
  // for the next ComputeAfterWrites.
  Status Write(absl::Span<const uint32_t> slots, const float* in) override {
    RECSDK_RETURN_IF_ERROR(CheckSlots(slots, "Write"));
    if (slots.empty()) return absl::OkStatus();
    auto staged = std::make_shared<StagedRows>();
    staged->slots.assign(slots.begin(), slots.end());
    staged->rows.assign(in, in + slots.size() * static_cast<size_t>(row_floats_));
    Stream& copy = device_.copy_stream();
    RECSDK_RETURN_IF_ERROR(CopyAfterCompute());
    DataTransfer* transfer = &device_.data_transfer();
    Status status =
        copy.Enqueue([transfer, rows = rows_, staged, row_floats = row_floats_]() -> Status {
          return CopyRuns(*transfer, rows, staged->slots, staged->rows.data(), row_floats,
                          /*to_device=*/true);
        });
    if (!status.ok()) return Named(status, "Write", slots.size());
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, copy.Record());
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Copies already landed need no wait: the list holds only what may still be in flight.
      std::erase_if(pending_, [](const std::shared_ptr<Event>& e) { return e->Done(); });
      pending_.push_back(std::move(done));
    }
    TierSwapCounters& c = device_.tier_swaps();
    c.swap_in_rows.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
    c.swap_in_bytes.fetch_add(static_cast<int64_t>(slots.size() * RowBytes()),
                              std::memory_order_relaxed);
    return absl::OkStatus();
  }

  Status ComputeAfterWrites() override {
    Stream& compute = device_.compute_stream();
    for (const std::shared_ptr<Event>& e : TakePending()) {
      if (e->Done()) continue;
      device_.tier_swaps().compute_waits.fetch_add(1, std::memory_order_relaxed);
      if (Status s = compute.WaitFor(*e); !s.ok()) {
        return Status(s.code(),
                      fmt::format("device tier of {}: {} waiting for a swap-in on {}: {}", label_,
                                  compute.name(), device_.copy_stream().name(), s.message()));
      }
    }
    return absl::OkStatus();
  }

  StatusOr<std::shared_ptr<Event>> ComputeFence() override {
    return device_.compute_stream().Record();
  }

 private:
  size_t RowBytes() const { return static_cast<size_t>(row_floats_) * sizeof(float); }

  Status CheckSlots(absl::Span<const uint32_t> slots, const char* what) const {
    for (uint32_t s : slots) {
      if (s >= capacity_) {
        return absl::InvalidArgumentError(fmt::format(
            "device tier of {}: {} of slot {}, past its {} rows", label_, what, s, capacity_));
      }
    }
    return absl::OkStatus();
  }

  // CopyAfterCompute: the copy stream's next work starts after the compute work enqueued so far
  // (a kernel still reading or updating a slot runs before the slot is overwritten or read).
  Status CopyAfterCompute() {
    Stream& compute = device_.compute_stream();
    Stream& copy = device_.copy_stream();
    if (&compute == &copy) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> before, compute.Record());
    return copy.WaitFor(*before);
  }

  std::vector<std::shared_ptr<Event>> TakePending() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(pending_, {});
  }

  Status Named(const Status& status, const char* what, size_t n) const {
    return Status(status.code(), fmt::format("device tier of {}: {} of {} rows: {}", label_, what,
                                             n, status.message()));
  }

  Device& device_;
  std::unique_ptr<MemoryCharge> charge_;  // the rows' bytes in the variable pool's count
  std::shared_ptr<TensorBuffer> rows_;
  uint32_t capacity_;
  int row_floats_;
  std::string label_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Event>> pending_;  // swap-ins' events not waited for; guarded by mu_
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
