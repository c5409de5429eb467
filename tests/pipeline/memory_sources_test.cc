// memory_sources_test.cc: InMemoryDatasetFromBatches (src/pipeline/memory_sources.cc): batches
// come back in order and unchanged (row counts, num_valid, masks), Reset rewinds, transforms
// regroup them, and batches whose column layouts differ are refused naming batch and column.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Concat;
using ::recsdk::testing::Drain;
using ::testing::HasSubstr;

// MakeBatch: `rows` rows, "label" [rows,1] float32 = first + r and "ids" [rows,2] int64 =
// {10 * (first + r), 10 * (first + r) + 1}.
Batch MakeBatch(int first, int rows) {
  std::vector<float> label;
  std::vector<int64_t> ids;
  for (int r = 0; r < rows; ++r) {
    label.push_back(static_cast<float>(first + r));
    ids.push_back(10 * (first + r));
    ids.push_back(10 * (first + r) + 1);
  }
  Batch b;
  EXPECT_TRUE(b.AddColumn("label", *Tensor::FromValues<float>(Shape{rows, 1}, label)).ok());
  EXPECT_TRUE(b.AddColumn("ids", *Tensor::FromValues<int64_t>(Shape{rows, 2}, ids)).ok());
  b.set_num_valid(rows);
  return b;
}

TEST(InMemoryDatasetFromBatchesTest, YieldsTheBatchesInOrderAndResetRewinds) {
  auto ds = InMemoryDatasetFromBatches({MakeBatch(0, 2), MakeBatch(2, 1), MakeBatch(3, 3)});
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (int epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE(epoch);
    auto batches = Drain(**ds);
    ASSERT_TRUE(batches.ok()) << batches.status();
    ASSERT_EQ(batches->size(), 3u);
    EXPECT_EQ((*batches)[0].num_rows(), 2);
    EXPECT_EQ((*batches)[1].num_rows(), 1);
    EXPECT_EQ((*batches)[2].num_rows(), 3);
    EXPECT_EQ((*batches)[2].column("ids")->shape(), (Shape{3, 2}));
    EXPECT_EQ(Concat<float>(*batches, "label"), (std::vector<float>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(Concat<int64_t>(*batches, "ids"),
              (std::vector<int64_t>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 51}));
    // The end stays the end until Reset.
    Batch after;
    auto more = (*ds)->GetNext(&after);
    ASSERT_TRUE(more.ok());
    EXPECT_FALSE(*more);
    ASSERT_TRUE((*ds)->Reset().ok());
  }
  EXPECT_EQ((*ds)->malformed_counts().total(), 0);
}

TEST(InMemoryDatasetFromBatchesTest, KeepsPaddingAndMasks) {
  Batch padded = MakeBatch(0, 3);
  ASSERT_TRUE(
      padded.AddColumn("mask", *Tensor::FromValues<float>(Shape{3}, {1.0f, 1.0f, 0.0f})).ok());
  padded.set_num_valid(2);
  Batch full = MakeBatch(3, 2);
  ASSERT_TRUE(full.AddColumn("mask", *Tensor::FromValues<float>(Shape{2}, {1.0f, 1.0f})).ok());
  auto ds = InMemoryDatasetFromBatches({full, padded});
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok());
  ASSERT_EQ(batches->size(), 2u);
  EXPECT_EQ((*batches)[0].num_valid(), 2);
  EXPECT_EQ((*batches)[1].num_rows(), 3);
  EXPECT_EQ((*batches)[1].num_valid(), 2);
  ASSERT_NE((*batches)[1].mask(), nullptr);
  EXPECT_EQ((*batches)[1].mask()->data<float>()[2], 0.0f);
}

TEST(InMemoryDatasetFromBatchesTest, NoBatchesIsAnEmptyStream) {
  auto ds = InMemoryDatasetFromBatches({});
  ASSERT_TRUE(ds.ok()) << ds.status();
  Batch b;
  auto more = (*ds)->GetNext(&b);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
}

TEST(InMemoryDatasetFromBatchesTest, FeedsTransforms) {
  auto ds = InMemoryDatasetFromBatches({MakeBatch(0, 2), MakeBatch(2, 1), MakeBatch(3, 3)});
  ASSERT_TRUE(ds.ok());
  auto batched = BatchRows(std::move(*ds), 4);
  ASSERT_TRUE(batched.ok()) << batched.status();
  auto batches = Drain(**batched);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 2u);  // 6 rows: 4 + 2
  EXPECT_EQ((*batches)[0].num_rows(), 4);
  EXPECT_EQ((*batches)[1].num_rows(), 2);
  EXPECT_EQ(Concat<int64_t>(*batches, "ids"),
            (std::vector<int64_t>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 51}));
}

TEST(InMemoryDatasetFromBatchesTest, RefusesBatchesWithAnotherLayout) {
  auto with = [](std::string name, Tensor t) {
    Batch b = MakeBatch(0, 2);
    EXPECT_TRUE(b.AddColumn(std::move(name), std::move(t)).ok());
    return b;
  };
  Batch swapped;
  ASSERT_TRUE(swapped.AddColumn("ids", *MakeBatch(0, 2).Column("ids")).ok());
  ASSERT_TRUE(swapped.AddColumn("label", *MakeBatch(0, 2).Column("label")).ok());
  Batch renamed;
  ASSERT_TRUE(renamed.AddColumn("label", *MakeBatch(0, 2).Column("label")).ok());
  ASSERT_TRUE(renamed.AddColumn("user", *MakeBatch(0, 2).Column("ids")).ok());
  Batch retyped;
  ASSERT_TRUE(retyped.AddColumn("label", *MakeBatch(0, 2).Column("label")).ok());
  ASSERT_TRUE(retyped.AddColumn("ids", Tensor(DType::kInt32, Shape{2, 2})).ok());
  Batch wider;
  ASSERT_TRUE(wider.AddColumn("label", *MakeBatch(0, 2).Column("label")).ok());
  ASSERT_TRUE(wider.AddColumn("ids", Tensor(DType::kInt64, Shape{2, 3})).ok());
  struct Case {
    const char* what;
    Batch batch;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"an extra column", with("ts", Tensor(DType::kInt64, Shape{2})), "3 columns"},
           {"columns in another order", swapped, "\"ids\" int64 [?,2] but batch 0 has \"label\""},
           {"a renamed column", renamed, "\"user\""},
           {"another dtype", retyped, "\"ids\" int32 [?,2] but batch 0 has \"ids\" int64 [?,2]"},
           {"another width", wider, "\"ids\" int64 [?,3] but batch 0 has \"ids\" int64 [?,2]"},
       }) {
    SCOPED_TRACE(c.what);
    auto ds = InMemoryDatasetFromBatches({MakeBatch(0, 2), MakeBatch(2, 5), c.batch});
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ds.status().message(), HasSubstr("batch 2"));
    EXPECT_THAT(ds.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace recsdk
