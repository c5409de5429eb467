// cuda_tier_memory.cc: a tiered table's device tier in GPU memory (cuda_tier_memory.h).
#include "src/device/cuda/cuda_tier_memory.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_row_store.h"

namespace recsdk::cuda {
namespace {

// kSwapOutWait: how long the host waits for a swap-out's copy (WaitRead) or, when the memory
// goes, for every queued copy.
constexpr absl::Duration kSwapOutWait = absl::Minutes(2);
// kSpareSwapOutBuffers: staging buffers kept for later swap-outs once their rows were taken (the
// table keeps one swap-out in flight; a snapshot's Read between two is synchronous).
constexpr size_t kSpareSwapOutBuffers = 2;

// SwapOutBuffers: one swap-out's staging: the victims' slots and rows in pinned host memory and
// the same layout on the GPU ([rows * row_floats floats | pad to 16 bytes | rows int64 slots]).
// Owned by the in-flight swap-out from ReadAsync until WaitRead has copied its rows out, so no
// later copy refills it while the GPU may still write it.
struct SwapOutBuffers {
  int64_t rows = 0;        // how many rows it holds
  int64_t ids_offset = 0;  // bytes from the start to the slots
  PinnedBuffer pinned;
  DeviceBuffer device;
};

// SwapOutDone: the event after a swap-out's copy to pinned memory (internal::Event over a CUDA
// event on the swap stream).
class SwapOutDone final : public internal::Event {
 public:
  explicit SwapOutDone(std::unique_ptr<cuda::Event> event) : event_(std::move(event)) {}
  bool Done() const override { return event_->Synchronize(absl::ZeroDuration()).ok(); }
  Status Wait(absl::Duration timeout) const override { return event_->Synchronize(timeout); }

 private:
  std::unique_ptr<cuda::Event> event_;
};

class CudaTierMemory final : public internal::DeviceTierMemory {
 public:
  CudaTierMemory(internal::Device& device, Stream& compute,
                 std::unique_ptr<internal::MemoryCharge> charge,
                 std::unique_ptr<CudaRowStore> store, std::string label)
      : device_(device),
        compute_(compute),
        charge_(std::move(charge)),
        store_(std::move(store)),
        label_(std::move(label)) {}

  // Swap-ins still queued write the store's rows, swap-outs still queued write their pinned
  // staging: they land before the rows and the staging are freed.
  ~CudaTierMemory() override {
    if (pending_.empty() && reads_.empty()) return;
    if (!pending_.empty()) {
      device_.tier_swaps().swap_in_host_waits.fetch_add(1, std::memory_order_relaxed);
    }
    (void)store_->stream().Synchronize(kSwapOutWait);  // failed: the rows go away anyway
  }
  CudaTierMemory(const CudaTierMemory&) = delete;
  CudaTierMemory& operator=(const CudaTierMemory&) = delete;

  float* rows() const override { return store_->table().data; }
  int row_floats() const override { return store_->row_floats(); }
  uint32_t capacity() const override { return store_->capacity(); }

