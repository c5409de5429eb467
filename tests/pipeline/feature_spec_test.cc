// Tests of FeatureSpec validation and MergeFeatureFields (src/pipeline/feature_spec.cc).
#include "recsdk/feature_spec.h"

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::testing::HasSubstr;
using testing::Drain;

// Spec builds a FeatureSpec field by field (GCC's -Wextra flags partial designated initializers).
FeatureSpec Spec(std::string name, int64_t access = -1, int64_t eviction = -1,
                 bool is_timestamp = false) {
  FeatureSpec s;
  s.name = std::move(name);
  s.access_threshold = access;
  s.eviction_threshold = eviction;
  s.is_timestamp = is_timestamp;
  return s;
}

TEST(FeatureSpecTest, DefaultsAreValid) {
  FeatureSpec s = Spec("user_id");
  EXPECT_TRUE(s.Validate().ok());
  EXPECT_EQ(s.EffectiveIndexKey(), "user_id");
  EXPECT_EQ(s.EffectiveTableName(), "user_id");
  s.index_key = "C1";
  s.table_name = "user_table";
  EXPECT_EQ(s.EffectiveIndexKey(), "C1");
  EXPECT_EQ(s.EffectiveTableName(), "user_table");
}

TEST(FeatureSpecTest, ThresholdBelowMinusOneIsAnError) {
  FeatureSpec s = Spec("item", -2);
  Status st = s.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("\"item\""));
  EXPECT_THAT(st.message(), HasSubstr("access_threshold -2"));
  EXPECT_THAT(st.message(), HasSubstr("below -1"));
  s.access_threshold = 5;
  s.eviction_threshold = -3;
  EXPECT_THAT(s.Validate().message(), HasSubstr("eviction_threshold -3"));
}

TEST(FeatureSpecTest, EvictionWithoutAdmissionIsAnError) {
  FeatureSpec s = Spec("item", -1, 3600);
  Status st = s.Validate();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("requires admission"));
  s.access_threshold = 0;
  EXPECT_TRUE(s.Validate().ok());
}

TEST(FeatureSpecTest, OtherFieldRules) {
  EXPECT_FALSE(FeatureSpec{}.Validate().ok());
  FeatureSpec s = Spec("a");
  s.batch_size = -1;
  EXPECT_THAT(s.Validate().message(), HasSubstr("batch_size -1"));
  s = Spec("a");
  s.faae_coefficient = 0;
  EXPECT_THAT(s.Validate().message(), HasSubstr("faae_coefficient 0"));
  EXPECT_FALSE(Spec("ts", 1, -1, true).Validate().ok());
}

TEST(FeatureSpecTest, ListRules) {
  std::vector<FeatureSpec> specs = {Spec("a", 2, 100), Spec("b")};
  specs[1].table_name = "shared";
  Status st = ValidateFeatureSpecs(specs);
  EXPECT_THAT(st.message(), HasSubstr("is_timestamp"));
  specs.push_back(Spec("ts", -1, -1, true));
  specs.back().index_key = "timestamp";
  EXPECT_TRUE(ValidateFeatureSpecs(specs).ok());
  specs.push_back(Spec("ts2", -1, -1, true));
  EXPECT_THAT(ValidateFeatureSpecs(specs).message(), HasSubstr("already the timestamp"));
  specs.pop_back();
  specs.push_back(Spec("a"));
  EXPECT_THAT(ValidateFeatureSpecs(specs).message(), HasSubstr("used twice"));
}

// Merged: the spec of a feature "sparse_feature" merging `fields`.
FeatureSpec Merged(std::vector<std::string> fields, FieldKeys keys = FieldKeys::kOffset,
                   std::vector<int64_t> offsets = {}) {
  FeatureSpec s = Spec("sparse_feature");
  s.fields = std::move(fields);
  s.field_keys = keys;
  s.field_offsets = std::move(offsets);
  return s;
}

