// separate_memory_device.cc: "separate_memory", a test device whose memory is not the host's.
//
// The CPU kernels (KernelRegistry::AddAlias) run on tensors that live in one arena of reserved
// address space. The arena is mapped PROT_NONE except while the device itself works on it: a
// kernel running on the device's stream, a copy through its DataTransfer, the zero-fill of a
// fresh buffer. So a host read or write of device memory anywhere else (the Session returning a
// fetch without its copy, a checkpoint reading a variable in place, an observer reading an
// output) is a segmentation fault at the faulting line, and a kernel given a host tensor where the
// device expects its own is an error from the executor's memory check: a missing copy fails a
// test instead of reading the right bytes by luck. CTest runs the graph and session tests on this
// device (label separate_memory; RECSDK_TEST_DEVICE in session.cc).
//
// Its copy stream is deferred (ArenaCopyStream): the device tier's swap-ins run only when their
// event is waited for, so a missing wait is a wrong row, not a race that happens to go right.
//
// With several kernels at once (DNN_V100:N) the arena is open while any of them runs, so a host op
// running beside them could touch it unnoticed: the trap is exact with one op at a time (the
// default), which is how the suite runs.
// Threading: the arena's allocator and its access count are guarded by their own mutexes.
#include "src/device/separate_memory/separate_memory_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/kernel.h"

namespace recsdk::internal {
namespace {

constexpr size_t kArenaAlign = 64;
// The most address space one device reserves (the pools' limits bound what is used).
constexpr size_t kMaxArenaBytes = size_t{16} << 30;

// ProtectedArena: first-fit allocation in one reserved range, inaccessible to the host outside an
// Access scope.
class ProtectedArena final : public Allocator {
 public:
  explicit ProtectedArena(size_t bytes) {
    size_ = (bytes + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      base_ = static_cast<char*>(p);
      free_[0] = size_;
    }
  }
  ~ProtectedArena() override {
    if (base_ != nullptr) ::munmap(base_, size_);
  }
  ProtectedArena(const ProtectedArena&) = delete;
  ProtectedArena& operator=(const ProtectedArena&) = delete;

  bool ok() const { return base_ != nullptr; }
  MemoryKind kind() const override { return MemoryKind::kDevice; }

  void* Allocate(size_t bytes) override {
    const size_t need = (std::max<size_t>(bytes, 1) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      const size_t offset = it->first;
      const size_t left = it->second - need;
      free_.erase(it);
      if (left > 0) free_[offset + need] = left;
      return base_ + offset;
    }
    return nullptr;
  }

  void Free(void* p, size_t bytes) override {
    if (p == nullptr) return;
    size_t offset = static_cast<size_t>(static_cast<char*>(p) - base_);
    size_t len = (std::max<size_t>(bytes, 1) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    std::lock_guard<std::mutex> lock(mu_);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + len == next->first) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += len;
        return;
      }
    }
    free_[offset] = len;
  }

  void Zero(void* p, size_t bytes) override {
    Access access(*this);
    std::memset(p, 0, bytes);
  }

  // Contains: whether [p, p + bytes) lies in the arena.
  bool Contains(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c + bytes <= base_ + size_;
  }

  // Access: the arena is readable and writable while at least one Access lives.
  class Access {
   public:
    explicit Access(ProtectedArena& arena) : arena_(arena) { arena_.Open(); }
    ~Access() { arena_.Close(); }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    ProtectedArena& arena_;
  };

 private:
  void Open() {
    std::lock_guard<std::mutex> lock(access_mu_);
    if (open_++ == 0) ::mprotect(base_, size_, PROT_READ | PROT_WRITE);
  }
  void Close() {
    std::lock_guard<std::mutex> lock(access_mu_);
    if (--open_ == 0) ::mprotect(base_, size_, PROT_NONE);
  }

  char* base_ = nullptr;
  size_t size_ = 0;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length of each free block; guarded by mu_
  std::mutex access_mu_;
  int open_ = 0;  // guarded by access_mu_
};

// ArenaStream: synchronous; the device's work runs with its arena open.
class ArenaStream final : public SyncStream {
 public:
  ArenaStream(std::string name, ProtectedArena& arena)
      : SyncStream(std::move(name)), arena_(arena) {}
  Status Run(absl::FunctionRef<Status()> work) override {
    ProtectedArena::Access access(arena_);
    return work();
  }

 private:
  ProtectedArena& arena_;
};

