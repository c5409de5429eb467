// ssd_store.cc: the SSD tier's RowStore (fixed-size records in preallocated files).
// Threading: see ssd_store.h.
#include "src/table/tiers/ssd_store.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "fmt/format.h"
#include "src/common/crc32c.h"
#include "src/common/status_macros.h"
#include "src/table/tiers/io_pool.h"
#include "src/table/tiers/uring.h"

namespace recsdk::internal {
namespace {

constexpr char kMagic[8] = {'R', 'E', 'C', 'S', 'D', 'K', 'S', 'S'};
constexpr uint32_t kVersion = 1;
// kMaxRunSlots: records in one preadv/pwritev (well under IOV_MAX), so a bulk move still spreads
// over the I/O threads.
constexpr uint32_t kMaxRunSlots = 256;
constexpr uint64_t kDefaultFileBytes = uint64_t{64} << 20;
// The direct read path: reads in flight, the block size O_DIRECT offsets and lengths are aligned
// to, and the most bytes one read of adjacent rows covers.
constexpr unsigned kDirectDepth = 64;
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kDirectReadBytes = uint64_t{32} << 10;

uint64_t AlignDown(uint64_t x) { return x / kBlock * kBlock; }
uint64_t AlignUp(uint64_t x) { return (x + kBlock - 1) / kBlock * kBlock; }

// FileHeader: the first bytes of every file (the rest of its 4 KiB are zero).
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t row_floats;
  uint32_t rows_per_file;
  uint32_t file_rows;
  uint64_t file_index;
  // released_generation: the highest checkpoint generation whose held slots were released
  // (SsdStore::CommitHold); 0 in files written before copy-on-write slots, which is right.
  uint64_t released_generation;
};
static_assert(sizeof(FileHeader) == 40);

bool ValidFileName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// FullIo: preadv/pwritev of all of iov[0, count) at `offset`, resuming after short transfers.
// Returns 0, an errno, or -1 when a read found the end of the file.
int FullIo(int fd, struct iovec* iov, int count, off_t offset, bool write) {
  while (count > 0) {
    const ssize_t done = write ? pwritev(fd, iov, count, offset) : preadv(fd, iov, count, offset);
    if (done < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (done == 0) return write ? EIO : -1;
    offset += done;
    size_t left = static_cast<size_t>(done);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

}  // namespace

SsdStore::SsdStore(const SsdStoreOptions& options, uint32_t rows_per_file)
    : RowStore(Tier::kSsd, options.row_floats, options.capacity),
      folders_(options.folders),
      file_name_(options.file_name),
      rows_per_file_(rows_per_file),
      allocated_((uint64_t{options.capacity} + 63) / 64, 0),
      has_free_((allocated_.size() + 63) / 64, ~uint64_t{0}) {
  row_limit_ = options.row_limit == 0 ? options.capacity : options.row_limit;
  if (options.io_threads > 0) pool_ = std::make_unique<IoPool>(options.io_threads);
  if (options.read_path != SsdReadPath::kBuffered) {
    absl::StatusOr<std::unique_ptr<Uring>> ring = Uring::Create(kDirectDepth);
    if (ring.ok()) {
      uring_ = *std::move(ring);
      ring_ = true;
      o_direct_ = options.read_path == SsdReadPath::kDirect;
    }
  }
}

SsdStore::~SsdStore() {
  uring_.reset();  // before the buffers its reads land in
  for (char* b : bounce_) free(b);
  for (File& file : files_) {
    close(file.fd);
    if (file.direct_fd >= 0) close(file.direct_fd);
  }
}

void SsdStore::OpenDirect(File* file) {
  if (!ring_ || !o_direct_) return;
  file->direct_fd = open(file->path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  // A file system without O_DIRECT (tmpfs): every read of this store goes through preadv.
  if (file->direct_fd < 0) ring_ = false;
}

namespace {
absl::Status CheckOptions(const SsdStoreOptions& options) {
  if (options.row_floats <= 0 || options.capacity == 0) {
    return absl::InvalidArgumentError(
        fmt::format("ssd tier \"{}\": row_floats {} and capacity {} rows must both be > 0",
                    options.file_name, options.row_floats, options.capacity));
  }
  if (!ValidFileName(options.file_name)) {
    return absl::InvalidArgumentError(fmt::format(
        "ssd tier: file name \"{}\" must be non-empty and use only letters, digits, '_', '-' and "
        "'.' (it names the files under ssd_data_path)",
        options.file_name));
  }
  if (options.folders.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("ssd tier \"{}\": ssd_data_path is empty; give at least one existing folder",
                    options.file_name));
  }
  for (const std::string& folder : options.folders) {
    struct stat st;
    if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          fmt::format("ssd tier \"{}\": ssd_data_path folder \"{}\" is not an existing "
                      "directory; create it or remove it from ssd_data_path",
                      options.file_name, folder));
    }
  }
  if (options.row_limit > options.capacity) {
    return absl::InvalidArgumentError(
        fmt::format("ssd tier \"{}\": row_limit {} is above the capacity of {} slots",
                    options.file_name, options.row_limit, options.capacity));
  }
  if (options.io_threads < 0 || options.io_threads > 64) {
    return absl::InvalidArgumentError(
        fmt::format("ssd tier \"{}\": io_threads {} must be in [0, 64]", options.file_name,
                    options.io_threads));
  }
  return absl::OkStatus();
}

uint32_t RowsPerFile(const SsdStoreOptions& options) {
  uint64_t rows = options.rows_per_file;
  if (rows == 0) {
    rows = std::max<uint64_t>(1, kDefaultFileBytes / (uint64_t{4} * options.row_floats));
  }
  return static_cast<uint32_t>(std::min<uint64_t>(rows, options.capacity));
}
}  // namespace

absl::StatusOr<std::unique_ptr<SsdStore>> SsdStore::Create(const SsdStoreOptions& options) {
  RECSDK_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<SsdStore> store(new SsdStore(options, RowsPerFile(options)));
  const uint64_t num_files =
      (uint64_t{options.capacity} + store->rows_per_file_ - 1) / store->rows_per_file_;
  for (const std::string& folder : options.folders) {
    for (uint64_t i = 0; i < num_files; ++i) {
      const std::string path = folder + "/" + store->FileName(i);
      if (unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::FailedPreconditionError(
            fmt::format("ssd tier \"{}\": cannot remove the earlier store's file \"{}\": {}",
                        options.file_name, path, std::strerror(errno)));
      }
    }
  }
  return store;
}

absl::StatusOr<std::unique_ptr<SsdStore>> SsdStore::Open(const SsdStoreOptions& options,
                                                         absl::Span<const uint32_t> live_slots) {
  RECSDK_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<SsdStore> store(new SsdStore(options, RowsPerFile(options)));
  SsdStore& s = *store;
  const uint64_t num_files = (uint64_t{options.capacity} + s.rows_per_file_ - 1) / s.rows_per_file_;
  for (uint64_t index = 0; index < num_files; ++index) {
    File file;
    for (size_t f = 0; f < s.folders_.size() && file.fd < 0; ++f) {
      const std::string path = s.folders_[f] + "/" + s.FileName(index);
      int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      // A checkpoint's linked segments may be read-only (a restore only reads them).
      if (fd < 0 && (errno == EACCES || errno == EROFS))
        fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        file = {fd, -1, path};
        s.first_folder_ = f;
      }
    }
    if (file.fd < 0) break;  // files are made in slot order: the rest were never made
    s.files_.push_back(file);
    const uint64_t expected = kHeaderBytes + uint64_t{s.FileRows(index)} * s.record_bytes();
    struct stat st = {};
    if (fstat(file.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != expected) {
      return absl::DataLossError(fmt::format(
          "ssd tier file \"{}\" is {} bytes, expected {} ({} rows of {} bytes after a {}-byte "
          "header): the file was truncated or is not this store's; restore from a checkpoint",
          file.path, st.st_size, expected, s.FileRows(index), s.record_bytes(), kHeaderBytes));
    }
    FileHeader header;
    struct iovec iov = {&header, sizeof(header)};
    const int err = FullIo(file.fd, &iov, 1, 0, /*write=*/false);
    const char* mismatch = nullptr;
    if (err != 0) {
      mismatch = "its header cannot be read";
    } else if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
      mismatch = "its magic is not RECSDKSS";
    } else if (header.version != kVersion) {
      mismatch = "its version is not 1";
    } else if (header.row_floats != static_cast<uint32_t>(s.row_floats())) {
      mismatch = "its row size differs from the table's";
    } else if (header.rows_per_file != s.rows_per_file_ || header.file_rows != s.FileRows(index)) {
      mismatch = "its rows per file differ from the store's";
    } else if (header.file_index != index) {
      mismatch = "its file index differs from its name's";
    }
    if (mismatch != nullptr) {
      return absl::DataLossError(fmt::format(
          "ssd tier file \"{}\": {} (header: row_floats {}, rows_per_file {}, file_rows {}, "
          "index {}; expected {}, {}, {}, {}); the file is corrupt or from another store",
          file.path, mismatch, header.row_floats, header.rows_per_file, header.file_rows,
          header.file_index, s.row_floats(), s.rows_per_file_, s.FileRows(index), index));
    }
    s.released_generation_ = std::max(s.released_generation_, header.released_generation);
    posix_fadvise(file.fd, 0, 0, POSIX_FADV_RANDOM);
    s.OpenDirect(&s.files_.back());
    s.file_rows_ += s.FileRows(index);
  }
  for (uint32_t slot : live_slots) {
    if (slot >= s.file_rows_) {
      return absl::DataLossError(fmt::format(
          "ssd tier \"{}\": live slot {} lies beyond the {} rows of the files found; file \"{}\" "
          "is missing from every folder of ssd_data_path",
          options.file_name, slot, s.file_rows_, s.FileName(slot / s.rows_per_file_)));
    }
    if (s.IsAllocated(slot)) {
      return absl::InvalidArgumentError(
          fmt::format("ssd tier \"{}\": live slot {} is listed twice", options.file_name, slot));
    }
    s.SetAllocated(slot, true);
  }
  s.size_ = static_cast<uint32_t>(live_slots.size());
  return store;
}

