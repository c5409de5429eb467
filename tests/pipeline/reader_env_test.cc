// reader_env_test.cc: the file sources list and read their files through ReaderOptions::env
// (src/pipeline/files.cc, chunked_source.cc), so a test Env's faults reach them: short reads
// change nothing, a failed read is DataLoss naming the file, and the listing is the Env's.
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/common/env.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Concat;
using ::recsdk::testing::Drain;
using ::recsdk::testing::TestDir;
using ::recsdk::testing::TotalRows;
using ::recsdk::testing::WriteFile;
using ::testing::HasSubstr;

// Lines of a two-column delimited file: an id and a label.
std::string Lines(int first, int count) {
  std::string s;
  for (int i = first; i < first + count; ++i) absl::StrAppend(&s, i, ",", i % 2, "\n");
  return s;
}

DelimitedOptions Options(Env* env) {
  DelimitedOptions o;
  o.delimiter = ',';
  o.schema = {{"id", ColumnKind::kSparse}, {"label", ColumnKind::kLabel}};
  o.reader.chunk_bytes = 4096;
  o.reader.env = env;
  return o;
}

// CountingEnv: counts the listings and opens that reach it.
class CountingEnv final : public EnvWrapper {
 public:
  CountingEnv() : EnvWrapper(Env::Default()) {}
  StatusOr<std::vector<std::string>> GetChildren(const std::string& d) override {
    ++listings;
    return EnvWrapper::GetChildren(d);
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p) override {
    ++opens;
    return EnvWrapper::NewRandomAccessFile(p);
  }
  std::atomic<int> listings{0};
  std::atomic<int> opens{0};
};

TEST(ReaderEnvTest, ShortReadsFromTheEnvReadEveryRowOnce) {
  TestDir dir;
  WriteFile(dir.File("a.csv"), Lines(0, 3000));
  WriteFile(dir.File("b.csv"), Lines(3000, 10));
  internal::FaultInjectionEnv env(Env::Default());
  env.short_read_bytes = 7;  // every read comes back with at most 7 bytes
  auto ds = DelimitedDataset({dir.File("*.csv")}, Options(&env));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(TotalRows(*batches), 3010);
  std::vector<int64_t> ids = Concat<int64_t>(*batches, "id");
  for (int64_t i = 0; i < 3010; ++i) ASSERT_EQ(ids[static_cast<size_t>(i)], i);
}

TEST(ReaderEnvTest, AFailedReadIsDataLossNamingTheFile) {
  TestDir dir;
  WriteFile(dir.File("a.csv"), Lines(0, 3000));
  internal::FaultInjectionEnv env(Env::Default());
  auto ds = DelimitedDataset({dir.File("a.csv")}, Options(&env));
  ASSERT_TRUE(ds.ok()) << ds.status();
  env.fail_read_after = 1;  // the first chunk reads, the second fails
  auto batches = Drain(**ds);
  ASSERT_FALSE(batches.ok());
  EXPECT_EQ(batches.status().code(), absl::StatusCode::kDataLoss) << batches.status();
  EXPECT_THAT(batches.status().message(), HasSubstr(dir.File("a.csv")));
  EXPECT_THAT(batches.status().message(), HasSubstr("byte offset 4096"));
}

TEST(ReaderEnvTest, PatternsAreListedAndFilesOpenedThroughTheEnv) {
  TestDir dir;
  std::filesystem::create_directories(dir.File("day1"));
  std::filesystem::create_directories(dir.File("day2"));
  std::filesystem::create_directories(dir.File("other"));
  WriteFile(dir.File("day1/part-0.csv"), Lines(0, 2));
  WriteFile(dir.File("day2/part-0.csv"), Lines(2, 2));
  WriteFile(dir.File("day2/.part-1.csv"), Lines(9, 1));  // hidden: '*' does not match a dot
  WriteFile(dir.File("other/part-0.csv"), Lines(9, 1));
  CountingEnv env;
  // A wildcard in a directory component as well as in the file name, as glob(3) allows.
  auto files = ExpandFilePatterns({dir.File("day*/part-*.csv")}, &env);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files,
            (std::vector<std::string>{dir.File("day1/part-0.csv"), dir.File("day2/part-0.csv")}));
  EXPECT_GE(env.listings.load(), 3);  // the top directory and both day directories

  auto ds = DelimitedDataset({dir.File("day*/part-*.csv")}, Options(&env));
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int opens_before = env.opens.load();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(Concat<int64_t>(*batches, "id"), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(env.opens.load() - opens_before, 2);  // each data file once
}

TEST(ReaderEnvTest, ADirectoryAndALinkToADirectoryListTheirRegularFiles) {
  TestDir dir;
  std::filesystem::create_directories(dir.File("data/sub"));
  WriteFile(dir.File("data/b"), "x");
  WriteFile(dir.File("data/a"), "x");
  WriteFile(dir.File("data/sub/c"), "x");  // a subdirectory's files are not read
  std::filesystem::create_directory_symlink(dir.File("data"), dir.File("link"));
  for (const std::string& pattern : {dir.File("data"), dir.File("link")}) {
    auto files = ExpandFilePatterns({pattern});
    ASSERT_TRUE(files.ok()) << pattern << ": " << files.status();
    EXPECT_EQ(*files, (std::vector<std::string>{pattern + "/a", pattern + "/b"}));
  }
  // A glob that matches a directory names it.
  auto files = ExpandFilePatterns({dir.File("data/*")});
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(files.status().message(), HasSubstr("is a directory"));
  EXPECT_THAT(files.status().message(), HasSubstr("matched by"));
}

}  // namespace
}  // namespace recsdk
