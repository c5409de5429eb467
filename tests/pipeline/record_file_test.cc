// Tests of recsdk binary record files (src/pipeline/record_file.cc): round trip from Criteo text
// and synthetic data, CRC damage and truncation under both policies, bad headers, and a failed
// write (full disk, short write, failed fsync) leaving the previous file intact.
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/common/env.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Concat;
using ::recsdk::testing::Drain;
using ::recsdk::testing::ReadFile;
using ::recsdk::testing::ScrambledFileLists;
using ::recsdk::testing::TestDir;
using ::recsdk::testing::TotalRows;
using ::recsdk::testing::WriteFile;
using ::recsdk::testing::WriterFault;
using ::recsdk::testing::WriterFaults;
using ::testing::HasSubstr;

SyntheticOptions Small() {
  SyntheticOptions o;
  o.num_rows = 1000;
  o.vocabulary_sizes = {100, 100, 100};
  o.num_dense = 3;
  o.with_timestamps = true;
  o.block_rows = 128;
  return o;
}

TEST(RecordFileTest, RoundTripsSyntheticData) {
  TestDir dir;
  auto src = SyntheticDataset(Small());
  auto rows = ConvertToRecordFile(**src, dir.File("a.rrec"), 300);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 1000);
  auto ds = RecordFileDataset({dir.File("a.rrec")});
  ASSERT_TRUE(ds.ok());
  auto got = Drain(**ds);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 4u);  // 300, 300, 300, 100
  auto want = *Drain(**SyntheticDataset(Small()));
  for (const char* col : {"C1", "C3", "timestamp"}) {
    EXPECT_EQ(Concat<int64_t>(*got, col), Concat<int64_t>(want, col)) << col;
  }
  EXPECT_EQ(Concat<float>(*got, "dense"), Concat<float>(want, "dense"));
  EXPECT_EQ(Concat<float>(*got, "label"), Concat<float>(want, "label"));
}

TEST(RecordFileTest, ConvertsCriteoText) {
  TestDir dir;
  std::string text;
  for (int r = 0; r < 50; ++r) {
    text += std::to_string(r % 2);
    for (int i = 0; i < 13; ++i) absl::StrAppend(&text, "\t", i);
    for (int i = 0; i < 26; ++i) absl::StrAppend(&text, "\t", absl::Hex(r * 26 + i));
    text.push_back('\n');
  }
  WriteFile(dir.File("a.tsv"), text);
  auto criteo = CriteoDataset({dir.File("a.tsv")});
  ASSERT_TRUE(ConvertToRecordFile(**criteo, dir.File("a.rrec"), 16).ok());
  auto ds = RecordFileDataset({dir.File("a.rrec")});
  auto got = *Drain(**ds);
  EXPECT_EQ(TotalRows(got), 50);
  EXPECT_EQ(Concat<int64_t>(got, "C26")[49], 49 * 26 + 25);
}

TEST(RecordFileTest, FilesAreReadInSortedNameOrder) {
  TestDir dir;
  const std::vector<std::string> names = {"part-2.rrec", "part-10.rrec", "part-1.rrec"};
  for (const std::string& name : names) {  // created in neither name nor numeric order
    const int64_t part = std::stoi(name.substr(5));
    auto src = InMemoryDataset({{"id", std::vector<int64_t>{part * 100, part * 100 + 1}}});
    ASSERT_TRUE(src.ok()) << src.status();
    auto rows = ConvertToRecordFile(**src, dir.File(name));
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(*rows, 2);
  }
  for (const std::vector<std::string>& files : ScrambledFileLists(dir, names, "*.rrec")) {
    auto ds = RecordFileDataset(files);
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto got = Drain(**ds);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Concat<int64_t>(*got, "id"), (std::vector<int64_t>{100, 101, 1000, 1001, 200, 201}))
        << absl::StrJoin(files, " ");
  }
}

TEST(RecordFileTest, DamageUnderBothPolicies) {
  TestDir dir;
  auto src = SyntheticDataset(Small());
  ASSERT_TRUE(ConvertToRecordFile(**src, dir.File("good.rrec"), 250).ok());
  const std::string good = ReadFile(dir.File("good.rrec"));
  // Flip a payload byte near the end of the file (inside the last data block).
  std::string crc = good;
  crc[crc.size() - 24 - 70] ^= 0x10;
  WriteFile(dir.File("crc.rrec"), crc);
  WriteFile(dir.File("cut.rrec"), good.substr(0, good.size() - 24 - 10));
  WriteFile(dir.File("magic.rrec"), "NOTARECORDFILE__");
  struct Case {
    std::string file;
    MalformedReason reason;
    int64_t rows_kept;
  };
  for (const Case& c : {Case{"crc.rrec", MalformedReason::kCrcMismatch, 750},
                        Case{"cut.rrec", MalformedReason::kTruncated, 750},
                        Case{"magic.rrec", MalformedReason::kBadHeader, 0}}) {
    auto strict = RecordFileDataset({dir.File(c.file)});
    auto err = Drain(**strict);
    ASSERT_FALSE(err.ok()) << c.file;
    EXPECT_THAT(err.status().message(), HasSubstr(c.file));
    EXPECT_THAT(err.status().message(), HasSubstr(MalformedReasonName(c.reason))) << err.status();
    ReaderOptions o;
    o.malformed_policy = MalformedPolicy::kSkip;
    auto lenient = RecordFileDataset({dir.File(c.file)}, o);
    auto ok = Drain(**lenient);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(TotalRows(*ok), c.rows_kept) << c.file;
    EXPECT_EQ((*lenient)->malformed_counts().count(c.reason), 1) << c.file;
  }
}

// Issue 28 item 4: the writer goes through the Env, so every way a write can fail is tried here.
// Each must return an error naming the file, leave the previous file byte for byte, and leave no
// temporary behind (a later conversion to the same path must not trip over it).
TEST(RecordFileTest, AFailedWriteLeavesThePreviousFileIntact) {
  using internal::FaultInjectionEnv;
  TestDir dir;
  const std::string path = dir.File("a.rrec");
  SyntheticOptions old_data = Small();
  old_data.num_rows = 10;
  ASSERT_TRUE(ConvertToRecordFile(**SyntheticDataset(old_data), path).ok());
  const std::string before = ReadFile(path);
  const std::vector<WriterFault> faults = WriterFaults(4000, /*failed_write=*/true);
  for (const WriterFault& fault : faults) {
    FaultInjectionEnv env(internal::Env::Default());
    fault.arm(env);
    auto rows = ConvertToRecordFile(**SyntheticDataset(Small()), path, 128, &env);
    ASSERT_FALSE(rows.ok()) << fault.name;
    EXPECT_EQ(rows.status().code(), fault.code) << fault.name << ": " << rows.status();
    EXPECT_THAT(rows.status().message(), HasSubstr("\"" + path + "\"")) << fault.name;
    EXPECT_THAT(rows.status().message(), HasSubstr("unchanged")) << fault.name;
    EXPECT_EQ(ReadFile(path), before) << fault.name;
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename(), "a.rrec") << fault.name;
      ++entries;
    }
    EXPECT_EQ(entries, 1) << fault.name;
  }
  // The Env in the way of nothing: the same conversion through it succeeds and replaces the file.
  internal::FaultInjectionEnv env(internal::Env::Default());
  auto rows = ConvertToRecordFile(**SyntheticDataset(Small()), path, 128, &env);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 1000);
  EXPECT_EQ(env.renames.load(), 1);
  EXPECT_EQ(TotalRows(*Drain(**RecordFileDataset({path}))), 1000);
}

}  // namespace
}  // namespace recsdk
