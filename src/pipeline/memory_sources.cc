// memory_sources.cc: the in-memory and the synthetic sources. Not thread-safe (one consumer);
// SyntheticTrueLogit is a pure function.
#include <cmath>
#include <string>
#include <utility>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/exception_guard.h"
#include "src/common/finite_option.h"
#include "src/common/hash.h"
#include "src/common/random.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace internal {
namespace {

class InMemorySource final : public Dataset {
 public:
  InMemorySource(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("InMemory source", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    if (next_ >= batches_.size()) return false;
    *batch = batches_[next_++];
    return true;
  }
  Status Reset() override {
    next_ = 0;
    return absl::OkStatus();
  }
  StatusOr<int64_t> SkipBatches(int64_t n) override {
    if (n < 0) return Dataset::SkipBatches(n);  // the error
    const size_t skip = std::min(static_cast<size_t>(n), batches_.size() - next_);
    next_ += skip;
    return static_cast<int64_t>(skip);
  }
  MalformedCounts malformed_counts() const override { return {}; }

 private:
  std::vector<Batch> batches_;
  size_t next_ = 0;
};

// ZipfSampler: ranks 1..n with P(k) ~ k^-s by rejection-inversion (Hoermann & Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", 1996):
// O(1) memory and expected O(1) time for any vocabulary size.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_x1_ = H(1.5) - 1.0;
    h_n_ = H(n_ + 0.5);
    threshold_ = 2.0 - HInv(H(2.5) - h(2.0));
  }
  // Sample: a rank in [1, n] from uniforms drawn from `rng`.
  int64_t Sample(PhiloxStream& rng) const {
    for (;;) {
      const double u01 = (static_cast<double>(rng.NextBits()) + 0.5) * 0x1.0p-32;
      const double u = h_n_ + u01 * (h_x1_ - h_n_);
      const double x = HInv(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= threshold_ || u >= H(k + 0.5) - h(k)) return static_cast<int64_t>(k);
    }
  }

 private:
  static double Helper1(double x) {  // log1p(x)/x, continuous at 0
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x / 3.0);
  }
  static double Helper2(double x) {  // expm1(x)/x, continuous at 0
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0);
  }
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  double H(double x) const {
    const double lx = std::log(x);
    return Helper2((1.0 - s_) * lx) * lx;
  }
  double HInv(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;  // guards rounding at the domain's edge
    return std::exp(Helper1(t) * x);
  }

  double n_, s_;
  double h_x1_, h_n_, threshold_;
};

uint64_t FeatureKey(uint64_t seed, int f) { return CombineSeeds(seed, 0x1D5 + f); }

// Weight of id `id` of feature f: a standard normal fixed by (seed, f, id).
float IdWeight(uint64_t seed, int f, int64_t id) {
  PhiloxStream s(FeatureKey(seed, f), static_cast<uint64_t>(id));
  return s.Normal();
}
float DenseWeight(uint64_t seed, int j) {
  PhiloxStream s(CombineSeeds(seed, 0xDE45E), static_cast<uint64_t>(j));
  return s.Normal();
}

