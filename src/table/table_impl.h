// table_impl.h: TableImpl, the EmbeddingTable of recsdk/table.h, and the helpers its files share.
// The class is split by concern over several files (STYLE.md, "one file, one concept"):
//   table.cc           creation, the row slab, row initialisation, single-key reads
//   table_lookup.cc    Resolve (the key index and admission) and the Gather* reads
//   table_update.cc    the sparse optimizers' updates, by row id or by address
//   table_evict.cc     eviction and set_threshold
//   table_export.cc    .npy export and import
//   table_snapshot.cc  Snapshot / LoadSnapshot (src/checkpoint/ owns the file format)
//
// Layout: rows live in one virtual-memory reservation (mmap, committed page by page as rows are
// first used), so a row id maps to an address with one multiply and a row never moves, even when
// a dynamically expanding table grows. Timestamps (only with eviction) sit in a parallel
// reservation. Keys awaiting admission are kept apart in a hash map; they have no row.
//
// Threading: see recsdk/table.h. Batch methods split work with oneTBB; each unique key (row) is
// touched by exactly one task, so there are no locks.
#ifndef RECSDK_TABLE_TABLE_IMPL_H_
#define RECSDK_TABLE_TABLE_IMPL_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "recsdk/table.h"
#include "src/common/parallel_for.h"
#include "src/common/prefetch.h"
#include "src/device/tier_memory.h"
#include "src/table/key_index.h"
#include "src/table/npy.h"
#include "src/table/sparse_optimizers_impl.h"
#include "src/table/tier_lease.h"
#include "src/table/tiers/eviction_policy.h"
#include "src/table/tiers/memory_store.h"
#include "src/table/tiers/row_store.h"
#include "src/table/tiers/ssd_store.h"

namespace recsdk::internal {

// A dynamically expanding table reserves this much address space for rows (committed lazily);
// capacity() reports the rows it holds (table.h documents the 2^40).
constexpr uint64_t kDynamicReserveBytes = 1ull << 40;
constexpr int64_t kDynamicInitialIndex = 1 << 16;

// AllocateSnapshotBuffer / FreeSnapshotBuffer: the memory of RowBufferAllocator and
// UninitializedAllocator: below 1 MiB operator new; from 1 MiB a mapping of its own, 2 MiB
// aligned, with transparent huge pages (MoveSnapshotPages can then move it). Allocate throws
// std::bad_alloc; Free takes the bytes as allocated.
void* AllocateSnapshotBuffer(size_t bytes);
void FreeSnapshotBuffer(void* p, size_t bytes) noexcept;

// UninitializedAllocator: RowBufferAllocator (recsdk/table.h) for any trivial T: buffers from
// AllocateSnapshotBuffer, elements left uninitialised by value-initialisation.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  T* allocate(size_t n) { return static_cast<T*>(AllocateSnapshotBuffer(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeSnapshotBuffer(p, n * sizeof(T)); }
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}  // NOLINT
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// KeyRows: (key, row) entries, in huge-page buffers when large (UninitializedAllocator): a 10M-row
// table's 160 MB of entries would otherwise take 40k page faults per snapshot.
using KeyRow = std::pair<int64_t, uint32_t>;
using KeyRows = std::vector<KeyRow, UninitializedAllocator<KeyRow>>;
// SortEntriesByKey: entries of distinct keys in ascending key order (a radix sort for large
// inputs).
void SortEntriesByKey(KeyRows& entries);
// SortEntriesByLocation: entries in ascending packed location (device, host, then SSD slots in
// file order): the order a streamed snapshot of a tiered table reads its tiers in.
void SortEntriesByLocation(KeyRows& entries);

constexpr uint64_t kHugePage = uint64_t{2} << 20;
// MapHugeAligned: an anonymous read-write mapping of `bytes` (rounded up to pages) that starts on
// a 2 MiB boundary, with MADV_HUGEPAGE; nullptr when mmap fails.
void* MapHugeAligned(uint64_t bytes, int extra_flags);
// MoveSnapshotPages: moves the pages of a snapshot buffer (AllocateSnapshotBuffer, `bytes` as
// allocated) to `to` (2 MiB aligned, mapped, at least `bytes` rounded up to pages) with mremap,
// replacing what was mapped there; the buffer stays allocated, now reading zeros. False, and
// nothing changed, when the buffer is not its own aligned mapping or the kernel refuses (then
// copy). No byte is copied and no page zeroed: a restore's rows become the table's slab.
bool MoveSnapshotPages(void* from, size_t bytes, void* to);