TEST(FeatureSpecTest, FieldRules) {
  EXPECT_TRUE(Merged({"C1", "C2"}).Validate().ok());
  EXPECT_TRUE(Merged({"C1", "C2"}, FieldKeys::kOffset, {0, 1000}).Validate().ok());
  EXPECT_TRUE(Merged({"C1", "C2"}, FieldKeys::kHash).Validate().ok());
  EXPECT_THAT(Merged({"C1", "C1"}).Validate().message(), HasSubstr("listed twice"));
  EXPECT_THAT(Merged({"C1", ""}).Validate().message(), HasSubstr("field name is empty"));
  EXPECT_THAT(Merged({"C1", "sparse_feature"}).Validate().message(),
              HasSubstr("also the merged column"));
  EXPECT_THAT(Merged({"C1", "C2"}, FieldKeys::kOffset, {0}).Validate().message(),
              HasSubstr("1 field_offsets for 2 fields"));
  EXPECT_THAT(Merged({"C1", "C2"}, FieldKeys::kOffset, {10, 10}).Validate().message(),
              HasSubstr("is not above field_offsets[0] = 10"));
  EXPECT_THAT(Merged({"C1", "C2"}, FieldKeys::kOffset, {-1, 10}).Validate().message(),
              HasSubstr("is negative"));
  EXPECT_THAT(Merged({"C1", "C2"}, FieldKeys::kHash, {0, 10}).Validate().message(),
              HasSubstr("kHash"));
  EXPECT_THAT(Merged({"C1"}, static_cast<FieldKeys>(7)).Validate().message(),
              HasSubstr("not a FieldKeys value"));
  FeatureSpec no_fields = Spec("a");
  no_fields.field_offsets = {0};
  EXPECT_THAT(no_fields.Validate().message(), HasSubstr("fields is empty"));
  FeatureSpec ts = Merged({"C1"});
  ts.is_timestamp = true;
  EXPECT_THAT(ts.Validate().message(), HasSubstr("clear fields"));
}

// FieldsDataset: one batch with C1 [4] (rank 1), C2 [4,2] and a float column.
std::unique_ptr<Dataset> FieldsDataset(std::vector<int64_t> c1, std::vector<int64_t> c2) {
  std::vector<InMemoryColumn> cols;
  cols.push_back(InMemoryColumn{"C1", std::move(c1), 1});
  cols.push_back(InMemoryColumn{"C2", std::move(c2), 2});
  cols.push_back(InMemoryColumn{"label", std::vector<float>{0, 1, 0, 1}, 1});
  return *InMemoryDataset(std::move(cols), 4);
}

std::vector<int64_t> MergedKeys(std::unique_ptr<Dataset> ds, std::vector<FeatureSpec> specs) {
  auto merged = MergeFeatureFields(std::move(ds), std::move(specs));
  EXPECT_TRUE(merged.ok()) << merged.status();
  if (!merged.ok()) return {};
  auto batches = Drain(**merged);
  EXPECT_TRUE(batches.ok()) << batches.status();
  if (!batches.ok()) return {};
  EXPECT_EQ(batches->size(), 1u);
  const Tensor* t = (*batches)[0].column("sparse_feature");
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  EXPECT_EQ(t->shape().ToString(), "[4,3]");
  EXPECT_NE((*batches)[0].column("C1"), nullptr) << "the field columns stay";
  return std::vector<int64_t>(t->flat<int64_t>().begin(), t->flat<int64_t>().end());
}

