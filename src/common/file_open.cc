// file_open.cc: see file_open.h.
#include "src/common/file_open.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fmt/format.h"

namespace recsdk::internal {

absl::Status ErrnoToStatus(int err, std::string_view what) {
  const char* reason = std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(fmt::format("{}: {}; check the path", what, reason));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(fmt::format(
          "{}: {}; check the permissions of the file and its directory for this process", what,
          reason));
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(
          fmt::format("{}: {}; free disk space or choose another directory", what, reason));
    case EEXIST:
    case ENOTEMPTY:
      return absl::AlreadyExistsError(fmt::format("{}: {}", what, reason));
    case EISDIR:
      return absl::InvalidArgumentError(fmt::format(
          "{}: {}; pass a regular file, or the directory itself as a pattern", what, reason));
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(fmt::format("{}: {}; fix the path", what, reason));
    case ELOOP:
      return absl::InvalidArgumentError(fmt::format(
          "{}: {} (a symbolic link where a file is written, or a loop of links); recsdk never "
          "writes through a link: remove it or fix the path",
          what, reason));
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return absl::ResourceExhaustedError(
          fmt::format("{}: {}; close other files or raise the limit", what, reason));
    case EIO:
      return absl::InternalError(
          fmt::format("{}: {}; the storage device reported an error, check it", what, reason));
    default:
      return absl::InternalError(fmt::format("{}: {}", what, reason));
  }
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, std::string_view who,
                                    std::string_view fix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return ErrnoToStatus(errno, fmt::format("{}: cannot open \"{}\"", who, path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, fmt::format("{}: cannot stat \"{}\"", who, path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a named pipe"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(fmt::format("{}: \"{}\" is {}; {}", who, path, kind, fix));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace recsdk::internal
