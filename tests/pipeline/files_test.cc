// files_test.cc: ExpandFilePatterns (src/pipeline/files.cc), which every file source uses to
// turn paths, directories and globs into the one sorted list that every run and rank reads.
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::TestDir;
using ::recsdk::testing::WriteFile;
using ::testing::HasSubstr;

TEST(ExpandFilePatternsTest, SortsByNameAndDropsDuplicatesAcrossPatterns) {
  TestDir dir;
  for (const char* name : {"part-2", "part-10", "part-1", "b.txt"}) WriteFile(dir.File(name), "x");
  std::filesystem::create_directory(dir.File("sub"));  // a directory's subdirectories are skipped
  WriteFile(dir.File("sub/part-0"), "x");
  auto files =
      ExpandFilePatterns({dir.File("part-2"), dir.File("part-*"), dir.path(), dir.File("part-2")});
  ASSERT_TRUE(files.ok()) << files.status();
  // Byte order, not numeric order: "part-10" < "part-2".
  EXPECT_EQ(*files, (std::vector<std::string>{dir.File("b.txt"), dir.File("part-1"),
                                              dir.File("part-10"), dir.File("part-2")}));
}

TEST(ExpandFilePatternsTest, NothingToReadIsAnErrorNamingThePattern) {
  TestDir dir;
  WriteFile(dir.File("a"), "x");
  std::filesystem::create_directory(dir.File("empty"));
  struct Case {
    std::string pattern;
    std::string message;
  };
  for (const Case& c :
       {Case{dir.File("missing"), "does not exist"}, Case{dir.File("*.none"), "matches no file"},
        Case{dir.File("empty"), "holds no regular files"}}) {
    auto files = ExpandFilePatterns({dir.File("a"), c.pattern});
    EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound) << c.pattern;
    EXPECT_THAT(files.status().message(), HasSubstr(c.pattern));
    EXPECT_THAT(files.status().message(), HasSubstr(c.message));
  }
  EXPECT_EQ(ExpandFilePatterns({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace recsdk
