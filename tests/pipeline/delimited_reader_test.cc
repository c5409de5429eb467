// Tests of the schema-driven delimited reader (src/pipeline/text_sources.cc).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Concat;
using ::recsdk::testing::Drain;
using ::recsdk::testing::ScrambledFileLists;
using ::recsdk::testing::TestDir;
using ::recsdk::testing::TotalRows;
using ::recsdk::testing::WriteFile;
using ::testing::HasSubstr;

DelimitedOptions Options() {
  DelimitedOptions o;
  o.schema = {{"click", ColumnKind::kLabel},    {"price", ColumnKind::kDense},
              {"note", ColumnKind::kSkip},      {"user", ColumnKind::kSparse},
              {"tags", ColumnKind::kSparse, 3}, {"ts", ColumnKind::kTimestamp}};
  o.schema[3].hex = true;
  o.skip_header = true;
  return o;
}

TEST(DelimitedReaderTest, ReadsSchemaColumns) {
  TestDir dir;
  WriteFile(dir.File("a.csv"),
            "click,price,note,user,tags,ts\n1,2.5,héllo,ff,1|2,100\n0,,x,a,,200\r\n");
  auto ds = DelimitedDataset({dir.File("a.csv")}, Options());
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto b = Drain(**ds);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(TotalRows(*b), 2);
  EXPECT_EQ(Concat<float>(*b, "label"), (std::vector<float>{1, 0}));
  EXPECT_EQ(Concat<float>(*b, "dense"), (std::vector<float>{2.5f, 0}));
  EXPECT_EQ(Concat<int64_t>(*b, "user"), (std::vector<int64_t>{255, 10}));
  EXPECT_EQ(Concat<int64_t>(*b, "tags"), (std::vector<int64_t>{1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(Concat<int64_t>(*b, "timestamp"), (std::vector<int64_t>{100, 200}));
}

TEST(DelimitedReaderTest, MalformedUnderBothPolicies) {
  struct Case {
    std::string line;
    MalformedReason reason;
  };
  for (const Case& c : {Case{"1,2,x,ff,1", MalformedReason::kWrongColumnCount},
                        Case{"1,abc,x,ff,1,5", MalformedReason::kBadNumber},
                        Case{"1,2,x,fg,1,5", MalformedReason::kBadHex},
                        Case{"1,2,\xff\xfe,ff,1,5", MalformedReason::kInvalidUtf8},
                        Case{"1,2,x,ff,1|2|3|4,5", MalformedReason::kWrongValueCount},
                        Case{"1,2,x,ff,1,5.5", MalformedReason::kBadNumber}}) {
    TestDir dir;
    WriteFile(dir.File("a.csv"), absl::StrCat("h\n1,2,x,ff,1,5\n", c.line, "\n0,1,y,1,2,3\n"));
    auto strict = DelimitedDataset({dir.File("a.csv")}, Options());
    auto err = Drain(**strict);
    ASSERT_FALSE(err.ok()) << c.line;
    EXPECT_THAT(err.status().message(), HasSubstr("a.csv\" line 3"));
    EXPECT_THAT(err.status().message(), HasSubstr(MalformedReasonName(c.reason))) << err.status();
    DelimitedOptions o = Options();
    o.reader.malformed_policy = MalformedPolicy::kSkip;
    auto lenient = DelimitedDataset({dir.File("a.csv")}, o);
    auto ok = Drain(**lenient);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(TotalRows(*ok), 2);
    EXPECT_EQ((*lenient)->malformed_counts().count(c.reason), 1) << c.line;
  }
}

TEST(DelimitedReaderTest, FilesAreReadInSortedNameOrderEachWithItsHeader) {
  TestDir dir;
  const std::vector<std::string> names = {"part-2.csv", "part-10.csv", "part-1.csv"};
  for (const std::string& name : names) {  // created in neither name nor numeric order
    const int part = std::stoi(name.substr(5));
    WriteFile(dir.File(name), absl::StrCat("click,price,note,user,tags,ts\n", "1,1,x,ff,1,",
                                           part * 100, "\n0,2,y,a,2,", part * 100 + 1, "\n"));
  }
  for (const std::vector<std::string>& files : ScrambledFileLists(dir, names, "part-*.csv")) {
    auto ds = DelimitedDataset(files, Options());
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto b = Drain(**ds);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(Concat<int64_t>(*b, "timestamp"),
              (std::vector<int64_t>{100, 101, 1000, 1001, 200, 201}))
        << absl::StrJoin(files, " ");
  }
}

TEST(DelimitedReaderTest, SchemaErrors) {
  DelimitedOptions o;
  EXPECT_THAT(DelimitedDataset({"x"}, o).status().message(), HasSubstr("schema is empty"));
  o.schema = {{"label", ColumnKind::kSparse}};
  EXPECT_THAT(DelimitedDataset({"x"}, o).status().message(), HasSubstr("reserved"));
  o.schema = {{"a", ColumnKind::kSparse, 0}};
  EXPECT_THAT(DelimitedDataset({"x"}, o).status().message(), HasSubstr("width 0"));
}

}  // namespace
}  // namespace recsdk
