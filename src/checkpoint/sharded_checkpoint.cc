// sharded_checkpoint.cc: filtering and merging the shards of a table's snapshot (see
// sharded_checkpoint.h).
#include "src/checkpoint/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/table/collective_table.h"

namespace recsdk::internal {
namespace {

// KeepOwned: the indices i of `keys` that `placement` holds.
std::vector<size_t> Owned(const std::vector<int64_t>& keys, const TablePlacement& placement) {
  std::vector<size_t> kept;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ShardOwner(keys[i], placement.world) == placement.rank) kept.push_back(i);
  }
  return kept;
}

template <typename V>
V Pick(const V& values, const std::vector<size_t>& index) {
  V out;
  out.reserve(index.size());
  for (size_t i : index) out.push_back(values[i]);
  return out;
}

// HeaderOf: `s` without its keys, rows and pending entries (what describes the table).
TableSnapshot HeaderOf(const TableSnapshot& s) {
  TableSnapshot out;
  out.table_name = s.table_name;
  out.dim = s.dim;
  out.num_slots = s.num_slots;
  out.optimizer = s.optimizer;
  out.key_dtype = s.key_dtype;
  out.is_delta = s.is_delta;
  out.data_time = s.data_time;
  out.access_threshold = s.access_threshold;
  return out;
}

// Entry: where a key of the merged snapshot comes from.
struct Entry {
  int64_t key;
  size_t part;
  size_t index;
};

// MergedOrder: the entries of `keys_of(part)` over all parts, sorted by key; DataLoss when a key
// is in two parts.
template <typename KeysOf>
StatusOr<std::vector<Entry>> MergedOrder(size_t parts, KeysOf keys_of, const char* what,
                                         const std::string& where) {
  std::vector<Entry> order;
  for (size_t p = 0; p < parts; ++p) {
    const std::vector<int64_t>& keys = keys_of(p);
    for (size_t i = 0; i < keys.size(); ++i) order.push_back({keys[i], p, i});
  }
  std::sort(order.begin(), order.end(),
            [](const Entry& a, const Entry& b) { return a.key < b.key; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i].key == order[i - 1].key) {
      return absl::DataLossError(fmt::format(
          "{}: {} {} is in shard parts {} and {}, but shards hold disjoint keys; the checkpoint "
          "was altered or mixes shards of different saves: restore another checkpoint",
          where, what, order[i].key, order[i - 1].part, order[i].part));
    }
  }
  return order;
}

}  // namespace

std::string ShardDirName(int rank, int world) { return fmt::format("shard-{}-of-{}", rank, world); }

TableSnapshot FilterSnapshot(TableSnapshot&& snapshot, const TablePlacement& placement) {
  if (placement.world <= 1) return std::move(snapshot);
  TableSnapshot out = HeaderOf(snapshot);
  const size_t width = static_cast<size_t>(snapshot.dim) + static_cast<size_t>(snapshot.num_slots);
  const std::vector<size_t> rows = Owned(snapshot.keys, placement);
  out.keys = Pick(snapshot.keys, rows);
  if (!snapshot.timestamps.empty()) out.timestamps = Pick(snapshot.timestamps, rows);
  out.rows.resize(rows.size() * width);
  for (size_t j = 0; j < rows.size(); ++j) {
    std::memcpy(out.rows.data() + j * width, snapshot.rows.data() + rows[j] * width,
                width * sizeof(float));
  }
  out.removed_keys = Pick(snapshot.removed_keys, Owned(snapshot.removed_keys, placement));
  const std::vector<size_t> pending = Owned(snapshot.pending_keys, placement);
  out.pending_keys = Pick(snapshot.pending_keys, pending);
  out.pending_counts = Pick(snapshot.pending_counts, pending);
  out.pending_timestamps = Pick(snapshot.pending_timestamps, pending);
  return out;
}

StatusOr<TableSnapshot> MergeShardSnapshots(std::vector<TableSnapshot>& parts,
                                            const std::string& where) {
  if (parts.empty()) {
    return absl::InternalError(fmt::format("{}: no shard parts to merge", where));
  }
  if (parts.size() == 1) return std::move(parts[0]);
  const TableSnapshot& first = parts[0];
  for (size_t p = 1; p < parts.size(); ++p) {
    const TableSnapshot& s = parts[p];
    if (s.table_name != first.table_name || s.dim != first.dim || s.num_slots != first.num_slots ||
        s.optimizer != first.optimizer || s.key_dtype != first.key_dtype ||
        s.is_delta != first.is_delta) {
      return absl::DataLossError(fmt::format(
          "{}: shard part {} of table \"{}\" (dim {}, {} slots, {}) does not describe the table "
          "as part 0 does (table \"{}\", dim {}, {} slots, {}); restore another checkpoint",
          where, p, s.table_name, s.dim, s.num_slots, s.is_delta ? "delta" : "full",
          first.table_name, first.dim, first.num_slots, first.is_delta ? "delta" : "full"));
    }
  }
  TableSnapshot out = HeaderOf(first);
  for (const TableSnapshot& s : parts) {
    out.data_time = std::max(out.data_time, s.data_time);
    out.access_threshold = std::max(out.access_threshold, s.access_threshold);
  }
  const size_t width = static_cast<size_t>(first.dim) + static_cast<size_t>(first.num_slots);
  // Timestamps: every part's keys have them (a table that evicts) or none do.
  const bool timed = std::any_of(parts.begin(), parts.end(),
                                 [](const TableSnapshot& s) { return !s.timestamps.empty(); });
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p].keys.empty() && parts[p].timestamps.empty() == timed) {
      return absl::DataLossError(fmt::format(
          "{}: shard part {} of table \"{}\" {} timestamps where another part {}; restore another "
          "checkpoint",
          where, p, first.table_name, timed ? "lacks" : "has", timed ? "has them" : "has none"));
    }
  }

  RECSDK_ASSIGN_OR_RETURN(
      std::vector<Entry> rows,
      MergedOrder(
          parts.size(), [&](size_t p) -> const std::vector<int64_t>& { return parts[p].keys; },
          "key", where));
  out.keys.reserve(rows.size());
  out.rows.resize(rows.size() * width);
  if (timed) out.timestamps.reserve(rows.size());
  for (size_t j = 0; j < rows.size(); ++j) {
    const TableSnapshot& s = parts[rows[j].part];
    out.keys.push_back(rows[j].key);
    if (timed) out.timestamps.push_back(s.timestamps[rows[j].index]);
    std::memcpy(out.rows.data() + j * width, s.rows.data() + rows[j].index * width,
                width * sizeof(float));
  }

  RECSDK_ASSIGN_OR_RETURN(
      std::vector<Entry> removed,
      MergedOrder(
          parts.size(),
          [&](size_t p) -> const std::vector<int64_t>& { return parts[p].removed_keys; },
          "removed key", where));
  for (const Entry& e : removed) out.removed_keys.push_back(e.key);

  RECSDK_ASSIGN_OR_RETURN(
      std::vector<Entry> pending,
      MergedOrder(
          parts.size(),
          [&](size_t p) -> const std::vector<int64_t>& { return parts[p].pending_keys; },
          "pending key", where));
  for (const Entry& e : pending) {
    const TableSnapshot& s = parts[e.part];
    out.pending_keys.push_back(e.key);
    out.pending_counts.push_back(s.pending_counts[e.index]);
    out.pending_timestamps.push_back(s.pending_timestamps[e.index]);
  }
  parts.clear();
  return out;
}

}  // namespace recsdk::internal
