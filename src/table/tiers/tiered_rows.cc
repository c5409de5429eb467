// tiered_rows.cc: the per-batch swap over the device, host and SSD stores.
// Threading: not thread-safe (see tiered_rows.h).
#include "src/table/tiers/tiered_rows.h"

#include <algorithm>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

absl::StatusOr<std::unique_ptr<TieredRows>> TieredRows::Create(const TieredRowsOptions& o) {
  const std::string table = fmt::format("table \"{}\"", o.table);
  if (o.row_floats <= 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: row_floats {} must be > 0", table, o.row_floats));
  }
  if (o.device_rows == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: device_vocabulary_size 0; the device tier needs at least two batches' keys", table));
  }
  if (o.ssd_rows > 0 && o.host_rows == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: ssd_vocabulary_size {} needs the host tier (host_vocabulary_size > 0): the SSD tier "
        "sits behind host memory",
        table, o.ssd_rows));
  }
  if (o.ssd_rows > 0 && o.ssd_folders.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: ssd_vocabulary_size {} needs ssd_data_path (the folders of the SSD tier)",
                    table, o.ssd_rows));
  }
  RECSDK_RETURN_IF_ERROR(TierBases::Check(o.device_rows, o.host_rows, o.ssd_rows));
  std::unique_ptr<TieredRows> rows(new TieredRows(o));
  MemoryStoreOptions device;
  device.tier = Tier::kDevice;
  device.row_floats = o.row_floats;
  device.capacity = o.device_rows;
  device.budget = o.device_budget;
  device.label = table;
  RECSDK_ASSIGN_OR_RETURN(rows->device_, MemoryStore::Create(device));
  EvictionPolicyOptions policy = o.policy;
  policy.capacity = o.device_rows;
  RECSDK_ASSIGN_OR_RETURN(rows->device_policy_, EvictionPolicy::Create(policy));
  if (o.host_rows > 0) {
    MemoryStoreOptions host = device;
    host.tier = Tier::kHost;
    host.capacity = o.host_rows;
    host.budget = nullptr;
    RECSDK_ASSIGN_OR_RETURN(rows->host_, MemoryStore::Create(host));
    policy.capacity = o.host_rows;
    RECSDK_ASSIGN_OR_RETURN(rows->host_policy_, EvictionPolicy::Create(policy));
    rows->host_keys_.assign(o.host_rows, -1);
  }
  if (o.ssd_rows > 0) {
    SsdStoreOptions ssd;
    ssd.row_floats = o.row_floats;
    ssd.capacity = o.ssd_rows;
    ssd.folders = o.ssd_folders;
    ssd.file_name = o.table;
    ssd.read_path = o.ssd_read_path;
    RECSDK_ASSIGN_OR_RETURN(rows->ssd_, SsdStore::Create(ssd));
  }
  rows->device_keys_.assign(o.device_rows, -1);
  return rows;
}

TieredRows::TieredRows(const TieredRowsOptions& options)
    : options_(options),
      bases_(options.device_rows, options.host_rows, options.ssd_rows),
      index_(uint64_t{options.device_rows} + options.host_rows + options.ssd_rows) {}

RowStore* TieredRows::Store(Tier tier) const {
  switch (tier) {
    case Tier::kDevice:
      return device_.get();
    case Tier::kHost:
      return host_.get();
    case Tier::kSsd:
      break;
  }
  return ssd_.get();
}

uint32_t TieredRows::rows_on(Tier tier) const {
  const RowStore* store = Store(tier);
  return store == nullptr ? 0 : store->size();
}

absl::StatusOr<RowLocation> TieredRows::Locate(int64_t key) const {
  const uint32_t packed = index_.Find(key);
  if (packed == KeyIndex::kEmpty) {
    return absl::NotFoundError(fmt::format("table \"{}\": key {} has no row", options_.table, key));
  }
  return bases_.Unpack(packed);
}

absl::Status TieredRows::Move(const std::vector<int64_t>& keys, Tier from,
                              const std::vector<uint32_t>& from_slots, Tier to,
                              std::vector<uint32_t>* to_slots) {
  if (keys.empty()) return absl::OkStatus();
  to_slots->resize(keys.size());
  RECSDK_RETURN_IF_ERROR(MoveRows(*Store(from), from_slots, *Store(to), to_slots->data()));
  for (size_t i = 0; i < keys.size(); ++i) {
    index_.Erase(keys[i]);
    index_.Insert(keys[i], bases_.Pack({to, (*to_slots)[i]}));
    if (to != Tier::kSsd) KeyAt(to, (*to_slots)[i]) = keys[i];
    if (from != Tier::kSsd) KeyAt(from, from_slots[i]) = -1;
  }
  moved_[static_cast<int>(to)] += keys.size();
  return absl::OkStatus();
}

