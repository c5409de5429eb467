// table_tiers.cc: the device, host and SSD tiers under TableImpl (table_impl.h): the swaps a
// Resolve plans and runs, the leases that keep a batch's device rows in place while it is in
// flight, and the bulk row access export, import, eviction and snapshots use across tiers.
//
// With host_vocabulary_size > 0 the key index maps a key to a packed RowLocation (TierBases):
// device slots first (the table's slab, which the graph reads and writes by row id and by
// address), then the host tier's MemoryStore, then the SSD tier's SsdStore. A key's row is in
// exactly one tier. A Resolve of a batch, before anything changes:
//   1. finds each key's tier; the device hits count as used by this batch (eviction policy);
//   2. reads the rows coming up from the host and SSD into memory (an I/O error is DataLoss and
//      leaves the table as it was);
//   3. when the device has fewer free slots than rows arriving (host, SSD and admitted new keys),
//      asks the device policy for victims among the unpinned slots; too few is Unavailable (the
//      lease's owner holds batches that are not consumed yet: wait and retry) or the "two
//      consecutive batches" FailedPrecondition naming device_vocabulary_size;
//   4. when the host cannot take the victims, asks the host policy for its coldest rows to push
//      to SSD; a full host without SSD, or a full SSD, is ResourceExhausted naming the tier.
// Then it runs the plan: free the slots the batch's rows leave, host -> SSD, device -> host (all
// in bulk), the batch's rows into free device slots, new keys initialised, every batch row
// pinned under the caller's lease. Per-row metadata (timestamp, change-tracking byte, use
// history) is indexed by packed location and moves with its row, so eviction, delta snapshots and
// the policies' history see the same row wherever it is.
//
// Threading: every function here runs under tier_mu_ (the table's Resolve takes it; Snapshot,
// eviction and import run with exclusive access to the table and take it too).
#include <unistd.h>

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "src/common/status_macros.h"
#include "src/table/collective_table.h"
#include "src/table/locked_table.h"
#include "src/table/table_impl.h"

namespace recsdk::internal {

namespace {

uint32_t Uses(uint64_t h) { return static_cast<uint32_t>(h); }
int64_t LastBatch(uint64_t h) { return static_cast<int32_t>(static_cast<uint32_t>(h >> 32)); }
uint64_t MakeHistory(uint32_t uses, int64_t last) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(last))) << 32) | uses;
}

// An SSD record holds the row and, in two more floats' bytes, its use history, so an SSD-resident
// row costs no history in host memory (issue 14's bytes per SSD row).
constexpr size_t kHistoryFloats = sizeof(uint64_t) / sizeof(float);
// kReleaseFenceWait: how long a lease release waits for the device work that used its rows.
constexpr absl::Duration kReleaseFenceWait = absl::Seconds(60);
uint64_t RecordHistory(const float* record, size_t rf) {
  uint64_t h;
  std::memcpy(&h, record + rf, sizeof(h));
  return h;
}
void SetRecordHistory(float* record, size_t rf, uint64_t h) {
  std::memcpy(record + rf, &h, sizeof(h));
}

}  // namespace

Status TableImpl::InitTiers() {
  const std::string label = fmt::format("table \"{}\"", name());
  const int64_t host = config_.host_vocabulary_size, ssd = config_.ssd_vocabulary_size;
  // The SSD tier's slots: its vocabulary plus the spare kept for checkpoints (ssd_spare_).
  const int64_t ssd_slots = ssd + ssd_spare_;
  RECSDK_RETURN_IF_ERROR(TierBases::Check(static_cast<uint64_t>(device_rows_),
                                          static_cast<uint64_t>(host),
                                          static_cast<uint64_t>(ssd_slots)));
  bases_ = TierBases(static_cast<uint32_t>(device_rows_), static_cast<uint32_t>(host),
                     static_cast<uint32_t>(ssd_slots));
  ssd_base_ = bases_.Pack({Tier::kSsd, 0});
  ssd_dirty_.assign((static_cast<uint64_t>(ssd_slots) + 63) / 64, 0);
  // At most 1 byte per SSD vocabulary row for the list of dirty SSD keys (8 bytes an entry).
  dirty_ssd_limit_ = std::max(static_cast<size_t>(ssd / 8), kMinDirtySsdKeys);
  dirty_ssd_compact_at_ = kMinDirtySsdKeys;
  MemoryStoreOptions h;
  h.tier = Tier::kHost;
  h.row_floats = row_floats_;
  h.capacity = static_cast<uint32_t>(host);
  h.label = label;
  RECSDK_ASSIGN_OR_RETURN(host_, MemoryStore::Create(h));
  if (ssd > 0) {
    SsdStoreOptions o;
    o.row_floats = row_floats_ + static_cast<int>(kHistoryFloats);
    o.capacity = static_cast<uint32_t>(ssd_slots);
    o.row_limit = static_cast<uint32_t>(ssd);
    o.folders = config_.ssd_data_path;
    // Table names may hold '/'; file names may not. A table's files replace those an earlier run
    // of a table of the same name left in the folders (SsdStore::Create).
    o.file_name = name();
    for (char& c : o.file_name) {
      if (c == '/') c = '_';
    }
    RECSDK_ASSIGN_OR_RETURN(ssd_, SsdStore::Create(o));
  }
  EvictionPolicyOptions p;
  p.capacity = static_cast<uint32_t>(device_rows_);
  RECSDK_ASSIGN_OR_RETURN(device_policy_, EvictionPolicy::Create(p));
  p.capacity = static_cast<uint32_t>(host);
  RECSDK_ASSIGN_OR_RETURN(host_policy_, EvictionPolicy::Create(p));
  device_keys_.assign(static_cast<size_t>(device_rows_), -1);
  host_keys_.assign(static_cast<size_t>(host), -1);
  device_pins_.assign(static_cast<size_t>(device_rows_), 0);
  device_held_.assign(static_cast<size_t>(device_rows_), 0);
  history_ = SlabReservation(static_cast<uint64_t>(max_rows_) * sizeof(uint64_t));
  if (history_.base() == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("{}: cannot reserve use history for {} rows", label, max_rows_));
  }
  return absl::OkStatus();
}

