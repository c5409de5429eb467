// files.cc: ExpandFilePatterns. Thread-safe. Every listing and check goes through the Env (a
// test's Env sees them; a remote file system plugs in): directories with GetChildren, globs
// matched one path component at a time with fnmatch, as glob(3) does.
#include <fnmatch.h>

#include <algorithm>
#include <string_view>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "recsdk/env.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

// Join: `dir` + "/" + `name`; `dir` empty means the working directory (the path stays relative,
// as glob(3) returns it).
std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool HasWildcard(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// CheckRegularFile: OK when `path` is a regular file (a symbolic link to one counts); otherwise
// NotFound (missing), PermissionDenied, or InvalidArgument naming what it is (a named pipe would
// block a reader forever, a directory or device is not data). `via` says where the path came from.
Status CheckRegularFile(Env* env, const std::string& path, std::string_view via) {
  StatusOr<FileType> type = env->GetFileType(path);
  if (!type.ok()) {
    if (type.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(
          fmt::format("dataset: file \"{}\"{} does not exist; check the path", path, via));
    }
    return Status(type.status().code(),
                  fmt::format("dataset: file \"{}\"{}: {}", path, via, type.status().message()));
  }
  if (*type == FileType::kRegular) return absl::OkStatus();
  if (*type == FileType::kDirectory) {
    return absl::InvalidArgumentError(fmt::format(
        "dataset: \"{}\"{} is a directory, not a regular file; inputs must be regular files "
        "(narrow the pattern, or pass the directory alone to read its files)",
        path, via));
  }
  // A link, a pipe, a socket or a device: opening it (never blocking) says what it leads to.
  auto opened = env->NewRandomAccessFile(path);
  if (opened.ok()) return absl::OkStatus();
  if (opened.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(fmt::format(
        "dataset: file \"{}\"{} does not exist (a link to nothing); check the path", path, via));
  }
  return Status(opened.status().code(),
                fmt::format("dataset: \"{}\"{}: {}; inputs must be regular files (narrow the "
                            "pattern or copy the data into a file)",
                            path, via, opened.status().message()));
}

// ExpandDirectory: the regular files of `dir` (not its subdirectories), appended to *out.
Status ExpandDirectory(Env* env, const std::string& dir, std::vector<std::string>* out) {
  StatusOr<std::vector<std::string>> names = env->GetChildren(dir);
  if (!names.ok()) {
    return Status(names.status().code(),
                  fmt::format("dataset: directory \"{}\": {}", dir, names.status().message()));
  }
  const size_t before = out->size();
  for (const std::string& name : *names) {
    const std::string path = Join(dir, name);
    if (CheckRegularFile(env, path, "").ok()) out->push_back(path);
  }
  if (out->size() == before) {
    return absl::NotFoundError(
        fmt::format("dataset: directory \"{}\" holds no regular files", dir));
  }
  return absl::OkStatus();
}

// Glob: the paths matching `pattern`, component by component. A component with a wildcard is
// matched against the names in its directory (a leading '.' only by a pattern's '.', as glob(3));
// one without is taken as it is. Components before the last must be directories.
Status Glob(Env* env, const std::string& pattern, std::vector<std::string>* matches) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= pattern.size()) {
    const size_t slash = std::min(pattern.find('/', start), pattern.size());
    if (slash > start) parts.push_back(pattern.substr(start, slash - start));
    start = slash + 1;
  }
  std::vector<std::string> current = {pattern.starts_with('/') ? "/" : ""};
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    std::vector<std::string> next;
    for (const std::string& dir : current) {
      if (!HasWildcard(parts[i])) {
        const std::string path = Join(dir, parts[i]);
        StatusOr<FileType> type = env->GetFileType(path);
        if (type.ok() && (last || *type == FileType::kDirectory || *type == FileType::kSymlink)) {
          next.push_back(path);
        }
        continue;
      }
      StatusOr<std::vector<std::string>> names = env->GetChildren(dir.empty() ? "." : dir);
      if (!names.ok()) continue;  // not a directory, or unreadable: no match below it
      for (const std::string& name : *names) {
        if (::fnmatch(parts[i].c_str(), name.c_str(), FNM_PERIOD) != 0) continue;
        const std::string path = Join(dir, name);
        if (!last) {
          StatusOr<FileType> type = env->GetFileType(path);
          if (!type.ok() || (*type != FileType::kDirectory && *type != FileType::kSymlink)) {
            continue;
          }
        }
        next.push_back(path);
      }
    }
    current = std::move(next);
    if (current.empty()) break;
  }
  *matches = std::move(current);
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandFilePatterns(const std::vector<std::string>& patterns,
                                                      Env* env) {
  if (env == nullptr) env = Env::Default();
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    if (!HasWildcard(pattern)) {
      StatusOr<FileType> type = env->GetFileType(pattern);
      // A directory, or a link to one (GetChildren follows it).
      if (type.ok() && (*type == FileType::kDirectory ||
                        (*type == FileType::kSymlink && env->GetChildren(pattern).ok()))) {
        if (Status s = ExpandDirectory(env, pattern, &out); !s.ok()) return s;
        continue;
      }
      if (Status s = CheckRegularFile(env, pattern, ""); !s.ok()) return s;
      out.push_back(pattern);
      continue;
    }
    std::vector<std::string> matches;
    if (Status s = Glob(env, pattern, &matches); !s.ok()) return s;
    if (matches.empty()) {
      return absl::NotFoundError(
          fmt::format("dataset: pattern \"{}\" matches no file; check the path", pattern));
    }
    for (const std::string& m : matches) {
      if (Status s = CheckRegularFile(env, m, fmt::format(" (matched by \"{}\")", pattern));
          !s.ok()) {
        return s;
      }
      out.push_back(m);
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
