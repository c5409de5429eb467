// allocator.cc
#include "src/device/allocator.h"

#include <bit>
#include <cstdlib>
#include <cstring>

#include "fmt/format.h"
#include "src/common/status_macros.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RECSDK_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define RECSDK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define RECSDK_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define RECSDK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#endif
#endif
#ifndef RECSDK_POISON
#define RECSDK_POISON(p, n) ((void)(p), (void)(n))
#define RECSDK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace recsdk::internal {
namespace {

class SystemHostAllocator final : public Allocator {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }
  void* Allocate(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void Free(void* p, size_t /*bytes*/) override { std::free(p); }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
};

class CountedBuffer final : public TensorBuffer {
 public:
  CountedBuffer(void* data, size_t size, size_t capacity,
                std::shared_ptr<LimitedAllocator::State> state)
      : TensorBuffer(data, size), capacity_(capacity), state_(std::move(state)) {}
  ~CountedBuffer() override {
    state_->in_use.fetch_sub(static_cast<int64_t>(capacity_));
    state_->Give(data(), capacity_);
  }
  MemoryKind memory_kind() const override { return state_->memory->kind(); }

 private:
  size_t capacity_;
  std::shared_ptr<LimitedAllocator::State> state_;
};

}  // namespace

std::shared_ptr<Allocator> HostAllocator() {
  static const auto* host = new std::shared_ptr<Allocator>(std::make_shared<SystemHostAllocator>());
  return *host;
}

size_t LimitedAllocator::SizeClass(size_t bytes) {
  if (bytes <= 512) return bytes <= 64 ? 64 : (bytes + 63) / 64 * 64;
  // Eight classes per power of two: round up to a multiple of 2^(floor(log2(bytes)) - 3).
  const int top = 63 - std::countl_zero(static_cast<uint64_t>(bytes));
  const size_t step = size_t{1} << (top - 3);
  return (bytes + step - 1) / step * step;
}

LimitedAllocator::State::~State() { Drop(); }

void* LimitedAllocator::State::Take(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = free.find(capacity);
  if (it == free.end() || it->second.buffers.empty()) return nullptr;
  void* p = it->second.buffers.back();
  it->second.buffers.pop_back();
  it->second.last_used = ++tick;
  cached -= static_cast<int64_t>(capacity);
  RECSDK_UNPOISON(p, capacity);
  return p;
}

void LimitedAllocator::State::Give(void* p, size_t capacity) {
  constexpr int64_t kSlack = 4 << 20;
  std::vector<std::pair<void*, size_t>> evicted;
  bool kept = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    // Twice the peak: buffers of one step's size classes that were never live together still
    // all fit (the DLRM step owns ~1.05x its peak across classes).
    const int64_t cap = 2 * peak.load() + kSlack;
    const int64_t need = static_cast<int64_t>(capacity);
    // Make room by evicting the least recently used other classes (sizes that drifted away).
    while (cached + need > cap) {
      Bucket* victim = nullptr;
      size_t victim_capacity = 0;
      for (auto& [c, bucket] : free) {
        if (c == capacity || bucket.buffers.empty()) continue;
        if (victim == nullptr || bucket.last_used < victim->last_used) {
          victim = &bucket;
          victim_capacity = c;
        }
      }
      if (victim == nullptr) break;
      evicted.emplace_back(victim->buffers.back(), victim_capacity);
      victim->buffers.pop_back();
      cached -= static_cast<int64_t>(victim_capacity);
    }
    if (cached + need <= cap) {
      // Under ASan a cached buffer stays poisoned, so a use after its tensor died is reported.
      RECSDK_POISON(p, capacity);
      Bucket& bucket = free[capacity];
      bucket.buffers.push_back(p);
      bucket.last_used = ++tick;
      cached += need;
      kept = true;
    }
  }
  for (auto& [q, c] : evicted) {
    RECSDK_UNPOISON(q, c);
    memory->Free(q, c);
  }
  if (!kept) memory->Free(p, capacity);
}

void LimitedAllocator::State::Drop() {
  std::map<size_t, Bucket> dropped;
  {
    std::lock_guard<std::mutex> lock(mu);
    dropped.swap(free);
    cached = 0;
  }
  for (auto& [capacity, bucket] : dropped) {
    for (void* p : bucket.buffers) {
      RECSDK_UNPOISON(p, capacity);
      memory->Free(p, capacity);
    }
  }
}

LimitedAllocator::LimitedAllocator(std::string option_name, int64_t limit_bytes,
                                   std::shared_ptr<Allocator> memory)
    : option_name_(std::move(option_name)),
      limit_(limit_bytes),
      state_(std::make_shared<State>(std::move(memory))) {}

int64_t LimitedAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->cached;
}

void LimitedAllocator::ReleaseCache() { state_->Drop(); }

StatusOr<std::shared_ptr<TensorBuffer>> LimitedAllocator::Allocate(size_t bytes) {
  // Accounting is by capacity (what the buffer really holds), so the limit bounds real memory.
  const size_t capacity = SizeClass(bytes);
  const int64_t n = static_cast<int64_t>(capacity);
  const int64_t now = state_->in_use.fetch_add(n) + n;
  if (now > limit_) {
    state_->in_use.fetch_sub(n);
    return absl::ResourceExhaustedError(fmt::format(
        "out of device memory: allocating {} bytes with {} of {} bytes in use; raise {}", bytes,
        now - n, limit_, option_name_));
  }
  int64_t peak = state_->peak.load();
  while (now > peak && !state_->peak.compare_exchange_weak(peak, now)) {
  }
  void* p = state_->Take(capacity);
  if (p == nullptr) {
    // Cached buffers count against the limit too: give them back before growing past it.
    if (now + cached_bytes() > limit_) state_->Drop();
    p = state_->memory->Allocate(capacity);
    if (p == nullptr) {
      state_->Drop();
      p = state_->memory->Allocate(capacity);
    }
    if (p == nullptr) {
      state_->in_use.fetch_sub(n);
      return absl::ResourceExhaustedError(
          fmt::format("{} allocation of {} bytes failed (the {} pool)",
                      MemoryKindName(state_->memory->kind()), bytes, option_name_));
    }
    state_->fresh.fetch_add(1);
  }
  return std::shared_ptr<TensorBuffer>(std::make_shared<CountedBuffer>(p, bytes, capacity, state_));
}

StatusOr<std::unique_ptr<MemoryCharge>> LimitedAllocator::Charge(int64_t bytes,
                                                                 std::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(fmt::format("{}: negative charge of {} bytes", what, bytes));
  }
  const int64_t now = state_->in_use.fetch_add(bytes) + bytes;
  if (now > limit_) {
    state_->in_use.fetch_sub(bytes);
    return absl::ResourceExhaustedError(
        fmt::format("out of device memory: {} needs {} bytes with {} of {} bytes in use; raise {}",
                    what, bytes, now - bytes, limit_, option_name_));
  }
  int64_t peak = state_->peak.load();
  while (now > peak && !state_->peak.compare_exchange_weak(peak, now)) {
  }
  // Cached buffers count against the limit too (Allocate).
  if (now + cached_bytes() > limit_) state_->Drop();
  return std::make_unique<MemoryCharge>(state_, bytes);
}

StatusOr<Tensor> LimitedAllocator::AllocateTensor(DType dtype, const Shape& shape, Fill fill) {
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype);
  auto buf = Allocate(bytes);
  if (!buf.ok()) return buf.status();
  if (bytes > 0 && fill == Fill::kZero) state_->memory->Zero((*buf)->data(), bytes);
  return Tensor(dtype, shape, *std::move(buf));
}

}  // namespace recsdk::internal
