// ssd_store.h: the SSD tier's RowStore: fixed-size records in preallocated files under a list of
// folders (ssd_data_path), used in order as they fill.
//
// Layout. Slot s lives in file s / rows_per_file at byte kHeaderBytes + (s % rows_per_file) *
// record_bytes of "<file_name>.<index>.rows"; a record is the row and a 4-byte CRC32C of it
// seeded with the slot, checked on every read (a corrupt or misplaced record is DataLoss). Files
// are created as allocation needs them (whole files, their blocks reserved with posix_fallocate, so
// a full disk shows up when a file is created, never as a failed row write later), in the first
// folder of the list that has room. Each file opens with a 4 KiB header (magic, version, row size,
// rows per file, file index) that Open checks. Allocation is next fit: the free slots in slot
// order from where the last allocation stopped, wrapping at the end of the files made, so the rows
// a swap demotes land in runs of adjacent slots (one pwritev a run, few pages dirtied; stop 21,
// docs/tiers.md) rather than in the scattered slots its promotions just freed, as the earlier
// last-freed-first reuse did. Freed slots are reused before any new file is made; slots are never
// moved, so there is nothing to compact (a table's SSD files are as large as its largest SSD
// population, at most ssd_vocabulary_size rows). Finding a free slot skips full 64-slot words
// through a summary bitmap; with the files nearly full, one Allocate may scan the whole summary
// (a bit per 64 slots).
//
// I/O. Reads, where the kernel has io_uring (SsdReadPath::kAuto): the slots are sorted, adjacent
// rows merged (up to 32 KiB), and every read goes through the page cache on a raw io_uring ring
// (uring.h; no liburing needed), 64 in flight, in two passes: first each read flagged
// RWF_NOWAIT, which the kernel answers inline, in the one submitting system call, when its pages
// are cached (rows written since, or read lately); then the rest, which the kernel reads from
// the disk asynchronously. The rows are copied out of per-ring-entry buffers and checked.
// SsdReadPath::kDirect reads the whole 4 KiB blocks with O_DIRECT instead (the default until
// stop 20): as fast on cold pages, but a direct read of a block written since first waits for
// its writeback, which made two thirds of an SSD-tiered Resolve (docs/tiers.md). Elsewhere
// (tmpfs, no io_uring) and for all writes, the files are buffered and opened POSIX_FADV_RANDOM
// (a cold row costs one page read, no read-ahead): Read and Write sort the slots, merge adjacent
// records into one preadv/pwritev straight from or into the caller's rows, first start the page
// reads of runs not in the page cache at once with posix_fadvise(WILLNEED) (which runs are
// cached is asked with RWF_NOWAIT reads on the ring, one system call for all), then do the
// runs, inline or on `io_threads` threads. The WILLNEED pass matters most for writes: a
// buffered write to part of an uncached page reads the page first, under the file's inode lock,
// i.e. one at a time. Writes stay buffered because a row is smaller than a block: direct writes
// would need our own read-modify-write (and ext4 runs buffered writes on io_uring's worker
// threads, so the ring does not batch them).
//
// Host memory per SSD-resident row (the goal is <= 24 bytes): this store keeps 1 bit per
// slot (allocated or not), 1 bit per 64 slots (the summary of words with a free slot) and a hash
// entry per *pinned* slot (stop 20 and before: 4 bytes per *free* slot, the free list); the table
// adds its key index entry (12.8 bytes per entry at load 0.85 = 15.1 bytes, holding the packed
// RowLocation), 1 bit of change tracking and, with eviction, 8 bytes of last-access timestamp; a
// row's use history rides in its SSD record (the table's records are the row and 8 bytes of
// history). Total: 15.1 + 0.125 + 0.125 = 15.3 bytes, 23.3 with eviction; ssd_store_bench's
// `host_bytes_per_ssd_row` counter measures it with the real KeyIndex and this store filled to
// capacity.
//
// Errors. No room for more rows (the capacity reached, every folder full or gone) is
// ResourceExhausted naming the tier, the folders and each one's reason, returned before any slot
// was handed out; the store stays usable (its rows readable, freed slots reusable, and a later
// Allocate tries the folders again). A file that is short, or whose header does not match, is
// DataLoss naming the file (Open). An I/O error, or a record failing its checksum, is DataLoss
// naming the file and the offset.
//
// Measurements (benchmarks/ssd_store_bench.cc; this VM: 2 shared cores, a virtio disk, other
// builds running; 256-byte rows, 1M rows, cold pages; several runs, so read them as ranges):
//   disk, our fio-like loops:  sequential 1 MiB read 1.1-2.6 GB/s, write 0.7-1.2 GB/s;
//                              random 4 KiB read: 5-8k/s at depth 1 (one thread), 30-56k/s on 8
//                              threads, 44-60k/s on 32 threads, 73-83k/s at depth 64 through
//                              io_uring with O_DIRECT (the baseline of the ratio below);
//                              random 4 KiB write: 6-9k/s at depth 1, 28-46k/s on 8-32 threads.
//   random row reads, cold:    stop 20, same bench, load 3.5: kAuto 133k rows/s (0.69 of the
//                              disk's random 4 KiB reads), kDirect 140k (0.97), preadv 84k.
//   rows written since, cached (a swap's case; 90 rows of 388 bytes out of 30000, after 175
//                              writes): kAuto 0.6-1.3 us a row, kDirect 19 us (writeback).
//   random row reads:          direct path (io_uring + O_DIRECT, kDirect): 56-130k rows/s,
//                              row_read_vs_random_read 0.92-1.03 (goal >= 0.5), level with a
//                              plain io_uring O_DIRECT loop over the same rows (0.98-1.04x);
//                              buffered with the WILLNEED pass: 31-52k rows/s inline, 30-63k on
//                              4 threads (0.35-0.86 of the baseline); buffered without the pass
//                              (the first version): 6-7k rows/s inline, 41-42k on 4 threads.
//   random row writes          with the WILLNEED pass: 10-24k rows/s inline, 15-21k on 4 threads
//   (+ fdatasync):             (0.41-1.12 of the disk's random 4 KiB writes at depth 8-32);
//                              without it: 4-6k inline, 6-7k on 4 threads.
//   bulk write to adjacent slots (a demotion's shape) + fdatasync: 200-400 MB/s, 0.24-0.45 of
//                              the disk's sequential write.
//   against RocksDB 7.8 (Debian's librocksdb-dev; the same 1M rows, direct I/O, no compression,
//   4 KiB blocks, 8 MiB block cache, bulk-loaded and fully compacted, its best case for reads):
//                              random reads (batched MultiGet) 6.5-7.3k rows/s, 0.066-0.069 of
//                              the store; 131k random overwrites: RocksDB 72-80k rows/s with a
//                              write amplification of 2.0 (WAL + flush + the compactions it set
//                              off; a long run rewrites the levels and raises it), the store
//                              39-43k rows/s with 6.9-7.1 (a 256-byte row dirties a 4 KiB page).
// Choice: our own store, reads through io_uring (page cache first; O_DIRECT until stop 20),
// writes buffered with the WILLNEED pass, io_threads 0 (threads measured no faster once reads are
// asynchronous, and cost a pool per table). A swap moves about as many rows up (reads) as down
// (writes), so per row moved up and one down the store costs ~35 us against ~165 us for RocksDB;
// RocksDB's better writes do not make up for reads 15x slower. RocksDB would give crash consistency
// per write (its WAL), which the store does not (see docs/tiers.md: checkpoints must copy SSD
// rows). liburing-dev and librocksdb-dev are used only by the bench, when installed.
//
// Threading: as RowStore (row_store.h): one thread changes allocation state; Read and Write of
// distinct slots may be called concurrently (with io_threads > 0 they take turns on the pool).
#ifndef RECSDK_TABLE_TIERS_SSD_STORE_H_
#define RECSDK_TABLE_TIERS_SSD_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/table/tiers/row_store.h"