uint32_t SsdStore::RecordCrc(uint32_t slot, const float* row) const {
  // Seeded with the slot, so a record written to the wrong place does not check.
  const uint64_t seed = slot;
  return MaskCrc(Crc32cExtend(Crc32c(&seed, sizeof(seed)), row, row_bytes()));
}

absl::Status SsdStore::CheckRecord(uint32_t slot, const float* row, uint32_t crc) const {
  if (RecordCrc(slot, row) == crc) return absl::OkStatus();
  return absl::DataLossError(fmt::format(
      "{}: the record of slot {} at byte {} of \"{}\" fails its checksum (corrupt, or never "
      "written); restore the table from a checkpoint",
      Label(), slot, kHeaderBytes + uint64_t{slot % rows_per_file_} * record_bytes(),
      files_[slot / rows_per_file_].path));
}

std::string SsdStore::Label() const { return fmt::format("ssd tier \"{}\"", file_name_); }

std::string SsdStore::FileName(uint64_t index) const {
  return fmt::format("{}.{:05d}.rows", file_name_, index);
}

uint32_t SsdStore::FileRows(uint64_t index) const {
  const uint64_t begin = index * rows_per_file_;
  return static_cast<uint32_t>(std::min<uint64_t>(rows_per_file_, capacity() - begin));
}

