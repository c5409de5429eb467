// table.cc: the in-memory EmbeddingTable: slab of rows, key index, admission, eviction, batch
// lookups and updates, export and checkpoints.
//
// Layout: rows live in one virtual-memory reservation (mmap, committed page by page as rows are
// first used), so a row id maps to an address with one multiply and a row never moves, even when
// a dynamically expanding table grows. Timestamps (only with eviction) sit in a parallel
// reservation. Keys awaiting admission are kept apart in a hash map; they have no row.
//
// Threading: see recsdk/table.h. Batch methods split work with oneTBB; each unique key (row) is
// touched by exactly one task, so there are no locks.
#include "recsdk/table.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/parallel_for.h"
#include "src/common/check.h"
#include "src/common/hash.h"
#include "src/common/prefetch.h"
#include "src/common/random.h"
#include "src/common/status_macros.h"
#include "src/table/key_index.h"
#include "src/table/npy.h"
#include "src/table/sparse_optimizers_impl.h"
#include "src/table/table_kernels.h"

namespace recsdk {
namespace internal {
namespace {

// A dynamically expanding table reserves this much address space for rows (committed lazily);
// capacity() reports the rows it holds (table.h documents the 2^40).
constexpr uint64_t kDynamicReserveBytes = 1ull << 40;
constexpr int64_t kDynamicInitialIndex = 1 << 16;

// Below this many items a batch method runs on the calling thread.
constexpr size_t kParallelGrain = 2048;

// BigChunks: f(b, e) over about 4 chunks per allowed thread (at least kParallelGrain items
// each): prefetching loops restart their pipeline at every chunk, so chunks stay long.
template <typename F>
void BigChunks(size_t n, F&& f) {
  const size_t threads =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  const size_t parts = std::max<size_t>(1, threads) * 4;
  const size_t chunk = std::max(kParallelGrain, (n + parts - 1) / parts);
  if (n <= chunk) {
    if (n > 0) f(size_t{0}, n);
    return;
  }
  const size_t num = (n + chunk - 1) / chunk;
  tbb::parallel_for(size_t{0}, num,
                    [&](size_t c) { f(c * chunk, std::min(n, c * chunk + chunk)); });
}

template <typename F>
void ParallelChunks(size_t n, size_t grain, F&& f) {
  if (n <= grain) {
    if (n > 0) f(size_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, grain),
                    [&](const tbb::blocked_range<size_t>& r) { f(r.begin(), r.end()); });
}

// Reservation: an anonymous mapping whose pages are committed on first touch.
class Reservation {
 public:
  Reservation() = default;
  explicit Reservation(uint64_t bytes) : bytes_(std::max<uint64_t>(bytes, 4096)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      base_ = nullptr;
      return;
    }
    madvise(p, bytes_, MADV_HUGEPAGE);
    base_ = static_cast<char*>(p);
  }
  ~Reservation() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Reservation(Reservation&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Reservation& operator=(Reservation&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
  uint64_t bytes_ = 0;
};

struct Pending {
  float count = 0;
  int64_t timestamp = 0;
};

std::string Hex(uint64_t v) { return fmt::format("{:016x}", v); }

class TableImpl final : public EmbeddingTable {
 public:
  TableImpl(const TableConfig& config, const SparseOptimizerConfig& optimizer)
      : EmbeddingTable(config, optimizer),
        row_floats_(config.dim + num_slots_),
        row_bytes_(static_cast<uint64_t>(row_floats_) * sizeof(float)),
        evicting_(config.eviction_threshold >= 0),
        admitting_(config.access_threshold >= 0),
        seed_(config.initializer.seed != 0 ? static_cast<uint64_t>(config.initializer.seed)
                                           : Fingerprint64(config.name)),
        padding_(config.padding_keys.begin(), config.padding_keys.end()) {
    const int64_t vocab =
        config.device_vocabulary_size + config.host_vocabulary_size + config.ssd_vocabulary_size;
    if (config.use_dynamic_expansion) {
      max_rows_ = std::min<int64_t>(kMaxRows, kDynamicReserveBytes / row_bytes_);
      index_ = std::make_unique<KeyIndex>(std::min<int64_t>(vocab, kDynamicInitialIndex));
    } else {
      max_rows_ = vocab;
      index_ = std::make_unique<KeyIndex>(vocab);
    }
  }

  Status Init() {
    slab_ = Reservation(static_cast<uint64_t>(max_rows_) * row_bytes_);
    if (slab_.base() == nullptr) {
      return absl::ResourceExhaustedError(fmt::format(
          "table \"{}\": cannot reserve {} bytes of address space for {} rows of {} floats; "
          "lower the vocabulary sizes",
          name(), static_cast<uint64_t>(max_rows_) * row_bytes_, max_rows_, row_floats_));
    }
    if (evicting_) {
      timestamps_ = Reservation(static_cast<uint64_t>(max_rows_) * sizeof(int64_t));
      if (timestamps_.base() == nullptr) {
        return absl::ResourceExhaustedError(
            fmt::format("table \"{}\": cannot reserve timestamps for {} rows", name(), max_rows_));
      }
    }
    return absl::OkStatus();
  }

  int64_t size() const override { return static_cast<int64_t>(index_->size()); }
  int64_t capacity() const override { return max_rows_; }
  int64_t data_time() const override { return data_time_; }

  int64_t MemoryBytes() const override {
    int64_t bytes = static_cast<int64_t>(index_->MemoryBytes());
    bytes += next_row_ * static_cast<int64_t>(row_bytes_);
    if (evicting_) bytes += next_row_ * static_cast<int64_t>(sizeof(int64_t));
    bytes += static_cast<int64_t>(free_rows_.capacity() * sizeof(uint32_t));
    bytes +=
        static_cast<int64_t>(pending_.capacity() * (sizeof(std::pair<const int64_t, Pending>) + 1));
    bytes += static_cast<int64_t>(padding_.capacity() * (sizeof(int64_t) + 1));
    bytes += static_cast<int64_t>(sizeof(*this));
    return bytes;
  }

  float* Row(uint32_t row) const {
    return reinterpret_cast<float*>(slab_.base() + static_cast<uint64_t>(row) * row_bytes_);
  }
  int64_t* Timestamp(uint32_t row) const {
    return reinterpret_cast<int64_t*>(timestamps_.base()) + row;
  }
  void PrefetchRow(uint32_t row) const {
    if (row >= kDefaultRow) return;
    PrefetchLines(Row(row), static_cast<size_t>(config_.dim) * sizeof(float));
  }

  // InitRow: embedding from the initializer stream of (seed, key), then fresh slots.
  void InitRow(uint32_t row, int64_t key) const {
    float* w = Row(row);
    const Initializer& init = config_.initializer;
    const int dim = config_.dim;
    PhiloxStream stream(CombineSeeds(seed_, static_cast<uint64_t>(key)), 0);
    switch (init.kind) {
      case Initializer::Kind::kConstant:
        std::fill(w, w + dim, static_cast<float>(init.value));
        break;
      case Initializer::Kind::kUniform: {
        const float lo = static_cast<float>(init.min),
                    span = static_cast<float>(init.max - init.min);
        for (int i = 0; i < dim; ++i) w[i] = lo + span * stream.Uniform();
        break;
      }
      case Initializer::Kind::kNormal:
        for (int i = 0; i < dim; ++i) {
          w[i] = static_cast<float>(init.mean) + static_cast<float>(init.stddev) * stream.Normal();
        }
        break;
      case Initializer::Kind::kTruncatedNormal:
        for (int i = 0; i < dim; ++i) {
          w[i] = static_cast<float>(init.mean) +
                 static_cast<float>(init.stddev) * stream.TruncatedNormal();
        }
        break;
      case Initializer::Kind::kGlorotUniform: {
        const float limit = std::sqrt(6.0f / (2.0f * static_cast<float>(dim)));
        for (int i = 0; i < dim; ++i) w[i] = -limit + 2.0f * limit * stream.Uniform();
        break;
      }
      case Initializer::Kind::kGlorotNormal: {
        const float stddev = std::sqrt(2.0f / (2.0f * static_cast<float>(dim)));
        for (int i = 0; i < dim; ++i) w[i] = stddev * stream.TruncatedNormal();
        break;
      }
    }
    InitSlots(optimizer_, dim, w + dim);
  }

  int64_t FreeRows() const {
    return static_cast<int64_t>(free_rows_.size()) + (max_rows_ - next_row_);
  }
  uint32_t AllocateRow() {
    if (!free_rows_.empty()) {
      const uint32_t r = free_rows_.back();
      free_rows_.pop_back();
      return r;
    }
    return static_cast<uint32_t>(next_row_++);
  }

  Status FullError(int64_t needed) const {
    if (config_.use_dynamic_expansion) {
      return absl::ResourceExhaustedError(fmt::format(
          "table \"{}\" is full: {} new keys need rows but only {} of its {} rows are free (the "
          "row address space a dynamically expanding table reserves, 2^40 bytes of {}-byte rows); "
          "shard the table, lower dim, or enable admission and eviction",
          name(), needed, FreeRows(), max_rows_, row_bytes_));
    }
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\" is full: {} new keys need rows but only {} of its {} rows are free "
        "(capacity = device_vocabulary_size {} + host_vocabulary_size {} + ssd_vocabulary_size "
        "{}); raise the vocabulary sizes, set use_dynamic_expansion, or enable admission and "
        "eviction",
        name(), needed, FreeRows(), max_rows_, config_.device_vocabulary_size,
        config_.host_vocabulary_size, config_.ssd_vocabulary_size));
  }