namespace recsdk::internal {

class IoPool;
class Uring;

// SsdReadPath: how the SSD store reads rows.
enum class SsdReadPath : uint8_t {
  // kAuto: through io_uring where the kernel has it, else kBuffered. The records are read
  // through the page cache: first every read flagged RWF_NOWAIT (pages still cached, e.g. rows
  // written since, are copied inline in one system call), then the rest, which the kernel reads
  // from the disk asynchronously, up to 64 in flight (see Measurements).
  kAuto = 0,
  // kBuffered: preadv through the page cache.
  kBuffered = 1,
  // kDirect: O_DIRECT reads of the rows' 4 KiB blocks through io_uring, around the page cache
  // (the default until stop 20), else kBuffered. Fastest on cold pages, but a read of a block
  // written since waits for its writeback first.
  kDirect = 2,
};

struct SsdStoreOptions {
  // row_floats: floats per row; > 0.
  int row_floats = 0;
  // capacity: rows (ssd_vocabulary_size); > 0.
  uint32_t capacity = 0;
  // folders: ssd_data_path, used in order as they fill; at least one.
  std::vector<std::string> folders;
  // file_name: the files' name stem, "<file_name>.<index>.rows" (the table's name); letters,
  // digits, '_', '-' and '.', not empty.
  std::string file_name;
  // rows_per_file: records per file; 0 (default) picks files of about 64 MiB.
  uint32_t rows_per_file = 0;
  // io_threads: threads that run buffered reads and writes besides the caller's; 0 (default)
  // runs them inline, which measured about as fast as 4 threads once reads are asynchronous
  // (see Measurements above); in [0, 64].
  int io_threads = 0;
  // read_path: default kAuto (measured fastest where available).
  SsdReadPath read_path = SsdReadPath::kAuto;
  // row_limit: the most rows allocated at once; 0 (default) is `capacity`. A table sets
  // `capacity` above it (its ssd_vocabulary_size) to leave room for the slots kept for the latest
  // checkpoint (HoldForCheckpoint) beside the live rows.
  uint32_t row_limit = 0;
};

class SsdStore final : public RowStore {
 public:
  static constexpr uint64_t kHeaderBytes = 4096;
  // kRecordCrcBytes: each record is the row, then the masked CRC32C of the row seeded with the
  // slot (read back and checked on every read).
  static constexpr size_t kRecordCrcBytes = 4;