absl::Status SsdStore::MakeFile(uint64_t index, const std::string& folder, File* file) const {
  const std::string path = folder + "/" + FileName(index);
  const uint64_t bytes = kHeaderBytes + uint64_t{FileRows(index)} * record_bytes();
  // A file at the name is unlinked, never truncated: it may be a hard link a checkpoint holds
  // (HoldForCheckpoint), whose inode must keep its rows. O_EXCL | O_NOFOLLOW: a link planted at
  // a tier file's name must not get its target written.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return absl::ErrnoToStatus(errno, path);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  // Reserve every block now, so that a full disk is found here and never by a row write.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err == 0) {
    FileHeader header = {};
    std::memcpy(header.magic, kMagic, sizeof(kMagic));
    header.version = kVersion;
    header.row_floats = static_cast<uint32_t>(row_floats());
    header.rows_per_file = rows_per_file_;
    header.file_rows = FileRows(index);
    header.file_index = index;
    struct iovec iov = {&header, sizeof(header)};
    err = FullIo(fd, &iov, 1, 0, /*write=*/true);
  }
  if (err != 0) {
    close(fd);
    unlink(path.c_str());
    return absl::ErrnoToStatus(err, path);
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  *file = {fd, -1, path};
  return absl::OkStatus();
}

absl::Status SsdStore::Grow(uint64_t rows) {
  while (file_rows_ < rows) {
    const uint64_t index = files_.size();
    std::string reasons;
    for (size_t f = 0; f < first_folder_ && f < folders_.size(); ++f) {
      reasons += fmt::format("{}\"{}\": no space (found earlier)", reasons.empty() ? "" : "; ",
                             folders_[f]);
    }
    File file;
    for (size_t f = first_folder_; f < folders_.size(); ++f) {
      const absl::Status made = MakeFile(index, folders_[f], &file);
      if (made.ok()) {
        first_folder_ = f;
        break;
      }
      // A full folder stays behind us; any other failure (a vanished folder, permissions) is
      // tried again on the next growth.
      // (ErrnoToStatus maps ENOSPC and EDQUOT to ResourceExhausted.)
      const bool full = absl::IsResourceExhausted(made);
      if (full && f == first_folder_) first_folder_ = f + 1;
      reasons +=
          fmt::format("{}\"{}\": {}", reasons.empty() ? "" : "; ", folders_[f], made.message());
    }
    if (file.fd < 0) {
      // Nowhere to go: the next growth tries every folder again, in order (space may be freed).
      first_folder_ = 0;
      return absl::ResourceExhaustedError(fmt::format(
          "{} is full: no folder of ssd_data_path can take file {} ({} more rows of {} bytes; "
          "{} rows in use): {}; free disk space or add folders to ssd_data_path",
          Label(), FileName(index), FileRows(index), row_bytes(), size_, reasons));
    }
    OpenDirect(&file);
    files_.push_back(file);
    file_rows_ += FileRows(index);
  }
  return absl::OkStatus();
}