  Status CheckKeyRange(absl::Span<const int64_t> keys) const {
    if (config_.key_dtype != DType::kInt32) return absl::OkStatus();
    for (int64_t k : keys) {
      if (k < std::numeric_limits<int32_t>::min() || k > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(fmt::format(
            "table \"{}\" has int32 keys but got key {}; map ids into the int32 range or create "
            "the table with key_dtype int64",
            name(), k));
      }
    }
    return absl::OkStatus();
  }

  Status Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override {
    const size_t n = keys.size();
    RECSDK_CHECK(rows.size() == n);
    RECSDK_CHECK(counts.empty() || counts.size() == n);
    RECSDK_CHECK(timestamps.empty() || timestamps.size() == n);
    RECSDK_RETURN_IF_ERROR(CheckKeyRange(keys));
    const bool train = mode == LookupMode::kTrain;
    const KeyIndex& index = *index_;
    ParallelChunks(n, kParallelGrain, [&](size_t b, size_t e) {
      index.FindBatch(keys.data() + b, e - b, rows.data() + b);
    });

    int64_t batch_time = data_time_;
    if (train && !timestamps.empty()) {
      for (int64_t t : timestamps) batch_time = std::max(batch_time, t);
    }
    const int64_t default_time = batch_time == std::numeric_limits<int64_t>::min() ? 0 : batch_time;
    auto time_of = [&](size_t i) { return timestamps.empty() ? default_time : timestamps[i]; };

    // Decide for each miss without changing anything, so an error leaves the table as it was.
    std::vector<uint32_t> admit;    // positions of keys that get a row now
    std::vector<uint32_t> pending;  // positions of keys whose count grows but stay unadmitted
    std::vector<float> pending_counts;
    for (size_t i = 0; i < n; ++i) {
      if (rows[i] != KeyIndex::kEmpty) continue;
      const int64_t key = keys[i];
      if (!padding_.empty() && padding_.contains(key)) {
        rows[i] = kPaddingRow;
        continue;
      }
      rows[i] = kDefaultRow;
      if (!train) continue;
      if (!admitting_) {
        admit.push_back(static_cast<uint32_t>(i));
        continue;
      }
      const float occurrences = counts.empty() ? 1.0f : static_cast<float>(counts[i]);
      auto it = pending_.find(key);
      const float count =
          (it == pending_.end() ? 0.0f : it->second.count) + config_.faae_coefficient * occurrences;
      if (count >= static_cast<float>(config_.access_threshold)) {
        admit.push_back(static_cast<uint32_t>(i));
      } else {
        pending.push_back(static_cast<uint32_t>(i));
        pending_counts.push_back(count);
      }
    }
    if (static_cast<int64_t>(admit.size()) > FreeRows()) {
      for (uint32_t i : admit) rows[i] = kDefaultRow;
      return FullError(static_cast<int64_t>(admit.size()));
    }
    if (!train) return absl::OkStatus();

    for (size_t j = 0; j < pending.size(); ++j) {
      Pending& p = pending_[keys[pending[j]]];
      p.count = pending_counts[j];
      p.timestamp = std::max(p.timestamp, time_of(pending[j]));
    }
    if (!admit.empty()) {
      std::vector<int64_t> admit_keys(admit.size());
      std::vector<uint32_t> admit_rows(admit.size());
      for (size_t j = 0; j < admit.size(); ++j) {
        const uint32_t i = admit[j];
        if (admitting_ && !pending_.empty()) pending_.erase(keys[i]);
        const uint32_t row = AllocateRow();
        rows[i] = row;
        admit_keys[j] = keys[i];
        admit_rows[j] = row;
        if (evicting_) *Timestamp(row) = std::numeric_limits<int64_t>::min();
      }
      index_->InsertBatch(admit_keys.data(), admit_rows.data(), admit.size());
      ParallelChunks(admit.size(), 256, [&](size_t b, size_t e) {
        for (size_t j = b; j < e; ++j) InitRow(rows[admit[j]], keys[admit[j]]);
      });
    }
    if (evicting_) {
      ParallelChunks(n, kParallelGrain, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          if (rows[i] >= kDefaultRow) continue;
          int64_t* ts = Timestamp(rows[i]);
          *ts = std::max(*ts, time_of(i));
        }
      });
    }
    if (train && !timestamps.empty()) data_time_ = batch_time;
    return absl::OkStatus();
  }

