// table_export.cc: TableImpl's .npy export and import (src/table/npy.h reads and writes the
// format). Export reads; import needs exclusive access.
#include <cstring>

#include "fmt/format.h"
#include "src/common/exception_guard.h"
#include "src/common/status_macros.h"
#include "src/table/table_impl.h"

namespace recsdk::internal {

Status TableImpl::WriteKeys(const std::string& path, const std::vector<int64_t>& keys) const {
  if (config_.key_dtype == DType::kInt32) {
    std::vector<int32_t> k32(keys.begin(), keys.end());
    return WriteNpy(path, "<i4", {static_cast<int64_t>(k32.size())}, k32.data(), k32.size() * 4);
  }
  return WriteNpy(path, "<i8", {static_cast<int64_t>(keys.size())}, keys.data(), keys.size() * 8);
}

Status TableImpl::ExportNpy(const std::string& keys_path, const std::string& values_path) const {
  return CatchExceptions(fmt::format("table \"{}\": ExportNpy", name()),
                         [&] { return ExportNpyUnguarded(keys_path, values_path); });
}

Status TableImpl::ExportNpyUnguarded(const std::string& keys_path,
                                     const std::string& values_path) const {
  std::unique_lock<std::mutex> tier_lock(tier_mu_, std::defer_lock);
  if (tiered_) tier_lock.lock();
  const auto entries = SortedEntries();
  std::vector<int64_t> keys(entries.size());
  std::vector<float> values(entries.size() * static_cast<size_t>(config_.dim));
  if (tiered_) {
    // Every tier's rows, read in bulk (whole rows; the embeddings are kept).
    std::vector<uint32_t> packed(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      keys[i] = entries[i].first;
      packed[i] = entries[i].second;
    }
    std::vector<float> rows(entries.size() * static_cast<size_t>(row_floats_));
    RECSDK_RETURN_IF_ERROR(ReadRowsAt(packed, rows.data()));
    for (size_t i = 0; i < entries.size(); ++i) {
      std::memcpy(values.data() + i * static_cast<size_t>(config_.dim),
                  rows.data() + i * static_cast<size_t>(row_floats_),
                  static_cast<size_t>(config_.dim) * sizeof(float));
    }
  } else {
    for (size_t i = 0; i < entries.size(); ++i) {
      keys[i] = entries[i].first;
      CopyEmbedding(entries[i].second, values.data() + i * static_cast<size_t>(config_.dim));
    }
  }
  RECSDK_RETURN_IF_ERROR(WriteKeys(keys_path, keys));
  return WriteNpy(values_path, "<f4", {static_cast<int64_t>(keys.size()), config_.dim},
                  values.data(), values.size() * sizeof(float));
}

StatusOr<std::vector<int64_t>> TableImpl::KeysFrom(const NpyArray& a, const std::string& path) {
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

Status TableImpl::ImportNpy(const std::string& keys_path, const std::string& values_path) {
  return CatchExceptions(fmt::format("table \"{}\": ImportNpy", name()),
                         [&] { return ImportNpyUnguarded(keys_path, values_path); });
}

Status TableImpl::ImportNpyUnguarded(const std::string& keys_path, const std::string& values_path) {
  RECSDK_ASSIGN_OR_RETURN(NpyArray ka, ReadNpy(keys_path));
  RECSDK_ASSIGN_OR_RETURN(NpyArray va, ReadNpy(values_path));
  RECSDK_ASSIGN_OR_RETURN(std::vector<int64_t> keys, KeysFrom(ka, keys_path));
  if (va.descr != "<f4" || va.shape.size() != 2 || va.shape[0] != ka.shape[0] ||
      va.shape[1] != config_.dim) {
    return absl::DataLossError(
        fmt::format("table \"{}\": \"{}\" must hold float32 [{}, {}] values for the keys of \"{}\"",
                    name(), values_path, keys.size(), config_.dim, keys_path));
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
  if (missing > (tiered_ ? TierFreeRows() : FreeRows())) return FullError(missing);
  index_->Reserve(index_->size() + static_cast<uint64_t>(missing));
  if (tiered_) return ImportRowsTiered(keys, reinterpret_cast<const float*>(va.data.data()));
  const float* values = reinterpret_cast<const float*>(va.data.data());
  const size_t dim = static_cast<size_t>(config_.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (padding_.contains(keys[i])) continue;
    uint32_t row = index_->Find(keys[i]);
    if (row == KeyIndex::kEmpty) {
      row = AllocateRowFor(keys[i]);
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

// ImportRowsTiered: ImportNpy's apply step on a tiered table: every key's whole row is read
// from its tier, its embedding replaced, and written back; new keys go to the fastest tier with
// room, with fresh optimizer slots.
Status TableImpl::ImportRowsTiered(const std::vector<int64_t>& keys, const float* values) {
  std::lock_guard<std::mutex> tier_lock(tier_mu_);
  const size_t dim = static_cast<size_t>(config_.dim), rf = static_cast<size_t>(row_floats_);
  std::vector<int64_t> kept;
  std::vector<size_t> kept_at;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (padding_.contains(keys[i])) continue;
    kept.push_back(keys[i]);
    kept_at.push_back(i);
  }
  std::vector<uint32_t> packed(kept.size());
  std::vector<int64_t> fresh_keys;
  std::vector<size_t> fresh_at;
  for (size_t j = 0; j < kept.size(); ++j) {
    packed[j] = index_->Find(kept[j]);
    if (packed[j] == KeyIndex::kEmpty) {
      fresh_keys.push_back(kept[j]);
      fresh_at.push_back(j);
    }
  }
  std::vector<float> rows(kept.size() * rf);
  std::vector<uint64_t> history(kept.size(), kNoHistory);  // new rows keep kNoHistory
  {
    // Read the held rows first (an SSD error then changes nothing), with their histories.
    std::vector<uint32_t> held;
    std::vector<size_t> held_at;
    for (size_t j = 0; j < kept.size(); ++j) {
      if (packed[j] == KeyIndex::kEmpty) continue;
      held.push_back(packed[j]);
      held_at.push_back(j);
    }
    std::vector<float> buf(held.size() * rf);
    std::vector<uint64_t> held_history(held.size());
    RECSDK_RETURN_IF_ERROR(ReadRowsAt(held, buf.data(), held_history.data()));
    for (size_t h = 0; h < held.size(); ++h) {
      std::memcpy(rows.data() + held_at[h] * rf, buf.data() + h * rf, rf * sizeof(float));
      history[held_at[h]] = held_history[h];
    }
  }
  std::vector<uint32_t> placed(fresh_keys.size());
  RECSDK_RETURN_IF_ERROR(PlaceNew(fresh_keys, placed.data()));
  for (size_t f = 0; f < fresh_keys.size(); ++f) {
    const size_t j = fresh_at[f];
    packed[j] = placed[f];
    index_->Insert(fresh_keys[f], placed[f]);
    InitSlots(optimizer_, config_.dim, rows.data() + j * rf + dim);
    if (evicting_) *Timestamp(placed[f]) = data_time_ == kNoTime ? 0 : data_time_;
    pending_.erase(fresh_keys[f]);
  }
  for (size_t j = 0; j < kept.size(); ++j) {
    std::memcpy(rows.data() + j * rf, values + kept_at[j] * dim, dim * sizeof(float));
    SetTierDirty(packed[j], true);
  }
  RECSDK_RETURN_IF_ERROR(RelocateHeldSsd(kept, absl::MakeSpan(packed)));
  // Imported rows placed or held on SSD are dirty there: listed for the delta (DirtyEntries).
  for (size_t j = 0; j < kept.size(); ++j) {
    if (packed[j] >= ssd_base_) NoteDirtySsd(kept[j]);
  }
  return WriteRowsAt(packed, rows.data(), history.data());
}

}  // namespace recsdk::internal