uint64_t SsdStore::NextFree(uint64_t from, uint64_t limit) const {
  if (from >= limit) return limit;
  uint64_t w = from >> 6;
  uint64_t bits = ~allocated_[w] & (~uint64_t{0} << (from & 63));
  if (bits == 0) {
    // The next word with a free slot, from the summary (one bit a word).
    uint64_t next = w + 1;
    for (;;) {
      if (next * 64 >= limit) return limit;
      const uint64_t sw = next >> 6;
      const uint64_t summary = has_free_[sw] & (~uint64_t{0} << (next & 63));
      if (summary == 0) {
        next = (sw + 1) * 64;
        continue;
      }
      w = sw * 64 + static_cast<uint64_t>(__builtin_ctzll(summary));
      if (w * 64 >= limit) return limit;
      bits = ~allocated_[w];
      break;
    }
  }
  return std::min(limit, w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)));
}

absl::Status SsdStore::Reserve(uint64_t rows, uint64_t freeing_held) {
  if (rows > row_limit_) {
    return absl::ResourceExhaustedError(
        fmt::format("{} is full: {} rows asked of ssd_vocabulary_size {}; raise "
                    "ssd_vocabulary_size",
                    Label(), rows, row_limit_));
  }
  // Slots kept for the latest checkpoint, and the held ones about to join them, occupy slots
  // beside the rows.
  return Grow(std::min<uint64_t>(capacity(), rows + kept_count_ + freeing_held));
}

absl::Status SsdStore::Allocate(size_t n, uint32_t* slots) {
  if (n > uint64_t{row_limit_} - size_) {
    return absl::ResourceExhaustedError(
        fmt::format("{} is full: {} more rows asked, {} of ssd_vocabulary_size {} rows free; raise "
                    "ssd_vocabulary_size",
                    Label(), n, row_limit_ - size_, row_limit_));
  }
  // Slots kept for the latest checkpoint (held, since freed) occupy slots too.
  const uint64_t occupied = uint64_t{size_} + kept_count_;
  if (n > uint64_t{capacity()} - occupied) {
    return absl::ResourceExhaustedError(fmt::format(
        "{} is full: {} more rows asked, {} rows live and {} slots kept for the latest "
        "checkpoint (its SSD rows are linked, not copied) of {} slots; save a full checkpoint "
        "(which releases them), or save with SaverOptions::copy_ssd_rows",
        Label(), n, size_, kept_count_, capacity()));
  }
  // Every occupied slot lies in a file, so the files hold file_rows_ - occupied free slots: make
  // files only when those are too few (the files stay as large as the largest population).
  if (occupied + n > file_rows_) RECSDK_RETURN_IF_ERROR(Grow(occupied + n));
  // Next fit: the free slots in slot order from where the last allocation stopped, wrapping at the
  // end of the files. A swap's demoted rows then land in runs of adjacent slots (one pwritev a
  // run, fewer pages dirtied) instead of the scattered slots its promotions just freed.
  uint64_t at = cursor_ < file_rows_ ? cursor_ : 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t slot = NextFree(at, file_rows_);
    if (slot == file_rows_) slot = NextFree(0, file_rows_);  // there are n free slots
    SetAllocated(static_cast<uint32_t>(slot), true);
    slots[i] = static_cast<uint32_t>(slot);
    at = slot + 1;
  }
  cursor_ = at;
  size_ += static_cast<uint32_t>(n);
  return absl::OkStatus();
}

absl::Status SsdStore::Free(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "free"));
  // A held slot is kept (still set in allocated_, so never handed out) until the next
  // CommitHold; any other slot is free at once.
  auto release = [&](uint32_t slot, bool on) {
    if (IsHeld(slot)) {
      if (kept_.empty()) kept_.assign(allocated_.size(), 0);
      const uint64_t bit = uint64_t{1} << (slot & 63);
      kept_[slot >> 6] = on ? (kept_[slot >> 6] | bit) : (kept_[slot >> 6] & ~bit);
      kept_count_ = on ? kept_count_ + 1 : kept_count_ - 1;
      held_live_ = on ? held_live_ - 1 : held_live_ + 1;
    } else {
      SetAllocated(slot, !on);
    }
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint32_t slot = slots[i];
    if (!IsAllocated(slot) || pins_.contains(slot)) {
      const bool twice = !IsAllocated(slot);
      for (size_t j = 0; j < i; ++j) release(slots[j], false);
      return absl::FailedPreconditionError(
          twice ? fmt::format("{}: slot {} is listed twice in one Free", Label(), slot)
                : fmt::format("{}: cannot free slot {}: it is pinned by a batch in flight", Label(),
                              slot));
    }
    release(slot, true);
  }
  size_ -= static_cast<uint32_t>(slots.size());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SsdStore::PrepareHold(bool hold_rows) {
  prepared_ = false;
  next_held_.clear();
  if (!hold_rows && held_.empty() && kept_count_ == 0) return generation_;  // nothing to release
  if (hold_rows) {
    RECSDK_RETURN_IF_ERROR(Sync());
    next_held_ = allocated_;
    for (size_t w = 0; w < kept_.size(); ++w) next_held_[w] &= ~kept_[w];
  }
  prepared_ = true;
  return generation_ + 1;
}