int64_t TableImpl::TierFreeRows() const {
  int64_t free = FreeRows() + (config_.host_vocabulary_size - host_->size());
  if (ssd_ != nullptr) free += config_.ssd_vocabulary_size - ssd_->size();
  return free;
}

Status TableImpl::TwoBatchesError(size_t needed) const {
  return absl::FailedPreconditionError(fmt::format(
      "table \"{}\": device_vocabulary_size {} is below the {} unique keys of two consecutive "
      "batches (this batch's and the rows still in use by the previous one), which the device "
      "tier must hold at once; raise device_vocabulary_size to at least {} (or use smaller "
      "batches)",
      name(), device_rows_, needed, needed));
}

void TableImpl::TierPlan::Clear() {
  for (auto* v : {&host_pos, &ssd_pos, &host_slots, &ssd_slots, &victims, &cold, &hits}) v->clear();
  host_rows.clear();
  ssd_rows.clear();
  arriving_ts.clear();
  arriving_dirty.clear();
  arriving_hist.clear();
}

Status TableImpl::PlanTiers(absl::Span<const int64_t> keys, absl::Span<const uint32_t> rows,
                            size_t admits, const ResolveLease& lease, TierPlan* plan) {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  const size_t rf = static_cast<size_t>(row_floats_);
  // The public Resolve keeps the rows of its previous call, which may still be in flight, and
  // lets older ones move: with this batch's, two batches are pinned at most. With device tier
  // memory that release waits, as the key stage's do, for a fence after the compute enqueued so
  // far (which holds every kernel that used those rows), so no row is unpinned while a queued
  // kernel may still read or write it.
  if (lease.owner == nullptr) {
    if (device_memory_ == nullptr) {
      ReleaseLeasesLocked(nullptr, auto_batch_ - 1);
    } else {
      RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<Event> fence, device_memory_->ComputeFence());
      std::lock_guard<std::mutex> lock(release_mu_);
      pending_releases_.push_back({nullptr, auto_batch_ - 1, std::move(fence)});
    }
  }
  // Releases whose fence has passed take effect now; the others (the device still runs the step
  // that used their rows) are waited for below only if the batch lacks room without them.
  ApplyPendingReleases(/*wait=*/false);
  std::vector<uint32_t>& hits = plan->hits;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t r = rows[i];
    if (r >= kDefaultRow) continue;
    const RowLocation loc = bases_.Unpack(r);
    switch (loc.tier) {
      case Tier::kDevice:
        hits.push_back(loc.slot);
        break;
      case Tier::kHost:
        plan->host_pos.push_back(static_cast<uint32_t>(i));
        plan->host_slots.push_back(loc.slot);
        break;
      case Tier::kSsd:
        plan->ssd_pos.push_back(static_cast<uint32_t>(i));
        plan->ssd_slots.push_back(loc.slot);
        break;
    }
  }
  // A new batch for the policy; its device hits are used now, so they are never its victims.
  device_policy_->BeginBatch();
  ++policy_batch_;
  device_policy_->Touch(hits);
  if (!plan->host_slots.empty()) {
    plan->host_rows.resize(plan->host_slots.size() * rf);
    RECSDK_RETURN_IF_ERROR(host_->Read(plan->host_slots, plan->host_rows.data()));
  }
  if (!plan->ssd_slots.empty()) {
    plan->ssd_rows.resize(plan->ssd_slots.size() * (rf + kHistoryFloats));
    RECSDK_RETURN_IF_ERROR(ssd_->Read(plan->ssd_slots, plan->ssd_rows.data()));
  }
  const size_t arriving = plan->host_pos.size() + plan->ssd_pos.size() + admits;
  const size_t device_free = static_cast<size_t>(FreeRows());
  if (arriving > device_free) {
    const size_t want = arriving - device_free;
    // ChooseVictims changes nothing the caller must undo (eviction_policy.h), so a second choice
    // after more rows are unpinned is as good as a first.
    auto choose_victims = [&] {
      plan->victims.resize(want);
      plan->victims.resize(device_policy_->ChooseVictims(
          want, plan->victims.data(), [&](uint32_t slot) { return device_pins_[slot] != 0; }));
      if (plan->victims.size() < want) {
        // The policy also spares the previous Resolve's rows; pins are what really is in flight
        // (e.g. a Resolve of the other channel came between), so unpinned rows outside this
        // batch make up the rest, in slot order.
        const absl::flat_hash_set<uint32_t> hit_set(hits.begin(), hits.end());
        absl::flat_hash_set<uint32_t> chosen(plan->victims.begin(), plan->victims.end());
        for (int64_t s = 0; s < next_row_ && plan->victims.size() < want; ++s) {
          const uint32_t slot = static_cast<uint32_t>(s);
          if (device_pins_[slot] != 0 || hit_set.contains(slot) || chosen.contains(slot)) {
            continue;
          }
          if (device_held_[slot] == 0) continue;
          plan->victims.push_back(slot);
        }
      }
    };
    choose_victims();
    if (plan->victims.size() < want && HasPendingReleases()) {
      // Short of room: now wait (kReleaseFenceWait at most) for the steps still using rows
      // released earlier, and choose again with their rows unpinned.
      ApplyPendingReleases(/*wait=*/true);
      choose_victims();
    }
    if (plan->victims.size() < want) {
      if (lease.owner != nullptr) {
        int held = 0;
        for (const Lease& l : leases_) held += l.owner == lease.owner ? 1 : 0;
        if (held > 1) {
          return absl::UnavailableError(fmt::format(
              "table \"{}\": the device tier's {} rows are pinned by {} batches resolved ahead "
              "and not consumed yet; retry once the step has consumed one",
              name(), device_rows_, held));
        }
      }
      const absl::flat_hash_set<uint32_t> hit_set(hits.begin(), hits.end());
      size_t pinned_other = 0;
      for (int64_t s = 0; s < next_row_; ++s) {
        if (device_pins_[s] != 0 && !hit_set.contains(static_cast<uint32_t>(s))) ++pinned_other;
      }
      return TwoBatchesError(pinned_other + hits.size() + arriving);
    }
    const size_t host_room =
        static_cast<size_t>(config_.host_vocabulary_size) - host_->size() + plan->host_slots.size();
    if (plan->victims.size() > host_room) {
      const size_t host_want = plan->victims.size() - host_room;
      if (ssd_ == nullptr) {
        return absl::ResourceExhaustedError(fmt::format(
            "table \"{}\": the host tier is full (host_vocabulary_size {}) and there is no SSD "
            "tier for {} more rows pushed down from the device; raise host_vocabulary_size, set "
            "ssd_vocabulary_size and ssd_data_path, or enable eviction",
            name(), config_.host_vocabulary_size, host_want));
      }
      // The host's rows are never in flight (batches use device rows), so the host policy's
      // guard of the previous batch is not wanted: two batch steps put every earlier use out of
      // it (the half-life is then counted in half-batches).
      host_policy_->BeginBatch();
      host_policy_->BeginBatch();
      const absl::flat_hash_set<uint32_t> leaving(plan->host_slots.begin(), plan->host_slots.end());
      plan->cold.resize(host_want);
      plan->cold.resize(host_policy_->ChooseVictims(
          host_want, plan->cold.data(), [&](uint32_t slot) { return leaving.contains(slot); }));
      if (plan->cold.size() < host_want) {
        return absl::ResourceExhaustedError(fmt::format(
            "table \"{}\": the host tier (host_vocabulary_size {}) cannot take {} rows pushed "
            "down from the device; raise host_vocabulary_size",
            name(), config_.host_vocabulary_size, host_want));
      }
      const size_t ssd_room =
          static_cast<size_t>(config_.ssd_vocabulary_size) - ssd_->size() + plan->ssd_slots.size();
      if (plan->cold.size() > ssd_room) {
        return absl::ResourceExhaustedError(fmt::format(
            "table \"{}\": the ssd tier is full: {} of ssd_vocabulary_size {} rows in use under "
            "ssd_data_path \"{}\", and {} more must leave the host; raise ssd_vocabulary_size or "
            "enable eviction",
            name(), ssd_->size(), config_.ssd_vocabulary_size,
            fmt::join(config_.ssd_data_path, "\", \""), plan->cold.size()));
      }
      // The SSD files those rows need are made now, before anything changes: a full disk then
      // fails the plan (ResourceExhausted naming the tier, the folders and the file), not the
      // swap half done. ExecuteTiers frees the SSD slots of the rows coming up before it
      // allocates the slots of the rows going down, so a file made there failed after the index
      // still named the freed slots: the table's next snapshot read unallocated slots (issue 29).
      // The rows coming up from slots a linked checkpoint holds leave those slots occupied
      // (kept until the next full save), so they count too.
      RECSDK_RETURN_IF_ERROR(
          ssd_->Reserve(uint64_t{ssd_->size()} - plan->ssd_slots.size() + plan->cold.size(),
                        ssd_->HeldAmong(plan->ssd_slots)));
    }
  }
  // The arriving rows' metadata, read before their slots can be reused below (an SSD row's
  // history is in its record).
  for (const std::vector<uint32_t>* pos : {&plan->host_pos, &plan->ssd_pos}) {
    for (size_t j = 0; j < pos->size(); ++j) {
      const uint32_t packed = rows[(*pos)[j]];
      plan->arriving_ts.push_back(evicting_ ? *Timestamp(packed) : 0);
      plan->arriving_dirty.push_back(TierDirty(packed) ? 1 : 0);
      plan->arriving_hist.push_back(
          pos == &plan->host_pos
              ? *History(packed)
              : RecordHistory(plan->ssd_rows.data() + j * (rf + kHistoryFloats), rf));
    }
  }
  return absl::OkStatus();
}