absl::Status TieredRows::PrepareBatch(absl::Span<const int64_t> keys, const RowInit& init,
                                      uint32_t* device_slots) {
  const std::string table = fmt::format("table \"{}\"", options_.table);
  {
    absl::flat_hash_map<int64_t, bool> seen;
    for (int64_t key : keys) {
      if (!seen.emplace(key, true).second) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: key {} appears twice in one batch; dedup the batch first", table, key));
      }
    }
  }
  ++batch_;
  device_policy_->BeginBatch();
  if (host_policy_ != nullptr) host_policy_->BeginBatch();
  // 1. Batch t - 2 is done: its rows may move again.
  while (pinned_.size() >= 2) {
    RECSDK_RETURN_IF_ERROR(device_->Unpin(pinned_.front()));
    pinned_.pop_front();
  }
  // 2. Where each key is.
  std::vector<uint32_t> hits;
  std::vector<int64_t> host_keys, ssd_keys, new_keys;
  std::vector<uint32_t> host_slots, ssd_slots;
  for (int64_t key : keys) {
    const uint32_t packed = index_.Find(key);
    if (packed == KeyIndex::kEmpty) {
      new_keys.push_back(key);
      continue;
    }
    const RowLocation loc = bases_.Unpack(packed);
    switch (loc.tier) {
      case Tier::kDevice:
        hits.push_back(loc.slot);
        break;
      case Tier::kHost:
        host_keys.push_back(key);
        host_slots.push_back(loc.slot);
        break;
      case Tier::kSsd:
        ssd_keys.push_back(key);
        ssd_slots.push_back(loc.slot);
        break;
    }
  }
  device_policy_->Touch(hits);
  // The batch's host rows are about to go up: touching them keeps them out of the host's
  // victims below.
  if (host_policy_ != nullptr) host_policy_->Touch(host_slots);
  // 3. Plan, changing nothing yet: every full-tier error is found here, before a row moves.
  // The batch's host and SSD rows are read into memory first, so the slots they leave count as
  // room for the rows pushed down (a table at its full capacity still swaps).
  const size_t n = static_cast<size_t>(options_.row_floats);
  std::vector<float> host_rows(host_keys.size() * n), ssd_rows(ssd_keys.size() * n);
  if (!host_keys.empty()) RECSDK_RETURN_IF_ERROR(host_->Read(host_slots, host_rows.data()));
  if (!ssd_keys.empty()) RECSDK_RETURN_IF_ERROR(ssd_->Read(ssd_slots, ssd_rows.data()));
  const size_t arriving = host_keys.size() + ssd_keys.size() + new_keys.size();
  const size_t device_free = options_.device_rows - device_->size();
  std::vector<uint32_t> victims;
  std::vector<uint32_t> cold;
  if (arriving > device_free) {
    const size_t want = arriving - device_free;
    victims.resize(want);
    // Pins are the ground truth of what is in flight (after a failed batch the policy's
    // "previous batch" is that failed one), so pinned slots are skipped explicitly.
    victims.resize(device_policy_->ChooseVictims(
        want, victims.data(), [&](uint32_t slot) { return device_->IsPinned(slot); }));
    if (host_ == nullptr) {
      return absl::ResourceExhaustedError(fmt::format(
          "{}: the device tier is full ({} rows) and there is no host tier to evict to; the "
          "batch needs {} more rows: raise device_vocabulary_size or set host_vocabulary_size",
          table, options_.device_rows, want));
    }
    if (victims.size() < want) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: device_vocabulary_size {} is below the {} rows this batch and the previous one "
          "need on the device at once; raise device_vocabulary_size",
          table, options_.device_rows,
          options_.device_rows - device_free - victims.size() + arriving));
    }
    const size_t host_room = options_.host_rows - host_->size() + host_keys.size();
    if (victims.size() > host_room) {
      const size_t host_want = victims.size() - host_room;
      if (ssd_ == nullptr) {
        return absl::ResourceExhaustedError(fmt::format(
            "{}: the host tier is full ({} rows) and there is no SSD tier for {} more; raise "
            "host_vocabulary_size or set ssd_vocabulary_size",
            table, options_.host_rows, host_want));
      }
      cold.resize(host_want);
      cold.resize(host_policy_->ChooseVictims(host_want, cold.data()));
      if (cold.size() < host_want) {
        return absl::ResourceExhaustedError(fmt::format(
            "{}: the host tier ({} rows) cannot take {} rows evicted from the device besides "
            "the rows of the last two batches; raise host_vocabulary_size",
            table, options_.host_rows, host_want));
      }
      const size_t ssd_room = options_.ssd_rows - ssd_->size() + ssd_keys.size();
      if (cold.size() > ssd_room) {
        return absl::ResourceExhaustedError(fmt::format(
            "{}: the ssd tier is full: {} of ssd_vocabulary_size {} rows in use; {} rows to demote "
            "from the host, {} leaving it for the device; raise ssd_vocabulary_size (or evict "
            "keys)",
            table, ssd_->size(), options_.ssd_rows, cold.size(), ssd_keys.size()));
      }
    }
  }
  // 4. Do it: free the slots the batch's rows leave, push rows down (host -> SSD, device ->
  // host), then write the batch's rows into device slots. From here only an I/O error can fail
  // (DataLoss), and the full-tier checks above guarantee every allocation.
  if (!host_keys.empty()) {
    RECSDK_RETURN_IF_ERROR(host_->Free(host_slots));
    for (uint32_t slot : host_slots) {
      host_keys_[slot] = -1;
      host_policy_->Remove(slot);
    }
  }
  if (!ssd_keys.empty()) RECSDK_RETURN_IF_ERROR(ssd_->Free(ssd_slots));
  if (!cold.empty()) {
    std::vector<int64_t> cold_keys(cold.size());
    for (size_t i = 0; i < cold.size(); ++i) cold_keys[i] = host_keys_[cold[i]];
    std::vector<uint32_t> ssd_to;
    RECSDK_RETURN_IF_ERROR(Move(cold_keys, Tier::kHost, cold, Tier::kSsd, &ssd_to));
    for (uint32_t slot : cold) host_policy_->Remove(slot);
  }
  if (!victims.empty()) {
    std::vector<int64_t> victim_keys(victims.size());
    for (size_t i = 0; i < victims.size(); ++i) victim_keys[i] = device_keys_[victims[i]];
    std::vector<uint32_t> host_to;
    RECSDK_RETURN_IF_ERROR(Move(victim_keys, Tier::kDevice, victims, Tier::kHost, &host_to));
    for (uint32_t slot : victims) device_policy_->Remove(slot);
    for (size_t i = 0; i < host_to.size(); ++i) {
      const History& h = history_[victim_keys[i]];
      RECSDK_RETURN_IF_ERROR(host_policy_->Insert(host_to[i], h.uses, h.last_batch));
    }
  }
  std::vector<int64_t> up_keys = host_keys;
  up_keys.insert(up_keys.end(), ssd_keys.begin(), ssd_keys.end());
  up_keys.insert(up_keys.end(), new_keys.begin(), new_keys.end());
  std::vector<uint32_t> up(up_keys.size());
  RECSDK_RETURN_IF_ERROR(device_->Allocate(up.size(), up.data()));
  for (size_t i = 0; i < up_keys.size(); ++i) {
    float* row = device_->RowAddress(up[i]);
    if (i < host_keys.size()) {
      std::copy_n(host_rows.data() + i * n, n, row);
    } else if (i < host_keys.size() + ssd_keys.size()) {
      std::copy_n(ssd_rows.data() + (i - host_keys.size()) * n, n, row);
    } else {
      init(up_keys[i], row);
    }
    index_.Erase(up_keys[i]);
    index_.Insert(up_keys[i], bases_.Pack({Tier::kDevice, up[i]}));
    device_keys_[up[i]] = up_keys[i];
    auto it = history_.find(up_keys[i]);
    if (it == history_.end()) {
      RECSDK_RETURN_IF_ERROR(device_policy_->Insert(up[i], 0, -1));
    } else {
      RECSDK_RETURN_IF_ERROR(device_policy_->Insert(up[i], it->second.uses, it->second.last_batch));
    }
  }
  moved_[static_cast<int>(Tier::kDevice)] += host_keys.size() + ssd_keys.size();
  // 5. Pin and hand out the batch's device slots.
  std::vector<uint32_t> batch_slots(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const RowLocation loc = bases_.Unpack(index_.Find(keys[i]));
    batch_slots[i] = loc.slot;
    device_slots[i] = loc.slot;
    History& h = history_[keys[i]];
    ++h.uses;
    h.last_batch = batch_;
  }
  RECSDK_RETURN_IF_ERROR(device_->Pin(batch_slots));
  pinned_.push_back(std::move(batch_slots));
  return absl::OkStatus();
}

absl::Status TieredRows::ReadRows(absl::Span<const int64_t> keys, float* out) const {
  // Grouped by tier, so each store reads in bulk.
  std::vector<uint32_t> slots[kNumTiers];
  std::vector<size_t> where[kNumTiers];
  for (size_t i = 0; i < keys.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(const RowLocation loc, Locate(keys[i]));
    slots[static_cast<int>(loc.tier)].push_back(loc.slot);
    where[static_cast<int>(loc.tier)].push_back(i);
  }
  const size_t n = static_cast<size_t>(options_.row_floats);
  for (int t = 0; t < kNumTiers; ++t) {
    if (slots[t].empty()) continue;
    std::vector<float> rows(slots[t].size() * n);
    RECSDK_RETURN_IF_ERROR(Store(static_cast<Tier>(t))->Read(slots[t], rows.data()));
    for (size_t j = 0; j < where[t].size(); ++j) {
      std::copy_n(rows.data() + j * n, n, out + where[t][j] * n);
    }
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
