// recsdk/env.h: the file system recsdk reads and writes through (LevelDB's Env): checkpoints,
// exports, summaries, dumps, record files. Every option that takes an `Env*` (SaverOptions::env,
// SessionConfig::dump_env, ...) defaults to null, the process's POSIX file system
// (Env::Default()); pass your own to put the files elsewhere (a remote store) or to inject faults
// in tests (derive from EnvWrapper and override what you change).
//
// Errors name the path and map errno: ENOENT -> NotFound, EACCES/EPERM -> PermissionDenied,
// ENOSPC/EDQUOT -> ResourceExhausted, EEXIST -> AlreadyExists, others -> Internal (with
// strerror).
//
// Threading: an Env is thread-safe (Default() is shared by the whole process); a WritableFile or
// RandomAccessFile belongs to one thread at a time.
#ifndef RECSDK_ENV_H_
#define RECSDK_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/status.h"

namespace recsdk {

// WritableFile: a file being written sequentially. Close() is idempotent; the destructor closes
// without reporting errors, so writers call Close() and check it.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Append: writes `data` after the bytes written so far.
  [[nodiscard]] virtual Status Append(std::string_view data) = 0;
  // Sync: the bytes appended so far are on stable storage (fdatasync).
  [[nodiscard]] virtual Status Sync() = 0;
  // Close: flushes and closes the file (idempotent, see above).
  [[nodiscard]] virtual Status Close() = 0;
};

// RandomAccessFile: a file read at offsets. Read returns fewer than n bytes only at end of file.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Read: up to n bytes at `offset` into `scratch`; returns how many were read.
  [[nodiscard]] virtual StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const = 0;
  // Size: the file's size in bytes.
  [[nodiscard]] virtual StatusOr<uint64_t> Size() const = 0;
};

// FileType: what is at a path, the path itself (a symbolic link is not followed).
enum class FileType { kRegular, kDirectory, kSymlink, kOther };

// Env: the file system interface (see the file comment). Paths are the implementation's own.
class Env {
 public:
  virtual ~Env() = default;
  // Default: the POSIX file system of this process. Never null; lives for the process.
  static Env* Default();

  // NewWritableFile: creates or truncates `path`. Never writes through a symbolic link: a link at
  // `path` is InvalidArgument (O_NOFOLLOW), so a link planted there cannot redirect the write.
  [[nodiscard]] virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // NewExclusiveFile: creates `path` for writing; AlreadyExists when it exists (O_EXCL), so two
  // writers (threads or processes) never share a file.
  [[nodiscard]] virtual StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(
      const std::string& path) = 0;
  // NewRandomAccessFile: opens `path` for reading.
  [[nodiscard]] virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // FileExists: something is at `path`.
  [[nodiscard]] virtual bool FileExists(const std::string& path) = 0;
  // GetChildren: names (not paths) of the entries of directory `dir`, without "." and "..".
  [[nodiscard]] virtual StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  // DeleteFile: removes the file at `path`.
  [[nodiscard]] virtual Status DeleteFile(const std::string& path) = 0;
  // CreateDir: creates `dir` and missing parents; OK when it exists.
  [[nodiscard]] virtual Status CreateDir(const std::string& dir) = 0;
  // CreateDirExclusive: creates `dir` (its parent must exist); AlreadyExists when anything is at
  // that name, a symbolic link included. For temporaries a writer must own.
  [[nodiscard]] virtual Status CreateDirExclusive(const std::string& dir) = 0;
  // GetFileType: what `path` is, without following a symbolic link; NotFound when nothing is.
  [[nodiscard]] virtual StatusOr<FileType> GetFileType(const std::string& path) = 0;
  // DeleteDir: removes an empty directory.
  [[nodiscard]] virtual Status DeleteDir(const std::string& dir) = 0;
  // RenameFile: atomic replace of `to` by `from` (files, or a directory onto a missing name).
  [[nodiscard]] virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // SyncDir: the entries of `dir` (creations, renames) are on stable storage.
  [[nodiscard]] virtual Status SyncDir(const std::string& dir) = 0;
};

// EnvWrapper: forwards every call to `target`; subclasses override what they change.
class EnvWrapper : public Env {
 public:
  // EnvWrapper: forwards to `target`, which must outlive it. target: that Env.
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    return target_->NewWritableFile(p);
  }
  StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& p) override {
    return target_->NewExclusiveFile(p);
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p) override {
    return target_->NewRandomAccessFile(p);
  }
  bool FileExists(const std::string& p) override { return target_->FileExists(p); }
  StatusOr<std::vector<std::string>> GetChildren(const std::string& d) override {
    return target_->GetChildren(d);
  }
  Status DeleteFile(const std::string& p) override { return target_->DeleteFile(p); }
  Status CreateDir(const std::string& d) override { return target_->CreateDir(d); }
  Status CreateDirExclusive(const std::string& d) override {
    return target_->CreateDirExclusive(d);
  }
  StatusOr<FileType> GetFileType(const std::string& p) override { return target_->GetFileType(p); }
  Status DeleteDir(const std::string& d) override { return target_->DeleteDir(d); }
  Status RenameFile(const std::string& f, const std::string& t) override {
    return target_->RenameFile(f, t);
  }
  Status SyncDir(const std::string& d) override { return target_->SyncDir(d); }

 private:
  Env* target_;
};

}  // namespace recsdk

#endif  // RECSDK_ENV_H_
