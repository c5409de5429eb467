// sparse_training_test.cc: sparse optimizers trained through the graph (src/session/embedding.cc):
// dynamically expanding tables growing past device_vocabulary_size and updated by address
// (SparseMinimize, and the spec's way through the ASCEND_SPARSE_LOOKUP_LOCAL_EMB / _ID_OFFSET
// collections), and FTRL against a plain reference of its update rule.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::Ids;
using testing::SmallTable;
using testing::ValueOrDie;

constexpr int64_t kBatch = 32, kPerSample = 2, kDim = 4, kUniquePerStep = 48, kSteps = 3;
constexpr int64_t kVocab = 16;  // device_vocabulary_size: far below the keys the test inserts

// W: the fixed coefficient of each lookup element in loss = sum(emb * W): d loss / d emb = W.
Tensor W() {
  std::vector<float> w(kBatch * kPerSample * kDim);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 9) - 1.0f;
  return ValueOrDie(
      Tensor::FromValues<float>(Shape{kBatch, kPerSample, kDim}, absl::MakeConstSpan(w)));
}

// StepIds: kBatch x kPerSample ids of step `step`: kUniquePerStep new keys, most repeated.
std::vector<int64_t> StepIds(int64_t step) {
  std::vector<int64_t> ids(kBatch * kPerSample);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = step * 1000 + static_cast<int64_t>(i) % kUniquePerStep;
  }
  return ids;
}

struct DynamicModel {
  Graph graph;
  Output ids, emb, loss, id_offset;
  Node* train = nullptr;
  Node* init = nullptr;
};

// BuildDynamic: a dynamically expanding table trained by SparseMinimize, or (by_collections)
// the spec's way: gradients w.r.t. the LOCAL_EMB collection, applied through ID_OFFSET.
void BuildDynamic(DynamicModel* m, const SparseOptimizerConfig& opt, bool by_collections) {
  Scope s(&m->graph);
  TableConfig c = SmallTable("dyn", kDim, kVocab);
  c.use_dynamic_expansion = true;
  SparseTable t = ValueOrDie(create_table(s, c, opt));
  m->ids = ops::Placeholder(s, DType::kInt64, Shape{kBatch, kPerSample});
  m->emb = ValueOrDie(sparse_lookup(s, t, m->ids));
  m->loss = ops::ReduceSum(s, ops::Mul(s, m->emb, ops::Const(s, W())));
  Graph& g = m->graph;
  ASSERT_EQ(g.Collection(kSparseLookupLocalEmb).size(), 1u);
  ASSERT_EQ(g.Collection(kSparseLookupIdOffset).size(), 1u);
  m->id_offset = ValueOrDie(g.FindOutput(g.Collection(kSparseLookupIdOffset)[0]));
  if (!by_collections) {
    m->train = ValueOrDie(SparseMinimize(s, m->loss));
  } else {
    std::vector<Output> local_emb;
    for (const std::string& name : g.Collection(kSparseLookupLocalEmb)) {
      local_emb.push_back(ValueOrDie(g.FindOutput(name)));
    }
    EXPECT_EQ(local_emb[0], m->emb);
    std::vector<Output> grads = ValueOrDie(Gradients(s, {m->loss}, local_emb));
    std::vector<SparseGrad> sparse;
    for (size_t i = 0; i < grads.size(); ++i) {
      sparse.push_back(ValueOrDie(SparseGradForLocalEmb(s, local_emb[i], grads[i])));
      EXPECT_EQ(sparse.back().unique_rows, m->id_offset);  // the "addresses" of the lookup
    }
    m->train = ValueOrDie(ApplySparseGradients(s, sparse));
  }
  m->init = GlobalVariablesInitializer(s);
  ASSERT_TRUE(s.ok()) << s.status();
}

// ExpectedRow: the row of a key after one update from fresh slots with gradient g (step 1).
std::vector<float> ExpectedRow(const SparseOptimizerConfig& o, const float* w, const float* g) {
  std::vector<float> out(kDim);
  for (int d = 0; d < kDim; ++d) {
    if (o.kind == SparseOptimizerKind::kSGDByAddr) {
      out[d] = w[d] - o.learning_rate * g[d];
    } else {  // LazyAdam, t = 1
      const float m = (1 - o.beta1) * g[d], v = (1 - o.beta2) * g[d] * g[d];
      const float lr_t = o.learning_rate * std::sqrt(1 - o.beta2) / (1 - o.beta1);
      out[d] = w[d] - lr_t * m / (std::sqrt(v) + o.epsilon);
    }
  }
  return out;
}

