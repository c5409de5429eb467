// tiers_test_util.h: helpers for the row store tests: a fresh directory per test, and rows whose
// contents say which slot and which version they are. Not thread-safe.
#ifndef RECSDK_TESTS_TABLE_TIERS_TIERS_TEST_UTIL_H_
#define RECSDK_TESTS_TABLE_TIERS_TIERS_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace recsdk::testing {

// TierTestDir: a fresh directory under RECSDK_TEST_TMPDIR (default /tmp), removed at the end.
class TierTestDir {
 public:
  TierTestDir() {
    const char* base = std::getenv("RECSDK_TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/tiers_XXXXXX";
    std::filesystem::create_directories(std::filesystem::path(tmpl).parent_path());
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TierTestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TierTestDir(const TierTestDir&) = delete;
  TierTestDir& operator=(const TierTestDir&) = delete;
  // Sub: path/name, created.
  std::string Sub(const std::string& name) const {
    const std::string p = path_ + "/" + name;
    std::filesystem::create_directories(p);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// RowsFor: rows for `slots`, row i's float j = tag * 1e6 + slots[i] * 100 + j, so a row read
// back from the wrong place, or an old version of it, shows.
inline std::vector<float> RowsFor(const std::vector<uint32_t>& slots, int row_floats, int tag) {
  std::vector<float> rows(slots.size() * row_floats);
  for (size_t i = 0; i < slots.size(); ++i) {
    for (int j = 0; j < row_floats; ++j) {
      rows[i * row_floats + j] = static_cast<float>(tag * 1000000 + slots[i] * 100 + j);
    }
  }
  return rows;
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_TABLE_TIERS_TIERS_TEST_UTIL_H_
