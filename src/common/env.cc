// env.cc: the POSIX Env, the fault-injecting wrapper for tests, and whole-file helpers.
// Threading: see env.h.
#include "src/common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "fmt/format.h"
#include "src/common/file_open.h"
#include "src/common/memory_limit.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

Status ErrnoToStatus(int err, std::string_view op, const std::string& path) {
  return ErrnoToStatus(err, fmt::format("{} \"{}\"", op, path));
}

namespace {

// PosixWritableFile: write() straight from the caller's buffer (no staging copy). Every
// kWritebackBytes appended, sync_file_range starts the disk writeback of that range without
// waiting for it (RocksDB's bytes_per_sync), so the disk works while later bytes are produced
// and Sync's fdatasync only waits for the tail; before starting a range it waits for the one
// before last, which bounds the dirty pages a large payload leaves in the page cache. Linux only;
// elsewhere Sync does all the work.
class PosixWritableFile final : public WritableFile {
 public:
  static constexpr uint64_t kWritebackBytes = uint64_t{8} << 20;

  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(std::string_view data) override {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "writing", path_);
      }
      p += n;
      left -= static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
    }
    StartWriteback();
    return absl::OkStatus();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoToStatus(errno, "syncing", path_);
    return absl::OkStatus();
  }
  Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoToStatus(errno, "closing", path_);
    return absl::OkStatus();
  }

 private:
  // Best effort: a failure here only loses the overlap; Sync reports real write errors.
  void StartWriteback() {
#ifdef __linux__
    while (written_ - started_ >= kWritebackBytes) {
      if (started_ >= 2 * kWritebackBytes) {
        const uint64_t before = started_ - 2 * kWritebackBytes;
        (void)::sync_file_range(
            fd_, static_cast<off_t>(before), static_cast<off_t>(kWritebackBytes),
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      }
      (void)::sync_file_range(fd_, static_cast<off_t>(started_),
                              static_cast<off_t>(kWritebackBytes), SYNC_FILE_RANGE_WRITE);
      started_ += kWritebackBytes;
    }
#endif
  }

  std::string path_;
  int fd_;
  uint64_t written_ = 0;  // bytes appended
  uint64_t started_ = 0;  // bytes whose writeback was started
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, scratch + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "reading", path_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }
  StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoToStatus(errno, "stat of", path_);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv final : public Env {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ErrnoToStatus(errno, "creating", path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ErrnoToStatus(errno, "creating", path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    // OpenRegularFile (file_open.h): a named pipe or device put where a checkpoint file was
    // expected is refused instead of blocking the restore forever.
    RECSDK_ASSIGN_OR_RETURN(
        const int fd,
        OpenRegularFile(
            path, "opening",
            "expected a regular file there; check the path (a checkpoint, bundle or config "
            "file: restore from another copy)"));
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }
  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoToStatus(errno, "listing", dir);
    std::vector<std::string> out;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") out.emplace_back(name);
    }
    ::closedir(d);
    return out;
  }
  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoToStatus(errno, "deleting", path);
    return absl::OkStatus();
  }
  Status CreateDir(const std::string& dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("CreateDir: empty directory name");
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos != dir.size() && dir[pos] != '/') continue;
      const std::string prefix = dir.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoToStatus(errno, "creating directory", prefix);
      }
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "creating directory", dir);
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          fmt::format("\"{}\" exists and is not a directory; choose another path", dir));
    }
    return absl::OkStatus();
  }
  Status CreateDirExclusive(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoToStatus(errno, "creating directory", dir);
    return absl::OkStatus();
  }
  StatusOr<FileType> GetFileType(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat of", path);
    if (S_ISLNK(st.st_mode)) return FileType::kSymlink;
    if (S_ISDIR(st.st_mode)) return FileType::kDirectory;
    if (S_ISREG(st.st_mode)) return FileType::kRegular;
    return FileType::kOther;
  }
  Status DeleteDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return ErrnoToStatus(errno, "removing directory", dir);
    return absl::OkStatus();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoToStatus(errno, fmt::format("renaming \"{}\" to", from), to);
    }
    return absl::OkStatus();
  }
  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "opening directory", dir);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoToStatus(err, "syncing directory", dir);
    return absl::OkStatus();
  }
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> f)
      : env_(env), path_(std::move(path)), f_(std::move(f)) {}
  Status Append(std::string_view data) override {
    RECSDK_RETURN_IF_ERROR(env_->BeforeAppend(path_, data.size()));
    const size_t fits = env_->BytesThatFit(data.size());
    if (fits < data.size()) {
      if (fits > 0) RECSDK_RETURN_IF_ERROR(f_->Append(data.substr(0, fits)));
      return ErrnoToStatus(
          ENOSPC, fmt::format("writing (short: {} of {} bytes)", fits, data.size()), path_);
    }
    return f_->Append(data);
  }
  Status Sync() override {
    if (env_->fail_sync.load()) return ErrnoToStatus(EIO, "syncing", path_);
    return f_->Sync();
  }
  Status Close() override { return f_->Close(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> f_;
};

class ShortReadFile final : public RandomAccessFile {
 public:
  ShortReadFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<RandomAccessFile> f)
      : env_(env), path_(std::move(path)), f_(std::move(f)) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const override {
    // fetch_sub: one counter for all files and threads; the read that takes it from 0 to -1 fails.
    if (env_->fail_read_after.load() >= 0 && env_->fail_read_after.fetch_sub(1) == 0) {
      return ErrnoToStatus(EIO, "reading", path_);
    }
    const int64_t cap = env_->short_read_bytes.load();
    if (cap >= 0 && n > static_cast<size_t>(cap)) n = static_cast<size_t>(cap);
    return f_->Read(offset, n, scratch);
  }
  StatusOr<uint64_t> Size() const override { return f_->Size(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<RandomAccessFile> f_;
};

}  // namespace
}  // namespace recsdk::internal

