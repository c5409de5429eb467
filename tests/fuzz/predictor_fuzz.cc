// predictor_fuzz.cc: libFuzzer target for what Predictor::Load (recsdk/export.h) reads back: an
// exported bundle (graph.json, serving.json, the manifest, dense and table payloads). Input:
// byte 0 picks which file (every regular file of the bundle, sorted by relative path; its high
// bit reseals the file past its checksum, fuzz_util.h Reseal, so serving.json's fields and the
// graph reach their readers) the rest replaces, in a fresh copy of a valid bundle. Load must return
// a Status, and a bundle that loads must answer Predict on a well-formed input with a Status too (a
// corrupt graph that still verifies may compute anything, but may not crash).
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const std::string& GoodBundle() {
  static const std::string dir = [] {
    using namespace recsdk;
    const std::string d = fuzz::ScratchDir() + "/good_bundle";
    auto m = fuzz::BuildFuzzModel();
    fuzz::TrainRows(*m, {3, 9, 27}, 5);
    if (!ExportSavedModel(*m->session, d, {{"ids"}, {"out"}}).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string& good = GoodBundle();
  // Byte 0: the file (its low 7 bits) and whether to reseal it (its high bit).
  std::string input(reinterpret_cast<const char*>(data), size);
  input[0] = static_cast<char>(data[0] & 0x7f);
  const std::string dir = fuzz::CopyWithOneFileReplaced(
      good, reinterpret_cast<const uint8_t*>(input.data()), size, 1, (data[0] & 0x80) != 0);
  auto predictor = Predictor::Load(dir);
  if (!predictor.ok()) return 0;
  auto ids = Tensor::FromValues<int64_t>(Shape{2, 2}, {3, 9, 27, 1000});
  if (!ids.ok()) std::abort();
  (void)(*predictor)->Predict({{"ids", *ids}});
  return 0;
}
