// Tests of TFRecord framing, tf.Example decoding and the TfRecordDataset source
// (src/pipeline/tfrecord.cc), with files written by our own writer; each malformed case under
// both policies; TfRecordWriter's atomic writes under injected faults.
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/common/env.h"
#include "src/pipeline/crc32c.h"
#include "src/pipeline/tfrecord.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using internal::EncodeExample;
using internal::ExampleFeature;
using internal::FrameRecord;
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

std::string Example(int64_t i, bool packed = true) {
  return EncodeExample({
      {"label", std::vector<float>{static_cast<float>(i % 2)}, packed},
      {"dense", std::vector<float>{1.5f * i, 2.0f}, packed},
      {"user", std::vector<int64_t>{i * 10}, packed},
      {"tags", std::vector<int64_t>{i, i + 1}, packed},
      {"unused", std::vector<std::string>{"x"}, packed},
      {"ts", std::vector<int64_t>{1000 + i}, packed},
  });
}

TfRecordOptions Schema() {
  TfRecordOptions o;
  o.schema = {
      {"label", ColumnKind::kLabel},    {"dense", ColumnKind::kDense, 2},
      {"user", ColumnKind::kSparse, 1}, {"tags", ColumnKind::kSparse, 3},
      {"ts", ColumnKind::kTimestamp},
  };
  return o;
}

TEST(TfRecordReaderTest, ReadsPackedAndUnpacked) {
  TestDir dir;
  std::string file;
  for (int i = 0; i < 10; ++i) file += FrameRecord(Example(i, i % 2 == 0));
  WriteFile(dir.File("a.tfrecord"), file);
  auto ds = TfRecordDataset({dir.File("a.tfrecord")}, Schema());
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(TotalRows(*batches), 10);
  EXPECT_EQ(Concat<float>(*batches, "dense")[6], 4.5f);
  EXPECT_EQ(Concat<int64_t>(*batches, "user")[9], 90);
  auto tags = Concat<int64_t>(*batches, "tags");
  EXPECT_EQ(std::vector<int64_t>(tags.begin() + 9, tags.begin() + 12),
            (std::vector<int64_t>{3, 4, 0}));  // padded with pad_id
  EXPECT_EQ(Concat<int64_t>(*batches, "timestamp")[4], 1004);
  EXPECT_EQ(Concat<float>(*batches, "label")[3], 1.0f);
}

TEST(TfRecordReaderTest, FramingUsesMaskedCrc32c) {
  const std::string rec = FrameRecord("abc");
  ASSERT_EQ(rec.size(), 8u + 4 + 3 + 4);
  uint32_t data_crc;
  std::memcpy(&data_crc, rec.data() + 15, 4);
  EXPECT_EQ(internal::UnmaskCrc(data_crc), internal::Crc32c("abc"));
}

TEST(TfRecordReaderTest, FilesAreReadInSortedNameOrder) {
  TestDir dir;
  const std::vector<std::string> names = {"part-2.tfrecord", "part-10.tfrecord", "part-1.tfrecord"};
  for (const std::string& name : names) {  // created in neither name nor numeric order
    const int part = std::stoi(name.substr(5));
    WriteFile(dir.File(name),
              FrameRecord(Example(part * 10)) + FrameRecord(Example(part * 10 + 1)));
  }
  for (const std::vector<std::string>& files : ScrambledFileLists(dir, names, "*.tfrecord")) {
    auto ds = TfRecordDataset(files, Schema());
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto batches = Drain(**ds);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(Concat<int64_t>(*batches, "timestamp"),
              (std::vector<int64_t>{1010, 1011, 1100, 1101, 1020, 1021}))
        << absl::StrJoin(files, " ");
  }
}

struct Bad {
  std::string name;
  std::string bytes;  // replaces record 2
  MalformedReason reason;
  bool loses_rest;  // framing damage drops the rest of the file
};

std::vector<Bad> BadCases() {
  std::string crc = FrameRecord(Example(2));
  crc[14] ^= 1;  // a data byte
  std::string len_crc = FrameRecord(Example(2));
  len_crc[9] ^= 1;
  std::string garbage = FrameRecord("\xff\xff\xff");
  std::string missing = FrameRecord(EncodeExample({{"label", std::vector<float>{1}}}));
  std::string too_many = FrameRecord(EncodeExample({
      {"label", std::vector<float>{1}},
      {"dense", std::vector<float>{1, 2}},
      {"user", std::vector<int64_t>{1, 2}},
      {"tags", std::vector<int64_t>{1}},
      {"ts", std::vector<int64_t>{1}},
  }));
  return {
      {"data_crc", crc, MalformedReason::kCrcMismatch, false},
      {"length_crc", len_crc, MalformedReason::kCrcMismatch, true},
      {"bad_protobuf", garbage, MalformedReason::kBadProtobuf, false},
      {"missing_feature", missing, MalformedReason::kMissingFeature, false},
      {"too_many_values", too_many, MalformedReason::kWrongValueCount, false},
      {"truncated", FrameRecord(Example(2)).substr(0, 20), MalformedReason::kTruncated, true},
  };
}

