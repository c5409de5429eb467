// table_lookup.cc: TableImpl's Resolve (key index, admission, row insertion) and its Gather*
// reads. Threading: see recsdk/table.h (Resolve in training needs exclusive access; the gathers
// only read the rows they are given).
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "fmt/format.h"
#include "src/common/checked_math.h"
#include "src/common/exception_guard.h"
#include "src/common/status_macros.h"
#include "src/table/pooled_gather.h"
#include "src/table/table_impl.h"

namespace recsdk::internal {

// The public batch calls run under CatchExceptions: a bad_alloc (a huge batch, a rehash)
// becomes ResourceExhausted instead of leaving the library.
Status TableImpl::Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                          absl::Span<const int64_t> timestamps, LookupMode mode,
                          absl::Span<uint32_t> rows) {
  return ResolveLeased(keys, counts, timestamps, mode, rows, ResolveLease{});
}

Status TableImpl::ResolveLeased(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                                absl::Span<const int64_t> timestamps, LookupMode mode,
                                absl::Span<uint32_t> rows, const ResolveLease& lease) {
  // A tiered Resolve moves rows between tiers, even in evaluation (the rows it returns must be
  // on the device), so resolves of a tiered table take turns on the tier state.
  std::unique_lock<std::mutex> tier_lock(tier_mu_, std::defer_lock);
  if (tiered_) tier_lock.lock();
  return CatchExceptions(fmt::format("table \"{}\": Resolve", name()), [&] {
    return ResolveUnguarded(keys, counts, timestamps, mode, rows, lease);
  });
}

Status TableImpl::ResolveUnguarded(absl::Span<const int64_t> keys,
                                   absl::Span<const uint32_t> counts,
                                   absl::Span<const int64_t> timestamps, LookupMode mode,
                                   absl::Span<uint32_t> rows, const ResolveLease& lease) {
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
  ParallelFor(n, kParallelGrain, [&](size_t b, size_t e) {
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
  // With tiers, rows[i] of a known key is its packed location, maybe off the device: plan the
  // swaps that bring the batch's rows up (every full tier is found here, nothing changed yet).
  // The plan is a member, reused under tier_mu_ (held for a tiered table): its buffers, sized
  // by each batch's swaps, fragmented malloc's heap when allocated per call (docs/tiers.md, "RSS").
  TierPlan& plan = tier_plan_;
  if (tiered_) {
    if (static_cast<int64_t>(admit.size()) > TierFreeRows()) {
      for (uint32_t i : admit) rows[i] = kDefaultRow;
      return FullError(static_cast<int64_t>(admit.size()));
    }
    plan.Clear();
    RECSDK_RETURN_IF_ERROR(PlanTiers(keys, rows, admit.size(), lease, &plan));
  } else if (static_cast<int64_t>(admit.size()) > FreeRows()) {
    for (uint32_t i : admit) rows[i] = kDefaultRow;
    return FullError(static_cast<int64_t>(admit.size()));
  }
  if (!train && !tiered_) return absl::OkStatus();

  for (size_t j = 0; j < pending.size(); ++j) {
    PendingKey& p = pending_[keys[pending[j]]];
    p.count = pending_counts[j];
    p.timestamp = std::max(p.timestamp, time_of(pending[j]));
  }
  if (tiered_) {
    // Moves the rows, inserts and initialises the admitted keys, and turns rows[] into device
    // slots pinned under the lease.
    for (uint32_t i : admit) {
      if (admitting_ && !pending_.empty()) pending_.erase(keys[i]);
    }
    // ExecuteTiers changes the tiers step by step: an error there (an SSD write failing
    // mid-swap) leaves them half moved, which only a restore can repair.
    if (Status s = ExecuteTiers(keys, rows, admit, plan, lease); !s.ok()) return FailTiers(s);
    if (!train) return absl::OkStatus();
  } else if (!admit.empty()) {
    std::vector<int64_t> admit_keys(admit.size());
    std::vector<uint32_t> admit_rows(admit.size());
    for (size_t j = 0; j < admit.size(); ++j) {
      const uint32_t i = admit[j];
      if (admitting_ && !pending_.empty()) pending_.erase(keys[i]);
      const uint32_t row = AllocateRowFor(keys[i]);
      rows[i] = row;
      admit_keys[j] = keys[i];
      admit_rows[j] = row;
      MarkDirty(row);
      if (evicting_) *Timestamp(row) = std::numeric_limits<int64_t>::min();
    }
    index_->InsertBatch(admit_keys.data(), admit_rows.data(), admit.size());
    ParallelFor(admit.size(), 256, [&](size_t b, size_t e) {
      InitRows(admit.data() + b, e - b, rows.data(), keys.data());
    });
  }
  if (evicting_) {
    ParallelFor(n, kParallelGrain, [&](size_t b, size_t e) {
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

void TableImpl::CopyEmbedding(uint32_t row, float* out) const {
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
void TableImpl::GatherRows(const uint32_t* __restrict rows, const uint32_t* __restrict idx,
                           size_t b, size_t e, float* __restrict out) const {
  constexpr size_t kAhead = 16;
  const char* const base = rows_base_;
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

Status TableImpl::CheckSpan(const char* what, size_t size, size_t rows, size_t per_row) const {
  if (size == rows * per_row) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("table \"{}\": {} holds {} floats where {} rows of {} ({}) belong; size it "
                  "[rows, {}]",
                  name(), what, size, rows, per_row, rows * per_row, per_row));
}

Status TableImpl::Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const {
  RECSDK_RETURN_IF_ERROR(CheckSpan("Gather's output", out.size(), rows.size(), config_.dim));
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(rows, {}));
  ParallelFor(rows.size(), LongChunkGrain(rows.size()),
              [&](size_t b, size_t e) { GatherRows(rows.data(), nullptr, b, e, out.data()); });
  return absl::OkStatus();
}

Status TableImpl::GatherRestored(absl::Span<const uint32_t> unique_rows,
                                 absl::Span<const uint32_t> restore, absl::Span<float> out) const {
  RECSDK_RETURN_IF_ERROR(
      CheckSpan("GatherRestored's output", out.size(), restore.size(), config_.dim));
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(unique_rows, restore));
  // Long chunks so the prefetch pipeline rarely restarts.
  ParallelFor(restore.size(), LongChunkGrain(restore.size()), [&](size_t b, size_t e) {
    GatherRows(unique_rows.data(), restore.data(), b, e, out.data());
  });
  return absl::OkStatus();
}

Status TableImpl::GatherPooled(absl::Span<const uint32_t> unique_rows,
                               absl::Span<const uint32_t> restore, int64_t batch, int64_t n,
                               Combiner combiner, absl::Span<float> out_span) const {
  RECSDK_RETURN_IF_ERROR(CheckSpan("GatherPooled's output", out_span.size(),
                                   static_cast<size_t>(std::max<int64_t>(batch, 0)), config_.dim));
  return GatherPooledStrided(unique_rows, restore, batch, n, combiner, config_.dim, out_span);
}

Status TableImpl::GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                                      absl::Span<const uint32_t> restore, int64_t batch, int64_t n,
                                      Combiner combiner, int64_t stride,
                                      absl::Span<float> out_span) const {
  const std::optional<int64_t> positions = batch < 0 || n < 0 ? std::nullopt : CheckedMul(batch, n);
  if (!positions || static_cast<int64_t>(restore.size()) != *positions) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": pooled lookup of [batch {}, n {}] got {} restore indices; pass "
                    "batch * n of them",
                    name(), batch, n, restore.size()));
  }
  // The last row ends (batch - 1) * stride + dim floats in.
  std::optional<int64_t> span_end = 0;
  if (batch > 0) {
    span_end = CheckedMul(batch - 1, stride);
    if (span_end) span_end = CheckedAdd(*span_end, int64_t{config_.dim});
  }
  if (stride < config_.dim || !span_end || static_cast<int64_t>(out_span.size()) < *span_end) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": pooled output of {} rows {} floats apart needs a stride of at least dim "
        "{} and {} floats, got {}; pass the [batch, width] output at the table's column offset",
        name(), batch, stride, config_.dim, span_end.value_or(-1), out_span.size()));
  }
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(unique_rows, restore));
  PooledGatherRows([this](uint32_t row) { return Row(row); },
                   [this](uint32_t row) { PrefetchRow(row); }, unique_rows.data(), restore.data(),
                   static_cast<size_t>(batch), static_cast<size_t>(n), combiner,
                   static_cast<size_t>(stride), config_.dim, config_.serving_default_value,
                   out_span.data());
  return absl::OkStatus();
}