namespace recsdk {
Env* Env::Default() {
  static internal::PosixEnv* env = new internal::PosixEnv();
  return env;
}
}  // namespace recsdk

namespace recsdk::internal {

Status FaultInjectionEnv::BeforeAppend(const std::string& path, size_t bytes) {
  if (fail_write_after.load() >= 0 && fail_write_after.fetch_sub(1) == 0) {
    return ErrnoToStatus(EIO, "writing", path);
  }
  const int64_t left = disk_full_after_bytes.load();
  if (left >= 0) {
    if (static_cast<int64_t>(bytes) > left) return ErrnoToStatus(ENOSPC, "writing", path);
    disk_full_after_bytes.fetch_sub(static_cast<int64_t>(bytes));
  }
  return absl::OkStatus();
}

size_t FaultInjectionEnv::BytesThatFit(size_t bytes) {
  const int64_t left = short_write_after_bytes.load();
  if (left < 0) return bytes;
  if (static_cast<int64_t>(bytes) > left) {
    short_write_after_bytes.store(0);
    return static_cast<size_t>(left);
  }
  short_write_after_bytes.fetch_sub(static_cast<int64_t>(bytes));
  return bytes;
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  RECSDK_ASSIGN_OR_RETURN(auto f, target()->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(f)));
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewExclusiveFile(
    const std::string& path) {
  RECSDK_ASSIGN_OR_RETURN(auto f, target()->NewExclusiveFile(path));
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(f)));
}

StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path) {
  RECSDK_ASSIGN_OR_RETURN(auto f, target()->NewRandomAccessFile(path));
  return std::unique_ptr<RandomAccessFile>(new ShortReadFile(this, path, std::move(f)));
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  if (fail_rename.load()) {
    return ErrnoToStatus(EIO, fmt::format("renaming \"{}\" to", from), to);
  }
  RECSDK_RETURN_IF_ERROR(target()->RenameFile(from, to));
  renames.fetch_add(1);
  return absl::OkStatus();
}