// ArenaCopyStream: the device's copy stream, deferred as a GPU's copy engine is from the host's
// point of view: work given to Enqueue (the device tier's swap-ins) runs only when an event
// recorded after it is waited for (Event::Wait, or the compute stream's WaitFor), or when Run or
// Synchronize is called, on that caller's thread. So a kernel that reads rows a queued copy writes
// without waiting for the copy's event reads the old rows, and a staging buffer freed before its
// copy ran is read after free: both make the tests that compare with the CPU device fail, where a
// synchronous copy would hide them. The first failed copy's error is returned by every wait after
// it (as a GPU's sticky error).
class ArenaCopyStream final : public Stream {
 public:
  ArenaCopyStream(std::string name, ProtectedArena& arena)
      : name_(std::move(name)), arena_(arena) {}
  const std::string& name() const override { return name_; }
  Status Run(absl::FunctionRef<Status()> work) override {
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    RECSDK_RETURN_IF_ERROR(Lock(lock, kCopyStreamWait));
    RECSDK_RETURN_IF_ERROR(RunQueued(std::numeric_limits<int64_t>::max()));
    ProtectedArena::Access access(arena_);
    return work();
  }
  Status Enqueue(std::function<Status()> work) override {
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    RECSDK_RETURN_IF_ERROR(Lock(lock, kCopyStreamWait));
    queue_.push_back(std::move(work));
    ++enqueued_;
    return absl::OkStatus();
  }
  StatusOr<std::shared_ptr<Event>> Record() override {
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    RECSDK_RETURN_IF_ERROR(Lock(lock, kCopyStreamWait));
    return std::shared_ptr<Event>(std::make_shared<CopyEvent>(*this, enqueued_));
  }
  // WaitFor: events of the compute stream (synchronous) are done when recorded.
  Status WaitFor(const Event& event) override {
    if (Status s = event.Wait(kCopyStreamWait); !s.ok()) {
      return Status(s.code(),
                    fmt::format("stream {} waiting for an event: {}", name_, s.message()));
    }
    return absl::OkStatus();
  }
  Status Synchronize(absl::Duration timeout) override {
    return RunUpTo(std::numeric_limits<int64_t>::max(), timeout);
  }

 private:
  // kCopyStreamWait: the longest the host waits for the stream's lock (another thread running
  // its queued copies) or an event.
  static constexpr absl::Duration kCopyStreamWait = absl::Minutes(2);

  // CopyEvent: the point after the first `seq` pieces of work enqueued.
  class CopyEvent final : public Event {
   public:
    CopyEvent(ArenaCopyStream& stream, int64_t seq) : stream_(stream), seq_(seq) {}
    bool Done() const override { return stream_.ran_.load(std::memory_order_acquire) >= seq_; }
    Status Wait(absl::Duration timeout) const override { return stream_.RunUpTo(seq_, timeout); }

   private:
    ArenaCopyStream& stream_;
    int64_t seq_;
  };

  Status Lock(std::unique_lock<std::timed_mutex>& lock, absl::Duration timeout) const {
    if (lock.try_lock_for(absl::ToChronoNanoseconds(timeout))) return absl::OkStatus();
    return absl::DeadlineExceededError(
        fmt::format("stream {}: another thread held it (running its queued copies) for more than "
                    "{}",
                    name_, absl::FormatDuration(timeout)));
  }
  // RunUpTo: runs the queued work until `seq` pieces have run, on this thread.
  Status RunUpTo(int64_t seq, absl::Duration timeout) {
    if (ran_.load(std::memory_order_acquire) >= seq) return first_error();
    std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
    RECSDK_RETURN_IF_ERROR(Lock(lock, timeout));
    return RunQueued(seq);
  }
  // RunQueued: as RunUpTo, holding mu_.
  Status RunQueued(int64_t seq) {
    while (ran_.load(std::memory_order_relaxed) < seq && !queue_.empty()) {
      std::function<Status()> work = std::move(queue_.front());
      queue_.pop_front();
      Status s = work();
      if (!s.ok()) {
        std::lock_guard<std::mutex> error_lock(error_mu_);
        if (first_error_.ok()) first_error_ = s;
      }
      ran_.fetch_add(1, std::memory_order_release);
    }
    return first_error();
  }
  Status first_error() const {
    std::lock_guard<std::mutex> lock(error_mu_);
    return first_error_;
  }

  std::string name_;
  ProtectedArena& arena_;
  mutable std::timed_mutex mu_;
  std::deque<std::function<Status()>> queue_;  // guarded by mu_
  int64_t enqueued_ = 0;                       // guarded by mu_
  std::atomic<int64_t> ran_{0};                // pieces of work run so far
  mutable std::mutex error_mu_;
  Status first_error_;  // guarded by error_mu_
};

