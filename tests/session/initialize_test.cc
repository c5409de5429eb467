// Tests of init's settings that take effect on the graph (src/session/initialize.cc with
// src/session/embedding.cc): use_dynamic becomes the default of the lookups and
// use_dynamic_expansion the setting of the tables made while init is in effect.
#include "recsdk/initialize.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::SmallTable;
using testing::ValueOrDie;

// InitScope: init for one test, terminated at its end (even when an assertion fails).
class InitScope {
 public:
  explicit InitScope(const InitOptions& o) {
    terminate_config_initializer();
    status_ = init(o);
  }
  ~InitScope() { terminate_config_initializer(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// UseDynamicOf: the use_dynamic attribute the lookup's key op was built with.
bool UseDynamicOf(const Output& lookup) {
  return lookup.node->input(1).node->BoolAttr("use_dynamic", true);
}

TEST(InitUseDynamicTest, InitsUseDynamicIsTheDefaultOfLookups) {
  {
    Graph g;
    Scope s(&g);
    SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(1)));
    Output ids = ops::Placeholder(s, DType::kInt64, Shape{2, 2});
    // Without init: dynamic.
    EXPECT_TRUE(UseDynamicOf(ValueOrDie(sparse_lookup(s, t, ids))));
  }
  InitOptions o;
  o.use_dynamic = false;
  InitScope scope(o);
  ASSERT_TRUE(scope.status().ok()) << scope.status();
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(1)));
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{2, 2});
  // Unset: init's static shape, which needs send_count; the error says where false came from.
  auto refused = sparse_lookup(s, t, ids);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(refused.status().message());
  EXPECT_NE(msg.find("init(use_dynamic = false)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("send_count"), std::string::npos) << msg;
  SparseLookupOptions sized;
  sized.name = "sized";
  sized.send_count = 4;
  Output fixed = ValueOrDie(sparse_lookup(s, t, ids, sized));
  EXPECT_FALSE(UseDynamicOf(fixed));
  EXPECT_EQ(fixed.node->input(1).shape(), (Shape{4}));
  // Set on the lookup: it overrides init's.
  SparseLookupOptions own;
  own.name = "own";
  own.use_dynamic = true;
  EXPECT_TRUE(UseDynamicOf(ValueOrDie(sparse_lookup(s, t, ids, own))));

  // The static lookup trains and reads as a dynamic one does.
  auto session = ValueOrDie(Session::Create(g));
  auto out = ValueOrDie(session->Run({{ids, Ids(2, 2, {1, 2, 2, 3})}}, {fixed}));
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 2}));
}

TEST(InitUseDynamicExpansionTest, TablesCreatedAfterInitGrowAsKeysArrive) {
  InitOptions o;
  o.use_dynamic_expansion = true;
  {
    InitScope scope(o);
    ASSERT_TRUE(scope.status().ok()) << scope.status();
    Graph g;
    Scope s(&g);
    SparseTable t =
        ValueOrDie(create_table(s, SmallTable("grows", 2, 4), SparseOptimizerConfig::SGDByAddr(1)));
    EXPECT_TRUE(t.config().use_dynamic_expansion);
    // More keys than the vocabulary: the table grows instead of failing.
    Output ids = ops::Placeholder(s, DType::kInt64, Shape{4, 4});
    Output emb = ValueOrDie(sparse_lookup(s, t, ids));
    auto session = ValueOrDie(Session::Create(g));
    std::vector<int64_t> keys(16);
    for (int i = 0; i < 16; ++i) keys[i] = 100 + i;
    auto out = session->Run({{ids, Ids(4, 4, keys)}}, {emb});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_GE(ValueOrDie(LookupTable(*session, "grows"))->size(), 16);

    // A table that cannot grow by address is refused, naming init's option and the fix.
    auto refused = create_table(s, SmallTable("plain", 2), SparseOptimizerConfig::SGD(1));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(refused.status().message());
    EXPECT_NE(msg.find("init(use_dynamic_expansion = true)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("by-address"), std::string::npos) << msg;
    TableConfig tiered = SmallTable("tiered", 2);
    tiered.host_vocabulary_size = 64;
    auto refused_tier = create_table(s, tiered, SparseOptimizerConfig::SGDByAddr(1));
    ASSERT_FALSE(refused_tier.ok());
    EXPECT_NE(std::string(refused_tier.status().message()).find("init(use_dynamic_expansion"),
              std::string::npos)
        << refused_tier.status();
  }
  // After terminate_config_initializer the table's own setting stands.
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("t", 2), SparseOptimizerConfig::SGD(1)));
  EXPECT_FALSE(t.config().use_dynamic_expansion);
}

}  // namespace
}  // namespace recsdk
