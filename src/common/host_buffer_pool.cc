// host_buffer_pool.cc
#include "src/common/host_buffer_pool.h"

#include <bit>
#include <cstdlib>
#include <new>

#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace recsdk::internal {
namespace {

// Under ASan a held buffer is poisoned but for its link, so a use after the last Tensor let go
// of it is still reported, as it was when every buffer went back to free.
void PoisonHeld(void* p, size_t capacity) {
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + sizeof(void*), capacity - sizeof(void*));
}

}  // namespace

HostBufferPool& HostBufferPool::Global() {
  // Leaked on purpose (see the header); the reaper, constructed after it, runs at exit.
  static HostBufferPool* const pool = new HostBufferPool();
  struct Reaper {
    ~Reaper() {
      pool->set_limit_bytes(0);
      pool->Trim();
    }
  };
  static Reaper reaper;
  return *pool;
}

int HostBufferPool::ClassIndex(size_t bytes) {
  if (bytes <= 256) return bytes == 0 ? 0 : static_cast<int>((bytes - 1) / 64);
  // 2^k < bytes <= 2^(k+1), k >= 8; the classes of that octave are 2^k + j * 2^(k-2), j = 1..4.
  const int k = static_cast<int>(std::bit_width(bytes - 1)) - 1;
  const size_t step = size_t{1} << (k - 2);
  const size_t j = (bytes - (size_t{1} << k) + step - 1) / step;
  return 4 + (k - 8) * 4 + static_cast<int>(j) - 1;
}

size_t HostBufferPool::ClassBytes(int index) {
  if (index < 4) return static_cast<size_t>(index + 1) * 64;
  const int k = 8 + (index - 4) / 4;
  const size_t j = static_cast<size_t>((index - 4) % 4) + 1;
  return (size_t{1} << k) + j * (size_t{1} << (k - 2));
}

size_t HostBufferPool::CapacityFor(size_t bytes) {
  if (bytes <= kMaxPooledBytes) return ClassBytes(ClassIndex(bytes));
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded < bytes ? 0 : rounded;
}

void* HostBufferPool::Acquire(size_t bytes, size_t* capacity) {
  if (bytes <= kMaxPooledBytes) {
    const int index = ClassIndex(bytes);
    const size_t class_bytes = ClassBytes(index);
    FreeList& list = lists_[static_cast<size_t>(index)];
    {
      std::lock_guard<std::mutex> lock(list.mu);
      if (list.head != nullptr) {
        void* p = list.head;
        ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(p) + sizeof(void*),
                                    class_bytes - sizeof(void*));
        list.head = *static_cast<void**>(p);
        --list.count;
        ++list.reused;
        bytes_held_.fetch_sub(class_bytes, std::memory_order_relaxed);
        *capacity = class_bytes;
        return p;
      }
      ++list.allocated;
    }
    void* p = std::aligned_alloc(kAlignment, class_bytes);
    if (p == nullptr) throw std::bad_alloc();
    *capacity = class_bytes;
    return p;
  }
  const size_t rounded = CapacityFor(bytes);
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  *capacity = rounded;
  return p;
}

void HostBufferPool::Release(void* p, size_t capacity) {
  if (p == nullptr) return;
  if (capacity <= kMaxPooledBytes) {
    // Reserve the bytes before linking, so concurrent releases never pass the bound together.
    const size_t limit = limit_bytes();
    size_t held = bytes_held_.load(std::memory_order_relaxed);
    bool reserved = false;
    while (held + capacity <= limit) {
      if (bytes_held_.compare_exchange_weak(held, held + capacity, std::memory_order_relaxed)) {
        reserved = true;
        break;
      }
    }
    if (reserved) {
      FreeList& list = lists_[static_cast<size_t>(ClassIndex(capacity))];
      std::lock_guard<std::mutex> lock(list.mu);
      *static_cast<void**>(p) = list.head;
      PoisonHeld(p, capacity);
      list.head = p;
      ++list.count;
      return;
    }
  }
  freed_.fetch_add(1, std::memory_order_relaxed);
  std::free(p);
}

size_t HostBufferPool::Trim() {
  size_t total = 0;
  for (int index = 0; index < kNumClasses; ++index) {
    FreeList& list = lists_[static_cast<size_t>(index)];
    void* head = nullptr;
    size_t count = 0;
    {
      std::lock_guard<std::mutex> lock(list.mu);
      head = list.head;
      count = list.count;
      list.head = nullptr;
      list.count = 0;
    }
    const size_t class_bytes = ClassBytes(index);
    while (head != nullptr) {
      void* next = *static_cast<void**>(head);
      std::free(head);
      head = next;
    }
    bytes_held_.fetch_sub(count * class_bytes, std::memory_order_relaxed);
    total += count * class_bytes;
  }
  return total;
}

HostBufferPoolStats HostBufferPool::stats() const {
  HostBufferPoolStats s;
  for (int index = 0; index < kNumClasses; ++index) {
    const FreeList& list = lists_[static_cast<size_t>(index)];
    std::lock_guard<std::mutex> lock(list.mu);
    s.buffers_held += list.count;
    s.bytes_held += list.count * ClassBytes(index);
    s.reused += list.reused;
    s.allocated += list.allocated;
  }
  s.freed = freed_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace recsdk::internal
