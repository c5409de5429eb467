// fuzz_util.h: shared pieces of the libFuzzer targets in tests/fuzz/: a per-process scratch path,
// writing the input to a file (resealed past its checksum when asked), and draining a dataset.
// Every target is one binary, runnable on its own: `./<target> -max_total_time=N corpus_dir
// [seed_dir]` (scripts/fuzz.sh runs them all). Threading: libFuzzer calls a target from one thread;
// these helpers keep no shared state beyond the process-wide scratch directory.
#ifndef RECSDK_TESTS_FUZZ_FUZZ_UTIL_H_
#define RECSDK_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "recsdk/dataset.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/json_parse.h"

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

// FilesUnder: the regular files under `dir`, as paths relative to it, sorted (the restore
// targets' first input byte picks one of them; make_seeds.cc lists them the same way).
inline std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(std::filesystem::relative(e.path(), dir).string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Reseal: makes the file `rel` of the copy `dir` pass its checksum, so an input reaches the code
// behind the checksum instead of stopping at it (a random edit fails the CRC32C nearly always).
// A checksummed JSON document (a manifest.json, the `checkpoint` index, serving.json) whose
// input text parses as a JSON object is rewritten with its CRC32C (the writer's own format);
// a bundle's graph.json gets serving.json's graph_bytes and graph_crc32c updated. Other files,
// and inputs that do not parse, stay as they are.
inline void Reseal(const std::string& dir, const std::string& rel) {
  internal::Env* env = internal::Env::Default();
  const std::string path = dir + "/" + rel;
  const std::string name = std::filesystem::path(rel).filename().string();
  auto text = internal::ReadFileToString(env, path);
  if (!text.ok()) return;
  if (name == "manifest.json" || name == "checkpoint" || name == "serving.json") {
    auto doc = internal::ParseJson(*text, "fuzz input");
    if (doc.ok() && doc->is_object()) {
      (void)internal::WriteJsonDocument(env, path, *std::move(doc), /*atomic=*/false);
    }
    return;
  }
  if (name == "graph.json") {
    const std::string serving = dir + "/serving.json";
    auto doc = internal::ReadJsonDocument(env, serving);
    if (!doc.ok()) return;
    (*doc)["graph_bytes"] = text->size();
    (*doc)["graph_crc32c"] = internal::Crc32c(*text);
    (void)internal::WriteJsonDocument(env, serving, *std::move(doc), /*atomic=*/false);
  }
}

// CopyWithOneFileReplaced: the restore targets' input layout. A fresh copy of the valid directory
// `good` at ScratchDir()/in, in which file number data[0] (of FilesUnder(good), modulo their
// count) holds the input's bytes from `header` on. Returns the copy's path; size > header.
// With `reseal`, the replaced file is then made to pass its checksum (Reseal).
inline std::string CopyWithOneFileReplaced(const std::string& good, const uint8_t* data,
                                           size_t size, size_t header, bool reseal = false) {
  const std::vector<std::string> names = FilesUnder(good);
  const std::string dir = ScratchDir() + "/in";
  CopyTree(good, dir);
  const std::string& rel = names[data[0] % names.size()];
  WriteInput("in/" + rel, data + header, size - header);
  if (reseal) Reseal(dir, rel);
  return dir;
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
