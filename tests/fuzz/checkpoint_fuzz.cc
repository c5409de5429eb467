// checkpoint_fuzz.cc: libFuzzer target for what Saver::Restore (recsdk/checkpoint.h) reads back:
// a model directory with its `checkpoint` index, a full checkpoint ckpt-1 and a delta ckpt-2 on
// it (manifests, dense variable and table payloads). Input: byte 0 picks which file (every
// regular file under the model directory, sorted by relative path) the rest replaces, in a fresh
// copy of a valid model directory; byte 1's low bit restores the latest (the delta chain) or
// ckpt-1 alone, and its second bit reseals a JSON document (the index or a manifest) past its
// CRC32C (fuzz_util.h Reseal), so the index's names, the chains and ids, and every manifest
// field are fuzzed too, not only the checksum. Restore must return a Status; on error the session's
// variable and table must be unchanged (Restore verifies everything before it changes anything).
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A valid model directory, written once; each input starts from a copy of it.
const std::string& GoodModelDir() {
  static const std::string dir = [] {
    using namespace recsdk;
    const std::string d = fuzz::ScratchDir() + "/good_model";
    auto m = fuzz::BuildFuzzModel();
    fuzz::TrainRows(*m, {3, 9, 27}, 5);
    SaverOptions o;
    o.model_dir = d;
    o.is_incremental_checkpoint = true;
    auto saver = fuzz::Die(Saver::Create(*m->session, o));
    if (!saver->Save(1).ok()) std::abort();
    fuzz::TrainRows(*m, {9, 81}, 6);
    if (!saver->SaveDelta(2).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  using namespace recsdk;
  const std::string& good = GoodModelDir();
  const std::string dir = fuzz::CopyWithOneFileReplaced(good, data, size, 2, (data[1] & 2) != 0);
  static auto m = fuzz::BuildFuzzModel();
  static const std::vector<float> w0 = fuzz::WeightValues(*m);
  SaverOptions o;
  o.model_dir = dir;
  o.is_incremental_checkpoint = true;
  auto saver = fuzz::Die(Saver::Create(*m->session, o));
  const StatusOr<int64_t> step = saver->Restore((data[1] & 1) ? "ckpt-1" : "");
  saver.reset();
  if (step.ok()) {
    // Put the fresh state back for the next input: a new model is slow to build.
    m = fuzz::BuildFuzzModel();
    return 0;
  }
  if (m->table->size() != 0 || fuzz::WeightValues(*m) != w0) std::abort();
  return 0;
}