Status TableImpl::ExecuteTiers(absl::Span<const int64_t> keys, absl::Span<uint32_t> rows,
                               const std::vector<uint32_t>& admit, TierPlan& plan,
                               const ResolveLease& lease) {
  const size_t rf = static_cast<size_t>(row_floats_);
  size_t hits = 0, looked_up = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (rows[i] >= kDefaultRow) continue;
    ++looked_up;
    hits += rows[i] < static_cast<uint32_t>(device_rows_) ? 1 : 0;
  }
  // Each move writes the destination's metadata from the source's before the source slot can be
  // reused (the arriving rows' metadata was saved by PlanTiers).
  auto move_meta = [&](uint32_t from, uint32_t to) {
    if (evicting_) *Timestamp(to) = *Timestamp(from);
    SetTierDirty(to, TierDirty(from));
    if (bases_.Unpack(to).tier != Tier::kSsd) *History(to) = *History(from);
  };
  auto relocate = [&](int64_t key, uint32_t to) {
    index_->Erase(key);
    index_->Insert(key, to);
  };
  // 1. The slots the batch's rows leave (their change flags went into plan.arriving_dirty, and a
  // freed slot is left clean: a delta finds dirty SSD rows by their bits, DirtyEntries).
  if (!plan.host_slots.empty()) {
    RECSDK_RETURN_IF_ERROR(host_->Free(plan.host_slots));
    for (uint32_t s : plan.host_slots) {
      host_keys_[s] = -1;
      host_policy_->Remove(s);
      SetTierDirty(bases_.Pack({Tier::kHost, s}), false);
    }
  }
  if (!plan.ssd_slots.empty()) {
    RECSDK_RETURN_IF_ERROR(ssd_->Free(plan.ssd_slots));
    for (uint32_t s : plan.ssd_slots) SetTierDirty(bases_.Pack({Tier::kSsd, s}), false);
  }
  // 2. The host's coldest rows to SSD.
  if (!plan.cold.empty()) {
    const size_t n = plan.cold.size();
    const size_t record = rf + kHistoryFloats;
    move_rows_.resize(n * record);
    move_slots_.resize(n);
    float* const buf = move_rows_.data();
    const absl::Span<const uint32_t> to(move_slots_);
    for (size_t j = 0; j < n; ++j) {
      // MemoryStore rows are addressable: copied straight into the records.
      std::memcpy(buf + j * record, host_->RowAddress(plan.cold[j]), row_bytes_);
      SetRecordHistory(buf + j * record, rf, *History(bases_.Pack({Tier::kHost, plan.cold[j]})));
    }
    RECSDK_RETURN_IF_ERROR(ssd_->Allocate(n, move_slots_.data()));
    RECSDK_RETURN_IF_ERROR(ssd_->Write(to, buf));
    RECSDK_RETURN_IF_ERROR(host_->Free(plan.cold));
    for (size_t j = 0; j < n; ++j) {
      const uint32_t from = bases_.Pack({Tier::kHost, plan.cold[j]});
      const uint32_t dst = bases_.Pack({Tier::kSsd, to[j]});
      const int64_t key = host_keys_[plan.cold[j]];
      move_meta(from, dst);
      relocate(key, dst);
      host_keys_[plan.cold[j]] = -1;
      host_policy_->Remove(plan.cold[j]);
      // A dirty row reaching the SSD tier is listed (the delta's way to it, DirtyEntries).
      if (TierDirty(dst)) NoteDirtySsd(key);
      SetTierDirty(from, false);
    }
    demoted_ += static_cast<int64_t>(n);
  }
  // 3. The device's victims to the host.
  if (!plan.victims.empty()) {
    const size_t n = plan.victims.size();
    move_rows_.resize(n * rf);
    move_slots_.resize(n);
    const absl::Span<const uint32_t> to(move_slots_);
    if (device_memory_ != nullptr) {
      // A swap-out: the copy is queued (after the compute work so far, on the copy stream) and
      // the host tier takes the rows when something next needs host rows (SettleSwapOut): this
      // Resolve does not wait for the step in flight. Their device slots may take this batch's
      // rows below: those Writes queue after the Read, which has read the victims by then.
      RECSDK_RETURN_IF_ERROR(SettleSwapOut());
      // Victims are unpinned rows, and every release (the key stage's and the public Resolve's)
      // takes effect only once its fence has passed: no queued kernel uses them, so the copy
      // waits for no compute (it overlaps the step in flight).
      RECSDK_ASSIGN_OR_RETURN(
          PendingRows down,
          device_memory_->ReadAsync(plan.victims, SwapOutOrder::kAfterReleaseFences));
      RECSDK_RETURN_IF_ERROR(host_->Allocate(n, move_slots_.data()));
      std::lock_guard<std::mutex> lock(swap_out_mu_);
      swap_out_ = PendingSwapOut{move_slots_, std::move(down)};
    } else {
      RECSDK_RETURN_IF_ERROR(ReadDeviceRows(plan.victims, move_rows_.data()));
      RECSDK_RETURN_IF_ERROR(host_->Allocate(n, move_slots_.data()));
      RECSDK_RETURN_IF_ERROR(host_->Write(to, move_rows_.data()));
    }
    for (size_t j = 0; j < n; ++j) {
      const uint32_t slot = plan.victims[j];
      const int64_t key = device_keys_[slot];
      const uint32_t dst = bases_.Pack({Tier::kHost, to[j]});
      move_meta(slot, dst);
      SetTierDirty(slot, false);
      relocate(key, dst);
      device_keys_[slot] = -1;
      device_held_[slot] = 0;
      device_policy_->Remove(slot);
      free_rows_.push_back(slot);
      host_keys_[to[j]] = key;
      const uint64_t h = *History(dst);
      RECSDK_RETURN_IF_ERROR(host_policy_->Insert(to[j], Uses(h), LastBatch(h)));
    }
    demoted_ += static_cast<int64_t>(n);
  }
  // 4. The batch's rows up to the device.
  // With device tier memory the arriving rows go up in one Write (the swap on the copy stream).
  size_t m = 0;
  std::vector<uint32_t> up_slots;
  std::vector<float> up_rows;
  if (device_memory_ != nullptr) {
    up_slots.reserve(plan.host_pos.size() + plan.ssd_pos.size());
    up_rows.reserve(up_slots.capacity() * rf);
  }
  auto arrive = [&](uint32_t pos, const float* row) -> Status {
    const uint32_t slot = AllocateRow();
    if (device_memory_ != nullptr) {
      up_slots.push_back(slot);
      up_rows.insert(up_rows.end(), row, row + rf);
    } else {
      std::memcpy(Row(slot), row, row_bytes_);
    }
    relocate(keys[pos], slot);
    if (evicting_) *Timestamp(slot) = plan.arriving_ts[m];
    Dirty()[slot] = plan.arriving_dirty[m];
    *History(slot) = plan.arriving_hist[m];
    device_keys_[slot] = keys[pos];
    device_held_[slot] = 1;
    rows[pos] = slot;
    const uint64_t h = plan.arriving_hist[m++];
    return device_policy_->Insert(slot, Uses(h), LastBatch(h));
  };
  for (size_t j = 0; j < plan.host_pos.size(); ++j) {
    RECSDK_RETURN_IF_ERROR(arrive(plan.host_pos[j], plan.host_rows.data() + j * rf));
  }
  for (size_t j = 0; j < plan.ssd_pos.size(); ++j) {
    RECSDK_RETURN_IF_ERROR(
        arrive(plan.ssd_pos[j], plan.ssd_rows.data() + j * (rf + kHistoryFloats)));
  }
  if (!up_slots.empty()) RECSDK_RETURN_IF_ERROR(device_memory_->Write(up_slots, up_rows.data()));
  promoted_ += static_cast<int64_t>(m);
  // 5. New keys: fresh rows on the device.
  for (uint32_t i : admit) {
    const uint32_t slot = AllocateRow();
    rows[i] = slot;
    index_->Insert(keys[i], slot);
    MarkDirty(slot);
    if (evicting_) *Timestamp(slot) = std::numeric_limits<int64_t>::min();
    *History(slot) = kNoHistory;
    device_keys_[slot] = keys[i];
    device_held_[slot] = 1;
    RECSDK_RETURN_IF_ERROR(device_policy_->Insert(slot, 0, -1));
  }
  if (device_memory_ == nullptr) {
    ParallelFor(admit.size(), 256, [&](size_t b, size_t e) {
      InitRows(admit.data() + b, e - b, rows.data(), keys.data());
    });
  } else if (!admit.empty()) {
    // Initialised on the host (InitRowAt, InitRows' reference) and written up in one Write.
    std::vector<float> fresh(admit.size() * rf);
    std::vector<uint32_t> slots(admit.size());
    ParallelFor(admit.size(), 256, [&](size_t b, size_t e) {
      for (size_t j = b; j < e; ++j) {
        InitRowAt(fresh.data() + j * rf, keys[admit[j]]);
        slots[j] = rows[admit[j]];
      }
    });
    RECSDK_RETURN_IF_ERROR(device_memory_->Write(slots, fresh.data()));
  }
  // 6. Every row of the batch is on the device now: count the use and pin it under the lease.
  Lease held{lease.owner, lease.owner != nullptr ? lease.batch : auto_batch_++, {}};
  held.slots.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (rows[i] >= kDefaultRow) continue;
    const uint32_t slot = rows[i];
    const uint64_t h = *History(slot);
    *History(slot) = MakeHistory(Uses(h) + 1, policy_batch_);
    if (device_pins_[slot] != 0xFFFF) {
      ++device_pins_[slot];
      held.slots.push_back(slot);
    }
  }
  leases_.push_back(std::move(held));
  device_hits_ += static_cast<int64_t>(hits);
  device_lookups_ += static_cast<int64_t>(looked_up);
  return absl::OkStatus();
}

