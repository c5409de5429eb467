// Tests of FeatureSpec validation (src/pipeline/feature_spec.cc).
#include "recsdk/feature_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace recsdk {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace recsdk