absl::Status SsdStore::CommitHold() {
  if (!prepared_) return absl::OkStatus();
  prepared_ = false;
  // The new checkpoint's slots are protected first, beside the previous one's: if the release
  // below fails, both stay untouched (and the next CommitHold releases the older ones).
  auto count_held_live = [&] {
    held_live_ = 0;
    for (size_t w = 0; w < held_.size(); ++w) {
      const uint64_t kept = kept_.empty() ? 0 : kept_[w];
      held_live_ += static_cast<uint32_t>(__builtin_popcountll(held_[w] & allocated_[w] & ~kept));
    }
  };
  if (!next_held_.empty()) {
    if (held_.empty()) held_.assign(allocated_.size(), 0);
    for (size_t w = 0; w < held_.size(); ++w) held_[w] |= next_held_[w];
    count_held_live();
  }
  const uint64_t released = generation_;
  ++generation_;
  if (released > 0) {
    // Mark the released generation in every file before any of its slots can be reused: a
    // checkpoint of that generation (hard links to these inodes) is then refused at restore.
    for (const File& file : files_) {
      struct iovec iov = {const_cast<uint64_t*>(&released), sizeof(released)};
      int err = FullIo(file.fd, &iov, 1, offsetof(FileHeader, released_generation),
                       /*write=*/true);
      if (err == 0 && fdatasync(file.fd) != 0) err = errno;
      if (err != 0) {
        return absl::DataLossError(fmt::format(
            "{}: cannot mark the checkpoint's released rows in \"{}\": {}; the slots stay kept",
            Label(), file.path, std::strerror(err)));
      }
    }
    released_generation_ = released;
  }
  for (size_t w = 0; w < kept_.size(); ++w) {
    uint64_t bits = kept_[w];
    while (bits != 0) {
      const uint32_t slot =
          static_cast<uint32_t>(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)));
      SetAllocated(slot, false);
      bits &= bits - 1;
    }
    kept_[w] = 0;
  }
  kept_count_ = 0;
  held_ = std::move(next_held_);
  next_held_.clear();
  count_held_live();
  return absl::OkStatus();
}

absl::Status SsdStore::Pin(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "pin"));
  for (uint32_t slot : slots) ++pins_[slot];
  return absl::OkStatus();
}

