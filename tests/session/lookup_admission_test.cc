// lookup_admission_test.cc: admission and eviction settings given to sparse_lookup
// (src/session/embedding.cc): FeatureSpec thresholds and faae_coefficient, the options'
// access_and_evict_config, and the rule that a table's thresholds agree wherever they are set.
// Each setting is checked by the occurrence that admits a key, in the graph and in the key stage.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::KeyMode;
using testing::KeyModeName;
using testing::MakeBatch;
using testing::RunBatches;
using testing::SmallTable;
using testing::ValueOrDie;

constexpr float kDefault = 0.5f;

TableConfig Table(const std::string& name) {
  TableConfig c = SmallTable(name, 2);
  c.serving_default_value = kDefault;
  return c;
}

FeatureSpec Spec(const std::string& name, int64_t access_threshold, int64_t faae = 1) {
  FeatureSpec f;
  f.name = name;
  f.table_name = "ids";
  f.access_threshold = access_threshold;
  f.faae_coefficient = faae;
  return f;
}

// Element 0 of lookup result `t` at sample `b` (one id per sample, dim 2).
float At(const Tensor& t, int64_t b) { return t.data<float>()[b * 2]; }

TEST(LookupAdmissionTest, FeatureSpecThresholdAndCoefficientsDecideTheAdmittingOccurrence) {
  for (KeyMode mode : {KeyMode::kInGraph, KeyMode::kKeyStage}) {
    SCOPED_TRACE(KeyModeName(mode));
    Graph g;
    Scope s(&g);
    SparseTable t = ValueOrDie(create_table(s, Table("ids"), SparseOptimizerConfig::SGD(0.1f)));
    // C1 sets the table's threshold, 3; C2 leaves it (-1) and weighs its occurrences by 3.
    std::vector<Output> e =
        ValueOrDie(sparse_lookup(s, t, {Spec("C1", 3), Spec("C2", -1, /*faae=*/3)}, 1, 1, nullptr));
    EXPECT_EQ(t.config().access_threshold, 3);
    std::vector<Batch> batches;
    for (int64_t c2 : {6, 8, 8}) {
      batches.push_back(MakeBatch({{"C1", Ids(1, 1, {5})}, {"C2", Ids(1, 1, {c2})}}));
    }
    std::unique_ptr<Session> session;
    auto steps = RunBatches(mode, &g, batches, {e[0], e[1]}, {}, &session);
    ASSERT_EQ(steps.size(), 3u);
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "ids"));
    EXPECT_EQ(table->config().access_threshold, 3);
    // Key 5 (C1, weight 1) is admitted on its third occurrence, not before.
    EXPECT_EQ(At(steps[0][0], 0), kDefault);
    EXPECT_EQ(At(steps[1][0], 0), kDefault);
    EXPECT_EQ(At(steps[2][0], 0), ValueOrDie(table->ReadRow(5))[0]);
    // Keys 6 and 8 (C2, weight 3) on their first.
    EXPECT_EQ(At(steps[0][1], 0), ValueOrDie(table->ReadRow(6))[0]);
    EXPECT_EQ(At(steps[1][1], 0), ValueOrDie(table->ReadRow(8))[0]);
    EXPECT_EQ(table->size(), 3);
  }
}

TEST(LookupAdmissionTest, AccessAndEvictConfigAdmitsAndEvicts) {
  for (KeyMode mode : {KeyMode::kInGraph, KeyMode::kKeyStage}) {
    SCOPED_TRACE(KeyModeName(mode));
    Graph g;
    Scope s(&g);
    SparseTable t = ValueOrDie(create_table(s, Table("ids"), SparseOptimizerConfig::SGD(0.1f)));
    SparseLookupOptions o;
    o.modify_graph = mode == KeyMode::kKeyStage;
    o.timestamps = DatasetColumn(s, "ts", DType::kInt64, Shape{2});
    o.access_and_evict_config =
        AccessAndEvictConfig{.access_threshold = 2, .eviction_threshold = 10};
    Output e =
        ValueOrDie(sparse_lookup(s, t, DatasetColumn(s, "A", DType::kInt64, Shape{2, 1}), o));
    auto batch = [](std::vector<int64_t> ids, int64_t time) {
      return MakeBatch({{"A", Ids(2, 1, ids)}, {"ts", Tensor::Vector<int64_t>({time, time})}});
    };
    std::unique_ptr<Session> session;
    auto steps = RunBatches(mode, &g, {batch({1, 1}, 0), batch({2, 3}, 5), batch({2, 2}, 20)}, {e},
                            {}, &session);
    ASSERT_EQ(steps.size(), 3u);
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "ids"));
    EXPECT_EQ(table->config().access_threshold, 2);
    EXPECT_EQ(table->config().eviction_threshold, 10);
    // Key 1 occurs twice in batch 1: admitted there. Key 2 reaches 2 in batch 3 (its 2nd and 3rd
    // occurrence are in one batch), key 3 never.
    EXPECT_EQ(At(steps[0][0], 0), ValueOrDie(table->ReadRow(1))[0]);
    EXPECT_EQ(At(steps[1][0], 0), kDefault);
    EXPECT_EQ(At(steps[2][0], 0), ValueOrDie(table->ReadRow(2))[0]);
    EXPECT_EQ(table->FindRow(3), EmbeddingTable::kDefaultRow);
    EXPECT_EQ(table->AdmissionCount(3), 1.0f);
    // Data time 20, threshold 10: key 1 (last seen at 0) and key 3's count (at 5) go; 2 stays.
    EXPECT_EQ(ValueOrDie(table->EvictStale()), 2);
    EXPECT_EQ(table->FindRow(1), EmbeddingTable::kDefaultRow);
    EXPECT_NE(table->FindRow(2), EmbeddingTable::kDefaultRow);
    EXPECT_EQ(table->AdmissionCount(3), 0.0f);
  }
}

