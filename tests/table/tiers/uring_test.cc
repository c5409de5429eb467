// Tests of src/table/tiers/uring.{h,cc}: reads land where asked, the queue refuses past its depth,
// and errors come back as negative results. Skips where the kernel refuses io_uring.
#include "src/table/tiers/uring.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/table/tiers/tiers_test_util.h"

namespace recsdk::internal {
namespace {

TEST(UringTest, ReadsLandWhereAskedAndTheQueueStopsAtItsDepth) {
  auto ring = Uring::Create(4);
  if (!ring.ok()) GTEST_SKIP() << "io_uring unavailable: " << ring.status();
  testing::TierTestDir dir;
  const std::string path = dir.path() + "/data";
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 1000; ++i) f.put(static_cast<char>(i % 251));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<std::vector<char>> bufs(5, std::vector<char>(10, 0));
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*ring)->QueueRead(fd, bufs[i].data(), 10, 100 * i + 3, i));
  }
  EXPECT_FALSE((*ring)->QueueRead(fd, bufs[4].data(), 10, 0, 4));  // depth 4 in flight
  std::vector<int32_t> result(4, -999);
  unsigned done = 0;
  while (done < 4) {
    ASSERT_EQ((*ring)->SubmitAndWait(1), 0);
    done += (*ring)->Reap([&](uint64_t tag, int32_t res) { result[tag] = res; });
  }
  EXPECT_EQ((*ring)->in_flight(), 0u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(result[i], 10);
    for (int j = 0; j < 10; ++j) EXPECT_EQ(bufs[i][j], static_cast<char>((100 * i + 3 + j) % 251));
  }
  // A read past the end is short; a read of a closed descriptor fails with -EBADF.
  ASSERT_TRUE((*ring)->QueueRead(fd, bufs[0].data(), 10, 995, 0));
  ASSERT_TRUE((*ring)->QueueRead(-1, bufs[1].data(), 10, 0, 1));
  done = 0;
  while (done < 2) {
    ASSERT_EQ((*ring)->SubmitAndWait(1), 0);
    done += (*ring)->Reap([&](uint64_t tag, int32_t res) { result[tag] = res; });
  }
  EXPECT_EQ(result[0], 5);
  EXPECT_EQ(result[1], -EBADF);
  close(fd);
}

TEST(UringTest, CreateRejectsADepthThatIsNotAPowerOfTwo) {
  EXPECT_TRUE(absl::IsInvalidArgument(Uring::Create(3).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Uring::Create(0).status()));
}

}  // namespace
}  // namespace recsdk::internal
