// Tests of src/common/host_buffer_pool.h: the size-classed free lists behind AllocateHostBuffer.
#include "src/common/host_buffer_pool.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/tensor.h"

namespace recsdk::internal {
namespace {

bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % HostBufferPool::kAlignment == 0;
}

TEST(HostBufferPoolTest, SizeClassesAreMultiplesOf64AtMostAQuarterLarger) {
  EXPECT_EQ(HostBufferPool::CapacityFor(0), 64u);
  EXPECT_EQ(HostBufferPool::CapacityFor(1), 64u);
  EXPECT_EQ(HostBufferPool::CapacityFor(65), 128u);
  EXPECT_EQ(HostBufferPool::CapacityFor(256), 256u);
  EXPECT_EQ(HostBufferPool::CapacityFor(257), 320u);
  EXPECT_EQ(HostBufferPool::CapacityFor(513), 640u);
  EXPECT_EQ(HostBufferPool::CapacityFor(HostBufferPool::kMaxPooledBytes),
            HostBufferPool::kMaxPooledBytes);
  for (size_t bytes = 1; bytes <= HostBufferPool::kMaxPooledBytes; bytes = bytes * 5 / 4 + 7) {
    const size_t c = HostBufferPool::CapacityFor(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 64, 0u) << bytes;
    EXPECT_LE(c, bytes < 256 ? bytes + 63 : bytes + bytes / 4) << bytes;
  }
  // Above the largest class only the 64-byte rounding, and no wrap near SIZE_MAX.
  EXPECT_EQ(HostBufferPool::CapacityFor(HostBufferPool::kMaxPooledBytes + 1),
            HostBufferPool::kMaxPooledBytes + 64);
  EXPECT_EQ(HostBufferPool::CapacityFor(SIZE_MAX - 3), 0u);
}

TEST(HostBufferPoolTest, ReleasedBufferIsReusedForTheSameClass) {
  HostBufferPool pool;
  size_t c1 = 0;
  void* p = pool.Acquire(700, &c1);
  EXPECT_EQ(c1, 768u);
  pool.Release(p, c1);
  EXPECT_EQ(pool.stats().bytes_held, 768u);
  size_t c2 = 0;
  void* q = pool.Acquire(760, &c2);  // another size, same class
  EXPECT_EQ(q, p);
  EXPECT_EQ(c2, 768u);
  const HostBufferPoolStats s = pool.stats();
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.allocated, 1u);
  EXPECT_EQ(s.bytes_held, 0u);
  pool.Release(q, c2);
}

TEST(HostBufferPoolTest, HeldBytesNeverPassTheLimitAndLargeBuffersAreFreed) {
  HostBufferPool pool;
  pool.set_limit_bytes(size_t{1} << 20);
  std::vector<std::pair<void*, size_t>> out;
  for (int i = 0; i < 10; ++i) {
    size_t c = 0;
    void* p = pool.Acquire(size_t{256} << 10, &c);
    out.emplace_back(p, c);
  }
  for (auto [p, c] : out) pool.Release(p, c);
  HostBufferPoolStats s = pool.stats();
  EXPECT_EQ(s.bytes_held, size_t{1} << 20);  // 4 of 256 KiB kept
  EXPECT_EQ(s.buffers_held, 4u);
  EXPECT_EQ(s.freed, 6u);

  size_t c = 0;
  void* big = pool.Acquire(HostBufferPool::kMaxPooledBytes + 1, &c);
  EXPECT_TRUE(Aligned(big));
  pool.set_limit_bytes(size_t{1} << 30);
  pool.Release(big, c);
  s = pool.stats();
  EXPECT_EQ(s.freed, 7u);
  EXPECT_EQ(s.bytes_held, size_t{1} << 20);

  EXPECT_EQ(pool.Trim(), size_t{1} << 20);
  s = pool.stats();
  EXPECT_EQ(s.bytes_held, 0u);
  EXPECT_EQ(s.buffers_held, 0u);

  // A limit of 0 holds nothing.
  pool.set_limit_bytes(0);
  void* p = pool.Acquire(100, &c);
  pool.Release(p, c);
  EXPECT_EQ(pool.stats().bytes_held, 0u);
}

