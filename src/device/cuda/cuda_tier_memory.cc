// cuda_tier_memory.cc: a tiered table's device tier in GPU memory (cuda_tier_memory.h).
#include "src/device/cuda/cuda_tier_memory.h"

#include <mutex>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/cuda/cuda_row_store.h"

namespace recsdk::cuda {
namespace {

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

  // Swap-ins still queued write the store's rows: they land before the store is freed.
  ~CudaTierMemory() override {
    if (pending_.empty()) return;
    device_.tier_swaps().swap_in_host_waits.fetch_add(1, std::memory_order_relaxed);
    (void)store_->stream().Synchronize(absl::Minutes(2));  // failed: the rows go away anyway
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
  // Prepare: checks the slots, then makes the swap stream wait (on the GPU) for the compute work
  // enqueued so far: a queued kernel that reads or writes these slots runs before the swap.
  Status Prepare(absl::Span<const uint32_t> slots, const char* what) {
    for (uint32_t s : slots) {
      if (s >= capacity()) {
        return absl::InvalidArgumentError(fmt::format(
            "device tier of {}: {} of slot {}, past its {} rows", label_, what, s, capacity()));
      }
    }
    if (slots.empty()) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Event> before, Event::Create(compute_));
    RECSDK_RETURN_IF_ERROR(before->Record(compute_));
    return before->MakeWait(store_->stream());
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
