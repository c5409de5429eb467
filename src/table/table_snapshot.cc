// table_snapshot.cc: TableImpl's Snapshot / LoadSnapshot and the change tracking of delta
// snapshots (src/checkpoint/ owns the file format). Exclusive access.
#include <algorithm>
#include <cstring>
#include <future>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/numeric/bits.h"
#include "fmt/format.h"
#include "src/common/huge_pages.h"
#include "src/common/status_macros.h"
#include "src/table/table_impl.h"

namespace recsdk::internal {

namespace {

// Rows a streamed snapshot gathers per SnapshotRowSink::Rows call: 4 MiB of dim-16 Adagrad rows,
// small enough to stay in cache while the sink checksums and writes them.
constexpr size_t kSinkBytes = size_t{4} << 20;

}  // namespace

StatusOr<TableSnapshot> TableImpl::Snapshot(SnapshotKind kind) {
  return SnapshotImpl(kind, nullptr);
}

StatusOr<TableSnapshot> TableImpl::SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) {
  return SnapshotImpl(kind, &sink);
}

StatusOr<TableSnapshot> TableImpl::SnapshotImpl(SnapshotKind kind, SnapshotRowSink* sink) {
  TableSnapshot snap;
  snap.table_name = name();
  snap.dim = config_.dim;
  snap.num_slots = num_slots_;
  snap.optimizer = optimizer_.kind;
  snap.key_dtype = config_.key_dtype;
  snap.is_delta = kind == SnapshotKind::kDelta;
  snap.data_time = data_time_;
  snap.access_threshold = config_.access_threshold;
  // Tiers: the rows are copied out of every tier, the SSD files included, so a checkpoint never
  // refers to the SSD files, which later swaps overwrite in place (docs/tiers.md).
  std::unique_lock<std::mutex> tier_lock(tier_mu_, std::defer_lock);
  if (tiered_) tier_lock.lock();
  KeyRows entries;
  // A streamed snapshot of a tiered table goes in storage order: device slots, host slots, then
  // SSD slots in file order, so the SSD files are read front to back in long runs instead of one
  // random 4 KiB page per row, as key order did (issue 29: 0.06 of a sequential write).
  snap.storage_order = tiered_ && sink != nullptr;
  if (snap.is_delta) {
    entries = DirtyEntries();
    if (!snap.storage_order) SortEntriesByKey(entries);
    snap.removed_keys.assign(removed_.begin(), removed_.end());
    std::sort(snap.removed_keys.begin(), snap.removed_keys.end());
  } else if (snap.storage_order) {
    entries.reserve(index_->size());
    index_->ForEach([&](int64_t key, uint32_t packed) { entries.emplace_back(key, packed); });
  } else {
    entries = SortedEntries();
  }
  if (snap.storage_order) SortEntriesByLocation(entries);
  std::vector<std::pair<int64_t, PendingKey>> pend(pending_.begin(), pending_.end());
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
  const size_t n = entries.size();
  ResizeOnHugePages(snap.keys, n);
  if (evicting_) ResizeOnHugePages(snap.timestamps, n);
  if (sink != nullptr) {
    ParallelFor(n, LongChunkGrain(n), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        snap.keys[i] = entries[i].first;
        if (evicting_) snap.timestamps[i] = *Timestamp(entries[i].second);
      }
    });
    // A full snapshot of a table with an SSD tier offers its SSD rows to the sink by reference
    // (a checkpoint that hard-links the SSD files instead of copying them): then only the rows
    // before the first SSD entry go through Rows.
    size_t mem_n = n;
    if (tiered_ && ssd_ != nullptr && !snap.is_delta) {
      const size_t first_ssd = static_cast<size_t>(
          std::lower_bound(entries.begin(), entries.end(), ssd_base_,
                           [](const auto& e, uint32_t v) { return e.second < v; }) -
          entries.begin());
      bool taken = false;
      RECSDK_RETURN_IF_ERROR(OfferSsdSegments(entries, first_ssd, snap, *sink, &taken));
      if (taken) mem_n = first_ssd;
    }
    if (Status begun = sink->Begin(snap); !begun.ok()) {
      if (tiered_ && ssd_ != nullptr) ssd_->AbortHold();
      return begun;
    }
    // One reused buffer: its pages are faulted once, and each piece is still in cache when the
    // sink checksums and writes it.
    const size_t per = std::max<size_t>(1, kSinkBytes / row_bytes_);
    RowBuffer buffer(std::min(n, per) * static_cast<size_t>(row_floats_));
    if (tiered_) {
      // Two buffers: the tiers are read for the next piece on a thread of its own while the sink
      // checksums and writes this one, so the SSD files' read and the checkpoint's write overlap
      // (ReadRowsAt only reads; the tier lock is held for the whole snapshot).
      RowBuffer next(buffer.size());
      auto read_piece = [&](size_t b, float* out) {
        const size_t e = std::min(n, b + per);
        std::vector<uint32_t> packed(e - b);
        for (size_t i = b; i < e; ++i) packed[i - b] = entries[i].second;
        return ReadRowsAt(packed, out);
      };
      Status read = mem_n > 0 ? read_piece(0, buffer.data()) : absl::OkStatus();
      for (size_t b = 0; b < mem_n && read.ok(); b += per) {
        const size_t e = std::min(mem_n, b + per);
        std::future<Status> ahead;
        if (e < mem_n) ahead = std::async(std::launch::async, read_piece, e, next.data());
        const Status wrote = sink->Rows(
            absl::MakeConstSpan(buffer.data(), (e - b) * static_cast<size_t>(row_floats_)));
        read = ahead.valid() ? ahead.get() : absl::OkStatus();  // always joined
        if (!wrote.ok()) {
          if (ssd_ != nullptr) ssd_->AbortHold();
          return wrote;
        }
        std::swap(buffer, next);
      }
      if (!read.ok()) {
        if (ssd_ != nullptr) ssd_->AbortHold();
        return read;
      }
    }
    for (size_t b = 0; b < n && !tiered_; b += per) {
      const size_t e = std::min(n, b + per);
      {
        constexpr size_t kAhead = 16;
        for (size_t i = b; i < e; ++i) {
          if (i + kAhead < e) PrefetchLines(Row(entries[i + kAhead].second), row_bytes_);
          std::memcpy(buffer.data() + (i - b) * row_floats_, Row(entries[i].second), row_bytes_);
        }
      }
      RECSDK_RETURN_IF_ERROR(sink->Rows(
          absl::MakeConstSpan(buffer.data(), (e - b) * static_cast<size_t>(row_floats_))));
    }
  } else {
    snap.rows.resize(n * static_cast<size_t>(row_floats_));
    if (tiered_) {
      // Key order out, storage order in: the rows are read in pieces in location order (the SSD
      // files front to back, as a streamed snapshot does) and each put at its key's position.
      // (key position, packed location) pairs, sorted by location.
      KeyRows by_location(n);
      for (size_t i = 0; i < n; ++i) {
        snap.keys[i] = entries[i].first;
        by_location[i] = {static_cast<int64_t>(i), entries[i].second};
        if (evicting_) snap.timestamps[i] = *Timestamp(entries[i].second);
      }
      SortEntriesByLocation(by_location);
      const size_t rf = static_cast<size_t>(row_floats_);
      const size_t per = std::max<size_t>(1, kSinkBytes / row_bytes_);
      std::vector<float> piece(std::min(n, per) * rf);
      std::vector<uint32_t> packed;
      for (size_t b = 0; b < n; b += per) {
        const size_t e = std::min(n, b + per);
        packed.resize(e - b);
        for (size_t i = b; i < e; ++i) packed[i - b] = by_location[i].second;
        RECSDK_RETURN_IF_ERROR(ReadRowsAt(packed, piece.data()));
        for (size_t i = b; i < e; ++i) {
          std::memcpy(snap.rows.data() + static_cast<size_t>(by_location[i].first) * rf,
                      piece.data() + (i - b) * rf, row_bytes_);
        }
      }
    } else {
      ParallelFor(n, LongChunkGrain(n), [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          snap.keys[i] = entries[i].first;
          std::memcpy(snap.rows.data() + i * row_floats_, Row(entries[i].second), row_bytes_);
          if (evicting_) snap.timestamps[i] = *Timestamp(entries[i].second);
        }
      });
    }
  }
  if (kind != SnapshotKind::kFullKeepTracking) ResetTracking();
  return snap;
}