void TableImpl::ReleaseLeasesLocked(const void* owner, int64_t before_batch) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->owner != owner || it->batch >= before_batch) {
      ++it;
      continue;
    }
    for (uint32_t slot : it->slots) {
      if (device_pins_[slot] != 0) --device_pins_[slot];
    }
    it = leases_.erase(it);
  }
}

Status TableImpl::SettleSwapOut() const {
  std::lock_guard<std::mutex> lock(swap_out_mu_);
  if (!tier_failure_.ok()) return tier_failure_;
  if (!swap_out_) return absl::OkStatus();
  Status s = device_memory_->WaitRead(swap_out_->rows);
  if (s.ok()) s = host_->Write(swap_out_->host_slots, swap_out_->rows.rows->data());
  // The index already names the host slots: rows that did not arrive there are lost.
  if (!s.ok()) return FailTiersLocked(s);
  swap_out_.reset();
  return absl::OkStatus();
}

Status TableImpl::FailTiers(const Status& cause) const {
  std::lock_guard<std::mutex> lock(swap_out_mu_);
  return FailTiersLocked(cause);
}

Status TableImpl::FailTiersLocked(const Status& cause) const {
  if (tier_failure_.ok()) {
    tier_failure_ = absl::DataLossError(fmt::format(
        "table \"{}\": a move of rows between its tiers failed halfway ({}); its index may now "
        "name rows that never arrived, so the table refuses every later lookup, snapshot and "
        "export: fix the cause, then restore the last checkpoint into a new session",
        name(), cause.ToString()));
  }
  return tier_failure_;
}