// ExpectConflict: `status` is the InvalidArgument of a threshold conflict naming the table, both
// sides and the fix, and the graph gained no node.
void ExpectConflict(const Status& status, const Graph& g, int nodes_before,
                    const std::vector<std::string>& needles) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::string msg(status.message());
  for (const std::string& needle : needles) {
    EXPECT_NE(msg.find(needle), std::string::npos) << "missing \"" << needle << "\" in " << msg;
  }
  EXPECT_EQ(g.num_nodes(), nodes_before) << "a failed sparse_lookup changed the graph";
}

TEST(LookupAdmissionTest, ThresholdsThatDisagreeAreErrorsNamingBothSides) {
  Graph g;
  Scope s(&g);
  TableConfig config = Table("ids");
  config.access_threshold = 2;
  SparseTable t = ValueOrDie(create_table(s, config, SparseOptimizerConfig::SGD(0.1f)));
  // The table's own config against a FeatureSpec.
  int before = g.num_nodes();
  ExpectConflict(sparse_lookup(s, t, {Spec("C1", 3)}, 1, 1, nullptr).status(), g, before,
                 {"table \"ids\"", "access_threshold 3 from FeatureSpec \"C1\"",
                  "access_threshold 2 from the table's TableConfig", "same value"});
  EXPECT_EQ(t.config().access_threshold, 2);
  // Agreeing or silent (-1) specs are fine.
  ASSERT_TRUE(sparse_lookup(s, t, {Spec("C1", 2), Spec("C2", -1)}, 1, 1, nullptr).ok());

  // Two specs of one table in one call.
  SparseTable u = ValueOrDie(create_table(s, Table("u"), SparseOptimizerConfig::SGD(0.1f)));
  FeatureSpec a = Spec("A", 3), b = Spec("B", 4);
  a.table_name = b.table_name = "u";
  before = g.num_nodes();
  ExpectConflict(sparse_lookup(s, u, {a, b}, 1, 1, nullptr).status(), g, before,
                 {"table \"u\"", "access_threshold 4 from FeatureSpec \"B\"",
                  "access_threshold 3 from FeatureSpec \"A\""});
  EXPECT_EQ(u.config().access_threshold, -1);
  // A spec in one call, access_and_evict_config in a later one.
  ASSERT_TRUE(sparse_lookup(s, u, {a}, 1, 1, nullptr).ok());
  SparseLookupOptions later;
  later.name = "later";
  later.access_and_evict_config = AccessAndEvictConfig{.access_threshold = 5};
  Output ids = ops::Placeholder(s, DType::kInt64, Shape{1, 1});
  before = g.num_nodes();
  ExpectConflict(sparse_lookup(s, u, ids, later).status(), g, before,
                 {"access_threshold 5 from access_and_evict_config of sparse_lookup \"later\"",
                  "access_threshold 3 from FeatureSpec \"A\""});
  later.access_and_evict_config = AccessAndEvictConfig{.access_threshold = 3};
  EXPECT_TRUE(sparse_lookup(s, u, ids, later).ok());

  // Eviction without admission, and thresholds below -1.
  SparseTable v = ValueOrDie(create_table(s, Table("v"), SparseOptimizerConfig::SGD(0.1f)));
  SparseLookupOptions evict;
  evict.access_and_evict_config = AccessAndEvictConfig{.eviction_threshold = 10};
  before = g.num_nodes();
  ExpectConflict(sparse_lookup(s, v, ids, evict).status(), g, before,
                 {"table \"v\"", "eviction", "admission",
                  "eviction_threshold 10 from access_and_evict_config"});
  evict.access_and_evict_config = AccessAndEvictConfig{.access_threshold = -2};
  ExpectConflict(sparse_lookup(s, v, ids, evict).status(), g, before,
                 {"access_and_evict_config access_threshold -2 is below -1"});
  EXPECT_EQ(v.config().eviction_threshold, -1);
  EXPECT_TRUE(s.ok()) << s.status();
}

TEST(LookupAdmissionTest, FeatureSpecEvictionWithTheTimestampSpec) {
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, Table("ids"), SparseOptimizerConfig::SGD(0.1f)));
  FeatureSpec c1 = Spec("C1", 0);
  c1.eviction_threshold = 100;
  FeatureSpec ts;
  ts.name = "timestamp";
  ts.is_timestamp = true;
  // The timestamp spec is validated with the features, so eviction is accepted...
  ASSERT_TRUE(sparse_lookup(s, t, {c1}, 4, 1, &ts).ok());
  EXPECT_EQ(t.config().eviction_threshold, 100);
  EXPECT_EQ(t.config().access_threshold, 0);
  // ...and refused without it, or with a spec that is not a timestamp.
  SparseTable u = ValueOrDie(create_table(s, Table("u"), SparseOptimizerConfig::SGD(0.1f)));
  c1.table_name = "u";
  EXPECT_EQ(sparse_lookup(s, u, {c1}, 4, 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  FeatureSpec not_ts = ts;
  not_ts.is_timestamp = false;
  EXPECT_EQ(sparse_lookup(s, u, {c1}, 4, 1, &not_ts).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(u.config().eviction_threshold, -1);
}

}  // namespace
}  // namespace recsdk
