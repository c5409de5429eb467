// table_kernels_test.cc: every ISA variant of the table's update kernels (the ones this CPU runs)
// is bitwise equal to its plain reference twin RowUpdater, by row id and by address, with
// sentinel rows skipped and dims that leave vector tails; AggregateGradients' one-pass sums match
// a plain zero-then-add reference for dedup-ordered and arbitrary restore indices;
// AggregateLookupGradients pools as the gather did and rejects bad indices.
#include "src/table/table_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/tbb/global_control.h"
#include "recsdk/table.h"
#include "src/table/dedup.h"
#include "src/table/sparse_optimizers_impl.h"

namespace recsdk::internal {
namespace {

constexpr uint32_t kSkip = EmbeddingTable::kDefaultRow;

std::vector<SparseOptimizerConfig> Configs() {
  return {SparseOptimizerConfig::SGD(0.1f),
          SparseOptimizerConfig::SGD(0.05f, 0.01f),
          SparseOptimizerConfig::Adagrad(0.1f, 0.3f),
          SparseOptimizerConfig::AdagradByAddress(),
          SparseOptimizerConfig::Adagrad(0.1f, 0.3f, 0.0f, 0.05f),  // with weight decay
          SparseOptimizerConfig::AdagradByAddress(0.1f, 0.0f, 1e-10f, 0.2f),
          SparseOptimizerConfig::LazyAdam(0.01f),
          SparseOptimizerConfig::LazyAdamByAddress(0.2f),
          SparseOptimizerConfig::LazyAdam(0.01f, 0.9f, 0.999f, 1e-8f, 0.05f),
          SparseOptimizerConfig::LazyAdamByAddress(0.2f, 0.8f, 0.99f, 1e-6f, 0.3f)};
}

void RunKernel(const TableKernels& k, const SparseOptimizerConfig& c, char* base, int64_t row_bytes,
               const uint32_t* ids, float* const* addrs, int64_t n, const float* g, int64_t dim,
               float lr_t) {
  switch (c.kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      ids ? k.sgd_rows(base, row_bytes, ids, n, g, dim, c.learning_rate, c.weight_decay)
          : k.sgd_addrs(addrs, row_bytes, n, g, dim, c.learning_rate, c.weight_decay);
      break;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      ids ? k.adagrad_rows(base, row_bytes, ids, n, g, dim, c.learning_rate, c.adagrad_epsilon,
                           c.weight_decay)
          : k.adagrad_addrs(addrs, row_bytes, n, g, dim, c.learning_rate, c.adagrad_epsilon,
                            c.weight_decay);
      break;
    default:
      ids ? k.lazy_adam_rows(base, row_bytes, ids, n, g, dim, c.beta1, c.beta2, c.epsilon, lr_t,
                             c.weight_decay)
          : k.lazy_adam_addrs(addrs, row_bytes, n, g, dim, c.beta1, c.beta2, c.epsilon, lr_t,
                              c.weight_decay);
      break;
  }
}

TEST(TableKernelsTest, EveryVariantIsBitwiseEqualToTheReferenceTwin) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(BestIsa())) continue;
    const TableKernels& k = TableFastFor(isa);
    for (const SparseOptimizerConfig& c : Configs()) {
      for (int dim : {1, 3, 4, 8, 15, 16, 17, 33, 64}) {
        for (bool by_addr : {false, true}) {
          SCOPED_TRACE(::testing::Message() << IsaName(isa) << " " << c.ToString() << " dim " << dim
                                            << (by_addr ? " by address" : " by id"));
          const int row_floats = dim + c.NumSlots(dim);
          const int64_t rows = 40, n = 30;
          std::vector<float> slab(static_cast<size_t>(rows * row_floats));
          for (int64_t r = 0; r < rows; ++r) {
            float* row = slab.data() + r * row_floats;
            for (int i = 0; i < dim; ++i) row[i] = nd(rng);
            InitSlots(c, dim, row + dim);
            for (int i = dim; i < row_floats; ++i) row[i] += std::abs(nd(rng));
          }
          std::vector<float> want = slab;
          std::vector<uint32_t> ids(n);
          std::vector<float*> addrs(n);
          std::vector<uint32_t> perm(rows);
          for (uint32_t r = 0; r < rows; ++r) perm[r] = r;
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int64_t i = 0; i < n; ++i) {
            ids[i] = i % 7 == 3 ? (i % 2 ? kSkip : EmbeddingTable::kPaddingRow) : perm[i];
            addrs[i] = ids[i] >= kSkip ? nullptr : slab.data() + ids[i] * row_floats;
          }
          std::vector<float> g(static_cast<size_t>(n * dim));
          for (float& x : g) x = nd(rng);
          const RowUpdater ref(c, dim, 3);
          for (int64_t i = 0; i < n; ++i) {
            if (ids[i] < kSkip) ref.Apply(want.data() + ids[i] * row_floats, g.data() + i * dim);
          }
          RunKernel(k, c, reinterpret_cast<char*>(slab.data()), row_floats * 4,
                    by_addr ? nullptr : ids.data(), addrs.data(), n, g.data(), dim,
                    ref.adam_lr_t());
          ASSERT_EQ(0, std::memcmp(slab.data(), want.data(), slab.size() * sizeof(float)));
        }
      }
    }
  }
}