Status TableImpl::ReadDeviceRows(absl::Span<const uint32_t> slots, float* out) const {
  if (device_memory_ != nullptr) return device_memory_->Read(slots, out);
  for (size_t j = 0; j < slots.size(); ++j) {
    std::memcpy(out + j * static_cast<size_t>(row_floats_), Row(slots[j]), row_bytes_);
  }
  return absl::OkStatus();
}

Status TableImpl::WriteDeviceRows(absl::Span<const uint32_t> slots, const float* in) {
  if (device_memory_ != nullptr) return device_memory_->Write(slots, in);
  for (size_t j = 0; j < slots.size(); ++j) {
    std::memcpy(Row(slots[j]), in + j * static_cast<size_t>(row_floats_), row_bytes_);
  }
  return absl::OkStatus();
}

void TableImpl::ReleaseLeases(const void* owner, int64_t before_batch) {
  if (!tiered_) return;
  // On a device with its own queue the step that used the rows may still be running when the
  // host gets here: the release waits for a fence after the work enqueued so far. When no fence
  // can be had, the release is dropped (the rows stay pinned: safe) until a later one.
  std::shared_ptr<Event> after;
  if (device_memory_ != nullptr) {
    StatusOr<std::shared_ptr<Event>> fence = device_memory_->ComputeFence();
    if (!fence.ok()) return;
    after = *std::move(fence);
  }
  // The training loop calls this (KeyStage::Next) while a worker may be inside a Resolve holding
  // tier_mu_ for the whole plan and its moves: waiting for it would put the key stage's swap
  // work back on the step's path. The request is queued and applied by whoever holds the lock
  // next (releasing later is always safe: rows only stay pinned longer).
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    pending_releases_.push_back({owner, before_batch, std::move(after)});
  }
  if (tier_mu_.try_lock()) {
    // The loop's thread: no wait for the device here (that would sync every step).
    ApplyPendingReleases(/*wait=*/false);
    tier_mu_.unlock();
  }
}

bool TableImpl::HasPendingReleases() {
  std::lock_guard<std::mutex> lock(release_mu_);
  return !pending_releases_.empty();
}

void TableImpl::ApplyPendingReleases(bool wait) {
  std::vector<PendingRelease> todo;
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    todo.swap(pending_releases_);
  }
  std::vector<PendingRelease> later;
  for (PendingRelease& r : todo) {
    if (r.after != nullptr && !r.after->Done() &&
        (!wait || !r.after->Wait(kReleaseFenceWait).ok())) {
      later.push_back(std::move(r));  // still pinned; retried at the next Resolve
      continue;
    }
    ReleaseLeasesLocked(r.owner, r.before_batch);
  }
  if (!later.empty()) {
    std::lock_guard<std::mutex> lock(release_mu_);
    pending_releases_.insert(pending_releases_.begin(), std::make_move_iterator(later.begin()),
                             std::make_move_iterator(later.end()));
  }
}

