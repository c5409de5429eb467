// allocator_test.cc: LimitedAllocator (src/device/allocator.cc): freed buffers are reused by size
// class instead of coming fresh from the system, a reused buffer is still zero-filled unless the
// caller asks otherwise, the cache is bounded by the peak in use, and cached bytes give way to
// the limit rather than making an allocation fail.
#include "src/device/allocator.h"

#include <cstring>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(LimitedAllocatorTest, SizeClassesWasteAtMostAnEighth) {
  size_t prev = 0;
  for (size_t bytes = 1; bytes < (size_t{1} << 26); bytes = bytes * 9 / 8 + 1) {
    const size_t c = LimitedAllocator::SizeClass(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 64, 0u) << bytes;
    if (bytes > 512) {
      EXPECT_LE(c - bytes, bytes / 8) << bytes;
    }
    EXPECT_GE(c, prev) << bytes;
    prev = c;
  }
  // Sizes that drift a little between steps share a class.
  EXPECT_EQ(LimitedAllocator::SizeClass(4096 * 16 * 4 - 100),
            LimitedAllocator::SizeClass(4096 * 16 * 4 - 3000));
}

TEST(LimitedAllocatorTest, FreedBuffersAreReusedNotFresh) {
  LimitedAllocator a("graph_memory_max_size", 64 * kMiB);
  void* first = nullptr;
  {
    auto t = a.AllocateTensor(DType::kFloat32, Shape{1024, 256});
    ASSERT_TRUE(t.ok()) << t.status();
    first = t->raw_data();
  }
  EXPECT_EQ(a.fresh_allocations(), 1);
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.cached_bytes(), kMiB);
  for (int step = 0; step < 5; ++step) {
    auto t = a.AllocateTensor(DType::kFloat32, Shape{1024, 256});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->raw_data(), first);
    EXPECT_EQ(a.cached_bytes(), 0);
  }
  EXPECT_EQ(a.fresh_allocations(), 1);
}

TEST(LimitedAllocatorTest, ReusedBufferIsZeroFilledUnlessUninitializedIsAsked) {
  LimitedAllocator a("graph_memory_max_size", 64 * kMiB);
  {
    auto t = a.AllocateTensor(DType::kFloat32, Shape{4096});
    ASSERT_TRUE(t.ok());
    for (float& v : t->flat<float>()) v = 7.0f;
  }
  {
    auto t = a.AllocateTensor(DType::kFloat32, Shape{4096});
    ASSERT_TRUE(t.ok());
    for (float v : t->flat<float>()) ASSERT_EQ(v, 0.0f);
    for (float& v : t->flat<float>()) v = 7.0f;
  }
  auto t = a.AllocateTensor(DType::kFloat32, Shape{4096}, Fill::kUninitialized);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(a.fresh_allocations(), 1);
}

TEST(LimitedAllocatorTest, CacheIsBoundedAndEvictsClassesThatDriftedAway) {
  LimitedAllocator a("graph_memory_max_size", 1024 * kMiB);
  {
    auto big = a.AllocateTensor(DType::kFloat32, Shape{2 * kMiB});  // 8 MiB
    ASSERT_TRUE(big.ok());
  }
  // A size that drifts through many classes: the cache stays within twice the peak + 4 MiB by
  // evicting the classes used longest ago, and the newest class is always the one kept.
  for (int i = 1; i <= 64; ++i) {
    auto t = a.AllocateTensor(DType::kUInt8, Shape{i * 262144 + 1});
    ASSERT_TRUE(t.ok());
    void* p = t->raw_data();
    t = Tensor();
    auto again = a.AllocateTensor(DType::kUInt8, Shape{i * 262144 + 1});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->raw_data(), p) << i;
  }
  EXPECT_LE(a.cached_bytes(), 2 * a.peak() + 4 * kMiB);
  a.ReleaseCache();
  EXPECT_EQ(a.cached_bytes(), 0);
}

TEST(LimitedAllocatorTest, CachedBytesGiveWayToTheLimit) {
  LimitedAllocator a("graph_memory_max_size", 3 * kMiB);
  {
    auto t = a.AllocateTensor(DType::kUInt8, Shape{2 * kMiB});
    ASSERT_TRUE(t.ok());
  }
  EXPECT_EQ(a.cached_bytes(), 2 * kMiB);
  // 1.5 MiB is another class; with 2 MiB cached it would exceed 3 MiB, so the cache goes.
  auto t = a.AllocateTensor(DType::kUInt8, Shape{3 * kMiB / 2});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(a.cached_bytes(), 0);
  // Over the limit in use is still ResourceExhausted naming the option.
  auto over = a.AllocateTensor(DType::kUInt8, Shape{2 * kMiB});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("graph_memory_max_size"), std::string::npos);
}

TEST(LimitedAllocatorTest, BuffersMayOutliveTheAllocator) {
  Tensor kept;
  {
    LimitedAllocator a("graph_memory_max_size", 64 * kMiB);
    auto t = a.AllocateTensor(DType::kFloat32, Shape{1024});
    ASSERT_TRUE(t.ok());
    kept = *t;
    auto other = a.AllocateTensor(DType::kFloat32, Shape{2048});  // cached when it dies
    ASSERT_TRUE(other.ok());
  }
  kept.flat<float>()[3] = 1.0f;
  EXPECT_EQ(kept.flat<float>()[3], 1.0f);
}

}  // namespace
}  // namespace recsdk::internal
