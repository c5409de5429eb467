// A deterministic fuzz driver for the parsers (Criteo, delimited, TFRecord, record files): random
// mutations of valid inputs, under both policies, for a few thousand iterations. It asserts that
// nothing crashes, errors are Status values, and skip-mode output rows are well-formed. The
// libFuzzer targets in tests/fuzz/ explore further when clang is available.
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/pipeline/tfrecord.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::TestDir;
using ::recsdk::testing::WriteFile;

std::string Mutate(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    if (s.empty()) s.push_back('\0');
    const size_t at = rng() % s.size();
    switch (rng() % 5) {
      case 0:
        s[at] = static_cast<char>(rng());
        break;
      case 1:
        s[at] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 2:
        s.erase(at, 1 + rng() % 8);
        break;
      case 3:
        s.insert(at, std::string(1 + rng() % 4, "\t\n,|\xff"[rng() % 5]));
        break;
      case 4:
        s.resize(at);
        break;
    }
  }
  return s;
}

// Drains a dataset; every outcome but a crash is fine, and rows must be consistent.
void Consume(StatusOr<std::unique_ptr<Dataset>> ds) {
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (int i = 0; i < 1000; ++i) {
    Batch b;
    StatusOr<bool> more = (*ds)->GetNext(&b);
    if (!more.ok()) {
      EXPECT_FALSE(more.status().message().empty());
      return;
    }
    if (!*more) return;
    for (const auto& [name, t] : b.columns()) ASSERT_EQ(t.dim(0), b.num_rows()) << name;
  }
}

TEST(ParserFuzzTest, MutatedInputsNeverCrash) {
  TestDir dir;
  std::string criteo;
  for (int r = 0; r < 4; ++r) {
    criteo += std::to_string(r % 2);
    for (int i = 0; i < 13; ++i) absl::StrAppend(&criteo, "\t", i * r);
    for (int i = 0; i < 26; ++i) absl::StrAppend(&criteo, "\t", absl::Hex(r * 977 + i));
    criteo.push_back('\n');
  }
  const std::string csv = "1,2.5,ff,1|2,100\n0,,a,,200\n1,3,b,7,300\n";
  std::string tfr;
  for (int i = 0; i < 3; ++i) {
    tfr += internal::FrameRecord(internal::EncodeExample({
        {"label", std::vector<float>{1}},
        {"dense", std::vector<float>{1, 2}},
        {"ids", std::vector<int64_t>{i, 5}, i % 2 == 0},
        {"b", std::vector<std::string>{"x"}},
    }));
  }
  SyntheticOptions so;
  so.num_rows = 40;
  so.vocabulary_sizes = {10, 10};
  so.num_dense = 1;
  so.block_rows = 16;
  ASSERT_TRUE(ConvertToRecordFile(**SyntheticDataset(so), dir.File("base.rrec"), 16).ok());
  const std::string rrec = testing::ReadFile(dir.File("base.rrec"));

  DelimitedOptions dopt;
  dopt.schema = {{"label", ColumnKind::kLabel},
                 {"price", ColumnKind::kDense},
                 {"user", ColumnKind::kSparse},
                 {"tags", ColumnKind::kSparse, 2},
                 {"ts", ColumnKind::kTimestamp}};
  dopt.schema[2].hex = true;
  TfRecordOptions topt;
  topt.schema = {{"label", ColumnKind::kLabel},
                 {"dense", ColumnKind::kDense, 2},
                 {"ids", ColumnKind::kSparse, 2},
                 {"b", ColumnKind::kSparse, 1}};

  std::mt19937_64 rng(12345);
  const std::string path = dir.File("fuzz.in");
  for (int iter = 0; iter < 2000; ++iter) {
    const MalformedPolicy policy = iter % 2 ? MalformedPolicy::kSkip : MalformedPolicy::kError;
    switch (iter % 4) {
      case 0: {
        WriteFile(path, Mutate(criteo, rng));
        CriteoOptions o;
        o.reader.malformed_policy = policy;
        o.dense_transform = DenseTransform::kLog1p;
        Consume(CriteoDataset({path}, o));
        break;
      }
      case 1: {
        WriteFile(path, Mutate(csv, rng));
        dopt.reader.malformed_policy = policy;
        Consume(DelimitedDataset({path}, dopt));
        break;
      }
      case 2: {
        WriteFile(path, Mutate(tfr, rng));
        topt.reader.malformed_policy = policy;
        Consume(TfRecordDataset({path}, topt));
        break;
      }
      case 3: {
        WriteFile(path, Mutate(rrec, rng));
        ReaderOptions o;
        o.malformed_policy = policy;
        Consume(RecordFileDataset({path}, o));
        break;
      }
    }
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace recsdk