  // Read: after the swap-ins queued before it (the same swap stream); the host waits for it.
  Status Read(absl::Span<const uint32_t> slots, float* out) override {
    RECSDK_RETURN_IF_ERROR(Prepare(slots, "Read"));
    if (slots.empty()) return absl::OkStatus();
    internal::TierSwapCounters& c = device_.tier_swaps();
    c.swap_out_host_waits.fetch_add(1, std::memory_order_relaxed);
    RECSDK_RETURN_IF_ERROR(Named(store_->Read(slots, out), "Read", slots.size()));
    c.swap_out_rows.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
    c.swap_out_bytes.fetch_add(static_cast<int64_t>(slots.size()) * row_floats() * 4,
                               std::memory_order_relaxed);
    return absl::OkStatus();
  }
  // ReadAsync: a swap-out without a host wait. On the swap stream, after the compute work
  // enqueued so far (Prepare) and the swaps before it: the slots go up from pinned staging, the
  // victims' rows are gathered on the GPU into device staging and copied (cudaMemcpyAsync) into
  // pinned staging; an event after that copy is the result's `done`. The staging belongs to this
  // swap-out until WaitRead has copied its rows out.
  StatusOr<internal::PendingRows> ReadAsync(absl::Span<const uint32_t> slots,
                                            internal::SwapOutOrder order) override {
    RECSDK_RETURN_IF_ERROR(
        Prepare(slots, "ReadAsync", order == internal::SwapOutOrder::kAfterQueuedCompute));
    const int64_t n = static_cast<int64_t>(slots.size());
    internal::PendingRows pending{nullptr, std::make_shared<std::vector<float>>(
                                               slots.size() * static_cast<size_t>(row_floats()))};
    if (n == 0) return pending;
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<SwapOutBuffers> buffers, TakeSwapOutBuffers(n));
    Stream& swap = store_->stream();
    const int64_t value_bytes = n * row_floats() * static_cast<int64_t>(sizeof(float));
    auto* pinned_ids = reinterpret_cast<int64_t*>(buffers->pinned.as<char>() + buffers->ids_offset);
    std::copy(slots.begin(), slots.end(), pinned_ids);
    auto* device_ids = reinterpret_cast<int64_t*>(buffers->device.as<char>() + buffers->ids_offset);
    Status status =
        CopyHostToDevice(swap, device_ids, pinned_ids, n * static_cast<int64_t>(sizeof(int64_t)));
    if (status.ok())
      status = GatherRows(swap, store_->table(), device_ids, n, buffers->device.as<float>());
    if (status.ok()) {
      status = CopyDeviceToHost(swap, buffers->pinned.data(), buffers->device.data(), value_bytes);
    }
    StatusOr<std::unique_ptr<Event>> event = Event::Create(swap);
    if (status.ok()) status = event.status();
    if (status.ok()) status = (*event)->Record(swap);
    if (!status.ok()) {
      // Something may be queued that still reads or writes the staging: it runs out before the
      // staging is freed (bounded; a stream that failed is done at once).
      (void)swap.Synchronize(kSwapOutWait);
      return Named(status, "ReadAsync", slots.size());
    }
    pending.done = std::make_shared<SwapOutDone>(*std::move(event));
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.emplace(pending.done.get(), std::move(buffers));
    }
    internal::TierSwapCounters& c = device_.tier_swaps();
    c.swap_out_rows.fetch_add(n, std::memory_order_relaxed);
    c.swap_out_bytes.fetch_add(value_bytes, std::memory_order_relaxed);
    return pending;
  }
  // WaitRead: waits (bounded, counted when it had to) for the swap-out's copy, copies its rows from
  // pinned staging into pending.rows and keeps the staging for a later swap-out. A swap-out waited
  // for before (its rows are there) returns OK at once.
  Status WaitRead(const internal::PendingRows& pending) override {
    if (pending.done == nullptr) return absl::OkStatus();
    std::unique_ptr<SwapOutBuffers> buffers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = reads_.find(pending.done.get());
      if (it != reads_.end()) {
        buffers = std::move(it->second);
        reads_.erase(it);
      }
    }
    if (buffers == nullptr) return pending.done->Wait(kSwapOutWait);
    const size_t rows = pending.rows->size() / static_cast<size_t>(row_floats());
    Status status;
    if (!pending.done->Done()) {
      device_.tier_swaps().swap_out_host_waits.fetch_add(1, std::memory_order_relaxed);
      status = pending.done->Wait(kSwapOutWait);
    } else {
      status = pending.done->Wait(absl::ZeroDuration());  // reports a copy that failed
    }
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.emplace(pending.done.get(), std::move(buffers));  // the GPU may still write it
      return Status(
          status.code(),
          fmt::format("device tier of {} in GPU memory: waiting (at most {}) for a "
                      "swap-out of {} rows on its swap stream: {}",
                      label_, absl::FormatDuration(kSwapOutWait), rows, status.message()));
    }
    if (static_cast<int64_t>(rows) > buffers->rows) {
      return absl::InternalError(fmt::format(
          "device tier of {}: a swap-out's result holds {} rows, its staging {}; pass WaitRead the "
          "PendingRows ReadAsync returned",
          label_, rows, buffers->rows));
    }
    std::memcpy(pending.rows->data(), buffers->pinned.data(), pending.rows->size() * sizeof(float));
    std::lock_guard<std::mutex> lock(mu_);
    spare_.push_back(std::move(buffers));
    if (spare_.size() > kSpareSwapOutBuffers) {
      // The smallest goes: the larger ones serve any swap-out it would.
      auto smallest =
          std::min_element(spare_.begin(), spare_.end(),
                           [](const auto& a, const auto& b) { return a->rows < b->rows; });
      spare_.erase(smallest);
    }
    return absl::OkStatus();
  }
  // Write: packed into pinned staging and enqueued on the swap stream; its event waits in pending_
  // for ComputeAfterWrites (the host does not wait for the copy).
  Status Write(absl::Span<const uint32_t> slots, const float* in) override {
    RECSDK_RETURN_IF_ERROR(Prepare(slots, "Write"));
    if (slots.empty()) return absl::OkStatus();
    RECSDK_RETURN_IF_ERROR(Named(store_->WriteAsync(slots, in), "Write", slots.size()));
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Event> done, Event::Create(store_->stream()));
    RECSDK_RETURN_IF_ERROR(done->Record(store_->stream()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::move(done));
    }
    internal::TierSwapCounters& c = device_.tier_swaps();
    c.swap_in_rows.fetch_add(static_cast<int64_t>(slots.size()), std::memory_order_relaxed);
    c.swap_in_bytes.fetch_add(static_cast<int64_t>(slots.size()) * row_floats() * 4,
                              std::memory_order_relaxed);
    return absl::OkStatus();
  }
  // ComputeAfterWrites: the compute stream waits (on the GPU) for every queued swap-in.
  Status ComputeAfterWrites() override {
    std::vector<std::unique_ptr<Event>> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending.swap(pending_);
    }
    for (const std::unique_ptr<Event>& e : pending) {
      device_.tier_swaps().compute_waits.fetch_add(1, std::memory_order_relaxed);
      if (Status s = e->MakeWait(compute_); !s.ok()) {
        return Status(s.code(), fmt::format("device tier of {} in GPU memory: the compute stream's "
                                            "wait for a queued Write: {}",
                                            label_, s.message()));
      }
    }
    return absl::OkStatus();
  }
  StatusOr<std::shared_ptr<internal::Event>> ComputeFence() override {
    return device_.compute_stream().Record();
  }

 private:
  // Prepare: checks the slots, then (after_compute) makes the swap stream wait (on the GPU) for the
  // compute work enqueued so far: a queued kernel that reads or writes these slots runs before the
  // swap.
  Status Prepare(absl::Span<const uint32_t> slots, const char* what, bool after_compute = true) {
    for (uint32_t s : slots) {
      if (s >= capacity()) {
        return absl::InvalidArgumentError(fmt::format(
            "device tier of {}: {} of slot {}, past its {} rows", label_, what, s, capacity()));
      }
    }
    if (slots.empty() || !after_compute) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Event> before, Event::Create(compute_));
    RECSDK_RETURN_IF_ERROR(before->Record(compute_));
    return before->MakeWait(store_->stream());
  }
  // TakeSwapOutBuffers: staging for a swap-out of `n` rows: the smallest spare one that holds them,
  // or new buffers (rounded up to 1024 rows, so a table's swap-outs soon reuse them).
  StatusOr<std::unique_ptr<SwapOutBuffers>> TakeSwapOutBuffers(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = spare_.end();
      for (auto it = spare_.begin(); it != spare_.end(); ++it) {
        if ((*it)->rows >= n && (best == spare_.end() || (*it)->rows < (*best)->rows)) best = it;
      }
      if (best != spare_.end()) {
        std::unique_ptr<SwapOutBuffers> b = std::move(*best);
        spare_.erase(best);
        return b;
      }
    }
    auto b = std::make_unique<SwapOutBuffers>();
    b->rows = (n + 1023) / 1024 * 1024;
    b->ids_offset = (b->rows * row_floats() * static_cast<int64_t>(sizeof(float)) + 15) / 16 * 16;
    const int64_t bytes = b->ids_offset + b->rows * static_cast<int64_t>(sizeof(int64_t));
    StatusOr<PinnedBuffer> pinned = PinnedBuffer::Allocate(bytes);
    if (!pinned.ok()) return Named(pinned.status(), "ReadAsync's pinned staging", n);
    b->pinned = *std::move(pinned);
    StatusOr<DeviceBuffer> device = DeviceBuffer::Allocate(store_->stream(), bytes);
    if (!device.ok()) return Named(device.status(), "ReadAsync's device staging", n);
    b->device = *std::move(device);
    return b;
  }
  Status Named(Status s, const char* what, size_t n) const {
    if (s.ok()) return s;
    return Status(s.code(), fmt::format("device tier of {} in GPU memory: {} of {} rows: {}",
                                        label_, what, n, s.message()));
  }

  internal::Device& device_;
  Stream& compute_;
  std::unique_ptr<internal::MemoryCharge> charge_;  // the rows' bytes in the variable pool
  std::unique_ptr<CudaRowStore> store_;
  std::string label_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Event>> pending_;  // swap-ins' events not waited for; guarded by mu_
  // reads_: the staging of each swap-out not waited for, by its `done` event; spare_: staging
  // whose rows were taken, for later swap-outs. Guarded by mu_.
  std::unordered_map<const internal::Event*, std::unique_ptr<SwapOutBuffers>> reads_;
  std::vector<std::unique_ptr<SwapOutBuffers>> spare_;
};

}  // namespace

