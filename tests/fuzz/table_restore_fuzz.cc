// table_restore_fuzz.cc: libFuzzer target for what RestoreTable (recsdk/checkpoint.h) reads back (a
// table checkpoint directory: its manifest and payload files). Kept simple so that it survives a
// change of the checkpoint format: the input is split into files by a one-byte selector, written
// into a fresh directory next to a valid checkpoint's other files, and the table restores from it.
// Input: byte 0 picks which file (sorted by name) the rest replaces. The restore must return a
// Status; on error the table must be unchanged.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/checkpoint.h"
#include "recsdk/table.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

recsdk::TableConfig Config() {
  recsdk::TableConfig c;
  c.name = "fuzz";
  c.dim = 4;
  c.device_vocabulary_size = 64;
  c.access_threshold = 0;
  c.eviction_threshold = 100;
  return c;
}

// A valid checkpoint of a small table, written once; each input starts from a copy of it.
const std::string& GoodCheckpoint() {
  static const std::string dir = [] {
    using namespace recsdk;
    const std::string d = fuzz::ScratchDir() + "/good";
    auto t = EmbeddingTable::Create(Config(), SparseOptimizerConfig::Adagrad(0.1f));
    if (!t.ok()) std::abort();
    std::vector<int64_t> keys = {3, 9, 27};
    std::vector<int64_t> ts = {5, 6, 7};
    std::vector<uint32_t> rows(3);
    if (!(*t)->Resolve(keys, {}, ts, LookupMode::kTrain, absl::MakeSpan(rows)).ok()) std::abort();
    if (!SaveTable(**t, d).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string dir = fuzz::CopyWithOneFileReplaced(GoodCheckpoint(), data, size, 1);
  auto t = EmbeddingTable::Create(Config(), SparseOptimizerConfig::Adagrad(0.1f));
  if (!t.ok()) std::abort();
  const Status s = RestoreTable(**t, dir);
  if (!s.ok() && (*t)->size() != 0) std::abort();
  return 0;
}