TEST(HostBufferPoolTest, EveryBufferIs64ByteAlignedFreshOrReused) {
  HostBufferPool pool;
  std::vector<std::pair<void*, size_t>> out;
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{100}, size_t{1000}, size_t{4097},
                       size_t{100000}, size_t{3} << 20}) {
    for (int round = 0; round < 2; ++round) {
      size_t c = 0;
      void* p = pool.Acquire(bytes, &c);
      EXPECT_TRUE(Aligned(p)) << bytes;
      std::memset(p, 0xAB, c);  // the whole capacity is the caller's
      out.emplace_back(p, c);
    }
    // Give half back now, so the next sizes' second rounds may be served from lists.
    pool.Release(out.back().first, out.back().second);
    out.pop_back();
  }
  for (auto [p, c] : out) pool.Release(p, c);
}

TEST(HostBufferPoolTest, AllocateHostBufferReusesAndZeroFills) {
  HostBufferPool& pool = HostBufferPool::Global();
  pool.Trim();
  const uint64_t reused_before = pool.stats().reused;
  void* first = nullptr;
  {
    std::shared_ptr<TensorBuffer> b = AllocateHostBuffer(5000);
    ASSERT_EQ(b->size(), 5000u);
    first = b->data();
    EXPECT_TRUE(Aligned(first));
    std::memset(first, 0x5A, b->size());
  }
  std::shared_ptr<TensorBuffer> b = AllocateHostBuffer(4990);
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(b->size(), 4990u);
  EXPECT_EQ(pool.stats().reused, reused_before + 1);
  const auto* bytes = static_cast<const unsigned char*>(b->data());
  for (size_t i = 0; i < b->size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
  // A Tensor's buffer is one too: the same class comes back.
  void* tensor_data = nullptr;
  { tensor_data = Tensor(DType::kFloat32, Shape{300}).raw_data(); }
  Tensor t(DType::kFloat32, Shape{299});
  EXPECT_EQ(t.raw_data(), tensor_data);
  for (float v : t.flat<float>()) ASSERT_EQ(v, 0.0f);
}

// Threads acquire and release sizes of a few classes, keeping some buffers for a while, and each
// checks that nobody else wrote into a buffer it holds (two owners of one block would). Run under
// ThreadSanitizer (RECSDK_TSAN_TESTS) it also checks the locking.
TEST(HostBufferPoolTest, ConcurrentUseNeverHandsOneBufferToTwoOwners) {
  HostBufferPool pool;
  pool.set_limit_bytes(size_t{256} << 10);  // small, so both the held and the freed paths run
  constexpr int kThreads = 4;
  constexpr int kIterations = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      struct Held {
        void* p;
        size_t capacity;
        unsigned char mark;
      };
      std::vector<Held> kept;
      uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      for (int i = 0; i < kIterations; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const size_t bytes = size_t{200} << (x % 8);  // 200 B .. 25.6 KB
        size_t c = 0;
        void* p = pool.Acquire(bytes, &c);
        const auto mark = static_cast<unsigned char>(t * 31 + i);
        std::memset(p, mark, c);
        kept.push_back({p, c, mark});
        if (kept.size() > 8 || (x >> 20) % 3 == 0) {
          const size_t k = (x >> 32) % kept.size();
          const Held h = kept[k];
          const auto* b = static_cast<const unsigned char*>(h.p);
          for (size_t j = 0; j < h.capacity; j += 64) ASSERT_EQ(b[j], h.mark);
          pool.Release(h.p, h.capacity);
          kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (const Held& h : kept) pool.Release(h.p, h.capacity);
    });
  }
  for (std::thread& th : threads) th.join();
  const HostBufferPoolStats s = pool.stats();
  EXPECT_EQ(s.reused + s.allocated, uint64_t{kThreads} * kIterations);
  EXPECT_GT(s.reused, 0u);
  EXPECT_LE(s.bytes_held, size_t{256} << 10);
  EXPECT_EQ(s.allocated - s.freed, s.buffers_held);  // every block is held or freed
}

}  // namespace
}  // namespace recsdk::internal