// CheckRowsAndRestore: every restore index points into unique_rows, and every row id is one
// of this table's rows or a sentinel; a wrong one would read outside the slab.
Status TableImpl::CheckRowsAndRestore(absl::Span<const uint32_t> unique_rows,
                                      absl::Span<const uint32_t> restore) const {
  uint32_t worst_index = 0;
  for (uint32_t i : restore) worst_index = std::max(worst_index, i);
  if (!restore.empty() && worst_index >= unique_rows.size()) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": restore index {} is out of range for {} unique rows; pass the "
                    "restore_index of the batch whose unique keys Resolve turned into those rows",
                    name(), worst_index, unique_rows.size()));
  }
  for (uint32_t row : unique_rows) {
    if (row >= kDefaultRow) continue;
    if (static_cast<int64_t>(row) >= device_rows_) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": row id {} is not a row of this table (capacity {}); pass rows that "
          "Resolve returned",
          name(), row, device_rows_));
    }
  }
  return absl::OkStatus();
}

Status TableImpl::PaddingMask(absl::Span<const uint32_t> unique_rows,
                              absl::Span<const uint32_t> restore, absl::Span<float> mask) const {
  RECSDK_RETURN_IF_ERROR(CheckSpan("PaddingMask's mask", mask.size(), restore.size(), 1));
  RECSDK_RETURN_IF_ERROR(CheckRowsAndRestore(unique_rows, restore));
  for (size_t i = 0; i < restore.size(); ++i) {
    mask[i] = unique_rows[restore[i]] == kPaddingRow ? 0.0f : 1.0f;
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