void ReferenceAggregate(const std::vector<uint32_t>& restore, const float* g, int dim, int64_t nu,
                        float* out) {
  std::fill(out, out + nu * dim, 0.0f);
  for (size_t i = 0; i < restore.size(); ++i) {
    for (int k = 0; k < dim; ++k) out[restore[i] * dim + k] += g[i * dim + k];
  }
}

TEST(TableKernelsTest, AggregateGradientsMatchesZeroThenAdd) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t n : {size_t{10}, size_t{40000}}) {
    for (bool dedup_order : {true, false}) {
      const int dim = 5;
      const int64_t nu = static_cast<int64_t>(n / 3 + 2);  // the last ids never occur
      std::vector<uint32_t> restore(n);
      if (dedup_order) {
        std::vector<int64_t> keys(n);
        for (auto& k : keys) k = static_cast<int64_t>(rng() % (n / 3));
        DedupResult d;
        DedupKeys(keys, &d);
        restore = d.restore_index;
      } else {
        for (auto& r : restore) r = static_cast<uint32_t>(rng() % (nu - 2));
      }
      std::vector<float> g(n * dim), want(nu * dim);
      for (float& x : g) x = nd(rng);
      // A key seen once with a gradient of -0: its sum 0 + -0 is +0, where a sum that copied its
      // first gradient would keep -0.
      std::vector<int> seen(nu, 0);
      for (uint32_t r : restore) ++seen[r];
      for (size_t i = 0; i < n; ++i) {
        if (seen[restore[i]] != 1) continue;
        std::fill(g.begin() + i * dim, g.begin() + (i + 1) * dim, -0.0f);
        break;
      }
      ReferenceAggregate(restore, g.data(), dim, nu, want.data());
      for (AggregateStrategy s :
           {AggregateStrategy::kAuto, AggregateStrategy::kScan, AggregateStrategy::kSort}) {
        std::vector<float> got(nu * dim, 123.0f);
        EXPECT_TRUE(AggregateGradients(restore, g, dim, nu, absl::MakeSpan(got), s).ok());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << "n " << n << " strategy " << static_cast<int>(s);
      }
    }
  }
}

TEST(TableKernelsTest, AggregateGradientsIsExactOnSkewedIdsForAnyThreadCount) {
  // Most positions on the first ids (as with Zipf keys numbered by first occurrence), one id
  // holding a third of them: the work split must still give every id's input-order sum.
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t n = 60000;
  const int dim = 8;
  const int64_t nu = 5000;
  std::vector<uint32_t> restore(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng() % 3);
    restore[i] = r == 0   ? 0u
                 : r == 1 ? static_cast<uint32_t>(rng() % 10)
                          : static_cast<uint32_t>(rng() % nu);
  }
  std::vector<float> g(n * dim), want(nu * dim);
  for (float& x : g) x = nd(rng);
  ReferenceAggregate(restore, g.data(), dim, nu, want.data());
  // Every strategy (the scan, the counting sort, and the choice between them) at every thread
  // count: the same bits, each id's sum in position order.
  for (int threads : {1, 2, 3, 4, 8}) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    for (AggregateStrategy s :
         {AggregateStrategy::kAuto, AggregateStrategy::kScan, AggregateStrategy::kSort}) {
      std::vector<float> got(nu * dim, 123.0f);
      EXPECT_TRUE(AggregateGradients(restore, g, dim, nu, absl::MakeSpan(got), s).ok());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(want[i], got[i])
            << threads << " threads, strategy " << static_cast<int>(s) << ", float " << i;
      }
    }
  }
}

