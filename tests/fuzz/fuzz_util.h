// fuzz_util.h: shared pieces of the libFuzzer targets in tests/fuzz/: a per-process scratch path,
// writing the input to a file, and draining a dataset. Every target is one binary, runnable on
// its own: `./<target> -max_total_time=N corpus_dir [seed_dir]` (scripts/fuzz.sh runs them all).
// Threading: libFuzzer calls a target from one thread; these helpers keep no shared state beyond
// the process-wide scratch directory.
#ifndef RECSDK_TESTS_FUZZ_FUZZ_UTIL_H_
#define RECSDK_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "recsdk/dataset.h"

namespace recsdk::fuzz {

// ScratchDir: a directory of this process (under $TMPDIR or /tmp), created once.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string d = std::string(base != nullptr && *base ? base : "/tmp") + "/recsdk_fuzz_" +
                    std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// WriteInput writes bytes to ScratchDir()/name and returns the path.
inline std::string WriteInput(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();  // the harness, not the input, is broken
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// CopyTree copies directory `from` to `to` (which must not exist). libFuzzer's timers interrupt
// system calls, so a copy that fails with EINTR is retried; any other failure aborts (the harness,
// not the input, is broken).
inline void CopyTree(const std::string& from, const std::string& to) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::error_code ec;
    std::filesystem::remove_all(to, ec);
    std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, ec);
    if (!ec) return;
    if (ec != std::errc::interrupted) break;
  }
  std::abort();
}

// DrainAll reads up to `limit` batches; any Status is a fine outcome, a crash is not. Each
// batch's columns must agree on the row count (what every consumer relies on).
inline void DrainAll(StatusOr<std::unique_ptr<Dataset>> ds, int limit = 64) {
  if (!ds.ok()) return;
  for (int i = 0; i < limit; ++i) {
    Batch b;
    StatusOr<bool> more = (*ds)->GetNext(&b);
    if (!more.ok() || !*more) return;
    for (const auto& [name, t] : b.columns()) {
      if (t.dim(0) != b.num_rows()) std::abort();
    }
  }
}

// PolicyOf: the first input byte picks the malformed-row policy (both paths are fuzzed).
inline MalformedPolicy PolicyOf(uint8_t b) {
  return (b & 1) ? MalformedPolicy::kSkip : MalformedPolicy::kError;
}

}  // namespace recsdk::fuzz

#endif  // RECSDK_TESTS_FUZZ_FUZZ_UTIL_H_