class SyntheticSource final : public Dataset {
 public:
  explicit SyntheticSource(SyntheticOptions o) : opt_(std::move(o)) {
    for (int64_t v : opt_.vocabulary_sizes) samplers_.emplace_back(v, opt_.zipf_exponent);
    for (int j = 0; j < opt_.num_dense; ++j) {
      dense_w_.push_back(DenseWeight(opt_.seed, j) * opt_.dense_weight_scale);
    }
  }
  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("Synthetic source", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    if (next_row_ >= opt_.num_rows) return false;
    const int64_t n = std::min(opt_.block_rows, opt_.num_rows - next_row_);
    const int nf = static_cast<int>(opt_.vocabulary_sizes.size());
    const int w = opt_.ids_per_feature;
    Tensor label(DType::kFloat32, Shape{n, 1});
    Tensor dense(DType::kFloat32, Shape{n, opt_.num_dense});
    std::vector<Tensor> ids;
    for (int f = 0; f < nf; ++f) ids.emplace_back(DType::kInt64, Shape{n, w});
    Tensor ts;
    if (opt_.with_timestamps) ts = Tensor(DType::kInt64, Shape{n});
    float* lp = label.data<float>();
    float* dp = dense.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = next_row_ + i;
      PhiloxStream rng(CombineSeeds(opt_.seed, 0x5A3F1E), static_cast<uint64_t>(row));
      double logit = opt_.bias;
      for (int j = 0; j < opt_.num_dense; ++j) {
        const float v = rng.Uniform();
        dp[i * opt_.num_dense + j] = v;
        logit += static_cast<double>(dense_w_[j]) * v;
      }
      for (int f = 0; f < nf; ++f) {
        int64_t* out = ids[f].data<int64_t>() + i * w;
        for (int k = 0; k < w; ++k) {
          out[k] = samplers_[f].Sample(rng) - 1;
          logit += static_cast<double>(IdWeight(opt_.seed, f, out[k])) * opt_.id_weight_scale /
                   static_cast<double>(w);
        }
      }
      const double p = 1.0 / (1.0 + std::exp(-logit));
      lp[i] = static_cast<double>(rng.Uniform()) < p ? 1.0f : 0.0f;
      if (opt_.with_timestamps) {
        ts.data<int64_t>()[i] = opt_.start_timestamp + row * opt_.timestamp_step;
      }
    }
    Batch b;
    Status st = b.AddColumn("label", std::move(label));
    st.Update(b.AddColumn("dense", std::move(dense)));
    for (int f = 0; f < nf; ++f) {
      st.Update(b.AddColumn(opt_.sparse_prefix + std::to_string(f + 1), std::move(ids[f])));
    }
    if (opt_.with_timestamps) st.Update(b.AddColumn("timestamp", std::move(ts)));
    RECSDK_RETURN_IF_ERROR(st);
    next_row_ += n;
    *batch = std::move(b);
    return true;
  }
  Status Reset() override {
    next_row_ = 0;
    return absl::OkStatus();
  }
  // Every row is a function of its index (and the seed), so seeking is moving the index.
  StatusOr<int64_t> SkipBatches(int64_t n) override {
    if (n < 0) return Dataset::SkipBatches(n);  // the error
    const int64_t left = (opt_.num_rows - next_row_ + opt_.block_rows - 1) / opt_.block_rows;
    const int64_t skip = std::min(n, std::max<int64_t>(left, 0));
    next_row_ = std::min(opt_.num_rows, next_row_ + skip * opt_.block_rows);
    return skip;
  }
  MalformedCounts malformed_counts() const override { return {}; }

 private:
  const SyntheticOptions opt_;
  std::vector<ZipfSampler> samplers_;
  std::vector<float> dense_w_;
  int64_t next_row_ = 0;
};

}  // namespace
}  // namespace internal

namespace {

// DescribeColumnLayout: what every batch must agree on for one column: the name, the dtype and the
// dimensions past the first (the row count may differ), e.g. "ids" int64 [?,2].
std::string DescribeColumnLayout(const std::pair<std::string, Tensor>& column) {
  Shape shape = column.second.shape();
  if (shape.rank() > 0) shape.set_dim(0, Shape::kUnknownDim);
  return fmt::format("\"{}\" {} {}", column.first, DTypeName(column.second.dtype()),
                     shape.ToString());
}

}  // namespace

StatusOr<std::unique_ptr<Dataset>> InMemoryDatasetFromBatches(std::vector<Batch> batches) {
  for (size_t i = 1; i < batches.size(); ++i) {
    const auto& a = batches[0].columns();
    const auto& b = batches[i].columns();
    if (a.size() != b.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "InMemoryDatasetFromBatches: batch {} has {} columns but batch 0 has {}; every batch "
          "needs the same columns",
          i, b.size(), a.size()));
    }
    for (size_t c = 0; c < a.size(); ++c) {
      const std::string want = DescribeColumnLayout(a[c]);
      const std::string got = DescribeColumnLayout(b[c]);
      if (got != want) {
        return absl::InvalidArgumentError(fmt::format(
            "InMemoryDatasetFromBatches: column {} of batch {} is {} but batch 0 has {}; every "
            "batch needs the same columns in the same order, with the same dtypes and the same "
            "dimensions past the first",
            c, i, got, want));
      }
    }
  }
  return std::unique_ptr<Dataset>(new internal::InMemorySource(std::move(batches)));
}