absl::Status SsdStore::Unpin(absl::Span<const uint32_t> slots) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "unpin"));
  for (size_t i = 0; i < slots.size(); ++i) {
    auto it = pins_.find(slots[i]);
    if (it == pins_.end()) {
      for (size_t j = 0; j < i; ++j) ++pins_[slots[j]];
      return absl::FailedPreconditionError(
          fmt::format("{}: unpin of slot {}, which is not pinned", Label(), slots[i]));
    }
    if (--it->second == 0) pins_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status SsdStore::DoIo(std::vector<std::pair<uint32_t, float*>>& rows, bool write) const {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (write) {
    // A slot written twice keeps the later row: keep the last of each equal run.
    size_t out = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + 1 < rows.size() && rows[i + 1].first == rows[i].first) continue;
      rows[out++] = rows[i];
    }
    rows.resize(out);
  }
  std::vector<Run> runs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t slot = rows[i].first;
    if (!runs.empty()) {
      Run& last = runs.back();
      if (slot == last.first + last.count && slot / rows_per_file_ == last.first / rows_per_file_ &&
          last.count < kMaxRunSlots) {
        ++last.count;
        continue;
      }
    }
    runs.push_back({slot, 1, i});
  }
  const size_t bytes = row_bytes();
  const size_t record = record_bytes();
  // Each record is the row and its checksum: two iovecs a record.
  std::vector<uint32_t> crcs(rows.size());
  if (write) {
    for (size_t i = 0; i < rows.size(); ++i) crcs[i] = RecordCrc(rows[i].first, rows[i].second);
  }
  auto run_io = [&](size_t r) -> absl::Status {
    const Run& run = runs[r];
    struct iovec iov[2 * kMaxRunSlots];
    for (uint32_t j = 0; j < run.count; ++j) {
      iov[2 * j] = {rows[run.row_begin + j].second, bytes};
      iov[2 * j + 1] = {&crcs[run.row_begin + j], kRecordCrcBytes};
    }
    const File& file = files_[run.first / rows_per_file_];
    const off_t offset =
        static_cast<off_t>(kHeaderBytes + uint64_t{run.first % rows_per_file_} * record);
    const int err = FullIo(file.fd, iov, static_cast<int>(2 * run.count), offset, write);
    if (err != 0) {
      return absl::DataLossError(
          fmt::format("{}: {} of {} rows at byte {} of \"{}\" failed: {}", Label(),
                      write ? "write" : "read", run.count, offset, file.path,
                      err < 0 ? "the file ends early (truncated?)" : std::strerror(err)));
    }
    if (!write) {
      for (uint32_t j = 0; j < run.count; ++j) {
        const size_t i = run.row_begin + j;
        RECSDK_RETURN_IF_ERROR(CheckRecord(rows[i].first, rows[i].second, crcs[i]));
      }
    }
    return absl::OkStatus();
  };
  if (runs.size() > 1) {
    // Writing part of a page that is not cached reads the page first, and buffered writes to one
    // file take its inode lock in turn, so those reads would go one at a time. Start them all now
    // (WILLNEED reads ahead without waiting); the writes then mostly find their pages cached.
    // Runs whose pages are cached already (most: a swap writes the slots its reads just freed)
    // need no advice, and finding them costs one io_uring call against a system call a run.
    std::vector<bool> cached(runs.size(), false);
    if (ring_) {
      std::vector<std::pair<uint64_t, uint32_t>> ranges(runs.size());
      for (size_t r = 0; r < runs.size(); ++r) {
        ranges[r] = {uint64_t{runs[r].first}, runs[r].count};
      }
      CachedRuns(ranges, &cached);
    }
    for (size_t r = 0; r < runs.size(); ++r) {
      if (cached[r]) continue;
      const Run& run = runs[r];
      const uint64_t begin = kHeaderBytes + uint64_t{run.first % rows_per_file_} * record;
      posix_fadvise(files_[run.first / rows_per_file_].fd, static_cast<off_t>(begin),
                    static_cast<off_t>(uint64_t{run.count} * record), POSIX_FADV_WILLNEED);
    }
  }
  if (pool_ == nullptr || runs.size() == 1) {
    for (size_t r = 0; r < runs.size(); ++r) RECSDK_RETURN_IF_ERROR(run_io(r));
    return absl::OkStatus();
  }
  return pool_->Run(runs.size(), run_io);
}

absl::Status SsdStore::Read(absl::Span<const uint32_t> slots, float* out) const {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "read"));
  std::vector<std::pair<uint32_t, float*>> rows(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) rows[i] = {slots[i], out + i * row_floats()};
  if (ring_ && !rows.empty()) {
    std::lock_guard<std::mutex> lock(direct_mu_);
    if (uring_ != nullptr) {
      bool unsupported = false;
      absl::Status status = ReadRing(rows, &unsupported);
      if (!unsupported) return status;
      // The file system took O_DIRECT at open but refuses the reads (EINVAL): read through the
      // page cache from now on.
      uring_.reset();
    }
  }
  return DoIo(rows, /*write=*/false);
}

absl::Status SsdStore::MakeBounce() const {
  const uint64_t buffer_bytes = std::max(kDirectReadBytes, AlignUp(record_bytes()) + kBlock);
  if (!bounce_.empty()) return absl::OkStatus();
  for (unsigned i = 0; i < uring_->depth(); ++i) {
    void* p = nullptr;
    if (posix_memalign(&p, kBlock, buffer_bytes) != 0) {
      return absl::ResourceExhaustedError(
          fmt::format("{}: cannot allocate {} bytes of read buffers", Label(),
                      uint64_t{uring_->depth()} * buffer_bytes));
    }
    bounce_.push_back(static_cast<char*>(p));
  }
  return absl::OkStatus();
}

void SsdStore::CachedRuns(const std::vector<std::pair<uint64_t, uint32_t>>& runs,
                          std::vector<bool>* cached) const {
  std::lock_guard<std::mutex> lock(direct_mu_);
  if (uring_ == nullptr || !probe_cache_ || !MakeBounce().ok()) return;
  const uint64_t buffer_bytes = std::max(kDirectReadBytes, AlignUp(record_bytes()) + kBlock);
  std::vector<unsigned> free_buffers;
  for (unsigned b = uring_->depth(); b-- > 0;) free_buffers.push_back(b);
  std::vector<unsigned> buffer_of(runs.size());
  std::vector<uint32_t> want(runs.size());
  auto complete = [&](uint64_t tag, int32_t res) {
    free_buffers.push_back(buffer_of[tag]);
    if (res == -EOPNOTSUPP || res == -EINVAL) probe_cache_ = false;
    (*cached)[tag] = res >= 0 && static_cast<uint32_t>(res) == want[tag];
  };
  size_t next = 0;
  while (next < runs.size() || uring_->in_flight() > 0) {
    while (next < runs.size() && !free_buffers.empty()) {
      const auto [first, count] = runs[next];
      const uint64_t len = uint64_t{count} * record_bytes();
      if (len > buffer_bytes) {  // a long run: advise it (one call for many rows anyway)
        ++next;
        continue;
      }
      const unsigned b = free_buffers.back();
      const uint64_t offset = kHeaderBytes + first % rows_per_file_ * record_bytes();
      want[next] = static_cast<uint32_t>(len);
      if (!uring_->QueueRead(files_[first / rows_per_file_].fd, bounce_[b],
                             static_cast<uint32_t>(len), offset, next, RWF_NOWAIT)) {
        break;
      }
      free_buffers.pop_back();
      buffer_of[next++] = b;
    }
    if (uring_->in_flight() == 0) break;
    if (uring_->SubmitAndWait(1) != 0) {
      uring_.reset();  // as ReadRing: the ring is in an unknown state; the rest are advised
      return;
    }
    uring_->Reap(complete);
  }
}

