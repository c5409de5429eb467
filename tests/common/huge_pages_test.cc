// huge_pages_test.cc: ResizeOnHugePages (src/common/huge_pages.h) is vector::resize: the size, the
// zero fill of new elements and the elements already held are as with a plain resize, large or
// small, empty or not. (Whether the kernel grants huge pages is a hint's outcome, not tested.)
#include "src/common/huge_pages.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

TEST(ResizeOnHugePagesTest, LargeEmptyVectorIsZeroFilledAndWritable) {
  const size_t n = (size_t{6} << 20) / sizeof(int64_t) + 3;  // past the hint threshold
  std::vector<int64_t> v;
  ResizeOnHugePages(v, n);
  ASSERT_EQ(v.size(), n);
  for (size_t i = 0; i < n; i += 4093) EXPECT_EQ(v[i], 0) << i;
  EXPECT_EQ(v.back(), 0);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i) * 7;
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += v[i] - static_cast<int64_t>(i) * 7;
  EXPECT_EQ(sum, 0);
}

TEST(ResizeOnHugePagesTest, NonEmptyAndSmallVectorsResizeAsUsual) {
  std::vector<int64_t> v = {5, 6, 7};
  ResizeOnHugePages(v, size_t{1} << 20);  // large, but not empty: a plain resize
  ASSERT_EQ(v.size(), size_t{1} << 20);
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[2], 7);
  EXPECT_EQ(v[3], 0);
  EXPECT_EQ(v.back(), 0);
  ResizeOnHugePages(v, 2);  // shrinking keeps the prefix
  EXPECT_EQ(v, (std::vector<int64_t>{5, 6}));
  std::vector<float> small;
  ResizeOnHugePages(small, 10);
  EXPECT_EQ(small, std::vector<float>(10, 0.0f));
  std::vector<int64_t> none;
  ResizeOnHugePages(none, 0);
  EXPECT_TRUE(none.empty());
}

TEST(ResizeOnHugePagesTest, AdviseIgnoresRangesWithoutAWholeHugePage) {
  std::vector<char> v(100, 'x');
  AdviseHugePages(v.data(), v.size());  // no whole 2 MiB page inside: nothing to do
  AdviseHugePages(nullptr, 0);
  EXPECT_EQ(v, std::vector<char>(100, 'x'));
}

}  // namespace
}  // namespace recsdk::internal