class ArenaTransfer final : public DataTransfer {
 public:
  explicit ArenaTransfer(ProtectedArena& arena) : arena_(arena) {}
  Status CopyHostToDevice(const Tensor& host, Tensor* device) override {
    RECSDK_RETURN_IF_ERROR(Check("CopyHostToDevice", host, device, /*to_device=*/true));
    return Copy(host, device);
  }
  Status CopyDeviceToHost(const Tensor& device, Tensor* host) override {
    RECSDK_RETURN_IF_ERROR(Check("CopyDeviceToHost", device, host, /*to_device=*/false));
    return Copy(device, host);
  }

 private:
  Status Check(const char* what, const Tensor& src, const Tensor* dst, bool to_device) const {
    if (dst == nullptr || src.dtype() != dst->dtype() || src.shape() != dst->shape()) {
      return absl::InvalidArgumentError(fmt::format(
          "separate_memory {}: source {} {} and destination {} differ; allocate the destination "
          "with the source's dtype and shape",
          what, DTypeName(src.dtype()), src.shape().ToString(),
          dst == nullptr ? std::string("(null)")
                         : fmt::format("{} {}", DTypeName(dst->dtype()), dst->shape().ToString())));
    }
    if (src.TotalBytes() == 0) return absl::OkStatus();
    const Tensor& device = to_device ? *dst : src;
    const Tensor& host = to_device ? src : *dst;
    if (!arena_.Contains(device.raw_data(), device.TotalBytes()) || !host.on_host()) {
      return absl::InvalidArgumentError(fmt::format(
          "separate_memory {}: the device side is not in this device's memory or the host side "
          "is not in host memory (source in {} memory, destination in {} memory)",
          what, MemoryKindName(src.memory_kind()), MemoryKindName(dst->memory_kind())));
    }
    return absl::OkStatus();
  }
  Status Copy(const Tensor& src, Tensor* dst) {
    if (src.TotalBytes() == 0) return absl::OkStatus();
    ProtectedArena::Access access(arena_);
    std::memcpy(dst->raw_data(), src.raw_data(), src.TotalBytes());
    return absl::OkStatus();
  }

  ProtectedArena& arena_;
};

class SeparateMemoryDevice final : public Device {
 public:
  SeparateMemoryDevice(std::string type, const SessionConfig& config,
                       std::shared_ptr<ProtectedArena> arena)
      : Device(std::move(type), 0, config, arena),
        arena_(std::move(arena)),
        stream_(name() + "/compute", *arena_),
        copies_(name() + "/copy", *arena_),
        transfer_(*arena_),
        threads_(config.intra_op_parallelism > 0
                     ? config.intra_op_parallelism
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}
  DataTransfer& data_transfer() override { return transfer_; }
  Stream& compute_stream() override { return stream_; }
  Stream& copy_stream() override { return copies_; }
  int IntraOpThreads() const override { return threads_; }
  // The CPU table kernels run here on the arena: a tiered table's device tier lives in it.
  StatusOr<std::unique_ptr<DeviceTierMemory>> CreateTableTierMemory(
      int64_t rows, int row_floats, const std::string& label) override {
    return CreateTransferTierMemory(*this, arena_, rows, row_floats, label);
  }

 private:
  std::shared_ptr<ProtectedArena> arena_;
  ArenaStream stream_;
  ArenaCopyStream copies_;
  ArenaTransfer transfer_;
  int threads_;
};

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateSeparateMemoryDevice(const std::string& type,
                                                             const SessionConfig& config) {
  const uint64_t want = static_cast<uint64_t>(config.graph_memory_max_size) +
                        static_cast<uint64_t>(config.variable_memory_max_size);
  auto arena = std::make_shared<ProtectedArena>(
      static_cast<size_t>(std::min<uint64_t>(want, kMaxArenaBytes)));
  if (!arena->ok()) {
    return absl::ResourceExhaustedError(
        fmt::format("{}: cannot reserve the device's address range (mmap failed); lower "
                    "graph_memory_max_size and variable_memory_max_size",
                    type));
  }
  return std::unique_ptr<Device>(
      std::make_unique<SeparateMemoryDevice>(type, config, std::move(arena)));
}

void RegisterSeparateMemoryBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    DeviceRegistry::Global().Register(
        "separate_memory",
        [](const SessionConfig& config) {
          return CreateSeparateMemoryDevice("separate_memory", config);
        },
        MemoryKind::kDevice);
    KernelRegistry& r = KernelRegistry::Global();
    r.AddAlias("separate_memory", "cpu");
    RegisterCopyKernels(r, "separate_memory");
  });
}

}  // namespace recsdk::internal