StatusOr<std::unique_ptr<Dataset>> InMemoryDataset(std::vector<InMemoryColumn> columns,
                                                   int64_t block_rows) {
  if (block_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("InMemoryDataset: block_rows {} is below 1", block_rows));
  }
  if (columns.empty()) {
    return absl::InvalidArgumentError("InMemoryDataset: no columns; pass at least one");
  }
  Batch all;
  int64_t rows = -1;
  for (InMemoryColumn& c : columns) {
    const size_t count = std::visit([](const auto& v) { return v.size(); }, c.values);
    const int64_t per_row = std::max<int64_t>(c.width, 1);
    if (c.width < 0 || count % per_row != 0) {
      return absl::InvalidArgumentError(
          fmt::format("InMemoryDataset: column \"{}\" holds {} values, not a multiple of width {}",
                      c.name, count, c.width));
    }
    const int64_t n = static_cast<int64_t>(count) / per_row;
    if (rows >= 0 && n != rows) {
      return absl::InvalidArgumentError(fmt::format(
          "InMemoryDataset: column \"{}\" has {} rows but earlier columns have {}; every column "
          "needs one row per sample",
          c.name, n, rows));
    }
    rows = n;
    const Shape shape = c.width == 0 ? Shape{n} : Shape{n, c.width};
    Tensor t;
    if (auto* f = std::get_if<std::vector<float>>(&c.values)) {
      RECSDK_ASSIGN_OR_RETURN(t, Tensor::FromValues<float>(shape, *f));
    } else {
      RECSDK_ASSIGN_OR_RETURN(
          t, Tensor::FromValues<int64_t>(shape, std::get<std::vector<int64_t>>(c.values)));
    }
    RECSDK_RETURN_IF_ERROR(all.AddColumn(c.name, std::move(t)));
  }
  std::vector<Batch> blocks;
  for (int64_t b = 0; b < rows; b += block_rows) {
    RECSDK_ASSIGN_OR_RETURN(Batch block, all.Slice(b, std::min(rows, b + block_rows)));
    blocks.push_back(std::move(block));
  }
  return std::unique_ptr<Dataset>(new internal::InMemorySource(std::move(blocks)));
}

StatusOr<std::unique_ptr<Dataset>> SyntheticDataset(const SyntheticOptions& o) {
  auto bad = [](std::string msg) { return absl::InvalidArgumentError("SyntheticDataset: " + msg); };
  if (o.num_rows < 0) return bad(fmt::format("num_rows {} is negative", o.num_rows));
  if (o.block_rows < 1) return bad(fmt::format("block_rows {} is below 1", o.block_rows));
  if (o.ids_per_feature < 1) {
    return bad(fmt::format("ids_per_feature {} is below 1", o.ids_per_feature));
  }
  if (o.num_dense < 0) return bad(fmt::format("num_dense {} is negative", o.num_dense));
  for (const auto& [option, value] :
       {std::pair<const char*, float>{"id_weight_scale", o.id_weight_scale},
        {"dense_weight_scale", o.dense_weight_scale},
        {"bias", o.bias}}) {
    RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
        "SyntheticDataset", option, value,
        "the planted logit would be NaN and every label the same; use a finite value"));
  }
  if (!(o.zipf_exponent > 0) || !std::isfinite(o.zipf_exponent)) {
    return bad(
        fmt::format("zipf_exponent {} must be > 0 (1.05 resembles click logs)", o.zipf_exponent));
  }
  for (size_t f = 0; f < o.vocabulary_sizes.size(); ++f) {
    if (o.vocabulary_sizes[f] < 1) {
      return bad(fmt::format("vocabulary_sizes[{}] = {} is below 1", f, o.vocabulary_sizes[f]));
    }
  }
  return std::unique_ptr<Dataset>(new internal::SyntheticSource(o));
}

double SyntheticTrueLogit(const SyntheticOptions& o, absl::Span<const int64_t> ids,
                          absl::Span<const float> dense) {
  double logit = o.bias;
  for (int j = 0; j < o.num_dense && j < static_cast<int>(dense.size()); ++j) {
    logit +=
        static_cast<double>(internal::DenseWeight(o.seed, j) * o.dense_weight_scale) * dense[j];
  }
  const int w = o.ids_per_feature;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int f = static_cast<int>(i) / w;
    logit += static_cast<double>(internal::IdWeight(o.seed, f, ids[i])) * o.id_weight_scale /
             static_cast<double>(w);
  }
  return logit;
}

}  // namespace recsdk
