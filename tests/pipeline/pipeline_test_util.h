// pipeline_test_util.h: helpers for the pipeline tests: a temporary directory (under
// RECSDK_TEST_TMPDIR when CTest sets it), file writing, and draining a dataset. Not thread-safe.
#ifndef RECSDK_TESTS_PIPELINE_PIPELINE_TEST_UTIL_H_
#define RECSDK_TESTS_PIPELINE_PIPELINE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/dataset.h"
#include "src/common/env.h"

namespace recsdk::testing {

// TestDir: a fresh directory, removed on destruction.
class TestDir {
 public:
  TestDir() {
    const char* base = std::getenv("RECSDK_TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/pipeline_XXXXXX";
    std::filesystem::create_directories(std::filesystem::path(tmpl).parent_path());
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

inline std::string ReadFile(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// Drain: every batch until the end, or the first error.
inline StatusOr<std::vector<Batch>> Drain(Dataset& ds, int64_t limit = 1 << 30) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < limit; ++i) {
    Batch b;
    StatusOr<bool> more = ds.GetNext(&b);
    if (!more.ok()) return more.status();
    if (!*more) break;
    out.push_back(std::move(b));
  }
  return out;
}

// Column values of all batches concatenated (valid rows only).
template <typename T>
std::vector<T> Concat(const std::vector<Batch>& batches, const std::string& column) {
  std::vector<T> out;
  for (const Batch& b : batches) {
    const Tensor* t = b.column(column);
    EXPECT_NE(t, nullptr) << column;
    if (t == nullptr) continue;
    const int64_t per_row = b.num_rows() == 0 ? 0 : t->num_elements() / b.num_rows();
    const T* p = t->data<T>();
    out.insert(out.end(), p, p + per_row * b.num_valid());
  }
  return out;
}

// ScrambledFileLists: ways to name the files `names` of `dir` that do not list them in sorted
// order: the paths in the given order with the first repeated at the end, the directory itself,
// and `dir`/`glob`. A reader must read the same files, each once, in sorted-name order from each.
inline std::vector<std::vector<std::string>> ScrambledFileLists(
    const TestDir& dir, const std::vector<std::string>& names, const std::string& glob) {
  std::vector<std::string> listed;
  for (const std::string& name : names) listed.push_back(dir.File(name));
  if (!listed.empty()) listed.push_back(listed.front());
  return {listed, {dir.path()}, {dir.File(glob)}};
}

inline int64_t TotalRows(const std::vector<Batch>& batches) {
  int64_t n = 0;
  for (const Batch& b : batches) n += b.num_valid();
  return n;
}

// WriterFault: one way a file writer's disk can fail, how to arm it on a FaultInjectionEnv, and
// the status code the writer must return.
struct WriterFault {
  std::string name;
  std::function<void(internal::FaultInjectionEnv&)> arm;
  absl::StatusCode code;
};

// WriterFaults: a full disk and a short write after `after_bytes`, a failed fsync and a failed
// rename; with `failed_write`, also a write that fails outright (the third Append).
inline std::vector<WriterFault> WriterFaults(int64_t after_bytes, bool failed_write) {
  using internal::FaultInjectionEnv;
  std::vector<WriterFault> faults = {
      {"disk full", [=](FaultInjectionEnv& e) { e.disk_full_after_bytes = after_bytes; },
       absl::StatusCode::kResourceExhausted},
      {"short write", [=](FaultInjectionEnv& e) { e.short_write_after_bytes = after_bytes; },
       absl::StatusCode::kResourceExhausted},
  };
  if (failed_write) {
    faults.push_back({"failed write", [](FaultInjectionEnv& e) { e.fail_write_after = 2; },
                      absl::StatusCode::kInternal});
  }
  faults.push_back({"fsync failure", [](FaultInjectionEnv& e) { e.fail_sync = true; },
                    absl::StatusCode::kInternal});
  faults.push_back({"failed rename", [](FaultInjectionEnv& e) { e.fail_rename = true; },
                    absl::StatusCode::kInternal});
  return faults;
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_PIPELINE_PIPELINE_TEST_UTIL_H_