StatusOr<std::unique_ptr<internal::DeviceTierMemory>> CreateCudaTierMemory(
    internal::Device& device, Stream& compute, int64_t rows, int row_floats,
    const std::string& label) {
  if (rows <= 0 || rows > int64_t{0xFFFFFFFF} || row_floats <= 0) {
    return absl::InvalidArgumentError(
        fmt::format("device tier of {}: {} rows of {} floats; need 0 < rows < 2^32 and "
                    "row_floats > 0",
                    label, rows, row_floats));
  }
  const int64_t row_bytes = int64_t{row_floats} * 4;
  // Charged exactly, as the host slab and CreateTransferTierMemory are.
  RECSDK_ASSIGN_OR_RETURN(
      std::unique_ptr<internal::MemoryCharge> charge,
      device.variable_allocator().Charge(
          rows * row_bytes, fmt::format("the device tier of {} ({} rows of {} bytes, in {} memory)",
                                        label, rows, row_bytes, device.name())));
  CudaRowStoreOptions options;
  options.row_floats = row_floats;
  // The table's kernels gather the embedding with their own dim; the store's own GatherRows is
  // not used here, so the whole row stands in for it.
  options.dim = row_floats;
  options.capacity = static_cast<uint32_t>(rows);
  options.label = label;
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<CudaRowStore> store, CudaRowStore::Create(options));
  // The table allocates its slots itself: every slot of the store is in use from the start, so
  // Read and Write accept any slot below capacity.
  std::vector<uint32_t> slots(static_cast<size_t>(rows));
  RECSDK_RETURN_IF_ERROR(store->Allocate(slots.size(), slots.data()));
  return std::unique_ptr<internal::DeviceTierMemory>(std::make_unique<CudaTierMemory>(
      device, compute, std::move(charge), std::move(store), label));
}

}  // namespace recsdk::cuda