Status TableImpl::OfferSsdSegments(const KeyRows& entries, size_t first_ssd, TableSnapshot& snap,
                                   SnapshotRowSink& sink, bool* taken) {
  (void)snap;
  *taken = false;
  const size_t n = entries.size();
  if (first_ssd < n) {
    SsdSegmentRefs refs;
    refs.files = ssd_->FilePaths();
    refs.file_name = ssd_->file_name();
    refs.rows_per_file = ssd_->rows_per_file();
    refs.capacity = ssd_->capacity();
    refs.record_floats = ssd_->row_floats();
    refs.generation = ssd_->generation() + 1;
    refs.slots.resize(n - first_ssd);
    for (size_t i = first_ssd; i < n; ++i)
      refs.slots[i - first_ssd] = entries[i].second - ssd_base_;
    RECSDK_ASSIGN_OR_RETURN(*taken, sink.TakeSsdSegments(refs));
  }
  // Not taken (or no SSD rows): the checkpoint copies every row, and its commit only releases the
  // slots an earlier linked checkpoint held. Taken: the files are synced and the live slots held.
  StatusOr<uint64_t> prepared = ssd_->PrepareHold(*taken);
  if (!prepared.ok()) return prepared.status();
  return absl::OkStatus();
}

Status TableImpl::SettleSsdHold(bool committed) {
  if (!tiered_ || ssd_ == nullptr) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(tier_mu_);
  if (!committed) {
    ssd_->AbortHold();
    return absl::OkStatus();
  }
  return ssd_->CommitHold();
}