  // Create: a new, empty store. Removes files of an earlier store of the same file_name in the
  // folders. InvalidArgument for bad options; no file is made until Allocate needs one.
  static absl::StatusOr<std::unique_ptr<SsdStore>> Create(const SsdStoreOptions& options);
  // Open: the store whose files are in the folders (from a run with the same options), with
  // `live_slots` allocated and every other slot free (the live slots come from the checkpoint's
  // key -> location map). DataLoss naming the file when a file is short or its header does not
  // match the options, or when a live slot lies beyond the files found.
  static absl::StatusOr<std::unique_ptr<SsdStore>> Open(const SsdStoreOptions& options,
                                                        absl::Span<const uint32_t> live_slots);
  ~SsdStore() override;

  uint32_t size() const override { return size_; }
  absl::Status Allocate(size_t n, uint32_t* slots) override;
  absl::Status Free(absl::Span<const uint32_t> slots) override;
  absl::Status Read(absl::Span<const uint32_t> slots, float* out) const override;
  absl::Status Write(absl::Span<const uint32_t> slots, const float* in) override;
  absl::Status Pin(absl::Span<const uint32_t> slots) override;
  absl::Status Unpin(absl::Span<const uint32_t> slots) override;
  bool IsPinned(uint32_t slot) const override { return pins_.contains(slot); }
  bool IsAllocated(uint32_t slot) const override {
    return ((allocated_[slot >> 6] >> (slot & 63)) & 1) != 0 &&
           (kept_.empty() || ((kept_[slot >> 6] >> (slot & 63)) & 1) == 0);
  }

  // Copy-on-write slots for checkpoints that link the files instead of copying the rows
  // (docs/tiers.md, "Checkpoints without a second copy"). A record never changes while its slot
  // is allocated except by Write to that slot, so a checkpoint may refer to the slots live at its
  // save as long as none of them is handed out again: PrepareHold (at the save, after Sync) notes
  // the live slots; CommitHold (once the checkpoint is committed) makes them the held set and
  // releases the previous one; AbortHold (the save failed) forgets the prepared set. A held slot
  // that is freed stays reserved ("kept": not allocated, not reusable) until the next CommitHold.
  // Before it releases the previous set, CommitHold writes that set's generation into every
  // file's header (ReleasedGeneration), so a checkpoint of an older generation, whose files are
  // hard links to the same inodes, is refused at restore instead of reading reused slots.
  // PrepareHold: with `hold_rows`, Sync, then notes the live slots; without, prepares to hold
  // none (a checkpoint that copied the rows: CommitHold then only releases the previous set).
  // Returns the generation the checkpoint records.
  [[nodiscard]] absl::StatusOr<uint64_t> PrepareHold(bool hold_rows = true);
  // CommitHold: DataLoss naming the file when a header cannot be written (nothing released then).
  [[nodiscard]] absl::Status CommitHold();
  void AbortHold() {
    next_held_.clear();
    prepared_ = false;
  }
  // IsHeld: whether the committed checkpoint refers to the slot (a Write there would change it).
  bool IsHeld(uint32_t slot) const {
    return !held_.empty() && ((held_[slot >> 6] >> (slot & 63)) & 1) != 0;
  }
  // kept_rows: held slots freed since the hold (reserved until the next CommitHold).
  uint32_t kept_rows() const { return kept_count_; }
  // held_live_rows: live rows whose slots the hold keeps (each becomes kept when freed).
  uint32_t held_live_rows() const { return held_live_; }
  // ReleasedGeneration: the highest generation whose hold a CommitHold released, as written in
  // the files' headers (0: none); read by Open.
  uint64_t ReleasedGeneration() const { return released_generation_; }
  // generation: the generation of the committed hold (0: none).
  uint64_t generation() const { return generation_; }
  // row_limit: the most rows allocated at once (SsdStoreOptions::row_limit).
  uint32_t row_limit() const { return row_limit_; }