TEST(TfRecordReaderTest, MalformedRecordsUnderBothPolicies) {
  for (const Bad& c : BadCases()) {
    TestDir dir;
    const std::string prefix = FrameRecord(Example(0)) + FrameRecord(Example(1));
    const bool at_end = c.name == "truncated";
    const std::string file = absl::StrCat(prefix, c.bytes, at_end ? "" : FrameRecord(Example(3)));
    WriteFile(dir.File("a.tfrecord"), file);
    auto strict = TfRecordDataset({dir.File("a.tfrecord")}, Schema());
    auto err = Drain(**strict);
    ASSERT_FALSE(err.ok()) << c.name;
    EXPECT_THAT(err.status().message(), HasSubstr("a.tfrecord"));
    EXPECT_THAT(err.status().message(), HasSubstr(absl::StrCat("byte offset ", prefix.size())))
        << c.name << err.status();
    EXPECT_THAT(err.status().message(), HasSubstr(MalformedReasonName(c.reason))) << c.name;

    TfRecordOptions o = Schema();
    o.reader.malformed_policy = MalformedPolicy::kSkip;
    auto lenient = TfRecordDataset({dir.File("a.tfrecord")}, o);
    auto ok = Drain(**lenient);
    ASSERT_TRUE(ok.ok()) << c.name << ok.status();
    EXPECT_EQ(TotalRows(*ok), c.loses_rest || at_end ? 2 : 3) << c.name;
    EXPECT_EQ((*lenient)->malformed_counts().count(c.reason), 1) << c.name;
  }
}

// PackedExample: record i of a file with `lps` samples per record (the DCNv2 guide's
// line_per_sample); sample j of record i is sample s = i * lps + j, whose values Example(s) has.
std::string PackedExample(int64_t i, int64_t lps) {
  std::vector<float> label, dense;
  std::vector<int64_t> user, tags, ts;
  for (int64_t j = 0; j < lps; ++j) {
    const int64_t s = i * lps + j;
    label.push_back(static_cast<float>(s % 2));
    dense.insert(dense.end(), {1.5f * s, 2.0f});
    user.push_back(s * 10);
    tags.insert(tags.end(), {s, s + 1, s + 2});
    ts.push_back(1000 + s);
  }
  return EncodeExample(
      {{"label", label}, {"dense", dense}, {"user", user}, {"tags", tags}, {"ts", ts}});
}

TEST(TfRecordReaderTest, LinePerSampleYieldsEverySampleOfARecord) {
  TestDir dir;
  constexpr int64_t kLps = 3;
  std::string file;
  for (int i = 0; i < 5; ++i) file += FrameRecord(PackedExample(i, kLps));
  WriteFile(dir.File("a.tfrecord"), file);
  TfRecordOptions o = Schema();
  o.line_per_sample = kLps;
  auto ds = TfRecordDataset({dir.File("a.tfrecord")}, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(TotalRows(*batches), 5 * kLps);
  const auto label = Concat<float>(*batches, "label");
  const auto dense = Concat<float>(*batches, "dense");
  const auto user = Concat<int64_t>(*batches, "user");
  const auto tags = Concat<int64_t>(*batches, "tags");
  const auto ts = Concat<int64_t>(*batches, "timestamp");
  for (int64_t s = 0; s < 5 * kLps; ++s) {
    EXPECT_EQ(label[s], static_cast<float>(s % 2)) << s;
    EXPECT_EQ(dense[2 * s], 1.5f * s) << s;
    EXPECT_EQ(dense[2 * s + 1], 2.0f) << s;
    EXPECT_EQ(user[s], s * 10) << s;
    EXPECT_EQ(std::vector<int64_t>(tags.begin() + 3 * s, tags.begin() + 3 * s + 3),
              (std::vector<int64_t>{s, s + 1, s + 2}))
        << s;
    EXPECT_EQ(ts[s], 1000 + s) << s;
  }
}

TEST(TfRecordReaderTest, LinePerSampleNeedsEveryListWhole) {
  TestDir dir;
  // Record 1's tags hold 8 ids for 3 samples x 3: which sample is short cannot be told, so the
  // whole record is malformed (never padded into the wrong sample).
  std::string short_tags = EncodeExample({{"label", std::vector<float>{0, 1, 0}},
                                          {"dense", std::vector<float>{1, 2, 3, 4, 5, 6}},
                                          {"user", std::vector<int64_t>{1, 2, 3}},
                                          {"tags", std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}},
                                          {"ts", std::vector<int64_t>{1, 2, 3}}});
  WriteFile(dir.File("a.tfrecord"), FrameRecord(PackedExample(0, 3)) + FrameRecord(short_tags) +
                                        FrameRecord(PackedExample(2, 3)));
  TfRecordOptions o = Schema();
  o.line_per_sample = 3;
  auto strict = Drain(**TfRecordDataset({dir.File("a.tfrecord")}, o));
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("\"tags\" has 8 values; the schema allows 9 "
                                                   "(3 samples x 3)"));
  o.reader.malformed_policy = MalformedPolicy::kSkip;
  auto lenient = TfRecordDataset({dir.File("a.tfrecord")}, o);
  auto ok = Drain(**lenient);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(TotalRows(*ok), 6);
  EXPECT_EQ(Concat<int64_t>(*ok, "user")[3], 60);  // record 2's first sample follows record 0's
  EXPECT_EQ((*lenient)->malformed_counts().count(MalformedReason::kWrongValueCount), 1);
  // Bad values of the option.
  for (int64_t bad : {int64_t{0}, int64_t{-2}, TfRecordOptions::kMaxLinePerSample + 1}) {
    o.line_per_sample = bad;
    EXPECT_THAT(TfRecordDataset({dir.File("a.tfrecord")}, o).status().message(),
                HasSubstr(absl::StrCat("line_per_sample ", bad, " is outside")));
  }
}