Status TableImpl::RelocateHeldSsd(absl::Span<const int64_t> keys, absl::Span<uint32_t> packed) {
  if (!tiered_ || ssd_ == nullptr || ssd_->generation() == 0) return absl::OkStatus();
  std::vector<size_t> at;
  for (size_t i = 0; i < packed.size(); ++i) {
    if (packed[i] != KeyIndex::kEmpty && packed[i] >= ssd_base_ &&
        ssd_->IsHeld(packed[i] - ssd_base_)) {
      at.push_back(i);
    }
  }
  if (at.empty()) return absl::OkStatus();
  std::vector<uint32_t> fresh(at.size());
  RECSDK_RETURN_IF_ERROR(ssd_->Allocate(fresh.size(), fresh.data()));
  std::vector<uint32_t> old(at.size());
  for (size_t j = 0; j < at.size(); ++j) {
    const uint32_t from = packed[at[j]];
    const uint32_t to = bases_.Pack({Tier::kSsd, fresh[j]});
    if (evicting_) *Timestamp(to) = *Timestamp(from);
    SetTierDirty(to, TierDirty(from));
    SetTierDirty(from, false);
    index_->Erase(keys[at[j]]);
    index_->Insert(keys[at[j]], to);
    packed[at[j]] = to;
    old[j] = from - ssd_base_;
  }
  return ssd_->Free(old);  // held: kept until the next checkpoint is committed
}

Status TableImpl::LoadSnapshot(const TableSnapshot& snap) {
  return LoadSnapshotImpl(snap, nullptr);
}

Status TableImpl::AdoptSnapshot(TableSnapshot&& snap) { return LoadSnapshotImpl(snap, &snap.rows); }