void TableImpl::ScrubLeases(const absl::flat_hash_set<uint32_t>& device_slots) {
  if (device_slots.empty()) return;
  for (Lease& l : leases_) {
    std::erase_if(l.slots, [&](uint32_t s) { return device_slots.contains(s); });
  }
  for (uint32_t s : device_slots) device_pins_[s] = 0;
}

Status TableImpl::ReadRowsAt(absl::Span<const uint32_t> packed, float* out,
                             uint64_t* history) const {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  const size_t rf = static_cast<size_t>(row_floats_);
  if (!tiered_) {
    for (size_t i = 0; i < packed.size(); ++i)
      std::memcpy(out + i * rf, Row(packed[i]), row_bytes_);
    return absl::OkStatus();
  }
  std::vector<uint32_t> slots[kNumTiers];
  std::vector<size_t> where[kNumTiers];
  for (size_t i = 0; i < packed.size(); ++i) {
    const RowLocation loc = bases_.Unpack(packed[i]);
    if (loc.tier != Tier::kSsd && history != nullptr) history[i] = *History(packed[i]);
    if (loc.tier == Tier::kDevice && device_memory_ == nullptr) {  // the host slab: in place
      std::memcpy(out + i * rf, Row(loc.slot), row_bytes_);
      continue;
    }
    slots[static_cast<int>(loc.tier)].push_back(loc.slot);
    where[static_cast<int>(loc.tier)].push_back(i);
  }
  for (Tier tier : {Tier::kDevice, Tier::kHost, Tier::kSsd}) {
    const int t = static_cast<int>(tier);
    if (slots[t].empty()) continue;
    // SSD records carry the row's history after it.
    const size_t stride = tier == Tier::kSsd ? rf + kHistoryFloats : rf;
    std::vector<float> buf(slots[t].size() * stride);
    if (tier == Tier::kDevice) {
      RECSDK_RETURN_IF_ERROR(ReadDeviceRows(slots[t], buf.data()));
    } else {
      const RowStore* store =
          tier == Tier::kHost ? static_cast<const RowStore*>(host_.get()) : ssd_.get();
      RECSDK_RETURN_IF_ERROR(store->Read(slots[t], buf.data()));
    }
    for (size_t j = 0; j < where[t].size(); ++j) {
      std::memcpy(out + where[t][j] * rf, buf.data() + j * stride, row_bytes_);
      if (tier == Tier::kSsd && history != nullptr) {
        history[where[t][j]] = RecordHistory(buf.data() + j * stride, rf);
      }
    }
  }
  return absl::OkStatus();
}

Status TableImpl::WriteRowsAt(absl::Span<const uint32_t> packed, const float* in,
                              const uint64_t* history) {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  const size_t rf = static_cast<size_t>(row_floats_);
  if (!tiered_) {
    for (size_t i = 0; i < packed.size(); ++i) std::memcpy(Row(packed[i]), in + i * rf, row_bytes_);
    return absl::OkStatus();
  }
  std::vector<uint32_t> slots[kNumTiers];
  std::vector<float> rows[kNumTiers];
  for (size_t i = 0; i < packed.size(); ++i) {
    const RowLocation loc = bases_.Unpack(packed[i]);
    if (loc.tier != Tier::kSsd) *History(packed[i]) = history[i];
    if (loc.tier == Tier::kDevice && device_memory_ == nullptr) {  // the host slab: in place
      std::memcpy(Row(loc.slot), in + i * rf, row_bytes_);
      continue;
    }
    const int t = static_cast<int>(loc.tier);
    slots[t].push_back(loc.slot);
    rows[t].insert(rows[t].end(), in + i * rf, in + (i + 1) * rf);
    if (loc.tier == Tier::kSsd) {
      rows[t].resize(rows[t].size() + kHistoryFloats);
      SetRecordHistory(rows[t].data() + rows[t].size() - (rf + kHistoryFloats), rf, history[i]);
    }
  }
  if (!slots[0].empty()) RECSDK_RETURN_IF_ERROR(WriteDeviceRows(slots[0], rows[0].data()));
  if (!slots[1].empty()) RECSDK_RETURN_IF_ERROR(host_->Write(slots[1], rows[1].data()));
  if (!slots[2].empty()) RECSDK_RETURN_IF_ERROR(ssd_->Write(slots[2], rows[2].data()));
  return absl::OkStatus();
}

Status TableImpl::PlaceNew(absl::Span<const int64_t> keys, uint32_t* packed) {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  size_t i = 0;
  if (!tiered_) {
    for (; i < keys.size(); ++i) packed[i] = AllocateRow();
    return absl::OkStatus();
  }
  for (; i < keys.size() && FreeRows() > 0; ++i) {
    const uint32_t slot = AllocateRow();
    packed[i] = slot;
    device_keys_[slot] = keys[i];
    device_held_[slot] = 1;
    RECSDK_RETURN_IF_ERROR(device_policy_->Insert(slot, 0, -1));
  }
  const size_t host_n = std::min<size_t>(
      keys.size() - i, static_cast<size_t>(config_.host_vocabulary_size) - host_->size());
  if (host_n > 0) {
    std::vector<uint32_t> slots(host_n);
    RECSDK_RETURN_IF_ERROR(host_->Allocate(host_n, slots.data()));
    for (size_t j = 0; j < host_n; ++j, ++i) {
      packed[i] = bases_.Pack({Tier::kHost, slots[j]});
      host_keys_[slots[j]] = keys[i];
      RECSDK_RETURN_IF_ERROR(host_policy_->Insert(slots[j], 0, -1));
    }
  }
  if (i < keys.size()) {
    if (ssd_ == nullptr) return FullError(static_cast<int64_t>(keys.size() - i));
    std::vector<uint32_t> slots(keys.size() - i);
    RECSDK_RETURN_IF_ERROR(ssd_->Allocate(slots.size(), slots.data()));
    for (size_t j = 0; j < slots.size(); ++j, ++i) packed[i] = bases_.Pack({Tier::kSsd, slots[j]});
  }
  // (An SSD row's history goes into its record when the row is written: WriteRowsAt.)
  for (size_t j = 0; j < keys.size(); ++j) {
    if (bases_.Unpack(packed[j]).tier != Tier::kSsd) *History(packed[j]) = kNoHistory;
  }
  // Placed rows are not used by any batch: two policy steps take them out of the "current or
  // previous batch" guard, so the next batches can push them down.
  for (int i = 0; i < 2; ++i) {
    device_policy_->BeginBatch();
    host_policy_->BeginBatch();
    ++policy_batch_;
  }
  return absl::OkStatus();
}