  void CopyEmbedding(uint32_t row, float* out) const {
    const int dim = config_.dim;
    if (row < kDefaultRow) {
      const float* __restrict w = Row(row);
      for (int i = 0; i < dim; ++i) out[i] = w[i];
    } else {
      std::fill(out, out + dim, row == kPaddingRow ? 0.0f : config_.serving_default_value);
    }
  }

  // GatherRows: out[i, :] = embedding of rows[idx ? idx[i] : i] for i in [b, e), the rows
  // prefetched kAhead positions ahead (as many misses in flight as the roofline's gather).
  // Embeddings of whole cache lines (dim a multiple of 16) are copied line by line with
  // fixed-size copies, and all state lives in locals. The previous loop (a libc memcpy of runtime
  // size per row, members re-read through `this` after each store to `out`) ran ~3x slower than a
  // plain gather of the same slab memory (10M rows, dim 16); CopyEmbedding stays its reference.
  void GatherRows(const uint32_t* __restrict rows, const uint32_t* __restrict idx, size_t b,
                  size_t e, float* __restrict out) const {
    constexpr size_t kAhead = 16;
    const char* const base = slab_.base();
    const uint64_t stride = row_bytes_;
    const size_t dim = static_cast<size_t>(config_.dim);
    const size_t emb_bytes = dim * sizeof(float);
    auto row_at = [&](size_t i) { return idx != nullptr ? rows[idx[i]] : rows[i]; };
    auto prefetch = [&](uint32_t row) {
      if (row < kDefaultRow) PrefetchLines(base + static_cast<uint64_t>(row) * stride, emb_bytes);
    };
    auto run = [&](auto copy) {
      for (size_t i = b; i < std::min(e, b + kAhead); ++i) prefetch(row_at(i));
      for (size_t i = b; i < e; ++i) {
        if (i + kAhead < e) prefetch(row_at(i + kAhead));
        const uint32_t row = row_at(i);
        float* o = out + i * dim;
        if (row < kDefaultRow) {
          copy(reinterpret_cast<char*>(o), base + static_cast<uint64_t>(row) * stride);
        } else {
          CopyEmbedding(row, o);
        }
      }
    };
    if (emb_bytes == 64) {
      run([](char* o, const char* w) { std::memcpy(o, w, 64); });
    } else if (emb_bytes % 64 == 0) {
      run([emb_bytes](char* o, const char* w) {
        for (size_t off = 0; off < emb_bytes; off += 64) std::memcpy(o + off, w + off, 64);
      });
    } else {
      run([emb_bytes](char* o, const char* w) { std::memcpy(o, w, emb_bytes); });
    }
  }