Status TableImpl::CheckSnapshotContent(const TableSnapshot& snap) const {
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
  if (snap.row_source) {
    if (!snap.rows.empty() || snap.is_delta) {
      return corrupt("rows come from a row source but the snapshot also holds rows or is a delta");
    }
  } else if (snap.rows.size() != n * static_cast<size_t>(row_floats_)) {
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
  // The first key out of order or repeated, named, so a hand-made file can be fixed.
  auto check_sorted = [&](const std::vector<int64_t>& v, std::string_view what) -> Status {
    const auto at = std::adjacent_find(v.begin(), v.end(), std::greater_equal<int64_t>());
    if (at == v.end()) return absl::OkStatus();
    return corrupt(fmt::format(
        "its {} are not sorted and unique: key {} at position {} is {} by "
        "key {}",
        what, *at, at - v.begin(), *at == *(at + 1) ? "repeated" : "followed", *(at + 1)));
  };
  if (snap.storage_order) {
    // Keys in storage order: unique is all that is asked (a sorted copy, 8 bytes a key).
    std::vector<int64_t> sorted(snap.keys);
    std::sort(sorted.begin(), sorted.end());
    RECSDK_RETURN_IF_ERROR(check_sorted(sorted, "keys"));
  } else {
    RECSDK_RETURN_IF_ERROR(check_sorted(snap.keys, "keys"));
  }
  RECSDK_RETURN_IF_ERROR(check_sorted(snap.pending_keys, "pending keys"));
  RECSDK_RETURN_IF_ERROR(check_sorted(snap.removed_keys, "removed keys"));
  if (Status s = CheckKeyRange(snap.keys); !s.ok()) {
    return absl::DataLossError(fmt::format("{} (in the snapshot)", s.message()));
  }
  if (Status s = CheckKeyRange(snap.pending_keys); !s.ok()) {
    return absl::DataLossError(fmt::format("{} (in the snapshot's pending keys)", s.message()));
  }
  return absl::OkStatus();
}

Status TableImpl::CheckSnapshots(absl::Span<const TableSnapshot> chain) {
  for (const TableSnapshot& s : chain) RECSDK_RETURN_IF_ERROR(CheckSnapshotContent(s));
  // Which keys are held after each snapshot, without touching the index: a full snapshot's
  // sorted keys (binary search), or the index for a chain that starts with a delta, overridden
  // by what the deltas since changed. Only the deltas' keys enter the overlay.
  const std::vector<int64_t>* base = nullptr;
  std::vector<int64_t> base_sorted;  // a storage-order base's keys, sorted
  absl::flat_hash_map<int64_t, bool> overlay;
  int64_t held = static_cast<int64_t>(index_->size());
  auto holds = [&](int64_t k) {
    if (auto it = overlay.find(k); it != overlay.end()) return it->second;
    if (base != nullptr) return std::binary_search(base->begin(), base->end(), k);
    return index_->Find(k) != KeyIndex::kEmpty;
  };
  // The most rows the SSD tier will hold: new rows go to the device tier first, then the host
  // tier, so the SSD tier grows only while both are full.
  const int64_t upper_tiers = tiered_ ? device_rows_ + config_.host_vocabulary_size : max_rows_;
  int64_t ssd_rows = tiered_ && ssd_ != nullptr ? static_cast<int64_t>(ssd_->size()) : 0;
  for (const TableSnapshot& s : chain) {
    int64_t needed = 0;
    if (!s.is_delta) {
      base = &s.keys;
      if (s.storage_order && &s != &chain.back()) {
        base_sorted = s.keys;
        std::sort(base_sorted.begin(), base_sorted.end());
        base = &base_sorted;
      }
      overlay.clear();
      held = needed = static_cast<int64_t>(s.keys.size());
      ssd_rows = 0;
    } else {
      for (int64_t k : s.removed_keys) {
        if (holds(k)) {
          overlay[k] = false;
          --held;
        }
      }
      for (int64_t k : s.keys) {
        if (!holds(k)) {
          overlay[k] = true;
          ++held;
          ++needed;
        }
      }
    }
    if (held > max_rows_) {
      if (s.is_delta) return FullError(needed);
      return absl::ResourceExhaustedError(fmt::format(
          "table \"{}\": the snapshot needs {} rows but the table holds at most {} "
          "(device_vocabulary_size {} + host_vocabulary_size {} + ssd_vocabulary_size {}); "
          "restore into a table created with larger vocabulary sizes",
          name(), held, max_rows_, config_.device_vocabulary_size, config_.host_vocabulary_size,
          config_.ssd_vocabulary_size));
    }
    ssd_rows = std::max(ssd_rows, held - upper_tiers);
  }
  if (tiered_ && ssd_ != nullptr && ssd_rows > 0) {
    std::lock_guard<std::mutex> tier_lock(tier_mu_);
    // A full load frees every row first: those a linked checkpoint holds stay kept beside the
    // new ones (Reserve counts the slots already kept).
    const uint64_t held = chain.front().is_delta ? 0 : ssd_->held_live_rows();
    RECSDK_RETURN_IF_ERROR(ssd_->Reserve(
        std::min<uint64_t>(static_cast<uint64_t>(ssd_rows) + held, ssd_->row_limit())));
  }
  return absl::OkStatus();
}

Status TableImpl::LoadSnapshotImpl(const TableSnapshot& snap, RowBuffer* adopt) {
  // Everything is checked (and the SSD tier's files made) before anything changes.
  RECSDK_RETURN_IF_ERROR(CheckSnapshots(absl::MakeConstSpan(&snap, 1)));
  // Rows checked as they are read (a one-pass restore) go straight in only when the table is
  // empty, where undoing a failure is emptying it again; otherwise they are verified first.
  if (snap.row_source && snap.verify_rows && (size() != 0 || !pending_.empty())) {
    RECSDK_RETURN_IF_ERROR(snap.verify_rows());
  }
  const size_t n = snap.keys.size();
  const size_t pn = snap.pending_keys.size();
  // Rows needed after applying: a full snapshot replaces everything; a delta frees the rows of
  // its removed keys and needs one for each of its keys not held after that.
  int64_t needed = static_cast<int64_t>(n);
  if (snap.is_delta) {
    absl::flat_hash_set<int64_t> removed(snap.removed_keys.begin(), snap.removed_keys.end());
    needed = 0;
    for (int64_t k : snap.keys) {
      if (removed.contains(k) || index_->Find(k) == KeyIndex::kEmpty) ++needed;
    }
  }
  if (tiered_) {
    std::lock_guard<std::mutex> tier_lock(tier_mu_);
    if (snap.is_delta) {
      RECSDK_RETURN_IF_ERROR(LoadSnapshotTiered(snap, needed));
    } else if (Status loaded = LoadFullSnapshotTiered(snap); !loaded.ok()) {
      // A one-pass load found a bad piece (or a tier failed): the table was empty (or is being
      // replaced) and is left empty, its host and SSD slots free, rather than half loaded.
      (void)ClearTiers();
      index_->Clear();
      return loaded;
    }
  } else if (snap.row_source) {
    // A table without tiers holds every row in memory anyway: read them all, then load.
    TableSnapshot whole;
    whole.keys = snap.keys;
    whole.timestamps = snap.timestamps;
    whole.data_time = snap.data_time;
    whole.rows.resize(snap.keys.size() * static_cast<size_t>(row_floats_));
    RECSDK_RETURN_IF_ERROR(snap.row_source(0, snap.keys.size(), whole.rows.data()));
    LoadSnapshotRows(whole, needed, &whole.rows);
  } else {
    LoadSnapshotRows(snap, needed, adopt);
  }
  pending_.clear();
  for (size_t i = 0; i < pn; ++i) {
    pending_[snap.pending_keys[i]] = PendingKey{snap.pending_counts[i], snap.pending_timestamps[i]};
  }
  data_time_ = snap.data_time;
  if (admitting_ && snap.access_threshold >= 0) config_.access_threshold = snap.access_threshold;
  removed_.clear();
  if (!snap.is_delta) return absl::OkStatus();
  ResetTracking();
  return absl::OkStatus();
}

// LoadSnapshotTiered: LoadSnapshot's apply step of a delta on a tiered table: the new rows go to
// the fastest tier with room (the device first), without swaps; swaps bring them up as batches
// use them.
Status TableImpl::LoadSnapshotTiered(const TableSnapshot& snap, int64_t needed) {
  const size_t n = snap.keys.size();
  {
    absl::flat_hash_set<uint32_t> device_slots;
    std::vector<uint32_t> gone;
    for (int64_t k : snap.removed_keys) {
      const uint32_t packed = index_->Find(k);
      if (packed == KeyIndex::kEmpty) continue;
      index_->Erase(k);
      gone.push_back(packed);
      if (packed < static_cast<uint32_t>(device_rows_)) device_slots.insert(packed);
    }
    ScrubLeases(device_slots);
    for (uint32_t packed : gone) RemoveAt(packed);
    index_->Reserve(index_->size() + static_cast<uint64_t>(needed));
  }
  std::vector<uint32_t> packed(n, KeyIndex::kEmpty);
  std::vector<int64_t> fresh_keys;
  std::vector<size_t> fresh_at;
  for (size_t i = 0; i < n; ++i) {
    if (snap.is_delta) packed[i] = index_->Find(snap.keys[i]);
    if (packed[i] == KeyIndex::kEmpty) {
      fresh_keys.push_back(snap.keys[i]);
      fresh_at.push_back(i);
    }
  }
  // Rows a delta overwrites keep their use histories (read back first); new rows have none.
  std::vector<uint64_t> history(n, kNoHistory);
  if (fresh_keys.size() < n) {
    std::vector<uint32_t> held;
    std::vector<size_t> held_at;
    for (size_t i = 0; i < n; ++i) {
      if (packed[i] == KeyIndex::kEmpty) continue;
      held.push_back(packed[i]);
      held_at.push_back(i);
    }
    std::vector<float> scratch(held.size() * static_cast<size_t>(row_floats_));
    std::vector<uint64_t> held_history(held.size());
    RECSDK_RETURN_IF_ERROR(ReadRowsAt(held, scratch.data(), held_history.data()));
    for (size_t h = 0; h < held.size(); ++h) history[held_at[h]] = held_history[h];
  }
  std::vector<uint32_t> placed(fresh_keys.size());
  RECSDK_RETURN_IF_ERROR(PlaceNew(fresh_keys, placed.data()));
  for (size_t j = 0; j < fresh_keys.size(); ++j) {
    packed[fresh_at[j]] = placed[j];
    index_->Insert(fresh_keys[j], placed[j]);
  }
  RECSDK_RETURN_IF_ERROR(RelocateHeldSsd(snap.keys, absl::MakeSpan(packed)));
  RECSDK_RETURN_IF_ERROR(WriteRowsAt(packed, snap.rows.data(), history.data()));
  for (size_t i = 0; i < n; ++i) {
    SetTierDirty(packed[i], false);
    if (evicting_) {
      *Timestamp(packed[i]) = snap.timestamps.empty() ? snap.data_time : snap.timestamps[i];
    }
  }
  return absl::OkStatus();
}

// LoadFullSnapshotTiered: LoadSnapshot's apply step of a kFull snapshot on a tiered table, in
// pieces of kSinkBytes of rows: each piece's keys are placed in the fastest tier with room (the
// device, then host, then SSD in slot order, so the SSD tier is written sequentially), its rows
// read (from the snapshot or its row_source) and written. Memory beyond the index: one piece.
Status TableImpl::LoadFullSnapshotTiered(const TableSnapshot& snap) {
  const size_t n = snap.keys.size();
  const size_t rf = static_cast<size_t>(row_floats_);
  RECSDK_RETURN_IF_ERROR(ClearTiers());
  index_->Clear();
  index_->Reserve(n);
  const size_t per = std::max<size_t>(1, kSinkBytes / row_bytes_);
  std::vector<float> buffer;
  if (snap.row_source) buffer.resize(std::min(n, per) * rf);
  std::vector<uint32_t> packed;
  const std::vector<uint64_t> history(std::min(n, per), kNoHistory);
  for (size_t b = 0; b < n; b += per) {
    const size_t e = std::min(n, b + per);
    const auto keys = absl::MakeConstSpan(snap.keys).subspan(b, e - b);
    packed.resize(e - b);
    RECSDK_RETURN_IF_ERROR(PlaceNew(keys, packed.data()));
    for (size_t i = 0; i < keys.size(); ++i) index_->Insert(keys[i], packed[i]);
    // With a row_source the snapshot holds no rows (snap.rows is empty: no offset into it).
    const float* rows = nullptr;
    if (snap.row_source) {
      RECSDK_RETURN_IF_ERROR(snap.row_source(b, e - b, buffer.data()));
      rows = buffer.data();
    } else {
      rows = snap.rows.data() + b * rf;
    }
    RECSDK_RETURN_IF_ERROR(WriteRowsAt(packed, rows, history.data()));
    for (size_t i = b; i < e; ++i) {
      SetTierDirty(packed[i - b], false);
      if (evicting_) {
        *Timestamp(packed[i - b]) = snap.timestamps.empty() ? snap.data_time : snap.timestamps[i];
      }
    }
  }
  return absl::OkStatus();
}

// LoadSnapshotRows: LoadSnapshot's apply step without tiers.
void TableImpl::LoadSnapshotRows(const TableSnapshot& snap, int64_t needed, RowBuffer* adopt) {
  const size_t n = snap.keys.size();

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
      RemoveAt(row);
    }
    index_->Reserve(index_->size() + static_cast<uint64_t>(needed));
  }
  const int64_t default_time = snap.data_time;
  // Huge pages when large (40 MB of row ids at 10M rows would be 10k page faults).
  std::vector<uint32_t, UninitializedAllocator<uint32_t>> rows(n);
  if (snap.is_delta) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t row = index_->Find(snap.keys[i]);
      if (row == KeyIndex::kEmpty) {
        row = AllocateRowFor(snap.keys[i]);
        index_->Insert(snap.keys[i], row);
      }
      rows[i] = row;
    }
  } else {
    // A fresh table: rows 0..n-1 in key order, the keys checked distinct above: a bulk load of the
    // empty index.
    std::iota(rows.begin(), rows.end(), 0u);
    next_row_ = static_cast<int64_t>(n);
    index_->BulkLoadDistinct(snap.keys.data(), rows.data(), n);
  }
  // A full snapshot's rows are rows 0..n-1 of the slab, laid out as in the snapshot: adopt its
  // buffer's pages there when allowed, instead of copying into fresh slab pages.
  bool moved = false;
  if (adopt != nullptr && !snap.is_delta && n > 0 && adopt->data() == snap.rows.data()) {
    const size_t bytes = adopt->capacity() * sizeof(float);
    if (((bytes + 4095) & ~size_t{4095}) <= slab_.bytes()) {
      moved = MoveSnapshotPages(adopt->data(), bytes, Row(0));
    }
  }
  ParallelFor(n, LongChunkGrain(n), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      if (!moved) std::memcpy(Row(rows[i]), snap.rows.data() + i * row_floats_, row_bytes_);
      MarkClean(rows[i]);
      if (!snap.is_delta) BindRow(rows[i], snap.keys[i]);
      if (evicting_) {
        *Timestamp(rows[i]) = snap.timestamps.empty() ? default_time : snap.timestamps[i];
      }
    }
  });
}

