// Tests of the Criteo TSV source (src/pipeline/text_sources.cc): values, transforms, defaults,
// every malformed case under both policies, file order and parallel determinism.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fmt/format.h"
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

// A Criteo line: label, 13 ints (row-dependent), 26 hex ids.
std::string Line(int row, int label = 1) {
  std::string s = std::to_string(label);
  for (int i = 0; i < 13; ++i) absl::StrAppend(&s, "\t", row + i);
  for (int i = 0; i < 26; ++i) s += fmt::format("\t{:08x}", row * 100 + i);
  s.push_back('\n');
  return s;
}

TEST(CriteoReaderTest, ParsesValues) {
  TestDir dir;
  std::string text = Line(0, 0) + Line(1) + Line(2);
  WriteFile(dir.File("a.tsv"), text);
  auto ds = CriteoDataset({dir.File("a.tsv")});
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(TotalRows(*batches), 3);
  EXPECT_EQ(Concat<float>(*batches, "label"), (std::vector<float>{0, 1, 1}));
  auto dense = Concat<float>(*batches, "dense");
  ASSERT_EQ(dense.size(), 39u);
  EXPECT_EQ(dense[13 + 4], 5.0f);  // row 1, I5 = 1 + 4
  EXPECT_EQ(Concat<int64_t>(*batches, "C3"), (std::vector<int64_t>{2, 102, 202}));
  EXPECT_EQ((*batches)[0].column("C26")->shape(), (Shape{3, 1}));
  EXPECT_EQ((*batches)[0].column("dense")->shape(), (Shape{3, 13}));
}

TEST(CriteoReaderTest, EmptyFieldsLog1pAndNegatives) {
  TestDir dir;
  std::string line = "1\t\t-5\t3";
  for (int i = 3; i < 13; ++i) line += "\t0";
  line += "\t\tffffffffffffffff";  // C1 empty, C2 = all ones
  for (int i = 2; i < 26; ++i) line += "\tA";
  WriteFile(dir.File("a.tsv"), line);  // no final newline: still a complete line
  CriteoOptions o;
  o.dense_transform = DenseTransform::kLog1p;
  o.default_id = 77;
  auto ds = CriteoDataset({dir.File("a.tsv")}, o);
  ASSERT_TRUE(ds.ok());
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  auto dense = Concat<float>(*batches, "dense");
  EXPECT_EQ(dense[0], 0.0f);  // empty -> 0 -> log1p(0)
  EXPECT_EQ(dense[1], 0.0f);  // -5 clamps to 0
  EXPECT_FLOAT_EQ(dense[2], std::log1p(3.0f));
  EXPECT_EQ(Concat<int64_t>(*batches, "C1"), (std::vector<int64_t>{77}));
  EXPECT_EQ(Concat<int64_t>(*batches, "C2"), (std::vector<int64_t>{-1}));  // bit pattern
  EXPECT_EQ(Concat<int64_t>(*batches, "C3"), (std::vector<int64_t>{10}));
}

struct BadCase {
  std::string name;
  std::string line;
  MalformedReason reason;
};

std::vector<BadCase> BadCases() {
  std::string good = Line(5);
  good.pop_back();
  // I1 of Line(5) is "5": make it "x".
  std::string bad_num = good;
  bad_num[bad_num.find('\t') + 1] = 'x';
  std::string bad_hex = absl::StrCat(good.substr(0, good.size() - 8), "zz000000");
  std::string utf8 = absl::StrCat(good.substr(0, good.size() - 8), "\xc3\x28", "000000");
  return {
      {"too_few_columns", "1\t2\t3", MalformedReason::kWrongColumnCount},
      {"too_many_columns", absl::StrCat(good, "\tabc"), MalformedReason::kWrongColumnCount},
      {"bad_number", bad_num, MalformedReason::kBadNumber},
      {"bad_label", absl::StrCat("x", good.substr(1)), MalformedReason::kBadNumber},
      {"bad_hex", bad_hex, MalformedReason::kBadHex},
      {"hex_too_long", absl::StrCat(good, "0123456789abcdef0"), MalformedReason::kBadHex},
      {"invalid_utf8", utf8, MalformedReason::kInvalidUtf8},
  };
}

TEST(CriteoReaderTest, MalformedLinesErrorNamesFileLineAndReason) {
  for (const BadCase& c : BadCases()) {
    TestDir dir;
    WriteFile(dir.File("a.tsv"), absl::StrCat(Line(0), Line(1), c.line, "\n", Line(3)));
    auto ds = CriteoDataset({dir.File("a.tsv")});
    ASSERT_TRUE(ds.ok());
    auto batches = Drain(**ds);
    ASSERT_FALSE(batches.ok()) << c.name;
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(batches.status().message(), HasSubstr("a.tsv")) << c.name;
    EXPECT_THAT(batches.status().message(), HasSubstr("line 3")) << c.name;
    EXPECT_THAT(batches.status().message(), HasSubstr(MalformedReasonName(c.reason)))
        << c.name << ": " << batches.status();
  }
}