TEST(TableKernelsTest, AggregateGradientsSortedSumsKeepPositionOrderOnZipfIds) {
  // Zipf-like ids numbered by first occurrence (DedupKeys), a dim with a vector tail, and
  // gradients of very different magnitudes so that any other summation order changes bits: the
  // counting sort must keep each id's positions in increasing order at every thread count.
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  const size_t n = 50000;
  const int dim = 19;
  std::vector<int64_t> keys(n);
  for (auto& k : keys) k = static_cast<int64_t>(std::pow(2000.0, ud(rng) * ud(rng)));
  DedupResult d;
  DedupKeys(keys, &d);
  const int64_t nu = static_cast<int64_t>(d.unique_keys.size());
  ASSERT_GE(n, 2 * static_cast<size_t>(nu));  // skewed: kAuto sorts with several threads
  std::vector<float> g(n * dim), want(nu * dim);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>((ud(rng) - 0.5) * std::pow(10.0, static_cast<double>(i % 9) - 4));
  }
  ReferenceAggregate(d.restore_index, g.data(), dim, nu, want.data());
  for (int threads : {1, 2, 3, 4, 8}) {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    for (AggregateStrategy s : {AggregateStrategy::kAuto, AggregateStrategy::kSort}) {
      std::vector<float> got(nu * dim, 123.0f);
      EXPECT_TRUE(AggregateGradients(d.restore_index, g, dim, nu, absl::MakeSpan(got), s).ok());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << threads << " threads, strategy " << static_cast<int>(s);
    }
  }
}

// AggregateLookupGradients (TableGradAggregate's sums, the reference of the CUDA twin): a pooled
// mean over two features with a padding row (it counts for nothing and shrinks the sample's
// count), worked by hand; bad restore indices and gradient sizes are InvalidArgument naming the
// feature.
TEST(TableKernelsTest, AggregateLookupGradientsPoolsAsTheGatherDid) {
  const std::vector<uint32_t> unique = {5, EmbeddingTable::kPaddingRow, 9};
  const std::vector<int32_t> r0 = {0, 1, 2, 0};            // two samples of two positions
  const std::vector<int32_t> r1 = {2, 2};                  // two samples of one position
  const std::vector<float> g0 = {1.0f, 2.0f, 4.0f, 8.0f};  // [2, dim 2]
  const std::vector<float> g1 = {16.0f, 32.0f, 64.0f, 128.0f};
  const std::vector<LookupGradient> features = {{.restore = r0, .batch = 2, .per = 2, .grad = g0},
                                                {.restore = r1, .batch = 2, .per = 1, .grad = g1}};
  std::vector<float> out(6, -1.0f);
  ASSERT_TRUE(
      AggregateLookupGradients(unique, features, Combiner::kMean, 2, absl::MakeSpan(out)).ok());
  // Sample 0 of feature 0 has one valid position (row 0): scale 1; sample 1 has two: scale 1/2.
  EXPECT_EQ(out, (std::vector<float>{1.0f + 0.5f * 4.0f, 2.0f + 0.5f * 8.0f, 0.0f, 0.0f,
                                     0.5f * 4.0f + 16.0f + 64.0f, 0.5f * 8.0f + 32.0f + 128.0f}));
  const std::vector<int32_t> bad = {0, 3};
  const std::vector<LookupGradient> bad_index = {
      {.restore = bad, .batch = 1, .per = 2, .grad = absl::MakeConstSpan(g0).subspan(0, 2)}};
  Status s = AggregateLookupGradients(unique, bad_index, Combiner::kSum, 2, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("restore index 3 at position 1"), std::string::npos) << s;
  const std::vector<LookupGradient> short_grad = {
      {.restore = r0, .batch = 2, .per = 2, .grad = g0}};
  s = AggregateLookupGradients(unique, short_grad, std::nullopt, 2, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("feature 0: the gradient holds 4 floats"), std::string::npos) << s;
}

}  // namespace
}  // namespace recsdk::internal
