// table.cc: the in-memory EmbeddingTable: slab of rows, key index, admission, eviction, batch
// lookups and updates, export, and snapshots of its rows for checkpoints (src/checkpoint/ owns
// the file format).
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
#include "oneapi/tbb/parallel_sort.h"
#include "src/common/check.h"
#include "src/common/exception_guard.h"
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
    dirty_ = Reservation(static_cast<uint64_t>(max_rows_));
    if (dirty_.base() == nullptr) {
      return absl::ResourceExhaustedError(fmt::format(
          "table \"{}\": cannot reserve change tracking for {} rows", name(), max_rows_));
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

  // The public batch calls run under CatchExceptions: a bad_alloc (a huge batch, a rehash)
  // becomes ResourceExhausted instead of leaving the library.
  Status Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override {
    return CatchExceptions(fmt::format("table \"{}\": Resolve", name()),
                           [&] { return ResolveUnguarded(keys, counts, timestamps, mode, rows); });
  }

  Status ResolveUnguarded(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                          absl::Span<const int64_t> timestamps, LookupMode mode,
                          absl::Span<uint32_t> rows) {
    const size_t n = keys.size();
    if (rows.size() != n || (!counts.empty() && counts.size() != n) ||
        (!timestamps.empty() && timestamps.size() != n)) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": Resolve of {} keys got {} rows, {} counts and {} timestamps; pass one "
          "row slot per key, and counts and timestamps each empty or one per key",
          name(), n, rows.size(), counts.size(), timestamps.size()));
    }
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
        MarkDirty(row);
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
          const int64_t t = std::max(*ts, time_of(i));
          if (t != *ts) {
            *ts = t;
            MarkDirty(rows[i]);
          }
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
    RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(unique_rows, restore));
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

  // CheckRowsAndRestore: every restore index points into unique_rows, and every row id is one
  // of this table's rows or a sentinel; a wrong one would read outside the slab.
  Status CheckRowsAndRestore(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore) const {
    uint32_t worst_index = 0;
    for (uint32_t i : restore) worst_index = std::max(worst_index, i);
    if (!restore.empty() && worst_index >= unique_rows.size()) {
      return absl::InvalidArgumentError(
          fmt::format("table \"{}\": restore index {} is out of range for {} unique rows; pass the "
                      "restore_index and rows of the same DedupKeys/Resolve",
                      name(), worst_index, unique_rows.size()));
    }
    for (uint32_t row : unique_rows) {
      if (row >= kDefaultRow) continue;
      if (static_cast<int64_t>(row) >= max_rows_) {
        return absl::InvalidArgumentError(fmt::format(
            "table \"{}\": row id {} is not a row of this table (capacity {}); pass rows that "
            "Resolve returned",
            name(), row, max_rows_));
      }
    }
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
    for (size_t i = b; i < e; ++i) {
      if (ids != nullptr) {
        if (ids[i] < kDefaultRow) MarkDirty(ids[i]);
      } else if (addrs[i] != nullptr) {
        MarkDirty(static_cast<uint32_t>(
            static_cast<uint64_t>(reinterpret_cast<const char*>(addrs[i]) - slab_.base()) /
            row_bytes_));
      }
    }
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

  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override {
    if (addresses.size() != rows.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": RowAddresses of {} rows got room for {} addresses; pass one slot per row",
          name(), rows.size(), addresses.size()));
    }
    RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(rows, {}));
    for (size_t i = 0; i < rows.size(); ++i) {
      addresses[i] = rows[i] < kDefaultRow ? Row(rows[i]) : nullptr;
    }
    return absl::OkStatus();
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
      removed_.insert(key);
    }
    int64_t evicted = static_cast<int64_t>(victims.size());
    absl::erase_if(pending_, [&](const auto& kv) {
      const bool old = kv.second.timestamp <= cutoff;
      evicted += old ? 1 : 0;
      return old;
    });
    return evicted;
  }

  Status SetAccessThreshold(int64_t access_threshold) override {
    if (!admitting_) {
      return absl::FailedPreconditionError(fmt::format(
          "set_threshold: table \"{}\" was created without admission (access_threshold -1), "
          "so its threshold cannot change to {}; create it with access_threshold >= 0",
          name(), access_threshold));
    }
    if (access_threshold < 0) {
      return absl::InvalidArgumentError(fmt::format(
          "set_threshold: table \"{}\": access_threshold {} is below 0; admission stays on for "
          "the table's life, so use 0 to admit every key",
          name(), access_threshold));
    }
    config_.access_threshold = access_threshold;
    return absl::OkStatus();
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
    tbb::parallel_sort(entries.begin(), entries.end());
    return entries;
  }

  std::string KeyDescr() const { return config_.key_dtype == DType::kInt32 ? "<i4" : "<i8"; }

  Status WriteKeys(const std::string& path, const std::vector<int64_t>& keys) const {
    if (config_.key_dtype == DType::kInt32) {
      std::vector<int32_t> k32(keys.begin(), keys.end());
      return WriteNpy(path, "<i4", {static_cast<int64_t>(k32.size())}, k32.data(), k32.size() * 4);
    }
    return WriteNpy(path, "<i8", {static_cast<int64_t>(keys.size())}, keys.data(), keys.size() * 8);
  }

  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override {
    return CatchExceptions(fmt::format("table \"{}\": ExportNpy", name()),
                           [&] { return ExportNpyUnguarded(keys_path, values_path); });
  }

  Status ExportNpyUnguarded(const std::string& keys_path, const std::string& values_path) const {
    const auto entries = SortedEntries();
    std::vector<int64_t> keys(entries.size());
    std::vector<float> values(entries.size() * static_cast<size_t>(config_.dim));
    for (size_t i = 0; i < entries.size(); ++i) {
      keys[i] = entries[i].first;
      CopyEmbedding(entries[i].second, values.data() + i * static_cast<size_t>(config_.dim));
    }
    RECSDK_RETURN_IF_ERROR(WriteKeys(keys_path, keys));
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
    return CatchExceptions(fmt::format("table \"{}\": ImportNpy", name()),
                           [&] { return ImportNpyUnguarded(keys_path, values_path); });
  }

  Status ImportNpyUnguarded(const std::string& keys_path, const std::string& values_path) {
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
    // A key listed twice has two candidate embeddings, and would be counted twice below: refuse.
    absl::flat_hash_map<int64_t, size_t> first_at;
    first_at.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, fresh] = first_at.emplace(keys[i], i);
      if (!fresh) {
        return absl::DataLossError(fmt::format(
            "table \"{}\": \"{}\" lists key {} twice (positions {} and {}); each key needs one "
            "embedding: remove the duplicate rows from both files",
            name(), keys_path, keys[i], it->second, i));
      }
    }
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
      MarkDirty(row);
    }
    return absl::OkStatus();
  }

  StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) override {
    TableSnapshot snap;
    snap.table_name = name();
    snap.dim = config_.dim;
    snap.num_slots = num_slots_;
    snap.optimizer = optimizer_.kind;
    snap.key_dtype = config_.key_dtype;
    snap.is_delta = kind == SnapshotKind::kDelta;
    snap.data_time = data_time_;
    snap.access_threshold = config_.access_threshold;
    std::vector<std::pair<int64_t, uint32_t>> entries;
    if (snap.is_delta) {
      const uint8_t* dirty = Dirty();
      index_->ForEach([&](int64_t key, uint32_t row) {
        if (dirty[row] != 0) entries.emplace_back(key, row);
      });
      tbb::parallel_sort(entries.begin(), entries.end());
      snap.removed_keys.assign(removed_.begin(), removed_.end());
      std::sort(snap.removed_keys.begin(), snap.removed_keys.end());
    } else {
      entries = SortedEntries();
    }
    const size_t n = entries.size();
    snap.keys.resize(n);
    snap.rows.resize(n * static_cast<size_t>(row_floats_));
    if (evicting_) snap.timestamps.resize(n);
    BigChunks(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        snap.keys[i] = entries[i].first;
        std::memcpy(snap.rows.data() + i * row_floats_, Row(entries[i].second), row_bytes_);
        if (evicting_) snap.timestamps[i] = *Timestamp(entries[i].second);
      }
    });
    std::vector<std::pair<int64_t, Pending>> pend(pending_.begin(), pending_.end());
    std::sort(pend.begin(), pend.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    snap.pending_keys.resize(pend.size());
    snap.pending_counts.resize(pend.size());
    snap.pending_timestamps.resize(pend.size());
    for (size_t i = 0; i < pend.size(); ++i) {
      snap.pending_keys[i] = pend[i].first;
      snap.pending_counts[i] = pend[i].second.count;
      snap.pending_timestamps[i] = pend[i].second.timestamp;
    }
    if (kind != SnapshotKind::kFullKeepTracking) ResetTracking();
    return snap;
  }

  Status LoadSnapshot(const TableSnapshot& snap) override {
    auto differs = [&](std::string_view what, std::string_view theirs, std::string_view ours) {
      return absl::FailedPreconditionError(fmt::format(
          "table \"{}\": the snapshot (of table \"{}\") has {} {} but the table has {} {}; restore "
          "into a table created with the same dim, key dtype and sparse optimizer",
          name(), snap.table_name, what, theirs, what, ours));
    };
    if (snap.dim != config_.dim) {
      return differs("dim", std::to_string(snap.dim), std::to_string(config_.dim));
    }
    if (snap.key_dtype != config_.key_dtype) {
      return differs("key dtype", DTypeName(snap.key_dtype), DTypeName(config_.key_dtype));
    }
    if (snap.optimizer != optimizer_.kind) {
      return differs("optimizer", SparseOptimizerKindName(snap.optimizer),
                     SparseOptimizerKindName(optimizer_.kind));
    }
    if (snap.num_slots != num_slots_) {
      return differs("optimizer slots per row", std::to_string(snap.num_slots),
                     std::to_string(num_slots_));
    }
    auto corrupt = [&](std::string_view what) {
      return absl::DataLossError(
          fmt::format("table \"{}\": the snapshot is inconsistent: {}; restore from another "
                      "checkpoint",
                      name(), what));
    };
    const size_t n = snap.keys.size();
    if (snap.rows.size() != n * static_cast<size_t>(row_floats_)) {
      return corrupt(fmt::format("{} keys but {} row floats (expected {} per row)", n,
                                 snap.rows.size(), row_floats_));
    }
    if (!snap.timestamps.empty() && snap.timestamps.size() != n) {
      return corrupt(fmt::format("{} keys but {} timestamps", n, snap.timestamps.size()));
    }
    const size_t pn = snap.pending_keys.size();
    if (snap.pending_counts.size() != pn || snap.pending_timestamps.size() != pn) {
      return corrupt("pending keys, counts and timestamps differ in length");
    }
    if (!snap.is_delta && !snap.removed_keys.empty()) {
      return corrupt("a full snapshot lists removed keys");
    }
    auto strictly_sorted = [](const std::vector<int64_t>& v) {
      return std::adjacent_find(v.begin(), v.end(), std::greater_equal<int64_t>()) == v.end();
    };
    if (!strictly_sorted(snap.keys)) return corrupt("keys are not sorted and unique");
    if (!strictly_sorted(snap.pending_keys)) return corrupt("pending keys are not unique");
    if (!strictly_sorted(snap.removed_keys)) return corrupt("removed keys are not unique");
    if (Status s = CheckKeyRange(snap.keys); !s.ok()) {
      return absl::DataLossError(fmt::format("{} (in the snapshot)", s.message()));
    }
    if (Status s = CheckKeyRange(snap.pending_keys); !s.ok()) {
      return absl::DataLossError(fmt::format("{} (in the snapshot's pending keys)", s.message()));
    }
    // Rows needed after applying: a full snapshot replaces everything; a delta frees the rows of
    // its removed keys and needs one for each of its keys not held after that.
    int64_t needed = static_cast<int64_t>(n);
    if (snap.is_delta) {
      absl::flat_hash_set<int64_t> removed(snap.removed_keys.begin(), snap.removed_keys.end());
      int64_t freed = 0;
      for (int64_t k : snap.removed_keys) freed += index_->Find(k) != KeyIndex::kEmpty ? 1 : 0;
      needed = 0;
      for (int64_t k : snap.keys) {
        if (removed.contains(k) || index_->Find(k) == KeyIndex::kEmpty) ++needed;
      }
      if (needed > FreeRows() + freed) return FullError(needed);
    } else if (needed > max_rows_) {
      return FullError(needed);
    }

    // Everything is checked: apply.
    if (!snap.is_delta) {
      index_->Clear();
      index_->Reserve(n);
      free_rows_.clear();
      next_row_ = 0;
    } else {
      for (int64_t k : snap.removed_keys) {
        const uint32_t row = index_->Find(k);
        if (row == KeyIndex::kEmpty) continue;
        index_->Erase(k);
        free_rows_.push_back(row);
      }
      index_->Reserve(index_->size() + static_cast<uint64_t>(needed));
    }
    const int64_t default_time = snap.data_time;
    std::vector<uint32_t> rows(n);
    if (snap.is_delta) {
      for (size_t i = 0; i < n; ++i) {
        uint32_t row = index_->Find(snap.keys[i]);
        if (row == KeyIndex::kEmpty) {
          row = AllocateRow();
          index_->Insert(snap.keys[i], row);
        }
        rows[i] = row;
      }
    } else {
      // A fresh table: rows 0..n-1 in key order, inserted as one batch.
      std::iota(rows.begin(), rows.end(), 0u);
      next_row_ = static_cast<int64_t>(n);
      index_->InsertBatch(snap.keys.data(), rows.data(), n);
    }
    BigChunks(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        std::memcpy(Row(rows[i]), snap.rows.data() + i * row_floats_, row_bytes_);
        MarkClean(rows[i]);
        if (evicting_) {
          *Timestamp(rows[i]) = snap.timestamps.empty() ? default_time : snap.timestamps[i];
        }
      }
    });
    pending_.clear();
    for (size_t i = 0; i < pn; ++i) {
      pending_[snap.pending_keys[i]] = Pending{snap.pending_counts[i], snap.pending_timestamps[i]};
    }
    data_time_ = snap.data_time;
    if (admitting_ && snap.access_threshold >= 0) config_.access_threshold = snap.access_threshold;
    removed_.clear();
    if (!snap.is_delta) return absl::OkStatus();
    ResetTracking();
    return absl::OkStatus();
  }

  // Change tracking for delta snapshots: one byte per row (set by whatever writes the row) and
  // the keys evicted since the last snapshot.
  uint8_t* Dirty() const { return reinterpret_cast<uint8_t*>(dirty_.base()); }
  void MarkDirty(uint32_t row) const { Dirty()[row] = 1; }
  void MarkClean(uint32_t row) const { Dirty()[row] = 0; }
  void ResetTracking() {
    if (next_row_ > 0) std::memset(Dirty(), 0, static_cast<size_t>(next_row_));
    removed_.clear();
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
  Reservation dirty_;                     // one byte per row: changed since the last Snapshot
  absl::flat_hash_set<int64_t> removed_;  // keys evicted since the last Snapshot
};

}  // namespace
}  // namespace internal

namespace internal {

constexpr size_t kLargeBuffer = size_t{1} << 20;

void* AllocateSnapshotBuffer(size_t bytes) {
  if (bytes < kLargeBuffer) return ::operator new(bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void FreeSnapshotBuffer(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kLargeBuffer) {
    ::operator delete(p);
  } else {
    munmap(p, bytes);
  }
}

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