absl::Status SsdStore::ReadRing(const std::vector<std::pair<uint32_t, float*>>& unsorted,
                                bool* unsupported) const {
  std::vector<std::pair<uint32_t, float*>> rows = unsorted;
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const uint64_t bytes = row_bytes();
  const uint64_t record = record_bytes();
  const uint64_t buffer_bytes = std::max(kDirectReadBytes, AlignUp(record) + kBlock);
  RECSDK_RETURN_IF_ERROR(MakeBounce());
  // Reads: adjacent slots of one file, as many as fit in one buffer, each read covering the
  // whole blocks its rows touch.
  struct DirectRead {
    uint32_t first;
    uint32_t count;
    size_t row_begin;
    uint64_t start;  // aligned file offset
    uint64_t len;    // aligned length
  };
  auto offset_of = [&](uint32_t slot) {
    return kHeaderBytes + uint64_t{slot % rows_per_file_} * record;
  };
  std::vector<DirectRead> reads;
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t slot = rows[i].first;
    const uint64_t end = AlignUp(offset_of(slot) + record);
    if (!reads.empty()) {
      DirectRead& last = reads.back();
      if ((slot == last.first + last.count - 1 || slot == last.first + last.count) &&
          slot / rows_per_file_ == last.first / rows_per_file_ &&
          end - last.start <= buffer_bytes) {
        last.count = slot - last.first + 1;
        last.len = end - last.start;
        continue;
      }
    }
    const uint64_t start = AlignDown(offset_of(slot));
    reads.push_back({slot, 1, i, start, end - start});
  }
  std::vector<unsigned> free_buffers;
  for (unsigned b = uring_->depth(); b-- > 0;) free_buffers.push_back(b);
  std::vector<unsigned> buffer_of(reads.size());
  absl::Status status;
  // ring_pass: the reads listed in `which`, `depth` in flight. `cached`: buffered reads flagged
  // RWF_NOWAIT, which the kernel answers inline when every page is cached and with -EAGAIN (or
  // a short count) otherwise; those reads go to *misses. Else from the disk: buffered reads of
  // the records (the kernel reads the missing pages asynchronously; with POSIX_FADV_RANDOM no
  // more than those), or with o_direct_ O_DIRECT reads of the whole blocks.
  auto ring_pass = [&](const std::vector<size_t>& which, bool cached,
                       std::vector<size_t>* misses) -> absl::Status {
    const bool whole_blocks = !cached && o_direct_;
    auto complete = [&](uint64_t tag, int32_t res) {
      const DirectRead& read = reads[tag];
      const char* buffer = bounce_[buffer_of[tag]];
      free_buffers.push_back(buffer_of[tag]);
      // A read from the disk covers whole blocks; one from the cache only the records, placed
      // where the blocks would put them.
      const uint64_t skip = offset_of(read.first) - read.start;
      const uint64_t need = (whole_blocks ? skip : 0) + uint64_t{read.count} * record;
      if (cached && (res < 0 || static_cast<uint64_t>(res) < need)) {
        // Not all cached (or the file ends early: the disk read below reports it). A kernel
        // without RWF_NOWAIT for buffered reads says so once; the probe then stays off.
        if (res == -EOPNOTSUPP || res == -EINVAL) probe_cache_ = false;
        misses->push_back(tag);
        return;
      }
      if (res == -EINVAL) *unsupported = true;
      if (res < 0 || static_cast<uint64_t>(res) < need) {
        if (status.ok()) {
          const std::string& path = files_[read.first / rows_per_file_].path;
          status = absl::DataLossError(
              fmt::format("{}: read of {} rows at byte {} of \"{}\" failed: {}", Label(),
                          read.count, offset_of(read.first), path,
                          res < 0 ? std::strerror(-res) : "the file ends early (truncated?)"));
        }
        return;
      }
      // Rows of the read in slot order (a slot asked twice is copied to both places).
      for (size_t i = read.row_begin; i < rows.size() && rows[i].first < read.first + read.count;
           ++i) {
        const char* at = buffer + (offset_of(rows[i].first) - read.start);
        std::memcpy(rows[i].second, at, bytes);
        uint32_t crc;
        std::memcpy(&crc, at + bytes, sizeof(crc));
        const absl::Status checked = CheckRecord(rows[i].first, rows[i].second, crc);
        if (!checked.ok() && status.ok()) status = checked;
      }
      (cached ? read_counts_.cached_rows : read_counts_.disk_rows) += read.count;
    };
    size_t next = 0;
    while (next < which.size() || uring_->in_flight() > 0) {
      while (status.ok() && next < which.size() && !free_buffers.empty()) {
        const size_t tag = which[next];
        const DirectRead& read = reads[tag];
        const unsigned b = free_buffers.back();
        const File& file = files_[read.first / rows_per_file_];
        const uint64_t skip = offset_of(read.first) - read.start;
        const bool queued =
            whole_blocks ? uring_->QueueRead(file.direct_fd, bounce_[b],
                                             static_cast<uint32_t>(read.len), read.start, tag)
                         : uring_->QueueRead(file.fd, bounce_[b] + skip,
                                             static_cast<uint32_t>(uint64_t{read.count} * record),
                                             offset_of(read.first), tag, cached ? RWF_NOWAIT : 0);
        if (!queued) break;
        free_buffers.pop_back();
        buffer_of[tag] = b;
        ++next;
      }
      if (uring_->in_flight() == 0) break;  // an error stopped the queueing
      const int err = uring_->SubmitAndWait(1);
      if (err != 0) {
        // The ring is in an unknown state: stop using it (reads go through the cache from now).
        uring_.reset();
        return absl::DataLossError(
            fmt::format("{}: io_uring_enter failed: {}; later reads use the "
                        "page cache",
                        Label(), std::strerror(err)));
      }
      uring_->Reap(complete);
    }
    return status;
  };
  std::vector<size_t> all(reads.size());
  for (size_t r = 0; r < reads.size(); ++r) all[r] = r;
  // Pages still in the page cache (rows written since, or read lately) are copied from there
  // first, inline. The O_DIRECT path skips this pass: a NOWAIT read of an uncached page starts
  // the kernel's read of it, which a direct read would then do a second time.
  std::vector<size_t> misses;
  if (probe_cache_ && !o_direct_) {
    RECSDK_RETURN_IF_ERROR(ring_pass(all, /*cached=*/true, &misses));
  } else {
    misses = std::move(all);
  }
  if (misses.empty()) return absl::OkStatus();
  return ring_pass(misses, /*cached=*/false, nullptr);
}

