// files.cc: ExpandFilePatterns. Thread-safe.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/file_open.h"

namespace recsdk {
namespace {

// CheckRegularFile: OK when `path` is a regular file; otherwise NotFound (missing),
// PermissionDenied, or InvalidArgument naming what it is (a named pipe would block a reader
// forever, a directory or device is not data). `via` says where the path came from.
Status CheckRegularFile(const std::string& path, std::string_view via) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(
          fmt::format("dataset: file \"{}\"{} does not exist; check the path", path, via));
    }
    return internal::ErrnoToStatus(err, fmt::format("dataset: file \"{}\"{}", path, via));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a named pipe"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    return absl::InvalidArgumentError(fmt::format(
        "dataset: \"{}\"{} is {}, not a regular file; inputs must be regular files (narrow the "
        "pattern or copy the data into a file)",
        path, via, kind));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandFilePatterns(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    std::error_code ec;
    if (std::filesystem::is_directory(pattern, ec)) {
      size_t before = out.size();
      for (const auto& entry : std::filesystem::directory_iterator(pattern, ec)) {
        if (entry.is_regular_file(ec)) out.push_back(entry.path().string());
      }
      if (out.size() == before) {
        return absl::NotFoundError(
            fmt::format("dataset: directory \"{}\" holds no regular files", pattern));
      }
      continue;
    }
    if (pattern.find_first_of("*?[") == std::string::npos) {
      if (Status s = CheckRegularFile(pattern, ""); !s.ok()) return s;
      out.push_back(pattern);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    for (const std::string& m : matches) {
      if (Status s = CheckRegularFile(m, fmt::format(" (matched by \"{}\")", pattern)); !s.ok()) {
        return s;
      }
      out.push_back(m);
    }
    if (rc != 0) {
      return absl::NotFoundError(
          fmt::format("dataset: pattern \"{}\" matches no file; check the path", pattern));
    }
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("dataset: no input files; pass at least one file");
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace recsdk
