// files.cc: ExpandFilePatterns. Thread-safe.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "fmt/format.h"
#include "recsdk/dataset.h"

namespace recsdk {

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
      struct stat st;
      if (::stat(pattern.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return absl::NotFoundError(
            fmt::format("dataset: file \"{}\" does not exist or is not a regular file", pattern));
      }
      out.push_back(pattern);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
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
