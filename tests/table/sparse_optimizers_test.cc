// sparse_optimizers_test.cc: every sparse optimizer against a plain dense reference (rows in
// std::vector, double-free float math written out directly) on the same gradients, including
// keys repeated within a batch; plus config validation.
#include "recsdk/sparse_optimizers.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/table.h"
#include "src/table/dedup.h"

namespace recsdk {
namespace {

using internal::AggregateGradients;
using internal::DedupKeys;
using internal::DedupResult;

// Dense reference: one row + slots per key, updated by the textbook rule. Only the keys of a
// step are updated, so a table that decayed untouched rows (weight decay applied eagerly rather
// than lazily) would differ from it.
struct Reference {
  SparseOptimizerConfig c;
  int dim;
  std::map<int64_t, std::vector<float>> w, s1, s2;

  void Step(const std::map<int64_t, std::vector<float>>& grads, int64_t t) {
    for (const auto& [key, g] : grads) {
      std::vector<float>& x = w.at(key);
      std::vector<float>& a = s1[key];
      std::vector<float>& b = s2[key];
      if (a.empty()) {
        const bool ftrl = c.kind == SparseOptimizerKind::kFTRL;
        const bool ada = c.kind == SparseOptimizerKind::kAdagrad ||
                         c.kind == SparseOptimizerKind::kAdagradByAddress;
        a.assign(dim, ftrl || ada ? c.initial_accumulator_value : 0.0f);
        b.assign(dim, 0.0f);
      }
      for (int i = 0; i < dim; ++i) {
        switch (c.kind) {
          case SparseOptimizerKind::kSGD:
          case SparseOptimizerKind::kSGDByAddr:
            x[i] = x[i] - c.learning_rate * (g[i] + c.weight_decay * x[i]);
            break;
          case SparseOptimizerKind::kAdagrad:
          case SparseOptimizerKind::kAdagradByAddress: {
            // L2 as the gradient of (wd/2)*|w|^2, on the rows of this step only.
            const float gl2 = g[i] + c.weight_decay * x[i];
            a[i] += gl2 * gl2;
            x[i] -= c.learning_rate * gl2 / (std::sqrt(a[i]) + c.adagrad_epsilon);
            break;
          }
          case SparseOptimizerKind::kLazyAdam:
          case SparseOptimizerKind::kLazyAdamByAddress: {
            const float gl2 = g[i] + c.weight_decay * x[i];
            a[i] = c.beta1 * a[i] + (1 - c.beta1) * gl2;
            b[i] = c.beta2 * b[i] + (1 - c.beta2) * gl2 * gl2;
            const double lr_t = c.learning_rate * std::sqrt(1 - std::pow(double{c.beta2}, t)) /
                                (1 - std::pow(double{c.beta1}, t));
            x[i] -= static_cast<float>(lr_t) * a[i] / (std::sqrt(b[i]) + c.epsilon);
            break;
          }
          case SparseOptimizerKind::kFTRL: {
            const float gs = g[i] + 2 * c.l2_shrinkage * x[i];
            const float an = a[i] + g[i] * g[i];
            const float p = -c.learning_rate_power;
            b[i] += gs - (std::pow(an, p) - std::pow(a[i], p)) / c.learning_rate * x[i];
            const float quad = std::pow(an, p) / c.learning_rate + 2 * c.l2;
            x[i] = !(std::fabs(b[i]) <= c.l1) ? ((b[i] > 0 ? c.l1 : -c.l1) - b[i]) / quad : 0.0f;
            a[i] = an;
            break;
          }
        }
      }
    }
  }
};

class OptimizerVsReference : public ::testing::TestWithParam<SparseOptimizerConfig> {};

TEST_P(OptimizerVsReference, MatchesDenseReferenceWithRepeatedKeys) {
  const SparseOptimizerConfig opt = GetParam();
  constexpr int kDim = 19;  // not a multiple of the vector width
  TableConfig tc;
  tc.name = "opt_table";
  tc.dim = kDim;
  tc.device_vocabulary_size = 64;
  tc.use_dynamic_expansion = opt.ByAddress();
  tc.initializer = Initializer::Normal(0, 0.1, 3);
  auto table_or = EmbeddingTable::Create(tc, opt);
  ASSERT_TRUE(table_or.ok()) << table_or.status();
  EmbeddingTable& table = **table_or;
  Reference ref{opt, kDim, {}, {}, {}};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> key_dist(0, 40);
  std::normal_distribution<float> grad_dist(0, 1);
  DedupResult d;
  for (int64_t step = 1; step <= 30; ++step) {
    std::vector<int64_t> keys(64);
    for (auto& k : keys) k = key_dist(rng) * 1000003;  // many repeats per batch
    std::vector<float> grads(keys.size() * kDim);
    for (auto& g : grads) g = grad_dist(rng);
    DedupKeys(keys, &d);
    std::vector<uint32_t> rows(d.unique_keys.size());
    ASSERT_TRUE(
        table.Resolve(d.unique_keys, d.counts, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
    std::map<int64_t, std::vector<float>> summed;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!ref.w.count(keys[i])) {
        auto row = table.ReadRow(keys[i]);
        ASSERT_TRUE(row.ok());
        ref.w[keys[i]] = std::vector<float>(row->begin(), row->begin() + kDim);
      }
      auto& s = summed[keys[i]];
      s.resize(kDim, 0.0f);
      for (int j = 0; j < kDim; ++j) s[j] += grads[i * kDim + j];
    }
    std::vector<float> agg(d.unique_keys.size() * kDim);
    EXPECT_TRUE(AggregateGradients(d.restore_index, grads, kDim,
                                   static_cast<int64_t>(d.unique_keys.size()), absl::MakeSpan(agg))
                    .ok());
    if (opt.ByAddress()) {
      std::vector<float*> addr(rows.size());
      ASSERT_TRUE(table.RowAddresses(rows, absl::MakeSpan(addr)).ok());
      EXPECT_TRUE(table.ApplyGradientsByAddress(addr, agg, step).ok());
    } else {
      EXPECT_TRUE(table.ApplyGradients(rows, agg, step).ok());
    }
    ref.Step(summed, step);
  }
  for (const auto& [key, w] : ref.w) {
    auto row = table.ReadRow(key);
    ASSERT_TRUE(row.ok());
    for (int i = 0; i < kDim; ++i) {
      ASSERT_NEAR((*row)[i], w[i], 1e-6f * std::max(1.0f, std::fabs(w[i])))
          << opt.ToString() << " key " << key << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerVsReference,
    ::testing::Values(SparseOptimizerConfig::SGD(0.05f), SparseOptimizerConfig::SGD(0.05f, 0.01f),
                      SparseOptimizerConfig::SGDByAddr(0.05f),
                      SparseOptimizerConfig::Adagrad(0.05f),
                      SparseOptimizerConfig::AdagradByAddress(0.05f, 0.5f),
                      // PyTorch's Adagrad: a zero initial accumulator with epsilon 1e-10.
                      SparseOptimizerConfig::Adagrad(0.05f, 0.0f, 1e-10f),
                      SparseOptimizerConfig::AdagradByAddress(0.05f, 0.0f, 0.5f),
                      SparseOptimizerConfig::LazyAdam(0.01f),
                      SparseOptimizerConfig::LazyAdamByAddress(0.01f),
                      // L2 (coupled weight decay) on every kind that takes it.
                      SparseOptimizerConfig::SGDByAddr(0.05f, 0.02f),
                      SparseOptimizerConfig::Adagrad(0.05f, 0.9f, 0.0f, 0.02f),
                      SparseOptimizerConfig::AdagradByAddress(0.05f, 0.5f, 1e-10f, 0.1f),
                      SparseOptimizerConfig::LazyAdam(0.01f, 0.9f, 0.999f, 1e-8f, 0.02f),
                      SparseOptimizerConfig::LazyAdamByAddress(0.01f, 0.9f, 0.999f, 1e-8f, 0.1f),
                      SparseOptimizerConfig::FTRL(0.05f),
                      SparseOptimizerConfig::FTRL(0.05f, -0.7f, 0.1f, 0.01f, 0.02f, 0.03f)));

// ExpectConfig: every hyper-parameter of `got` equals `want`'s, exactly (the factories copy their
// default arguments; nothing is computed).
void ExpectConfig(const SparseOptimizerConfig& got, const SparseOptimizerConfig& want) {
  SCOPED_TRACE(SparseOptimizerKindName(want.kind));
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.learning_rate, want.learning_rate);
  EXPECT_EQ(got.weight_decay, want.weight_decay);
  EXPECT_EQ(got.initial_accumulator_value, want.initial_accumulator_value);
  EXPECT_EQ(got.beta1, want.beta1);
  EXPECT_EQ(got.beta2, want.beta2);
  EXPECT_EQ(got.epsilon, want.epsilon);
  EXPECT_EQ(got.adagrad_epsilon, want.adagrad_epsilon);
  EXPECT_EQ(got.learning_rate_power, want.learning_rate_power);
  EXPECT_EQ(got.l1, want.l1);
  EXPECT_EQ(got.l2, want.l2);
  EXPECT_EQ(got.l2_shrinkage, want.l2_shrinkage);
}

// The spec's defaults, field by field, for each factory. Fields a kind ignores keep the struct's
// defaults, which are checked too (a table checkpoint records the whole config).
TEST(SparseOptimizerConfigTest, SpecDefaults) {
  SparseOptimizerConfig base;  // the struct's own defaults
  EXPECT_EQ(base.kind, SparseOptimizerKind::kSGD);
  EXPECT_EQ(base.learning_rate, 0.001f);
  EXPECT_EQ(base.weight_decay, 0.0f);
  EXPECT_EQ(base.initial_accumulator_value, 0.9f);
  EXPECT_EQ(base.beta1, 0.9f);
  EXPECT_EQ(base.beta2, 0.999f);
  EXPECT_EQ(base.epsilon, 1e-8f);
  EXPECT_EQ(base.learning_rate_power, -0.5f);
  EXPECT_EQ(base.l1, 0.0f);
  EXPECT_EQ(base.l2, 0.0f);
  EXPECT_EQ(base.l2_shrinkage, 0.0f);

  // SGD: the learning rate is the caller's; weight_decay defaults to 0.
  SparseOptimizerConfig sgd = base;
  sgd.learning_rate = 0.25f;
  ExpectConfig(SparseOptimizerConfig::SGD(0.25f), sgd);
  sgd.kind = SparseOptimizerKind::kSGDByAddr;
  ExpectConfig(SparseOptimizerConfig::SGDByAddr(0.25f), sgd);

  // Adagrad: learning_rate 0.001, initial_accumulator_value 0.9.
  SparseOptimizerConfig adagrad = base;
  adagrad.kind = SparseOptimizerKind::kAdagrad;
  adagrad.learning_rate = 0.001f;
  adagrad.initial_accumulator_value = 0.9f;
  ExpectConfig(SparseOptimizerConfig::Adagrad(), adagrad);
  adagrad.kind = SparseOptimizerKind::kAdagradByAddress;
  ExpectConfig(SparseOptimizerConfig::AdagradByAddress(), adagrad);

  // LazyAdam: learning_rate 0.001, beta1 0.9, beta2 0.999, epsilon 1e-8.
  SparseOptimizerConfig adam = base;
  adam.kind = SparseOptimizerKind::kLazyAdam;
  adam.learning_rate = 0.001f;
  adam.beta1 = 0.9f;
  adam.beta2 = 0.999f;
  adam.epsilon = 1e-8f;
  ExpectConfig(SparseOptimizerConfig::LazyAdam(), adam);
  adam.kind = SparseOptimizerKind::kLazyAdamByAddress;
  ExpectConfig(SparseOptimizerConfig::LazyAdamByAddress(), adam);

  // FTRL: learning_rate 0.001, learning_rate_power -0.5, initial_accumulator_value 0.1, l1 = l2 =
  // l2_shrinkage = 0.
  SparseOptimizerConfig ftrl = base;
  ftrl.kind = SparseOptimizerKind::kFTRL;
  ftrl.learning_rate = 0.001f;
  ftrl.learning_rate_power = -0.5f;
  ftrl.initial_accumulator_value = 0.1f;
  ftrl.l1 = 0.0f;
  ftrl.l2 = 0.0f;
  ftrl.l2_shrinkage = 0.0f;
  ExpectConfig(SparseOptimizerConfig::FTRL(), ftrl);

  // Slots and addressing per kind.
  EXPECT_EQ(SparseOptimizerConfig::SGD(1).NumSlots(16), 0);
  EXPECT_EQ(SparseOptimizerConfig::SGDByAddr(1).NumSlots(16), 0);
  EXPECT_EQ(SparseOptimizerConfig::Adagrad().NumSlots(16), 16);
  EXPECT_EQ(SparseOptimizerConfig::AdagradByAddress().NumSlots(16), 16);
  EXPECT_EQ(SparseOptimizerConfig::LazyAdam().NumSlots(16), 32);
  EXPECT_EQ(SparseOptimizerConfig::LazyAdamByAddress().NumSlots(16), 32);
  EXPECT_EQ(SparseOptimizerConfig::FTRL().NumSlots(16), 32);
  EXPECT_FALSE(SparseOptimizerConfig::SGD(1).ByAddress());
  EXPECT_TRUE(SparseOptimizerConfig::SGDByAddr(1).ByAddress());
  EXPECT_FALSE(SparseOptimizerConfig::Adagrad().ByAddress());
  EXPECT_TRUE(SparseOptimizerConfig::AdagradByAddress().ByAddress());
  EXPECT_FALSE(SparseOptimizerConfig::LazyAdam().ByAddress());
  EXPECT_TRUE(SparseOptimizerConfig::LazyAdamByAddress().ByAddress());
  EXPECT_FALSE(SparseOptimizerConfig::FTRL().ByAddress());
}

TEST(SparseOptimizerConfigTest, Validation) {
  auto expect_error = [](SparseOptimizerConfig c, const std::string& needle) {
    Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
  };
  expect_error(SparseOptimizerConfig::SGD(0), "learning_rate 0");
  expect_error(SparseOptimizerConfig::SGD(0.1f, -1), "weight_decay");
  expect_error(SparseOptimizerConfig::Adagrad(0.1f, 0), "initial_accumulator_value");
  expect_error(SparseOptimizerConfig::Adagrad(0.1f, -1), "initial_accumulator_value");
  expect_error(SparseOptimizerConfig::Adagrad(0.1f, 0.1f, -1e-3f), "adagrad_epsilon");
  EXPECT_TRUE(SparseOptimizerConfig::Adagrad(0.1f, 0.0f, 1e-10f).Validate().ok());
  expect_error(SparseOptimizerConfig::LazyAdam(0.1f, 1.0f), "beta1");
  expect_error(SparseOptimizerConfig::LazyAdam(0.1f, 0.9f, 0.999f, 0), "epsilon");
  expect_error(SparseOptimizerConfig::FTRL(0.1f, 0.5f), "learning_rate_power");
  expect_error(SparseOptimizerConfig::FTRL(0.1f, -0.5f, 0.1f, -1), "l1");
  // L2 as weight_decay: >= 0 on every kind that has it; FTRL's L2 is l2, so it is refused there
  // rather than recorded and ignored.
  expect_error(SparseOptimizerConfig::Adagrad(0.1f, 0.1f, 0.0f, -0.5f), "weight_decay -0.5");
  expect_error(SparseOptimizerConfig::LazyAdamByAddress(0.1f, 0.9f, 0.999f, 1e-8f, -1),
               "weight_decay -1");
  SparseOptimizerConfig ftrl_wd = SparseOptimizerConfig::FTRL();
  ftrl_wd.weight_decay = 0.01f;
  expect_error(ftrl_wd, "set l2");
  EXPECT_TRUE(SparseOptimizerConfig::LazyAdam(0.1f, 0.9f, 0.999f, 1e-8f, 0.1f).Validate().ok());
  for (auto c : {SparseOptimizerConfig::SGD(0.1f), SparseOptimizerConfig::Adagrad(),
                 SparseOptimizerConfig::LazyAdam(), SparseOptimizerConfig::FTRL()}) {
    EXPECT_TRUE(c.Validate().ok()) << c.ToString();
  }
  // Non-finite values, also in fields the kind does not use (the config is saved whole).
  expect_error(SparseOptimizerConfig::SGD(std::nanf("")), "learning_rate nan");
  expect_error(SparseOptimizerConfig::LazyAdam(0.1f, std::nanf("")), "beta1 nan");
  SparseOptimizerConfig sgd = SparseOptimizerConfig::SGD(0.1f);
  sgd.l1 = std::nanf("");
  expect_error(sgd, "l1 nan");
  sgd.l1 = 0;
  sgd.epsilon = -std::numeric_limits<float>::infinity();
  expect_error(sgd, "epsilon -inf");
}

// A NaN gradient makes the updated row NaN under every optimizer. FTRL's `|l| > l1 ? ... : 0`
// set the weight to 0 instead, so a diverged key trained on silently as a zero embedding.
TEST(SparseOptimizerNanTest, NanGradientMakesTheRowNaN) {
  for (const SparseOptimizerConfig& opt :
       {SparseOptimizerConfig::SGD(0.05f), SparseOptimizerConfig::Adagrad(0.05f),
        SparseOptimizerConfig::LazyAdam(0.05f), SparseOptimizerConfig::FTRL(0.05f),
        SparseOptimizerConfig::FTRL(0.05f, -0.7f, 0.1f, 0.01f, 0.02f, 0.03f)}) {
    SCOPED_TRACE(opt.ToString());
    TableConfig tc;
    tc.name = "nan_table";
    tc.dim = 4;
    tc.device_vocabulary_size = 8;
    tc.initializer = Initializer::Normal(0, 0.1, 3);
    auto table = EmbeddingTable::Create(tc, opt);
    ASSERT_TRUE(table.ok()) << table.status();
    std::vector<uint32_t> rows(2);
    ASSERT_TRUE((*table)->Resolve({1, 2}, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> grads = {nan, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    ASSERT_TRUE((*table)->ApplyGradients(rows, grads, 1).ok());
    auto nan_row = (*table)->ReadRow(1);
    auto other_row = (*table)->ReadRow(2);
    ASSERT_TRUE(nan_row.ok() && other_row.ok());
    EXPECT_TRUE(std::isnan((*nan_row)[0])) << (*nan_row)[0];
    for (int i = 1; i < 4; ++i) EXPECT_FALSE(std::isnan((*nan_row)[i])) << i;
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(std::isnan((*other_row)[i])) << i;
  }
}

}  // namespace
}  // namespace recsdk