StatusOr<std::string> ReadFileToString(Env* env, const std::string& path) {
  RECSDK_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(path));
  RECSDK_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  RECSDK_RETURN_IF_ERROR(CheckAllocation(size, fmt::format("reading \"{}\"", path)));
  std::string out(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    RECSDK_ASSIGN_OR_RETURN(const size_t n, f->Read(done, size - done, out.data() + done));
    if (n == 0) {
      return absl::DataLossError(
          fmt::format("reading \"{}\": got {} of its {} bytes (the file shrank while being read)",
                      path, done, size));
    }
    done += n;
  }
  return out;
}

Status WriteStringToFileSync(Env* env, const std::string& path, std::string_view data) {
  RECSDK_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path));
  RECSDK_RETURN_IF_ERROR(f->Append(data));
  RECSDK_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

Status WriteStringToFileAtomic(Env* env, const std::string& path, std::string_view data) {
  return WritePiecesToFileAtomic(env, path, {data});
}

Status WritePiecesToFileAtomic(Env* env, const std::string& path,
                               std::initializer_list<std::string_view> pieces) {
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> f, AtomicFileWriter::Create(env, path));
  for (std::string_view piece : pieces) RECSDK_RETURN_IF_ERROR(f->Append(piece));
  return f->Commit();
}

StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(Env* env,
                                                                     const std::string& path) {
  std::string tmp = path + ".tmp";
  // The temporary is created exclusively: whatever is at its name (a crash's leftover, or a link
  // planted to redirect the write) is removed first, never written through.
  RECSDK_RETURN_IF_ERROR(DeleteRecursively(env, tmp));
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewExclusiveFile(tmp));
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(env, path, std::move(tmp), std::move(f)));
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

Status AtomicFileWriter::Append(std::string_view data) {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("writing \"{}\": the file was already committed or abandoned", path_));
  }
  status_ = file_->Append(data);
  return status_;
}

Status AtomicFileWriter::Commit() {
  if (file_ == nullptr && status_.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("committing \"{}\": the file was already committed or abandoned", path_));
  }
  Status s = status_;
  if (s.ok()) s = file_->Sync();
  if (s.ok()) s = file_->Close();
  if (s.ok()) s = env_->RenameFile(tmp_, path_);
  if (!s.ok()) {
    Abandon();
    status_ = s;
    return s;
  }
  file_.reset();
  return env_->SyncDir(Dirname(path_));
}

void AtomicFileWriter::Abandon() {
  if (file_ == nullptr) return;
  file_->Close().IgnoreError();
  file_.reset();
  env_->DeleteFile(tmp_).IgnoreError();
}

Status DeleteRecursively(Env* env, const std::string& path) {
  // Checkpoint and bundle directories are flat; the depth bound keeps a hostile tree (or a
  // directory loop made with bind mounts) from running the stack out.
  constexpr int kMaxDepth = 16;
  std::function<Status(const std::string&, int)> remove = [&](const std::string& p,
                                                              int depth) -> Status {
    auto type = env->GetFileType(p);
    if (!type.ok()) return absl::IsNotFound(type.status()) ? absl::OkStatus() : type.status();
    if (*type != FileType::kDirectory) return env->DeleteFile(p);  // a link: the link alone
    if (depth >= kMaxDepth) {
      return absl::FailedPreconditionError(fmt::format(
          "deleting \"{}\": directories nest more than {} deep below it; recsdk writes flat "
          "directories, so this is not one of ours: delete it by hand",
          p, kMaxDepth));
    }
    RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(p));
    for (const std::string& c : children) {
      RECSDK_RETURN_IF_ERROR(remove(p + "/" + c, depth + 1));
    }
    return env->DeleteDir(p);
  };
  return remove(path, 0);
}

std::string NormalizeDir(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out.push_back(c);
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace recsdk::internal