  // Sync: fdatasync every file (a checkpoint calls it before it refers to the files).
  // Reserve: makes the files `rows` live slots need now (no slot is allocated), so that a later
  // Allocate of up to `rows` rows in all makes no file and cannot find the disk full. Slots
  // already kept for a checkpoint are counted on top, and so are `freeing_held`: held slots the
  // caller is about to free, which stay occupied as kept slots (HeldAmong counts them).
  // ResourceExhausted naming the folders when a file cannot be made, or when `rows` is above
  // the capacity; nothing is lost either way.
  [[nodiscard]] absl::Status Reserve(uint64_t rows, uint64_t freeing_held = 0);
  // HeldAmong: how many of `slots` the committed checkpoint holds.
  uint64_t HeldAmong(absl::Span<const uint32_t> slots) const {
    uint64_t n = 0;
    for (uint32_t s : slots) n += IsHeld(s) ? 1 : 0;
    return n;
  }
  [[nodiscard]] absl::Status Sync();
  // DropPageCache: Sync, then ask the kernel to drop the files' cached pages, so the next reads
  // come from the disk (for benchmarks that measure the disk, not the page cache).
  [[nodiscard]] absl::Status DropPageCache();
  // DropCleanPages: asks the kernel to drop the files' cached pages that are clean (no Sync: rows
  // written since stay cached until written back), as if memory were short (benchmarks).
  void DropCleanPages() const;

  uint32_t rows_per_file() const { return rows_per_file_; }
  // file_name: the files' name stem (SsdStoreOptions::file_name).
  const std::string& file_name() const { return file_name_; }
  // record_bytes: bytes of one record on disk (the row and its checksum).
  size_t record_bytes() const { return row_bytes() + kRecordCrcBytes; }
  // FilePaths: the files made so far, in slot order.
  std::vector<std::string> FilePaths() const;
  // HostMemoryBytes: host memory this store uses for its bookkeeping (bitmap, free list, pins,
  // file table, read buffers), for the bytes-per-row figure.
  uint64_t HostMemoryBytes() const;
  // FixedHostBytes: the part of HostMemoryBytes that does not grow with the rows (the object,
  // the file table, the direct path's read buffers: 64 x 32 KiB once the first read is made).
  uint64_t FixedHostBytes() const;
  // ring_reads: whether reads go through io_uring (kAuto or kDirect, where the kernel and, for
  // kDirect, the file system allow it).
  bool ring_reads() const { return ring_ && uring_ != nullptr; }
  // ReadCounts: rows io_uring reads found in the page cache (kAuto's first pass) and rows they
  // read from the disk, since the store was made (the preadv path counts neither).
  struct ReadCounts {
    uint64_t cached_rows = 0;
    uint64_t disk_rows = 0;
  };
  ReadCounts read_counts() const {
    std::lock_guard<std::mutex> lock(direct_mu_);
    return read_counts_;
  }

 private:
  struct File {
    int fd = -1;
    int direct_fd = -1;  // O_DIRECT, read-only; -1 when not used
    std::string path;
  };
  // Run: up to kMaxRunSlots adjacent records of one file: [first, first + count) slots, whose
  // rows are rows[0, count) (pointers into the caller's buffer).
  struct Run {
    uint32_t first;
    uint32_t count;
    size_t row_begin;  // index into the sorted (slot, row pointer) list
  };