KeyRows TableImpl::DirtyEntries() const {
  KeyRows entries;
  const uint8_t* dirty = Dirty();
  if (tiered_ && dirty_ssd_overflow_) {
    // The list of dirty SSD keys overflowed (dirty_ssd_limit_): walk the index, O(rows).
    index_->ForEach([&](int64_t key, uint32_t row) {
      if (TierDirty(row)) entries.emplace_back(key, row);
    });
    return entries;
  }
  // The change bytes of the rows ever used (untiered) or of the device and host slots (tiered),
  // 8 at a time (a 1% change leaves most words zero).
  const auto used = static_cast<size_t>(tiered_ ? ssd_base_ : next_row_);
  const size_t words = used / 8;
  auto word_at = [&](size_t w) {
    uint64_t word;
    std::memcpy(&word, dirty + w * 8, sizeof(word));
    return word;
  };
  // Calls add(r) for each dirty row r below `used`, skipping clean words.
  auto for_each_dirty = [&](auto&& add) {
    for (size_t w = 0; w < words; ++w) {
      if (word_at(w) == 0) continue;
      for (size_t r = w * 8; r < w * 8 + 8; ++r) {
        if (dirty[r] != 0) add(r);
      }
    }
    for (size_t r = words * 8; r < used; ++r) {
      if (dirty[r] != 0) add(r);
    }
  };
  if (tiered_) {
    // A slot's key from device_keys_ / host_keys_, kept only when the index still puts the key
    // there: a freed slot is left clean (RemoveAt, ExecuteTiers), and this check would drop one
    // that was not. The index is probed in batches (FindBatch: the buckets prefetched, many cache
    // misses in flight instead of one).
    std::vector<int64_t> keys;
    std::vector<uint32_t> at;
    for_each_dirty([&](size_t r) {
      keys.push_back(r < static_cast<size_t>(device_rows_)
                         ? device_keys_[r]
                         : host_keys_[r - static_cast<size_t>(device_rows_)]);
      at.push_back(static_cast<uint32_t>(r));
    });
    std::vector<uint32_t> found(std::max(keys.size(), dirty_ssd_keys_.size()));
    index_->FindBatch(keys.data(), keys.size(), found.data());
    entries.reserve(keys.size() + dirty_ssd_keys_.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i] == at[i]) entries.emplace_back(keys[i], at[i]);
    }
    // The SSD rows: the keys that reached the SSD tier dirty, where the index puts them now, if
    // still dirty there; a key listed twice gives the same entry twice, removed after sorting.
    const size_t first_ssd = entries.size();
    index_->FindBatch(dirty_ssd_keys_.data(), dirty_ssd_keys_.size(), found.data());
    for (size_t i = 0; i < dirty_ssd_keys_.size(); ++i) {
      const uint32_t packed = found[i];
      if (packed != KeyIndex::kEmpty && packed >= ssd_base_ && TierDirty(packed)) {
        entries.emplace_back(dirty_ssd_keys_[i], packed);
      }
    }
    std::sort(entries.begin() + static_cast<std::ptrdiff_t>(first_ssd), entries.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    entries.erase(
        std::unique(entries.begin() + static_cast<std::ptrdiff_t>(first_ssd), entries.end()),
        entries.end());
    return entries;
  }
  // Counted first, so that the entries take one allocation (page faults cost ~10 us each here).
  // A dirty byte is 0 or 1, so a popcount counts rows. A freed row is clean (RemoveAt), so every
  // dirty row holds the key it was bound to.
  size_t count = 0;
  for (size_t w = 0; w < words; ++w) count += static_cast<size_t>(absl::popcount(word_at(w)));
  for (size_t r = words * 8; r < used; ++r) count += dirty[r];
  entries.resize(count);
  const auto* row_keys = reinterpret_cast<const int64_t*>(row_keys_.base());
  size_t k = 0;
  for_each_dirty([&](size_t r) { entries[k++] = {row_keys[r], static_cast<uint32_t>(r)}; });
  return entries;
}