// SlabReservation: an anonymous mapping whose pages are committed on first touch, 2 MiB aligned.
class SlabReservation {
 public:
  SlabReservation() = default;
  explicit SlabReservation(uint64_t bytes)
      : bytes_((std::max<uint64_t>(bytes, 4096) + 4095) & ~uint64_t{4095}) {
    base_ = static_cast<char*>(MapHugeAligned(bytes_, MAP_NORESERVE));
  }
  uint64_t bytes() const { return bytes_; }
  ~SlabReservation() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  SlabReservation(SlabReservation&& o) noexcept : base_(o.base_), bytes_(o.bytes_) {
    o.base_ = nullptr;
  }
  SlabReservation& operator=(SlabReservation&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
  uint64_t bytes_ = 0;
};

struct PendingKey {
  float count = 0;
  int64_t timestamp = 0;
};

// kNoHistory: the use history of a row no batch has used yet (uses 0, last batch -1).
constexpr uint64_t kNoHistory = 0xFFFFFFFF00000000ull;

class TableImpl final : public EmbeddingTable {
 public:
  TableImpl(const TableConfig& config, const SparseOptimizerConfig& optimizer);
  Status Init();
  int64_t size() const override { return static_cast<int64_t>(index_->size()); }
  int64_t capacity() const override { return max_rows_; }
  int64_t data_time() const override { return data_time_; }
  int64_t MemoryBytes() const override;
  float* Row(uint32_t row) const {
    return reinterpret_cast<float*>(rows_base_ + static_cast<uint64_t>(row) * row_bytes_);
  }
  int64_t* Timestamp(uint32_t row) const {
    return reinterpret_cast<int64_t*>(timestamps_.base()) + row;
  }
  void PrefetchRow(uint32_t row) const {
    if (row >= kDefaultRow) return;
    PrefetchLines(Row(row), static_cast<size_t>(config_.dim) * sizeof(float));
  }
  // InitRow: embedding from the initializer stream of (seed, key), then fresh slots.
  void InitRow(uint32_t row, int64_t key) const;
  // InitRowAt: InitRow into the row_floats floats at w (any memory, e.g. an SSD record).
  void InitRowAt(float* w, int64_t key) const;
  // InitRows: InitRow(rows[at[j]], keys[at[j]]) for j < n, bitwise the same; uniform
  // initializers draw the rows' streams side by side (PhiloxStreamBlocks).
  void InitRows(const uint32_t* at, size_t n, const uint32_t* rows, const int64_t* keys) const;
  int64_t FreeRows() const {
    return static_cast<int64_t>(free_rows_.size()) + (device_rows_ - next_row_);
  }
  uint32_t AllocateRow();
  // AllocateRowFor: AllocateRow, bound to `key` (BindRow) so that delta snapshots find it.
  uint32_t AllocateRowFor(int64_t key) {
    const uint32_t row = AllocateRow();
    BindRow(row, key);
    return row;
  }
  Status FullError(int64_t needed) const;
  Status CheckKeyRange(absl::Span<const int64_t> keys) const;
  // The public batch calls run under CatchExceptions: a bad_alloc (a huge batch, a rehash)
  // becomes ResourceExhausted instead of leaving the library.
  Status Resolve(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override;
  Status ResolveUnguarded(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                          absl::Span<const int64_t> timestamps, LookupMode mode,
                          absl::Span<uint32_t> rows, const ResolveLease& lease);
  Status ResolveLeased(absl::Span<const int64_t> keys, absl::Span<const uint32_t> counts,
                       absl::Span<const int64_t> timestamps, LookupMode mode,
                       absl::Span<uint32_t> rows, const ResolveLease& lease);

  // ---- Tiers (table_tiers.cc). With host_vocabulary_size > 0 the key index maps a key to a
  // packed RowLocation (TierBases): device slots [0, device), host slots after them, SSD slots
  // last. Row ids handed to the graph (Resolve's rows, Gather, Apply, RowAddresses) are device
  // slots only, the slab below is the device tier, and per-row metadata (timestamps, change
  // tracking, use history) is indexed by packed location and moves with the row. Without tiers
  // the packed location is the row id and none of this runs.
  bool tiered() const { return tiered_; }
  int64_t DeviceTierBytes() const { return device_rows_ * static_cast<int64_t>(row_bytes_); }
  int64_t DeviceTierRows() const { return device_rows_; }
  int RowFloats() const { return row_floats_; }
  // UseDeviceTierMemory: the device tier's rows live in `memory` (device memory) from now on
  // instead of the host slab (device_tier_memory.h). FailedPrecondition unless the table is tiered
  // and holds no row yet, InvalidArgument when the memory's shape is not the tier's.
  Status UseDeviceTierMemory(std::unique_ptr<DeviceTierMemory> memory);
  DeviceTierMemory* device_memory() const { return device_memory_.get(); }
  Status InitTiers();
  // TierPlan: what a Resolve must move, decided before anything changes.
  struct TierPlan {
    std::vector<uint32_t> host_pos, ssd_pos;      // batch positions arriving from host / SSD
    std::vector<uint32_t> host_slots, ssd_slots;  // their slots there
    std::vector<float> host_rows, ssd_rows;       // their rows, read during planning
    std::vector<uint32_t> victims;                // device slots to demote to the host
    std::vector<uint32_t> cold;                   // host slots to demote to SSD
    std::vector<uint32_t> hits;                   // device slots the batch already has
    std::vector<int64_t> arriving_ts;             // metadata of the arriving rows
    std::vector<uint8_t> arriving_dirty;
    std::vector<uint64_t> arriving_hist;
    // Clear: empties every buffer, keeping its capacity for the next batch.
    void Clear();
  };
  Status PlanTiers(absl::Span<const int64_t> keys, absl::Span<const uint32_t> rows, size_t admits,
                   const ResolveLease& lease, TierPlan* plan);
  Status ExecuteTiers(absl::Span<const int64_t> keys, absl::Span<uint32_t> rows,
                      const std::vector<uint32_t>& admit, TierPlan& plan,
                      const ResolveLease& lease);
  void ReleaseLeasesLocked(const void* owner, int64_t before_batch);
  // ReleaseLeases: queues the release; with device tier memory it takes effect once the device's
  // compute work enqueued before the call has finished (an Event), never earlier.
  void ReleaseLeases(const void* owner, int64_t before_batch);
  // ApplyPendingReleases: the releases queued while tier_mu_ was busy (caller holds tier_mu_).
  // One whose fence has not passed is waited for when `wait` (the key stage's Resolve when its
  // batch lacks room without those rows, off the step's path; kReleaseFenceWait at most), else
  // left queued, as it is past that wait: its rows stay pinned, which is always safe.
  void ApplyPendingReleases(bool wait = true);
  // HasPendingReleases: whether releases are queued, not applied yet (their fence had not passed).
  bool HasPendingReleases();
  // ReadDeviceRows / WriteDeviceRows: whole rows of device slots to / from host memory: through
  // the device tier memory when there is one, else the slab.
  Status ReadDeviceRows(absl::Span<const uint32_t> slots, float* out) const;
  Status WriteDeviceRows(absl::Span<const uint32_t> slots, const float* in);
  // ReadRowsAt / WriteRowsAt: whole rows (embedding + slots) at packed locations, each tier in
  // bulk, and their use histories (History, or an SSD row's record): ReadRowsAt fills
  // history[i] when given; WriteRowsAt needs one per row (kNoHistory for a new row, the row's
  // own from ReadRowsAt to keep it). DataLoss from the SSD tier.
  Status ReadRowsAt(absl::Span<const uint32_t> packed, float* out,
                    uint64_t* history = nullptr) const;
  Status WriteRowsAt(absl::Span<const uint32_t> packed, const float* in, const uint64_t* history);
  // PlaceNew: packed locations for n new rows, in the fastest tier with free slots (no swaps);
  // the caller checked there is room (TierFreeRows). Inserts nothing into the index.
  Status PlaceNew(absl::Span<const int64_t> keys, uint32_t* packed);
  // ScrubLeases: the slots leave every lease (their rows are being evicted or replaced).
  void ScrubLeases(const absl::flat_hash_set<uint32_t>& device_slots);
  // RemoveAt: frees the row at a packed location (eviction, delta restore), from any tier.
  void RemoveAt(uint32_t packed);
  // ClearTiers: every tier empty (full restore).
  Status ClearTiers();
  Status ImportRowsTiered(const std::vector<int64_t>& keys, const float* values);
  Status LoadSnapshotTiered(const TableSnapshot& snap, int64_t needed);
  Status LoadFullSnapshotTiered(const TableSnapshot& snap);
  void LoadSnapshotRows(const TableSnapshot& snap, int64_t needed, RowBuffer* adopt);
  int64_t TierFreeRows() const;
  Status TwoBatchesError(size_t needed) const;
  TierStats Stats() const;
  void DropSsdCleanPages();
  // PrefillSsd: rows for the keys absent from the table, initialised as a first use would
  // initialise them, written straight into the SSD tier (see tier_lease.h).
  Status PrefillSsd(absl::Span<const int64_t> keys);
  // History: the use history of the row at a packed location on the device or host tier (an SSD
  // row's is in its record; this part of the reservation is never touched).
  uint64_t* History(uint32_t packed) const {
    return reinterpret_cast<uint64_t*>(history_.base()) + packed;
  }
  void CopyEmbedding(uint32_t row, float* out) const;
  // GatherRows: out[i, :] = embedding of rows[idx ? idx[i] : i] for i in [b, e), the rows
  // prefetched kAhead positions ahead (as many misses in flight as the roofline's gather).
  // Embeddings of whole cache lines (dim a multiple of 16) are copied line by line with
  // fixed-size copies, and all state lives in locals. The previous loop (a libc memcpy of runtime
  // size per row, members re-read through `this` after each store to `out`) ran ~3x slower than a
  // plain gather of the same slab memory (10M rows, dim 16); CopyEmbedding stays its reference.
  void GatherRows(const uint32_t* __restrict rows, const uint32_t* __restrict idx, size_t b,
                  size_t e, float* __restrict out) const;
  Status Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const override;
  Status GatherRestored(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                        absl::Span<float> out) const override;
  Status GatherPooled(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                      int64_t batch, int64_t n, Combiner combiner,
                      absl::Span<float> out) const override;
  Status GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore, int64_t batch, int64_t n,
                             Combiner combiner, int64_t out_stride,
                             absl::Span<float> out) const override;
  // CheckSpan: InvalidArgument naming `what` unless it holds `rows` rows of `per_row` floats.
  Status CheckSpan(const char* what, size_t size, size_t rows, size_t per_row) const;
  // CheckRowsAndRestore: every restore index points into unique_rows, and every row id is one
  // of this table's rows or a sentinel; a wrong one would read outside the slab.
  Status CheckRowsAndRestore(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore) const;
  Status PaddingMask(absl::Span<const uint32_t> unique_rows, absl::Span<const uint32_t> restore,
                     absl::Span<float> mask) const override;
  // UpdateBatch: one optimizer step on rows [b, e) of a batch, given by id (ids) or by address
  // (addrs). SGD, Adagrad and LazyAdam run the per-ISA kernels (bitwise equal to RowUpdater, their
  // reference twin); FTRL runs RowUpdater.
  void UpdateBatch(const RowUpdater& updater, const uint32_t* ids, float* const* addrs, size_t b,
                   size_t e, const float* grads) const;
  Status ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> grads,
                        int64_t step) override;
  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override;
  Status ApplyGradientsByAddress(absl::Span<float* const> addresses, absl::Span<const float> grads,
                                 int64_t step) override;
  StatusOr<int64_t> EvictStale() override;
  Status NoEviction() const;
  StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) override;
  Status SetAccessThreshold(int64_t access_threshold) override;
  uint32_t FindRow(int64_t key) const override;
  StatusOr<std::vector<float>> ReadRow(int64_t key) const override;
  float AdmissionCount(int64_t key) const override;
  // Entries sorted by key: checkpoints and exports are canonical whatever the insertion order.
  KeyRows SortedEntries() const;
  std::string KeyDescr() const { return config_.key_dtype == DType::kInt32 ? "<i4" : "<i8"; }
  Status WriteKeys(const std::string& path, const std::vector<int64_t>& keys) const;
  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override;
  Status ExportNpyUnguarded(const std::string& keys_path, const std::string& values_path) const;
  static StatusOr<std::vector<int64_t>> KeysFrom(const NpyArray& a, const std::string& path);
  Status ImportNpy(const std::string& keys_path, const std::string& values_path) override;
  Status ImportNpyUnguarded(const std::string& keys_path, const std::string& values_path);
  StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) override;
  StatusOr<TableSnapshot> SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) override;
  // SnapshotImpl: both of the above; the rows go to `sink` when it is not null.
  StatusOr<TableSnapshot> SnapshotImpl(SnapshotKind kind, SnapshotRowSink* sink);
  Status SettleSsdHold(bool committed) override;
  // OfferSsdSegments: a full streamed snapshot's SSD-resident entries (entries[first_ssd, n),
  // sorted by location) offered to the sink by reference; prepares the SSD store's hold (all of
  // them when taken, none otherwise). Sets *taken. tier_mu_ held.
  Status OfferSsdSegments(const KeyRows& entries, size_t first_ssd, TableSnapshot& snap,
                          SnapshotRowSink& sink, bool* taken);
  // RelocateHeldSsd: before rows are written in place (an import, a delta loaded on top), each
  // SSD-resident row whose slot the latest checkpoint holds moves to a fresh slot (index,
  // timestamp and change flag with it; `packed` updated), so the checkpoint's record stays as it
  // was. The row's content is not copied: the caller writes the whole record next. tier_mu_ held.
  Status RelocateHeldSsd(absl::Span<const int64_t> keys, absl::Span<uint32_t> packed);
  Status LoadSnapshot(const TableSnapshot& snap) override;
  Status AdoptSnapshot(TableSnapshot&& snap) override;
  // LoadSnapshotImpl: both of the above; `adopt` (snap's rows) may be moved into the slab.
  Status LoadSnapshotImpl(const TableSnapshot& snap, RowBuffer* adopt);
  Status CheckSnapshots(absl::Span<const TableSnapshot> chain) override;
  // CheckSnapshotContent: the checks of one snapshot that need none of the table's contents
  // (identity, array lengths, sorted unique keys, key range).
  Status CheckSnapshotContent(const TableSnapshot& snap) const;
  // Change tracking for delta snapshots: one byte per row (set by whatever writes the row) and
  // the keys evicted since the last snapshot.
  uint8_t* Dirty() const { return reinterpret_cast<uint8_t*>(dirty_.base()); }
  // TierDirty / SetTierDirty: the change-tracking flag at any packed location of a tiered
  // table: the Dirty() byte of a device or host location, a bit of ssd_dirty_ for an SSD slot
  // (host bytes per SSD row; that part of the byte reservation is never touched).
  bool TierDirty(uint32_t packed) const {
    if (packed < ssd_base_) return Dirty()[packed] != 0;
    const uint32_t slot = packed - ssd_base_;
    return (ssd_dirty_[slot >> 6] >> (slot & 63)) & 1;
  }
  void SetTierDirty(uint32_t packed, bool dirty) {
    if (packed < ssd_base_) {
      Dirty()[packed] = dirty ? 1 : 0;
      return;
    }
    const uint32_t slot = packed - ssd_base_;
    const uint64_t bit = uint64_t{1} << (slot & 63);
    ssd_dirty_[slot >> 6] = dirty ? (ssd_dirty_[slot >> 6] | bit) : (ssd_dirty_[slot >> 6] & ~bit);
  }
  void MarkDirty(uint32_t row) const { Dirty()[row] = 1; }
  void MarkClean(uint32_t row) const { Dirty()[row] = 0; }
  // BindRow: records which key a row holds (untiered tables), so that a delta snapshot finds
  // its keys from the dirty rows alone, in O(changed) instead of a walk of the key index.
  void BindRow(uint32_t row, int64_t key) const {
    if (!tiered_) reinterpret_cast<int64_t*>(row_keys_.base())[row] = key;
  }
  // DirtyEntries: (key, row) of every row changed since the last snapshot, in O(rows used / 8 +
  // changed). Tiered tables: the device and host rows from their change bytes (O(device + host
  // slots) / 8 + changed, each key from device_keys_ / host_keys_ checked against the index) and
  // the SSD rows from dirty_ssd_keys_ (O(its length)); after an overflow of that list, a walk of
  // the whole key index (O(rows), the only way before issue 29's O(changed) delta).
  KeyRows DirtyEntries() const;
  // ResetTracking: every row clean, no removed keys. Tiered: O(device + host slots) bytes cleared
  // and the SSD bits of dirty_ssd_keys_ (or their whole bitmap, 1 bit per slot, when smaller);
  // re-arms the list after an overflow.
  void ResetTracking();
  // NoteDirtySsd: the row of `key` has just reached the SSD tier dirty (a host -> SSD demotion, a
  // prefill, an import): a delta will find it through dirty_ssd_keys_. Call it once the key's
  // index entry and bit are in place. O(1) amortised: when the list reaches
  // dirty_ssd_compact_at_ it keeps each key whose row is on SSD and dirty, once (O(list)); if more
  // than half of dirty_ssd_limit_ remain, it drops the list and deltas fall back to the index
  // walk until the next ResetTracking. tier_mu_ held.
  void NoteDirtySsd(int64_t key);
  // SetDirtySsdKeyLimit: dirty_ssd_limit_ (tests reach the overflow fallback with it).
  void SetDirtySsdKeyLimit(size_t limit);

 private:
  static constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();
  // kMinDirtySsdKeys: the shortest dirty_ssd_keys_ that is compacted, and its smallest limit.
  static constexpr size_t kMinDirtySsdKeys = 4096;
  const int row_floats_;
  const uint64_t row_bytes_;
  const bool evicting_;
  const bool admitting_;
  const uint64_t seed_;
  const absl::flat_hash_set<int64_t> padding_;
  int64_t max_rows_ = 0;
  std::unique_ptr<KeyIndex> index_;
  SlabReservation slab_;
  char* rows_base_ = nullptr;  // the device tier's row 0: slab_.base(), or device tier memory
  std::unique_ptr<DeviceTierMemory> device_memory_;  // tiered tables on a device (or null)
  SlabReservation timestamps_;
  int64_t next_row_ = 0;
  std::vector<uint32_t> free_rows_;
  absl::flat_hash_map<int64_t, PendingKey> pending_;
  int64_t data_time_ = kNoTime;
  // Tiers (tiered_ only; see InitTiers).
  bool tiered_ = false;
  int64_t device_rows_ = 0;  // the device tier's rows: all of max_rows_ without tiers
  // ssd_spare_: SSD slots beyond ssd_vocabulary_size, for the slots kept for the latest
  // checkpoint (SsdStore::PrepareHold; up to ssd_vocabulary_size, as 32-bit locations allow).
  int64_t ssd_spare_ = 0;
  TierBases bases_{0, 0, 0};
  std::unique_ptr<MemoryStore> host_;
  std::unique_ptr<SsdStore> ssd_;
  std::unique_ptr<EvictionPolicy> device_policy_;
  std::unique_ptr<EvictionPolicy> host_policy_;
  std::vector<int64_t> device_keys_;   // device slot -> key
  std::vector<int64_t> host_keys_;     // host slot -> key (-1 free)
  std::vector<uint16_t> device_pins_;  // device slot -> leases pinning it
  std::vector<uint8_t> device_held_;   // device slot -> holds a row
  struct Lease {
    const void* owner;
    int64_t batch;
    std::vector<uint32_t> slots;
  };
  std::deque<Lease> leases_;
  int64_t auto_batch_ = 0;
  SlabReservation history_;  // per packed location: uses (low 32 bits), last batch (high 32)
  int64_t policy_batch_ = -1;
  int64_t promoted_ = 0, demoted_ = 0, device_hits_ = 0, device_lookups_ = 0;
  std::mutex release_mu_;  // guards pending_releases_ (never held with tier_mu_ waited for)
  struct PendingRelease {
    const void* owner;
    int64_t before_batch;
    std::shared_ptr<Event> after;  // null: at once
  };
  std::vector<PendingRelease> pending_releases_;
  // The last ExecuteTiers' victims on their way down (device tier memory only): their host slots,
  // allocated but not written yet, and the ReadAsync bringing their rows. SettleSwapOut writes
  // them into host_ (after the copy, WaitRead) before anything reads, frees or overwrites host
  // rows.
  struct PendingSwapOut {
    std::vector<uint32_t> host_slots;
    PendingRows rows;
  };
  mutable std::mutex swap_out_mu_;  // guards swap_out_ (ReadRowsAt may run under a shared lock)
  mutable std::optional<PendingSwapOut> swap_out_;
  Status SettleSwapOut() const;
  // tier_failure_: set when a swap between tiers failed halfway (in ExecuteTiers, or as the host
  // tier took a swap-out's rows). The index may then name slots whose rows never arrived, so
  // every later access to the tiers returns it (SettleSwapOut, which every such access calls
  // first) instead of serving or saving wrong rows. Guarded by swap_out_mu_.
  mutable Status tier_failure_;
  // FailTiers: records `cause` as the tier failure (the first one stays) and returns it.
  Status FailTiers(const Status& cause) const;
  Status FailTiersLocked(const Status& cause) const;
  mutable std::mutex tier_mu_;  // guards the tier state: Resolves of a tiered table take turns
  SlabReservation dirty_;       // one byte per row: changed since the last Snapshot
  uint32_t ssd_base_ = std::numeric_limits<uint32_t>::max();  // first SSD packed location
  std::vector<uint64_t> ssd_dirty_;  // tiered: one bit per SSD slot, as dirty_ (TierDirty)
  // dirty_ssd_keys_: keys whose rows reached the SSD tier dirty since the last ResetTracking
  // (NoteDirtySsd), so a delta finds its SSD rows without walking the key index, which has no
  // order by tier and at scale holds ~100x the rows a delta writes (docs/tiers.md, "Deltas of a
  // tiered table"). It may repeat a key and hold keys whose rows have since gone up, been removed
  // or cleaned: the delta checks each against the index and the row's dirty bit. Invariant: every
  // set bit of ssd_dirty_ is on a live slot whose key is in the list (or the list overflowed).
  // Memory: 8 bytes an entry, at most dirty_ssd_limit_ entries (compacted on the way), i.e. at
  // most 1 byte per SSD vocabulary row (2 with the vector's spare capacity); past it
  // dirty_ssd_overflow_ and the list is freed: deltas walk the index until ResetTracking.
  std::vector<int64_t> dirty_ssd_keys_;
  size_t dirty_ssd_limit_ = 0;       // ssd_vocabulary_size / 8, at least kMinDirtySsdKeys
  size_t dirty_ssd_compact_at_ = 0;  // the list's length that triggers the next compaction
  bool dirty_ssd_overflow_ = false;
  // ExecuteTiers' buffers for the rows it moves down (host -> SSD, device -> host), kept from
  // batch to batch under tier_mu_. Allocated per batch, at sizes that vary, they fragmented
  // malloc's heap: after the host tier filled, RSS grew ~1.4 MB/s with the live bytes flat
  // (docs/tiers.md, "RSS").
  std::vector<float> move_rows_;
  std::vector<uint32_t> move_slots_;
  TierPlan tier_plan_;  // the tiered Resolve's plan, reused under tier_mu_ for the same reason
  SlabReservation row_keys_;              // untiered: row -> the key it was last bound to (BindRow)
  absl::flat_hash_set<int64_t> removed_;  // keys evicted since the last Snapshot
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TABLE_IMPL_H_