  void Gather(absl::Span<const uint32_t> rows, float* out) const override {
    BigChunks(rows.size(),
              [&](size_t b, size_t e) { GatherRows(rows.data(), nullptr, b, e, out); });
  }

  void GatherRestored(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                      float* out) const override {
    // Long chunks so the prefetch pipeline rarely restarts.
    BigChunks(restore.size(), [&](size_t b, size_t e) {
      GatherRows(unique_rows.data(), restore.data(), b, e, out);
    });
  }

  Status GatherPooled(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                      int64_t batch, int64_t n, Combiner combiner, float* out) const override {
    if (batch < 0 || n < 0 || static_cast<int64_t>(restore.size()) != batch * n) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": pooled lookup of [batch {}, n {}] got {} restore indices; pass "
          "batch * n of them",
          name(), batch, n, restore.size()));
    }
    const int dim = config_.dim;
    const float dflt = config_.serving_default_value;
    ParallelChunks(static_cast<size_t>(batch), 64, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        float* o = out + b * static_cast<size_t>(dim);
        std::fill(o, o + dim, 0.0f);
        int64_t valid = 0;
        const uint32_t* idx = restore.data() + b * static_cast<size_t>(n);
        for (int64_t j = 0; j < n; ++j) {
          if (j + 4 < n) PrefetchRow(unique_rows[idx[j + 4]]);
          const uint32_t row = unique_rows[idx[j]];
          if (row == kPaddingRow) continue;
          ++valid;
          if (row == kDefaultRow) {
            for (int d = 0; d < dim; ++d) o[d] += dflt;
            continue;
          }
          const float* w = Row(row);
          for (int d = 0; d < dim; ++d) o[d] += w[d];
        }
        if (valid == 0 || combiner == Combiner::kSum) continue;
        const float scale = combiner == Combiner::kMean
                                ? 1.0f / static_cast<float>(valid)
                                : 1.0f / std::sqrt(static_cast<float>(valid));
        for (int d = 0; d < dim; ++d) o[d] *= scale;
      }
    });
    return absl::OkStatus();
  }

  void PaddingMask(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                   float* mask) const override {
    for (size_t i = 0; i < restore.size(); ++i) {
      mask[i] = unique_rows[restore[i]] == kPaddingRow ? 0.0f : 1.0f;
    }
  }

  // UpdateBatch: one optimizer step on rows [b, e) of a batch, given by id (ids) or by address
  // (addrs). SGD, Adagrad and LazyAdam run the per-ISA kernels (bitwise equal to RowUpdater, their
  // reference twin); FTRL runs RowUpdater.
  void UpdateBatch(const RowUpdater& updater, const uint32_t* ids, float* const* addrs, size_t b,
                   size_t e, const float* grads) const {
    const TableKernels& k = TableFast();
    const int64_t dim = config_.dim, rb = static_cast<int64_t>(row_bytes_);
    const int64_t n = static_cast<int64_t>(e - b);
    const float* g = grads + b * static_cast<size_t>(dim);
    const SparseOptimizerConfig& o = optimizer_;
    switch (o.kind) {
      case SparseOptimizerKind::kSGD:
      case SparseOptimizerKind::kSGDByAddr:
        ids ? k.sgd_rows(slab_.base(), rb, ids + b, n, g, dim, o.learning_rate, o.weight_decay)
            : k.sgd_addrs(addrs + b, rb, n, g, dim, o.learning_rate, o.weight_decay);
        return;
      case SparseOptimizerKind::kAdagrad:
      case SparseOptimizerKind::kAdagradByAddress:
        ids ? k.adagrad_rows(slab_.base(), rb, ids + b, n, g, dim, o.learning_rate,
                             o.adagrad_epsilon)
            : k.adagrad_addrs(addrs + b, rb, n, g, dim, o.learning_rate, o.adagrad_epsilon);
        return;
      case SparseOptimizerKind::kLazyAdam:
      case SparseOptimizerKind::kLazyAdamByAddress:
        ids ? k.lazy_adam_rows(slab_.base(), rb, ids + b, n, g, dim, o.beta1, o.beta2, o.epsilon,
                               updater.adam_lr_t())
            : k.lazy_adam_addrs(addrs + b, rb, n, g, dim, o.beta1, o.beta2, o.epsilon,
                                updater.adam_lr_t());
        return;
      case SparseOptimizerKind::kFTRL:
        for (size_t i = b; i < e; ++i) {
          float* row = ids ? (ids[i] < kDefaultRow ? Row(ids[i]) : nullptr) : addrs[i];
          if (row != nullptr) updater.Apply(row, grads + i * static_cast<size_t>(dim));
        }
        return;
    }
  }

  void ApplyGradients(absl::Span<const uint32_t> rows, const float* grads, int64_t step) override {
    const RowUpdater updater(optimizer_, config_.dim, step);
    BigChunks(rows.size(),
              [&](size_t b, size_t e) { UpdateBatch(updater, rows.data(), nullptr, b, e, grads); });
  }

  void RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override {
    RECSDK_CHECK(addresses.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      addresses[i] = rows[i] < kDefaultRow ? Row(rows[i]) : nullptr;
    }
  }

  void ApplyGradientsByAddress(absl::Span<float* const> addresses, const float* grads,
                               int64_t step) override {
    const RowUpdater updater(optimizer_, config_.dim, step);
    BigChunks(addresses.size(), [&](size_t b, size_t e) {
      UpdateBatch(updater, nullptr, addresses.data(), b, e, grads);
    });
  }

  StatusOr<int64_t> EvictStale() override {
    if (!evicting_) return NoEviction();
    if (data_time_ == std::numeric_limits<int64_t>::min()) return 0;
    return EvictLastAccessedAtOrBefore(data_time_ - config_.eviction_threshold);
  }

  Status NoEviction() const {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\" has eviction disabled (eviction_threshold -1); set eviction_threshold >= 0 "
        "and access_threshold >= 0 to evict",
        name()));
  }

  StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) override {
    if (!evicting_) return NoEviction();
    std::vector<std::pair<int64_t, uint32_t>> victims;
    index_->ForEach([&](int64_t key, uint32_t row) {
      if (*Timestamp(row) <= cutoff) victims.emplace_back(key, row);
    });
    for (const auto& [key, row] : victims) {
      index_->Erase(key);
      free_rows_.push_back(row);
    }
    int64_t evicted = static_cast<int64_t>(victims.size());
    absl::erase_if(pending_, [&](const auto& kv) {
      const bool old = kv.second.timestamp <= cutoff;
      evicted += old ? 1 : 0;
      return old;
    });
    return evicted;
  }

  uint32_t FindRow(int64_t key) const override {
    if (padding_.contains(key)) return kPaddingRow;
    const uint32_t row = index_->Find(key);
    return row == KeyIndex::kEmpty ? kDefaultRow : row;
  }

  StatusOr<std::vector<float>> ReadRow(int64_t key) const override {
    const uint32_t row = index_->Find(key);
    if (row == KeyIndex::kEmpty) {
      return absl::NotFoundError(fmt::format("table \"{}\" has no row for key {}", name(), key));
    }
    const float* w = Row(row);
    return std::vector<float>(w, w + row_floats_);
  }

  float AdmissionCount(int64_t key) const override {
    auto it = pending_.find(key);
    return it == pending_.end() ? 0.0f : it->second.count;
  }

  // Entries sorted by key: checkpoints and exports are canonical whatever the insertion order.
  std::vector<std::pair<int64_t, uint32_t>> SortedEntries() const {
    std::vector<std::pair<int64_t, uint32_t>> entries;
    entries.reserve(index_->size());
    index_->ForEach([&](int64_t key, uint32_t row) { entries.emplace_back(key, row); });
    std::sort(entries.begin(), entries.end());
    return entries;
  }

  std::string KeyDescr() const { return config_.key_dtype == DType::kInt32 ? "<i4" : "<i8"; }

  Status WriteKeys(const std::string& path, const std::vector<int64_t>& keys,
                   uint64_t* checksum) const {
    if (config_.key_dtype == DType::kInt32) {
      std::vector<int32_t> k32(keys.begin(), keys.end());
      if (checksum) *checksum = Checksum64(k32.data(), k32.size() * 4);
      return WriteNpy(path, "<i4", {static_cast<int64_t>(k32.size())}, k32.data(), k32.size() * 4);
    }
    if (checksum) *checksum = Checksum64(keys.data(), keys.size() * 8);
    return WriteNpy(path, "<i8", {static_cast<int64_t>(keys.size())}, keys.data(), keys.size() * 8);
  }

  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override {
    const auto entries = SortedEntries();
    std::vector<int64_t> keys(entries.size());
    std::vector<float> values(entries.size() * static_cast<size_t>(config_.dim));
    for (size_t i = 0; i < entries.size(); ++i) {
      keys[i] = entries[i].first;
      CopyEmbedding(entries[i].second, values.data() + i * static_cast<size_t>(config_.dim));
    }
    RECSDK_RETURN_IF_ERROR(WriteKeys(keys_path, keys, nullptr));
    return WriteNpy(values_path, "<f4", {static_cast<int64_t>(keys.size()), config_.dim},
                    values.data(), values.size() * sizeof(float));
  }

  static StatusOr<std::vector<int64_t>> KeysFrom(const NpyArray& a, const std::string& path) {
    if (a.shape.size() != 1 || (a.descr != "<i8" && a.descr != "<i4")) {
      return absl::DataLossError(
          fmt::format("\"{}\" must hold a 1-D int64 or int32 array of keys but holds {} of rank {}",
                      path, a.descr, a.shape.size()));
    }
    std::vector<int64_t> keys(static_cast<size_t>(a.shape[0]));
    if (a.descr == "<i8") {
      std::memcpy(keys.data(), a.data.data(), keys.size() * 8);
    } else {
      for (size_t i = 0; i < keys.size(); ++i) {
        int32_t k;
        std::memcpy(&k, a.data.data() + i * 4, 4);
        keys[i] = k;
      }
    }
    return keys;
  }

  Status ImportNpy(const std::string& keys_path, const std::string& values_path) override {
    RECSDK_ASSIGN_OR_RETURN(NpyArray ka, ReadNpy(keys_path));
    RECSDK_ASSIGN_OR_RETURN(NpyArray va, ReadNpy(values_path));
    RECSDK_ASSIGN_OR_RETURN(std::vector<int64_t> keys, KeysFrom(ka, keys_path));
    if (va.descr != "<f4" || va.shape.size() != 2 || va.shape[0] != ka.shape[0] ||
        va.shape[1] != config_.dim) {
      return absl::DataLossError(fmt::format(
          "table \"{}\": \"{}\" must hold float32 [{}, {}] values for the keys of \"{}\"", name(),
          values_path, keys.size(), config_.dim, keys_path));
    }
    RECSDK_RETURN_IF_ERROR(CheckKeyRange(keys));
    int64_t missing = 0;
    for (int64_t k : keys) {
      if (!padding_.contains(k) && index_->Find(k) == KeyIndex::kEmpty) ++missing;
    }
    if (missing > FreeRows()) return FullError(missing);
    index_->Reserve(index_->size() + static_cast<uint64_t>(missing));
    const float* values = reinterpret_cast<const float*>(va.data.data());
    const size_t dim = static_cast<size_t>(config_.dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (padding_.contains(keys[i])) continue;
      uint32_t row = index_->Find(keys[i]);
      if (row == KeyIndex::kEmpty) {
        row = AllocateRow();
        index_->Insert(keys[i], row);
        InitSlots(optimizer_, config_.dim, Row(row) + dim);
        if (evicting_) *Timestamp(row) = data_time_ == kNoTime ? 0 : data_time_;
        pending_.erase(keys[i]);
      }
      std::memcpy(Row(row), values + i * dim, dim * sizeof(float));
    }
    return absl::OkStatus();
  }

  Status Save(const std::string& dir) const override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(fmt::format("table \"{}\": cannot create directory \"{}\": {}",
                                             name(), dir, ec.message()));
    }
    const auto entries = SortedEntries();
    const size_t n = entries.size();
    std::vector<int64_t> keys(n);
    std::vector<float> rows(n * static_cast<size_t>(row_floats_));
    std::vector<int64_t> times(evicting_ ? n : 0);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = entries[i].first;
      std::memcpy(rows.data() + i * row_floats_, Row(entries[i].second), row_bytes_);
      if (evicting_) times[i] = *Timestamp(entries[i].second);
    }
    std::vector<std::pair<int64_t, Pending>> pend(pending_.begin(), pending_.end());
    std::sort(pend.begin(), pend.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t> pkeys(pend.size()), ptimes(pend.size());
    std::vector<float> pcounts(pend.size());
    for (size_t i = 0; i < pend.size(); ++i) {
      pkeys[i] = pend[i].first;
      pcounts[i] = pend[i].second.count;
      ptimes[i] = pend[i].second.timestamp;
    }
    nlohmann::json files = nlohmann::json::object();
    auto put = [&](const std::string& file, std::string_view descr, std::vector<int64_t> shape,
                   const void* data, uint64_t bytes) -> Status {
      RECSDK_RETURN_IF_ERROR(WriteNpy(dir + "/" + file, descr, shape, data, bytes));
      files[file] = {{"checksum", Hex(Checksum64(data, bytes))}, {"bytes", bytes}};
      return absl::OkStatus();
    };
    const int64_t sn = static_cast<int64_t>(n), pn = static_cast<int64_t>(pend.size());
    RECSDK_RETURN_IF_ERROR(put("keys.npy", "<i8", {sn}, keys.data(), n * 8));
    RECSDK_RETURN_IF_ERROR(
        put("rows.npy", "<f4", {sn, row_floats_}, rows.data(), rows.size() * sizeof(float)));
    if (evicting_) RECSDK_RETURN_IF_ERROR(put("timestamps.npy", "<i8", {sn}, times.data(), n * 8));
    RECSDK_RETURN_IF_ERROR(put("pending_keys.npy", "<i8", {pn}, pkeys.data(), pend.size() * 8));
    RECSDK_RETURN_IF_ERROR(
        put("pending_counts.npy", "<f4", {pn}, pcounts.data(), pend.size() * sizeof(float)));
    RECSDK_RETURN_IF_ERROR(
        put("pending_timestamps.npy", "<i8", {pn}, ptimes.data(), pend.size() * 8));
    nlohmann::json meta = {
        {"format_version", 1},
        {"name", name()},
        {"dim", config_.dim},
        {"num_slots", num_slots_},
        {"optimizer", static_cast<int>(optimizer_.kind)},
        {"size", sn},
        {"data_time", data_time_},
        {"has_timestamps", evicting_},
        {"files", files},
    };
    const std::string text = meta.dump(2);
    const std::string path = dir + "/table.json";
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f || std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() ||
        std::fflush(f.get()) != 0) {
      return absl::InternalError(
          fmt::format("table \"{}\": writing \"{}\" failed; check free space", name(), path));
    }
    return absl::OkStatus();
  }

  Status Restore(const std::string& dir) override {
    const std::string meta_path = dir + "/table.json";
    auto text = ReadFile(meta_path);
    if (!text.ok()) {
      return absl::DataLossError(fmt::format("table \"{}\": cannot restore from \"{}\": {}", name(),
                                             dir, std::string(text.status().message())));
    }
    auto corrupt = [&](std::string_view what) {
      return absl::DataLossError(
          fmt::format("table \"{}\": the checkpoint in \"{}\" is corrupt: {}; restore from another "
                      "checkpoint",
                      name(), dir, what));
    };
    nlohmann::json meta = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded() || !meta.is_object()) return corrupt("table.json is not valid JSON");
    int64_t dim = 0, slots = 0, kind = 0, size = 0, data_time = 0;
    bool has_ts = false;
    nlohmann::json files;
    try {
      dim = meta.at("dim").get<int64_t>();
      slots = meta.at("num_slots").get<int64_t>();
      kind = meta.at("optimizer").get<int64_t>();
      size = meta.at("size").get<int64_t>();
      data_time = meta.at("data_time").get<int64_t>();
      has_ts = meta.at("has_timestamps").get<bool>();
      files = meta.at("files");
      if (!files.is_object()) return corrupt("table.json has no file list");
    } catch (const std::exception& e) {
      return corrupt(fmt::format("table.json misses a field ({})", e.what()));
    }
    if (dim != config_.dim || slots != num_slots_ || kind != static_cast<int>(optimizer_.kind)) {
      return absl::FailedPreconditionError(fmt::format(
          "table \"{}\": the checkpoint in \"{}\" has dim {}, {} slots and optimizer {} but the "
          "table has dim {}, {} slots and optimizer {}; restore into a table created with the "
          "same dim and optimizer",
          name(), dir, dim, slots, SparseOptimizerKindName(static_cast<SparseOptimizerKind>(kind)),
          config_.dim, num_slots_, SparseOptimizerKindName(optimizer_.kind)));
    }
    auto load = [&](const std::string& file, std::string_view descr,
                    std::vector<int64_t> shape) -> StatusOr<NpyArray> {
      if (!files.contains(file)) return corrupt(fmt::format("{} is not listed", file));
      auto a = ReadNpy(dir + "/" + file);
      if (!a.ok()) return corrupt(std::string(a.status().message()));
      if (a->descr != descr || a->shape != shape) {
        return corrupt(fmt::format("{} has dtype {} and shape of rank {}, not what table.json says",
                                   file, a->descr, a->shape.size()));
      }
      std::string want;
      try {
        want = files.at(file).at("checksum").get<std::string>();
      } catch (const std::exception&) {
        return corrupt(fmt::format("{} has no checksum", file));
      }
      if (Hex(Checksum64(a->data.data(), a->data.size())) != want) {
        return corrupt(fmt::format("{} fails its checksum", file));
      }
      return a;
    };
    if (size < 0 || size > max_rows_) {
      return size < 0 ? corrupt("size is negative") : FullError(size);
    }
    RECSDK_ASSIGN_OR_RETURN(NpyArray keys_a, load("keys.npy", "<i8", {size}));
    RECSDK_ASSIGN_OR_RETURN(NpyArray rows_a, load("rows.npy", "<f4", {size, row_floats_}));
    NpyArray ts_a;
    if (has_ts) {
      RECSDK_ASSIGN_OR_RETURN(ts_a, load("timestamps.npy", "<i8", {size}));
    }
    int64_t pn = 0;
    try {
      pn = files.at("pending_keys.npy").at("bytes").get<int64_t>() / 8;
    } catch (const std::exception&) {
      return corrupt("pending_keys.npy is not listed");
    }
    RECSDK_ASSIGN_OR_RETURN(NpyArray pk_a, load("pending_keys.npy", "<i8", {pn}));
    RECSDK_ASSIGN_OR_RETURN(NpyArray pc_a, load("pending_counts.npy", "<f4", {pn}));
    RECSDK_ASSIGN_OR_RETURN(NpyArray pt_a, load("pending_timestamps.npy", "<i8", {pn}));

    // A key listed twice is corrupt; it is found before the contents are touched, so a failed
    // Restore leaves the table as it was. Save writes keys sorted, so the check is one pass.
    std::vector<int64_t> keys(static_cast<size_t>(size));
    if (size > 0) std::memcpy(keys.data(), keys_a.data.data(), keys.size() * sizeof(int64_t));
    {
      std::vector<int64_t> unsorted;
      const std::vector<int64_t>* sorted = &keys;
      if (!std::is_sorted(keys.begin(), keys.end())) {
        unsorted = keys;
        std::sort(unsorted.begin(), unsorted.end());
        sorted = &unsorted;
      }
      const auto dup = std::adjacent_find(sorted->begin(), sorted->end());
      if (dup != sorted->end()) return corrupt(fmt::format("key {} appears twice", *dup));
    }

    // Everything is read and verified: replace the contents.
    index_->Clear();
    index_->Reserve(static_cast<uint64_t>(size));
    free_rows_.clear();
    pending_.clear();
    next_row_ = 0;
    for (int64_t i = 0; i < size; ++i) {
      const uint32_t row = AllocateRow();
      const bool inserted = index_->Insert(keys[i], row);
      RECSDK_DCHECK(inserted);
      (void)inserted;
      std::memcpy(Row(row), rows_a.data.data() + static_cast<uint64_t>(i) * row_bytes_, row_bytes_);
      if (evicting_) {
        int64_t t = data_time;
        if (has_ts) std::memcpy(&t, ts_a.data.data() + i * 8, 8);
        *Timestamp(row) = t;
      }
    }
    for (int64_t i = 0; i < pn; ++i) {
      int64_t k, t;
      float c;
      std::memcpy(&k, pk_a.data.data() + i * 8, 8);
      std::memcpy(&c, pc_a.data.data() + i * 4, 4);
      std::memcpy(&t, pt_a.data.data() + i * 8, 8);
      pending_[k] = Pending{c, t};
    }
    data_time_ = data_time;
    return absl::OkStatus();
  }

 private:
  static constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();

  const int row_floats_;
  const uint64_t row_bytes_;
  const bool evicting_;
  const bool admitting_;
  const uint64_t seed_;
  const absl::flat_hash_set<int64_t> padding_;
  int64_t max_rows_ = 0;
  std::unique_ptr<KeyIndex> index_;
  Reservation slab_;
  Reservation timestamps_;
  int64_t next_row_ = 0;
  std::vector<uint32_t> free_rows_;
  absl::flat_hash_map<int64_t, Pending> pending_;
  int64_t data_time_ = kNoTime;
};

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    const TableConfig& config, const SparseOptimizerConfig& optimizer) {
  RECSDK_RETURN_IF_ERROR(config.Validate());
  if (Status s = optimizer.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": {}", config.name, std::string(s.message())));
  }
  if (config.use_dynamic_expansion && !optimizer.ByAddress()) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": use_dynamic_expansion needs a by-address optimizer but got {}; use "
        "SGDByAddr, AdagradByAddress or LazyAdamByAddress",
        config.name, SparseOptimizerKindName(optimizer.kind)));
  }
  try {
    auto table = std::make_unique<internal::TableImpl>(config, optimizer);
    RECSDK_RETURN_IF_ERROR(table->Init());
    return std::unique_ptr<EmbeddingTable>(std::move(table));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\": out of memory creating the key index for {} rows; lower the vocabulary "
        "sizes or use use_dynamic_expansion",
        config.name,
        config.device_vocabulary_size + config.host_vocabulary_size + config.ssd_vocabulary_size));
  }
}

}  // namespace recsdk