  SsdStore(const SsdStoreOptions& options, uint32_t rows_per_file);
  std::string Label() const;
  uint32_t RecordCrc(uint32_t slot, const float* row) const;
  // CheckRecord: DataLoss naming the file, the slot and the offset when `crc` is not the row's.
  absl::Status CheckRecord(uint32_t slot, const float* row, uint32_t crc) const;
  std::string FileName(uint64_t index) const;
  uint32_t FileRows(uint64_t index) const;
  // Grow: makes files until slots [0, rows) have files; ResourceExhausted (nothing lost) when a
  // file cannot be made in any folder.
  absl::Status Grow(uint64_t rows);
  absl::Status MakeFile(uint64_t index, const std::string& folder, File* file) const;
  // DoIo: sorted slot/row pairs -> runs -> preadv/pwritev on the pool.
  absl::Status DoIo(std::vector<std::pair<uint32_t, float*>>& rows, bool write) const;
  // ReadRing: reads slot/row pairs through io_uring (direct_mu_ held).
  // *unsupported is set when the kernel refused a read with EINVAL (O_DIRECT not really
  // supported); the caller then falls back to the buffered path.
  absl::Status ReadRing(const std::vector<std::pair<uint32_t, float*>>& rows,
                        bool* unsupported) const;
  // MakeBounce: the direct path's read buffers, made on first use (direct_mu_ held).
  absl::Status MakeBounce() const;
  // CachedRuns: (*cached)[r] = whether every page of runs[r] (first slot, count; one file) is in
  // the page cache, asked with RWF_NOWAIT reads through the ring; left false where it cannot
  // tell (no ring, a run longer than a read buffer).
  void CachedRuns(const std::vector<std::pair<uint64_t, uint32_t>>& runs,
                  std::vector<bool>* cached) const;
  // OpenDirect: the O_DIRECT descriptor of a file, or turns the direct path off for good.
  void OpenDirect(File* file);
  void SetAllocated(uint32_t slot, bool on) {
    const uint32_t w = slot >> 6;
    if (on) {
      allocated_[w] |= uint64_t{1} << (slot & 63);
      if (allocated_[w] == ~uint64_t{0}) has_free_[w >> 6] &= ~(uint64_t{1} << (w & 63));
    } else {
      allocated_[w] &= ~(uint64_t{1} << (slot & 63));
      has_free_[w >> 6] |= uint64_t{1} << (w & 63);
    }
  }
  // NextFree: the first free slot in [from, limit), or limit when there is none.
  uint64_t NextFree(uint64_t from, uint64_t limit) const;

  std::vector<std::string> folders_;
  std::string file_name_;
  uint32_t rows_per_file_;
  size_t first_folder_ = 0;  // folders before this one reported no space
  std::vector<File> files_;
  uint64_t file_rows_ = 0;  // slots [0, file_rows_) have files
  std::vector<uint64_t> allocated_;
  // has_free_: bit w is set when word w of allocated_ has a free slot (a clear bit), so a scan for
  // free slots skips full words 64 at a time.
  std::vector<uint64_t> has_free_;
  uint64_t cursor_ = 0;  // Allocate's next fit starts here
  uint32_t size_ = 0;
  uint32_t row_limit_ = 0;
  // Copy-on-write slots (PrepareHold): bitmaps over the slots, empty until the first hold.
  // kept_ slots are still set in allocated_ (so Allocate skips them) but not counted in size_.
  std::vector<uint64_t> held_;
  std::vector<uint64_t> next_held_;
  std::vector<uint64_t> kept_;
  uint32_t kept_count_ = 0;
  uint32_t held_live_ = 0;
  bool prepared_ = false;
  uint64_t generation_ = 0;
  uint64_t released_generation_ = 0;
  absl::flat_hash_map<uint32_t, uint32_t> pins_;  // slot -> pin count, pinned slots only
  std::unique_ptr<IoPool> pool_;
  // The ring read path: on when read_path is not kBuffered and io_uring works (and for kDirect,
  // O_DIRECT).
  bool ring_ = false;
  bool o_direct_ = false;                 // kDirect
  mutable std::mutex direct_mu_;          // guards uring_ and bounce_ (Read is const and may run
                                          // concurrently)
  mutable std::unique_ptr<Uring> uring_;  // dropped if the ring ever fails
  mutable std::vector<char*> bounce_;     // one aligned buffer per ring entry, made on first use
  mutable bool probe_cache_ = true;       // try the page cache before the disk (RWF_NOWAIT)
  mutable ReadCounts read_counts_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_SSD_STORE_H_