TEST(MergeFeatureFieldsTest, OffsetsMoveEachFieldIntoItsRange) {
  // Default offsets: field f starts at f << 32, the packing the DCNv2 guide's data uses.
  const int64_t f1 = int64_t{1} << 32;
  EXPECT_THAT(
      MergedKeys(FieldsDataset({5, 6, 7, 0}, {5, 1, 2, 3, 4, 9, 8, 0}), {Merged({"C1", "C2"})}),
      ::testing::ElementsAre(5, f1 + 5, f1 + 1, 6, f1 + 2, f1 + 3, 7, f1 + 4, f1 + 9, 0, f1 + 8,
                             f1 + 0));
  // Explicit offsets, as a preprocessing script's running sum of vocabulary sizes.
  EXPECT_THAT(MergedKeys(FieldsDataset({5, 6, 7, 0}, {5, 1, 2, 3, 4, 9, 8, 0}),
                         {Merged({"C1", "C2"}, FieldKeys::kOffset, {0, 10})}),
              ::testing::ElementsAre(5, 15, 11, 6, 12, 13, 7, 14, 19, 0, 18, 10));
}

TEST(MergeFeatureFieldsTest, HashKeepsFieldsApartAndIsStable) {
  const std::vector<int64_t> keys =
      MergedKeys(FieldsDataset({5, 6, -7, 5}, {5, 5, 6, 6, -7, -7, 5, 5}),
                 {Merged({"C1", "C2"}, FieldKeys::kHash)});
  ASSERT_EQ(keys.size(), 12u);
  for (int64_t k : keys) EXPECT_GE(k, 0);
  // The same (field, id) gives the same key; the same id in another field another key.
  EXPECT_EQ(keys[0], keys[9]);  // C1 id 5, rows 0 and 3
  EXPECT_EQ(keys[1], keys[2]);  // C2 id 5 twice in row 0
  EXPECT_NE(keys[0], keys[1]);  // id 5 in C1 vs C2
  EXPECT_EQ(keys[7], keys[8]);  // C2 id -7 twice in row 2
  EXPECT_NE(keys[6], keys[7]);  // id -7 in C1 vs C2
  absl::flat_hash_set<int64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), 6u);  // (C1,5) (C1,6) (C1,-7) (C2,5) (C2,6) (C2,-7)
  // Stable: another run gives the same keys (checkpoints rely on it).
  EXPECT_EQ(keys, MergedKeys(FieldsDataset({5, 6, -7, 5}, {5, 5, 6, 6, -7, -7, 5, 5}),
                             {Merged({"C1", "C2"}, FieldKeys::kHash)}));
}

TEST(MergeFeatureFieldsTest, BadDataIsAnErrorNamingTheField) {
  auto run = [](std::unique_ptr<Dataset> ds, FeatureSpec spec) -> Status {
    auto merged = MergeFeatureFields(std::move(ds), {std::move(spec)});
    if (!merged.ok()) return merged.status();
    return Drain(**merged).status();
  };
  // An id past its field's range would meet the next field's keys.
  Status st = run(FieldsDataset({5, 6, 10, 0}, {0, 0, 0, 0, 0, 0, 0, 0}),
                  Merged({"C1", "C2"}, FieldKeys::kOffset, {0, 10}));
  EXPECT_THAT(st.message(), HasSubstr("field \"C1\" (row 2, position 0) has id 10 outside"));
  st = run(FieldsDataset({0, 0, 0, 0}, {0, 0, 0, -1, 0, 0, 0, 0}), Merged({"C1", "C2"}));
  EXPECT_THAT(st.message(), HasSubstr("id -1 outside the field's range [0, 4294967296)"));
  st = run(FieldsDataset({0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}), Merged({"C1", "C9"}));
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("C9"));
  st = run(FieldsDataset({0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}), Merged({"C1", "label"}));
  EXPECT_THAT(st.message(), HasSubstr("field \"label\" is float32"));
  FeatureSpec clash = Merged({"C1"});
  clash.index_key = "C2";
  st = run(FieldsDataset({0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}), clash);
  EXPECT_THAT(st.message(), HasSubstr("already has a column \"C2\""));
  EXPECT_FALSE(MergeFeatureFields(nullptr, {}).ok());
  EXPECT_THAT(MergeFeatureFields(FieldsDataset({0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}),
                                 {Merged({"C1", "C1"})})
                  .status()
                  .message(),
              HasSubstr("listed twice"));
}

}  // namespace
}  // namespace recsdk