absl::Status SsdStore::Write(absl::Span<const uint32_t> slots, const float* in) {
  RECSDK_RETURN_IF_ERROR(CheckAllocated(slots, "write"));
  std::vector<std::pair<uint32_t, float*>> rows(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    // pwritev takes non-const iovecs; the rows are only read.
    rows[i] = {slots[i], const_cast<float*>(in + i * row_floats())};
  }
  return DoIo(rows, /*write=*/true);
}

absl::Status SsdStore::Sync() {
  for (const File& file : files_) {
    if (fdatasync(file.fd) != 0) {
      return absl::DataLossError(fmt::format("{}: fdatasync of \"{}\" failed: {}", Label(),
                                             file.path, std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status SsdStore::DropPageCache() {
  RECSDK_RETURN_IF_ERROR(Sync());
  for (const File& file : files_) posix_fadvise(file.fd, 0, 0, POSIX_FADV_DONTNEED);
  return absl::OkStatus();
}

void SsdStore::DropCleanPages() const {
  for (const File& file : files_) posix_fadvise(file.fd, 0, 0, POSIX_FADV_DONTNEED);
}

std::vector<std::string> SsdStore::FilePaths() const {
  std::vector<std::string> paths;
  for (const File& file : files_) paths.push_back(file.path);
  return paths;
}

uint64_t SsdStore::FixedHostBytes() const {
  uint64_t bytes = sizeof(*this);
  for (const File& file : files_) bytes += sizeof(File) + file.path.capacity();
  for (const std::string& folder : folders_) bytes += sizeof(std::string) + folder.capacity();
  std::lock_guard<std::mutex> lock(direct_mu_);
  if (!bounce_.empty()) {
    bytes += bounce_.size() * std::max(kDirectReadBytes, AlignUp(record_bytes()) + kBlock);
  }
  return bytes;
}

uint64_t SsdStore::HostMemoryBytes() const {
  return FixedHostBytes() + allocated_.capacity() * sizeof(uint64_t) +
         has_free_.capacity() * sizeof(uint64_t) +
         pins_.capacity() * (sizeof(std::pair<uint32_t, uint32_t>) + 1) +
         (held_.capacity() + next_held_.capacity() + kept_.capacity()) * sizeof(uint64_t);
}

}  // namespace recsdk::internal