TEST(CriteoReaderTest, MalformedLinesSkippedAndCounted) {
  for (const BadCase& c : BadCases()) {
    TestDir dir;
    WriteFile(dir.File("a.tsv"), absl::StrCat(Line(0), c.line, "\n", Line(2), c.line, "\n"));
    CriteoOptions o;
    o.reader.malformed_policy = MalformedPolicy::kSkip;
    auto ds = CriteoDataset({dir.File("a.tsv")}, o);
    ASSERT_TRUE(ds.ok());
    auto batches = Drain(**ds);
    ASSERT_TRUE(batches.ok()) << c.name << batches.status();
    EXPECT_EQ(TotalRows(*batches), 2) << c.name;
    EXPECT_EQ(Concat<int64_t>(*batches, "C1"), (std::vector<int64_t>{0, 200})) << c.name;
    EXPECT_EQ((*ds)->malformed_counts().count(c.reason), 2) << c.name;
    EXPECT_EQ((*ds)->malformed_counts().total(), 2) << c.name;
  }
}

TEST(CriteoReaderTest, TruncatedLastLine) {
  TestDir dir;
  std::string cut = Line(1).substr(0, 30);  // no newline, too few columns
  WriteFile(dir.File("a.tsv"), Line(0) + cut);
  auto ds = CriteoDataset({dir.File("a.tsv")});
  auto err = Drain(**ds);
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(err.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(err.status().message(), HasSubstr("line 2"));
  CriteoOptions o;
  o.reader.malformed_policy = MalformedPolicy::kSkip;
  auto skip = CriteoDataset({dir.File("a.tsv")}, o);
  auto ok = Drain(**skip);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(TotalRows(*ok), 1);
  EXPECT_EQ((*skip)->malformed_counts().count(MalformedReason::kTruncated), 1);
}

TEST(CriteoReaderTest, FilesAreReadInSortedNameOrder) {
  TestDir dir;
  // Created in neither name nor numeric order; by name they sort part-1, part-10, part-2.
  for (int part : {2, 10, 1}) {
    WriteFile(dir.File(fmt::format("part-{}.tsv", part)), Line(part * 100) + Line(part * 100 + 1));
  }
  const std::vector<int64_t> want = {100 * 100,  101 * 100, 1000 * 100,
                                     1001 * 100, 200 * 100, 201 * 100};
  for (const std::vector<std::string>& files :
       ScrambledFileLists(dir, {"part-2.tsv", "part-10.tsv", "part-1.tsv"}, "*.tsv")) {
    auto ds = CriteoDataset(files);
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto batches = Drain(**ds);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(Concat<int64_t>(*batches, "C1"), want) << absl::StrJoin(files, " ");
  }
}

TEST(CriteoReaderTest, LineNumbersCountPerFileAndSpanChunks) {
  TestDir dir;
  std::string bad;
  for (int i = 0; i < 2000; ++i) bad += Line(i);
  WriteFile(dir.File("b.tsv"), absl::StrCat(bad, "1\t2\n"));  // line 2001 is malformed
  std::string good;
  for (int i = 0; i < 3000; ++i) good += Line(10000 + i);
  WriteFile(dir.File("a.tsv"), good);
  CriteoOptions o;
  o.reader.chunk_bytes = 4096;  // about 13 lines: both files span many chunks
  auto ds = CriteoDataset({dir.File("b.tsv"), dir.File("a.tsv")}, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> ids;
  Status error;
  for (;;) {
    Batch b;
    StatusOr<bool> more = (*ds)->GetNext(&b);
    if (!more.ok()) {
      error = more.status();
      break;
    }
    if (!*more) break;
    const int64_t* c1 = b.column("C1")->data<int64_t>();
    ids.insert(ids.end(), c1, c1 + b.num_valid());
  }
  // a.tsv sorts first and is read whole; b.tsv follows up to the chunk holding the bad line
  // (a failing chunk yields no rows), and the error counts lines from the start of b.tsv.
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr("b.tsv\" line 2001"));
  ASSERT_GT(ids.size(), 3000u);
  ASSERT_LE(ids.size(), 5000u);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = i < 3000 ? 10000 + static_cast<int64_t>(i) : static_cast<int64_t>(i) - 3000;
    ASSERT_EQ(ids[i], row * 100) << "row " << i;
  }
}

TEST(CriteoReaderTest, ParallelParsingIsDeterministic) {
  TestDir dir;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int i = 0; i < 3000; ++i) text += Line(f * 10000 + i, i % 2);
    WriteFile(dir.File(fmt::format("part-{}.tsv", f)), text);
  }
  std::vector<int64_t> reference;
  for (int threads : {1, 2, 4}) {
    CriteoOptions o;
    o.reader.num_parse_threads = threads;
    o.reader.chunk_bytes = 8192;
    auto ds = CriteoDataset({absl::StrCat(dir.path(), "/part-*.tsv")}, o);
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto batches = Drain(**ds);
    ASSERT_TRUE(batches.ok());
    auto ids = Concat<int64_t>(*batches, "C1");
    ASSERT_EQ(ids.size(), 9000u);
    if (reference.empty()) reference = ids;
    EXPECT_EQ(ids, reference) << threads;
    EXPECT_EQ(ids[3000], 10000 * 100);  // part-1 follows part-0
    // Reset reads again from the start.
    ASSERT_TRUE((*ds)->Reset().ok());
    auto again = Drain(**ds);
    EXPECT_EQ(Concat<int64_t>(*again, "C1"), reference);
  }
}

TEST(CriteoReaderTest, OptionErrors) {
  CriteoOptions o;
  o.reader.num_parse_threads = 0;
  EXPECT_THAT(CriteoDataset({"/nonexistent"}, o).status().message(),
              HasSubstr("num_parse_threads"));
  EXPECT_EQ(CriteoDataset({"/nonexistent/x.tsv"}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace recsdk