void TableImpl::RemoveAt(uint32_t packed) {
  if (!tiered_) {
    MarkClean(packed);  // a dirty row holds its key (DirtyEntries)
    free_rows_.push_back(packed);
    return;
  }
  SetTierDirty(packed, false);  // a free slot is clean (DirtyEntries, ResetTracking)
  const RowLocation loc = bases_.Unpack(packed);
  switch (loc.tier) {
    case Tier::kDevice:
      device_policy_->Remove(loc.slot);
      device_keys_[loc.slot] = -1;
      device_held_[loc.slot] = 0;
      device_pins_[loc.slot] = 0;
      free_rows_.push_back(loc.slot);
      return;
    case Tier::kHost: {
      const uint32_t slot = loc.slot;
      // A swap-out on its way may be for this slot: it lands first (else it would land in the
      // slot's next row). Its error, if any, stays for the next settle to report.
      (void)SettleSwapOut();
      // The slot is allocated (the index pointed at it) and host slots are never pinned.
      (void)host_->Free({&slot, 1});
      host_policy_->Remove(slot);
      host_keys_[slot] = -1;
      return;
    }
    case Tier::kSsd: {
      const uint32_t slot = loc.slot;
      (void)ssd_->Free({&slot, 1});
      return;
    }
  }
}

Status TableImpl::ClearTiers() {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  next_row_ = 0;
  free_rows_.clear();
  if (!tiered_) return absl::OkStatus();
  std::vector<uint32_t> host_slots, ssd_slots;
  index_->ForEach([&](int64_t, uint32_t packed) {
    const RowLocation loc = bases_.Unpack(packed);
    if (loc.tier == Tier::kHost) host_slots.push_back(loc.slot);
    if (loc.tier == Tier::kSsd) ssd_slots.push_back(loc.slot);
  });
  if (!host_slots.empty()) RECSDK_RETURN_IF_ERROR(host_->Free(host_slots));
  if (!ssd_slots.empty()) RECSDK_RETURN_IF_ERROR(ssd_->Free(ssd_slots));
  std::fill(device_keys_.begin(), device_keys_.end(), -1);
  std::fill(host_keys_.begin(), host_keys_.end(), -1);
  std::fill(device_pins_.begin(), device_pins_.end(), 0);
  std::fill(device_held_.begin(), device_held_.end(), 0);
  // Every slot free and clean: the loader marks what it places.
  std::memset(Dirty(), 0, static_cast<size_t>(ssd_base_));
  std::fill(ssd_dirty_.begin(), ssd_dirty_.end(), 0);
  dirty_ssd_keys_.clear();
  dirty_ssd_overflow_ = false;
  dirty_ssd_compact_at_ = std::min(kMinDirtySsdKeys, dirty_ssd_limit_);
  leases_.clear();
  EvictionPolicyOptions p;
  p.capacity = static_cast<uint32_t>(device_rows_);
  RECSDK_ASSIGN_OR_RETURN(device_policy_, EvictionPolicy::Create(p));
  p.capacity = static_cast<uint32_t>(config_.host_vocabulary_size);
  RECSDK_ASSIGN_OR_RETURN(host_policy_, EvictionPolicy::Create(p));
  policy_batch_ = -1;
  return absl::OkStatus();
}

void TableImpl::DropSsdCleanPages() {
  if (!tiered_) return;
  std::lock_guard<std::mutex> lock(tier_mu_);
  if (ssd_ != nullptr) ssd_->DropCleanPages();
}

Status TableImpl::PrefillSsd(absl::Span<const int64_t> keys) {
  RECSDK_RETURN_IF_ERROR(SettleSwapOut());
  if (!tiered_ || ssd_ == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("PrefillSsd: table \"{}\" has no SSD tier; set host_vocabulary_size, "
                    "ssd_vocabulary_size and ssd_data_path",
                    name()));
  }
  if (config_.access_threshold > 0) {
    return absl::FailedPreconditionError(fmt::format(
        "PrefillSsd: table \"{}\" admits keys after {} uses (access_threshold); prefilled rows "
        "would skip admission, so prefill only tables with access_threshold 0",
        name(), config_.access_threshold));
  }
  std::lock_guard<std::mutex> lock(tier_mu_);
  ApplyPendingReleases();
  std::vector<int64_t> fresh;
  fresh.reserve(keys.size());
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(keys.size());
  for (int64_t k : keys) {
    if (index_->Find(k) == KeyIndex::kEmpty && seen.insert(k).second) fresh.push_back(k);
  }
  if (fresh.empty()) return absl::OkStatus();
  const int64_t room = config_.ssd_vocabulary_size - static_cast<int64_t>(ssd_->size());
  if (static_cast<int64_t>(fresh.size()) > room) {
    return absl::ResourceExhaustedError(fmt::format(
        "PrefillSsd: table \"{}\": the ssd tier has room for {} more rows (ssd_vocabulary_size "
        "{}), {} asked; raise ssd_vocabulary_size",
        name(), room, config_.ssd_vocabulary_size, fresh.size()));
  }
  const size_t rf = static_cast<size_t>(row_floats_);
  const size_t stride = rf + kHistoryFloats;
  std::vector<uint32_t> slots(fresh.size());
  RECSDK_RETURN_IF_ERROR(ssd_->Allocate(fresh.size(), slots.data()));
  std::vector<float> records(fresh.size() * stride);
  ParallelFor(fresh.size(), 1024, [&](size_t b, size_t e) {
    for (size_t j = b; j < e; ++j) {
      InitRowAt(records.data() + j * stride, fresh[j]);
      SetRecordHistory(records.data() + j * stride, rf, kNoHistory);
    }
  });
  if (Status st = ssd_->Write(slots, records.data()); !st.ok()) {
    // Nothing refers to the slots yet: give them back, and the table is as it was.
    (void)ssd_->Free(slots);
    return st;
  }
  for (size_t j = 0; j < fresh.size(); ++j) {
    const uint32_t packed = bases_.Pack({Tier::kSsd, slots[j]});
    index_->Insert(fresh[j], packed);
    // As a row a batch creates: changed since the last snapshot, never accessed.
    SetTierDirty(packed, true);
    NoteDirtySsd(fresh[j]);
    if (evicting_) *Timestamp(packed) = std::numeric_limits<int64_t>::min();
  }
  return absl::OkStatus();
}