void TableImpl::ResetTracking() {
  removed_.clear();
  if (!tiered_) {
    if (next_row_ > 0) std::memset(Dirty(), 0, static_cast<size_t>(next_row_));
    return;
  }
  // Tracking is per packed location: the device and host slots' bytes, then the SSD slots'
  // bits, which only the listed keys' rows can hold set (the invariant of dirty_ssd_keys_), or
  // the whole bitmap when that is shorter than the list or the list overflowed.
  std::memset(Dirty(), 0, static_cast<size_t>(ssd_base_));
  if (dirty_ssd_overflow_ || dirty_ssd_keys_.size() >= ssd_dirty_.size()) {
    std::fill(ssd_dirty_.begin(), ssd_dirty_.end(), 0);
  } else {
    for (int64_t key : dirty_ssd_keys_) {
      const uint32_t packed = index_->Find(key);
      if (packed != KeyIndex::kEmpty && packed >= ssd_base_) SetTierDirty(packed, false);
    }
  }
  dirty_ssd_keys_.clear();
  if (dirty_ssd_keys_.capacity() > 2 * kMinDirtySsdKeys) dirty_ssd_keys_.shrink_to_fit();
  dirty_ssd_overflow_ = false;
  dirty_ssd_compact_at_ = std::min(kMinDirtySsdKeys, dirty_ssd_limit_);
}