class DynamicExpansionTest : public ::testing::TestWithParam<SparseOptimizerConfig> {};

TEST_P(DynamicExpansionTest, TrainsByAddressPastTheDeviceVocabulary) {
  const SparseOptimizerConfig opt = GetParam();
  std::map<int64_t, std::vector<float>> rows_by_path[2];
  for (bool by_collections : {false, true}) {
    SCOPED_TRACE(by_collections ? "LOCAL_EMB / ID_OFFSET collections" : "SparseMinimize");
    DynamicModel m;
    BuildDynamic(&m, opt, by_collections);
    auto session = ValueOrDie(Session::Create(m.graph));
    RECSDK_ASSERT_OK(session->Run({}, {}, {m.init}).status());
    EmbeddingTable* table = ValueOrDie(LookupTable(*session, "dyn"));
    const int64_t capacity = table->capacity();
    const Tensor w = W();
    for (int64_t step = 0; step < kSteps; ++step) {
      const std::vector<int64_t> ids = StepIds(step);
      // The fetched embeddings are read before the update (the apply follows every lookup).
      auto out = ValueOrDie(
          session->Run({{m.ids, Ids(kBatch, kPerSample, ids)}}, {m.emb, m.id_offset}, {m.train}));
      const Tensor& emb = out[0];
      const Tensor& unique_rows = out[1];
      // ID_OFFSET: the lookup's unique rows in order of first occurrence, real rows with
      // addresses (the table grew instead of failing at device_vocabulary_size).
      ASSERT_EQ(unique_rows.num_elements(), kUniquePerStep);
      std::vector<uint32_t> rows(kUniquePerStep);
      for (int64_t u = 0; u < kUniquePerStep; ++u) {
        rows[u] = static_cast<uint32_t>(unique_rows.data<int32_t>()[u]);
        EXPECT_EQ(rows[u], table->FindRow(ids[u]));
      }
      std::vector<float*> addresses(kUniquePerStep);
      ASSERT_TRUE(table->RowAddresses(rows, absl::MakeSpan(addresses)).ok());
      for (float* a : addresses) EXPECT_NE(a, nullptr);
      // Each key's update: the sum of W over its positions, applied once.
      std::map<int64_t, std::vector<float>> before, grad;
      for (size_t i = 0; i < ids.size(); ++i) {
        const float* e = emb.data<float>() + i * kDim;
        const float* g = w.data<float>() + i * kDim;
        before.try_emplace(ids[i], e, e + kDim);
        auto [it, inserted] = grad.try_emplace(ids[i], kDim, 0.0f);
        for (int d = 0; d < kDim; ++d) it->second[d] += g[d];
      }
      for (const auto& [key, g] : grad) {
        const std::vector<float> want = ExpectedRow(opt, before[key].data(), g.data());
        const std::vector<float> got = ValueOrDie(table->ReadRow(key));
        for (int d = 0; d < kDim; ++d) {
          EXPECT_NEAR(got[d], want[d], 1e-6) << "key " << key << " dim " << d;
        }
      }
    }
    EXPECT_EQ(table->size(), kSteps * kUniquePerStep);
    EXPECT_GT(table->size(), kVocab);
    EXPECT_EQ(table->capacity(), capacity);
    for (int64_t step = 0; step < kSteps; ++step) {
      for (int64_t key : StepIds(step)) {
        rows_by_path[by_collections][key] = ValueOrDie(table->ReadRow(key));
      }
    }
  }
  // Both ways of training give the same table, bit for bit.
  EXPECT_EQ(rows_by_path[0], rows_by_path[1]);
}

INSTANTIATE_TEST_SUITE_P(ByAddress, DynamicExpansionTest,
                         ::testing::Values(SparseOptimizerConfig::SGDByAddr(0.1f),
                                           SparseOptimizerConfig::LazyAdamByAddress(0.01f)),
                         [](const auto& info) {
                           return info.param.kind == SparseOptimizerKind::kSGDByAddr
                                      ? std::string("SGDByAddr")
                                      : std::string("LazyAdamByAddress");
                         });

TEST(SparseTrainingTest, SparseGradForLocalEmbRejectsWhatIsNotALookup) {
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s, DType::kFloat32, Shape{2, 2});
  EXPECT_EQ(SparseGradForLocalEmb(s, x, x).status().code(), absl::StatusCode::kInvalidArgument);
  TableConfig c = SmallTable("t", 2);
  SparseTable t = ValueOrDie(create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  Output emb = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 1, {1, 2}))));
  const auto wrong = SparseGradForLocalEmb(s, emb, x);  // [2, 2] for a [2, 1, 2] result
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("[2,1,2]"), std::string_view::npos) << wrong.status();
}