TEST(TfRecordReaderTest, LinePerSampleOnTinyRecordsStaysBounded) {
  // 20,000 empty records with every feature optional and the largest line_per_sample: each
  // record is 65,536 default rows. The reader must not allocate every record's rows at once.
  TestDir dir;
  std::string file;
  for (int i = 0; i < 20000; ++i) file += FrameRecord("");
  WriteFile(dir.File("a.tfrecord"), file);
  TfRecordOptions o;
  o.schema = {{"label", ColumnKind::kLabel}, {"user", ColumnKind::kSparse, 1}};
  for (SchemaColumn& c : o.schema) c.required = false;
  o.line_per_sample = TfRecordOptions::kMaxLinePerSample;
  auto ds = TfRecordDataset({dir.File("a.tfrecord")}, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  Batch b;
  int64_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    auto more = (*ds)->GetNext(&b);
    ASSERT_TRUE(more.ok() && *more) << more.status();
    EXPECT_LE(b.num_rows(), TfRecordOptions::kMaxLinePerSample);
    rows += b.num_rows();
  }
  EXPECT_EQ(rows, 3 * TfRecordOptions::kMaxLinePerSample);
}

TEST(TfRecordWriterTest, WritesWhatTheReaderReadsOnlyOnClose) {
  TestDir dir;
  const std::string path = dir.File("a.tfrecord");
  internal::TfRecordWriter w;
  ASSERT_TRUE(w.Open(path).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(w.Write(Example(i)).ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing published before Close
  ASSERT_TRUE(w.Close().ok());
  ASSERT_TRUE(w.Close().ok());  // idempotent
  EXPECT_EQ(TotalRows(*Drain(**TfRecordDataset({path}, Schema()))), 10);
  EXPECT_EQ(w.Write(Example(0)).code(), absl::StatusCode::kFailedPrecondition);
  {
    internal::TfRecordWriter dropped;  // destroyed without Close: the old file stays
    ASSERT_TRUE(dropped.Open(path).ok());
    ASSERT_TRUE(dropped.Write(Example(0)).ok());
  }
  EXPECT_EQ(TotalRows(*Drain(**TfRecordDataset({path}, Schema()))), 10);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// Issue 28 item 4: a full disk, a short write, a failed fsync or rename each return an error
// naming the file, keep the previous file byte for byte and leave no temporary behind.
TEST(TfRecordWriterTest, AFailedWriteLeavesThePreviousFileIntact) {
  using internal::FaultInjectionEnv;
  TestDir dir;
  const std::string path = dir.File("a.tfrecord");
  {
    internal::TfRecordWriter w;
    ASSERT_TRUE(w.Open(path).ok());
    ASSERT_TRUE(w.Write(Example(7)).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  const std::string before = ReadFile(path);
  const std::vector<WriterFault> faults = WriterFaults(300, /*failed_write=*/false);
  for (const WriterFault& fault : faults) {
    FaultInjectionEnv env(internal::Env::Default());
    fault.arm(env);
    internal::TfRecordWriter w;
    ASSERT_TRUE(w.Open(path, &env).ok()) << fault.name;
    Status s;
    for (int i = 0; i < 20 && s.ok(); ++i) s = w.Write(Example(i));
    const Status closed = w.Close();
    if (s.ok()) s = closed;
    EXPECT_FALSE(closed.ok()) << fault.name;  // a failed Write fails the Close too
    ASSERT_FALSE(s.ok()) << fault.name;
    EXPECT_EQ(s.code(), fault.code) << fault.name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("\"" + path + "\"")) << fault.name;
    EXPECT_EQ(ReadFile(path), before) << fault.name;
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename(), "a.tfrecord") << fault.name;
      ++entries;
    }
    EXPECT_EQ(entries, 1) << fault.name;
  }
}

}  // namespace
}  // namespace recsdk
