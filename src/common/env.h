// env.h: the library's side of the one file-system interface (recsdk/env.h, LevelDB's Env
// shape) that checkpoints and exports go through, so tests inject faults (a failed write, a short
// read, a full disk, a crash between write and rename) and a remote file system can plug in: the
// fault-injecting Env of the tests, the errno mapping, and the whole-file and atomic-write helpers
// every writer uses.
//
// Threading: an Env is thread-safe (Default() is shared by the whole process); a WritableFile or
// RandomAccessFile belongs to one thread at a time.
#ifndef RECSDK_COMMON_ENV_H_
#define RECSDK_COMMON_ENV_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/env.h"
#include "recsdk/status.h"

namespace recsdk::internal {

// The interface itself (WritableFile, RandomAccessFile, FileType, Env, EnvWrapper) is public:
// recsdk/env.h. The names below keep their internal:: spelling for the code inside the library.
using ::recsdk::Env;
using ::recsdk::EnvWrapper;
using ::recsdk::FileType;
using ::recsdk::RandomAccessFile;
using ::recsdk::WritableFile;

// FaultInjectionEnv: an EnvWrapper for tests. Each knob is off by default (negative or false);
// settings may change between calls from any thread.
//   fail_write_after: the Nth Append from now (0 = the next one) fails with Internal (EIO).
//   disk_full_after_bytes: Appends fail with ResourceExhausted (ENOSPC) once this many more bytes
//     were appended.
//   short_write_after_bytes: the Append that goes past this many more bytes writes only the part
//     up to it and then fails with ResourceExhausted (ENOSPC), as a write() that came back short
//     on a filling disk: the file holds a torn tail. Later Appends write nothing and fail too.
//   short_read_bytes: every Read returns at most this many bytes (a truncated read).
//   fail_read_after: the Nth Read from now (0 = the next one), of any file opened through this
//     Env, fails with Internal (EIO), as a read of a bad sector does.
//   fail_rename: RenameFile fails with Internal without renaming (a crash between write and
//     rename, as far as the files on disk show).
//   fail_sync: every Sync fails with Internal (EIO), as fsync does when writeback failed.
class FaultInjectionEnv final : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* target) : EnvWrapper(target) {}
  std::atomic<int64_t> fail_write_after{-1};
  std::atomic<int64_t> disk_full_after_bytes{-1};
  std::atomic<int64_t> short_write_after_bytes{-1};
  std::atomic<int64_t> short_read_bytes{-1};
  std::atomic<int64_t> fail_read_after{-1};
  std::atomic<bool> fail_rename{false};
  std::atomic<bool> fail_sync{false};
  std::atomic<int64_t> renames{0};  // renames done (counted, for tests)

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewExclusiveFile(const std::string& path) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;

  // Called by this env's files.
  Status BeforeAppend(const std::string& path, size_t bytes);
  // BytesThatFit: how many of the next Append's `bytes` short_write_after_bytes lets through.
  size_t BytesThatFit(size_t bytes);
};

// ErrnoToStatus: the Status of a failed `op` on `path` with errno `err` (the one mapping of
// file_open.h, with the message "<op> \"<path>\": <reason>; <fix>").
Status ErrnoToStatus(int err, std::string_view op, const std::string& path);

// DeleteRecursively: deletes `path` and, when it is a directory, everything under it, never
// following a symbolic link (a link is removed, not its target). OK when nothing is at `path`.
[[nodiscard]] Status DeleteRecursively(Env* env, const std::string& path);

// NormalizeDir: `path` without trailing and repeated slashes ("a//b/" -> "a/b"; "/" stays), so
// that names built from it ("<dir>.tmp-<pid>", Dirname) mean what the caller meant.
std::string NormalizeDir(std::string_view path);

// IsPlainFileName: `name` names an entry of a directory, nothing else: not empty, no '/', not
// "." or "..", no NUL. Names read from files (an index, a manifest) must pass before use.
bool IsPlainFileName(std::string_view name);

// ReadFileToString: the whole file through `env`.
[[nodiscard]] StatusOr<std::string> ReadFileToString(Env* env, const std::string& path);
// WriteStringToFileSync: writes `data` to `path` and syncs it (no rename).
[[nodiscard]] Status WriteStringToFileSync(Env* env, const std::string& path,
                                           std::string_view data);
// WriteStringToFileAtomic: writes `path`.tmp, syncs, renames onto `path` and syncs the directory,
// so `path` holds either its old or its new contents after a crash. Whatever is at `path`.tmp
// (a leftover, or a planted link) is removed first, never written through.
[[nodiscard]] Status WriteStringToFileAtomic(Env* env, const std::string& path,
                                             std::string_view data);
// WritePiecesToFileAtomic: WriteStringToFileAtomic of the pieces one after the other, without
// joining them (a table's rows are written straight from the caller's buffer).
[[nodiscard]] Status WritePiecesToFileAtomic(Env* env, const std::string& path,
                                             std::initializer_list<std::string_view> pieces);
// AtomicFileWriter: a file streamed to `path`.tmp and renamed onto `path` by Commit, for writers
// whose bytes are not all in memory at once (a record file, a TFRecord file); the whole-file
// helpers above use it too. Until Commit succeeds the previous file at `path` (or its absence)
// is what readers see; a failed Append leaves the writer failed (later Appends and Commit return
// that error); a failed Commit, Abandon, or destruction without Commit deletes the temporary.
// As WriteStringToFileAtomic, whatever is at `path`.tmp is removed first, never written through.
// Not thread-safe.
class AtomicFileWriter {
 public:
  [[nodiscard]] static StatusOr<std::unique_ptr<AtomicFileWriter>> Create(Env* env,
                                                                          const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  [[nodiscard]] Status Append(std::string_view data);
  // Commit: syncs and closes the temporary, renames it onto `path` and syncs the directory.
  [[nodiscard]] Status Commit();
  // Abandon: deletes the temporary; `path` keeps what it had. Idempotent.
  void Abandon();
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(Env* env, std::string path, std::string tmp, std::unique_ptr<WritableFile> f)
      : env_(env), path_(std::move(path)), tmp_(std::move(tmp)), file_(std::move(f)) {}
  Env* env_;
  std::string path_;
  std::string tmp_;
  std::unique_ptr<WritableFile> file_;  // null once committed or abandoned
  Status status_;                       // the first failure
};

// Dirname: the part of `path` before its last '/' ("." when none).
std::string Dirname(const std::string& path);

// JoinPath: a + "/" + b (b alone when a is empty; one slash when a ends with one).
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_ENV_H_