// FtrlReference: TensorFlow's ApplyFtrlV2 on one element, in double.
struct FtrlState {
  double w, acc, lin;
};
void FtrlReference(const SparseOptimizerConfig& c, double g, FtrlState* st) {
  const double p = c.learning_rate_power;
  const double gs = g + 2 * c.l2_shrinkage * st->w;
  const double acc_new = st->acc + g * g;
  st->lin += gs - (std::pow(acc_new, -p) - std::pow(st->acc, -p)) / c.learning_rate * st->w;
  const double quadratic = std::pow(acc_new, -p) / c.learning_rate + 2 * c.l2;
  st->w = std::fabs(st->lin) > c.l1 ? ((st->lin > 0 ? c.l1 : -c.l1) - st->lin) / quadratic : 0.0;
  st->acc = acc_new;
}

TEST(SparseTrainingTest, FtrlMatchesItsReferenceThroughTheGraph) {
  const SparseOptimizerConfig ftrl =
      SparseOptimizerConfig::FTRL(0.05f, -0.5f, 0.1f, /*l1=*/0.001f, /*l2=*/0.01f,
                                  /*l2_shrinkage=*/0.002f);
  constexpr int kD = 3;
  Graph g;
  Scope s(&g);
  SparseTable t = ValueOrDie(create_table(s, SmallTable("ftrl", kD), ftrl));
  const std::vector<int64_t> ids = {3, 4, 3, 5};  // key 3 twice: one update with the sum
  Output emb = ValueOrDie(sparse_lookup(s, t, ops::Const(s, Ids(2, 2, ids))));
  std::vector<float> wv(ids.size() * kD);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.4f * static_cast<float>(i % 5) - 0.7f;
  Output w = ops::Const(
      s, ValueOrDie(Tensor::FromValues<float>(Shape{2, 2, kD}, absl::MakeConstSpan(wv))));
  // d loss / d emb = w + 2 emb: the gradient depends on the row, so a wrong row shows.
  Output loss =
      ops::Add(s, ops::ReduceSum(s, ops::Mul(s, emb, w)), ops::ReduceSum(s, ops::Square(s, emb)));
  Node* train = ValueOrDie(SparseMinimize(s, loss));
  Node* init = GlobalVariablesInitializer(s);
  auto session = ValueOrDie(Session::Create(g));
  RECSDK_ASSERT_OK(session->Run({}, {}, {init}).status());
  EmbeddingTable* table = ValueOrDie(LookupTable(*session, "ftrl"));
  std::map<int64_t, std::vector<FtrlState>> ref;
  for (int step = 0; step < 3; ++step) {
    const Tensor e = ValueOrDie(session->Run({}, {emb}, {train}))[0];
    std::map<int64_t, std::vector<double>> grad;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [it, inserted] = grad.try_emplace(ids[i], kD, 0.0);
      for (int d = 0; d < kD; ++d) {
        const double ed = e.data<float>()[i * kD + d];
        it->second[d] += wv[i * kD + d] + 2 * ed;
        if (step == 0) {
          auto [st, fresh] =
              ref.try_emplace(ids[i], kD, FtrlState{0, ftrl.initial_accumulator_value, 0});
          st->second[d].w = ed;
        } else {
          EXPECT_NEAR(ed, ref[ids[i]][d].w, 1e-5) << "step " << step << " key " << ids[i];
        }
      }
    }
    for (const auto& [key, gk] : grad) {
      for (int d = 0; d < kD; ++d) FtrlReference(ftrl, gk[d], &ref[key][d]);
    }
  }
  for (const auto& [key, states] : ref) {
    const std::vector<float> row = ValueOrDie(table->ReadRow(key));  // [w, acc, linear]
    ASSERT_EQ(row.size(), 3u * kD);
    for (int d = 0; d < kD; ++d) {
      EXPECT_NEAR(row[d], states[d].w, 1e-5) << key;
      EXPECT_NEAR(row[kD + d], states[d].acc, 1e-5) << key;
      EXPECT_NEAR(row[2 * kD + d], states[d].lin, 1e-5) << key;
    }
  }
  EXPECT_EQ(table->size(), 3);
}

}  // namespace
}  // namespace recsdk