TierStats TableImpl::Stats() const {
  TierStats s;
  if (!tiered_) {
    s.device_rows = size();
    return s;
  }
  std::lock_guard<std::mutex> lock(tier_mu_);
  s.device_rows = static_cast<int64_t>(device_rows_ - FreeRows());
  s.host_rows = host_->size();
  s.ssd_rows = ssd_ != nullptr ? ssd_->size() : 0;
  s.promoted = promoted_;
  s.demoted = demoted_;
  s.device_hits = device_hits_;
  s.device_lookups = device_lookups_;
  if (ssd_ != nullptr) {
    const SsdStore::ReadCounts reads = ssd_->read_counts();
    s.ssd_cached_reads = static_cast<int64_t>(reads.cached_rows);
    s.ssd_disk_reads = static_cast<int64_t>(reads.disk_rows);
  }
  return s;
}

namespace {
// ImplOf: the TableImpl behind `table`, seeing through a Session's LockedTable for the calls
// below that serialise the tier state themselves; null for other tables.
const TableImpl* ImplOf(const EmbeddingTable& table) {
  if (const auto* locked = dynamic_cast<const LockedTable*>(&table)) {
    return dynamic_cast<const TableImpl*>(&locked->SelfSynchronised());
  }
  return dynamic_cast<const TableImpl*>(&table);
}
TableImpl* ImplOf(EmbeddingTable& table) {
  return const_cast<TableImpl*>(ImplOf(static_cast<const EmbeddingTable&>(table)));
}
}  // namespace

bool IsTiered(const EmbeddingTable& table) {
  const TableImpl* impl = ImplOf(table);
  return impl != nullptr && impl->tiered();
}

Status ResolveWithLease(EmbeddingTable& table, absl::Span<const int64_t> unique_keys,
                        absl::Span<const uint32_t> counts, absl::Span<const int64_t> timestamps,
                        LookupMode mode, absl::Span<uint32_t> rows, const ResolveLease& lease) {
  // The caller holds the table's lock (a LockedTable's guard gives the table itself); a
  // LockedTable here would resolve without the lease.
  auto* impl = dynamic_cast<TableImpl*>(&table);
  if (impl == nullptr) {
    if (auto* collective = dynamic_cast<CollectiveTable*>(&table);
        collective != nullptr && lease.owner != nullptr) {
      return collective->ResolveLeased(unique_keys, counts, timestamps, mode, rows, lease);
    }
    if (lease.owner != nullptr && IsTiered(table)) {
      return absl::InternalError(fmt::format(
          "ResolveWithLease: table \"{}\" was passed with its lock wrapper; pass the table its "
          "guard gives (LockedTable::LockKeys)",
          table.name()));
    }
    return table.Resolve(unique_keys, counts, timestamps, mode, rows);
  }
  return impl->ResolveLeased(unique_keys, counts, timestamps, mode, rows, lease);
}

void ReleaseLeases(EmbeddingTable& table, const void* owner, int64_t before_batch) {
  if (TableImpl* impl = ImplOf(table)) {
    impl->ReleaseLeases(owner, before_batch);
    return;
  }
  // A sharded table serialises its batches' bookkeeping itself, as the tiers do.
  EmbeddingTable* inner = &table;
  if (auto* locked = dynamic_cast<LockedTable*>(&table)) inner = &locked->SelfSynchronised();
  if (auto* collective = dynamic_cast<CollectiveTable*>(inner)) {
    collective->ReleaseLeased(owner, before_batch);
  }
}

void DropSsdCleanPages(EmbeddingTable& table) {
  if (TableImpl* impl = ImplOf(table)) impl->DropSsdCleanPages();
}

Status PrefillSsd(EmbeddingTable& table, absl::Span<const int64_t> keys) {
  TableImpl* impl = ImplOf(table);
  if (impl == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("PrefillSsd: table \"{}\" is not a local tiered table", table.name()));
  }
  return impl->PrefillSsd(keys);
}

DeviceTierShape GetDeviceTierShape(const EmbeddingTable& table) {
  const TableImpl* impl = ImplOf(table);
  if (impl == nullptr || !impl->tiered()) return {};
  return {impl->DeviceTierRows(), impl->RowFloats()};
}

Status UseDeviceTierMemory(EmbeddingTable& table, std::unique_ptr<DeviceTierMemory> memory) {
  TableImpl* impl = ImplOf(table);
  if (impl == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "UseDeviceTierMemory: table \"{}\" is not a local table; give the memory to the table "
        "before it is wrapped",
        table.name()));
  }
  return impl->UseDeviceTierMemory(std::move(memory));
}

DeviceTierMemory* DeviceTierMemoryOf(const EmbeddingTable& table) {
  const TableImpl* impl = ImplOf(table);
  return impl != nullptr && impl->tiered() ? impl->device_memory() : nullptr;
}

int64_t DeviceTierBytes(const EmbeddingTable& table) {
  const TableImpl* impl = ImplOf(table);
  return impl != nullptr && impl->tiered() ? impl->DeviceTierBytes() : 0;
}

TierStats GetTierStats(const EmbeddingTable& table) {
  const TableImpl* impl = ImplOf(table);
  return impl != nullptr ? impl->Stats() : TierStats{};
}

}  // namespace recsdk::internal