void TableImpl::NoteDirtySsd(int64_t key) {
  if (dirty_ssd_overflow_) return;
  dirty_ssd_keys_.push_back(key);
  if (dirty_ssd_keys_.size() < dirty_ssd_compact_at_) return;
  // Compaction: each key whose row the index puts on SSD with its bit set, once (sorted by key;
  // O(list log list) every time the list doubles). Mid-swap (ExecuteTiers) a key whose row is on
  // its way up may still name an SSD slot that a demoted row has just taken: it is kept too (a
  // spare entry; the delta checks again), and no key that needs its entry is dropped.
  std::sort(dirty_ssd_keys_.begin(), dirty_ssd_keys_.end());
  dirty_ssd_keys_.erase(std::unique(dirty_ssd_keys_.begin(), dirty_ssd_keys_.end()),
                        dirty_ssd_keys_.end());
  size_t kept = 0;
  for (int64_t k : dirty_ssd_keys_) {
    const uint32_t packed = index_->Find(k);
    if (packed == KeyIndex::kEmpty || packed < ssd_base_ || !TierDirty(packed)) continue;
    dirty_ssd_keys_[kept++] = k;
  }
  dirty_ssd_keys_.resize(kept);
  if (kept > dirty_ssd_limit_ / 2) {
    // Too many dirty SSD rows to list within the bound: deltas walk the index (as before issue
    // 29's change) until the next ResetTracking, which re-arms the list.
    dirty_ssd_overflow_ = true;
    dirty_ssd_keys_.clear();
    dirty_ssd_keys_.shrink_to_fit();
    return;
  }
  dirty_ssd_compact_at_ = std::min(dirty_ssd_limit_, std::max(2 * kept, kMinDirtySsdKeys));
}

void TableImpl::SetDirtySsdKeyLimit(size_t limit) {
  dirty_ssd_limit_ = std::max<size_t>(limit, 2);
  dirty_ssd_compact_at_ = std::min(dirty_ssd_compact_at_, dirty_ssd_limit_);
}

}  // namespace recsdk::internal
