// dump_fuzz.cc: libFuzzer target for the dump reader (src/precision/dump_reader.h) behind
// `recsdk find-nan`, `compare-dumps`, `precision-check` and `replay-op`: a step directory's
// manifest.json and its .npy tensor files. Input: byte 0 picks which file (every regular file of a
// valid step directory, sorted by name) the rest replaces, in a fresh copy; byte 1's low bit
// reseals a replaced tensor file (the manifest's "bytes" and "crc32c" for it are rewritten to
// match), so the .npy header check behind the checksum is fuzzed too, not only the checksum.
// FindNan, CompareDumps (against the valid dump, and against an unfused one: fused_from and the
// fused op's pairing), PrecisionCheck (`recsdk precision-check`; the copy against the valid dump)
// and ReplayOp (`recsdk replay-op`, every op of the valid dump by name, so the manifest's types and
// attributes are fuzzed too) must return a Status; none may crash, whatever the files hold.
// Threading: libFuzzer calls the target from one thread.
#include <cstdlib>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"
#include "src/precision/dump_reader.h"
#include "src/precision/dump_replay.h"
#include "src/precision/precision_check.h"
#include "tests/fuzz/fuzz_dump.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace recsdk;

// A valid step directory (fuzz_dump.h), written once; each input starts from a copy of it.
const std::string& GoodStepDir() {
  static const std::string dir = fuzz::WriteFuzzDump(fuzz::ScratchDir() + "/good_dump");
  return dir;
}

// ResealTensor: makes the manifest's entry for tensor file `name` agree with the file's size and
// CRC-32C. Does nothing when the file is the manifest or the manifest is not as written.
void ResealTensor(const std::string& dir, const std::string& name) {
  using nlohmann::json;
  if (name == "manifest.json") return;
  internal::Env* env = internal::Env::Default();
  auto text = internal::ReadFileToString(env, dir + "/manifest.json");
  auto bytes = internal::ReadFileToString(env, dir + "/" + name);
  if (!text.ok() || !bytes.ok()) std::abort();
  json m = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("ops")) std::abort();
  for (json& op : m["ops"]) {
    for (const char* list : {"inputs", "outputs"}) {
      for (json& t : op[list]) {
        if (t.value("file", "") == name) {
          t["bytes"] = bytes->size();
          t["crc32c"] = internal::Crc32c(*bytes);
        }
      }
    }
  }
  const std::string resealed = m.dump();
  fuzz::WriteInput("in/manifest.json", reinterpret_cast<const uint8_t*>(resealed.data()),
                   resealed.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string& good = GoodStepDir();
  const std::string dir = fuzz::CopyWithOneFileReplaced(good, data, size, 2);
  if (data[1] & 1) {
    const std::vector<std::string> names = fuzz::FilesUnder(good);
    ResealTensor(dir, names[data[0] % names.size()]);
  }
  internal::Env* env = internal::Env::Default();
  auto report = internal::FindNan(env, dir);
  if (report.ok()) (void)report->Text();
  auto comparison = internal::CompareDumps(env, good, dir, 0.98);
  if (comparison.ok()) {
    (void)comparison->Text();
    (void)comparison->Csv();
  }
  // The unfused dump against the copy: the fused op's pairing with the chain it replaced reads
  // the copy's fused_from, inputs and producers.
  static const std::string unfused =
      fuzz::WriteFuzzDump(fuzz::ScratchDir() + "/unfused_dump", /*fused=*/false);
  auto fused_pair = internal::CompareDumps(env, unfused, dir, 0.98);
  if (fused_pair.ok()) (void)fused_pair->Text();
  auto check = internal::PrecisionCheck(env, good, dir);
  if (check.ok()) (void)check->Text();
  // replay-op rebuilds each op from the manifest's type and attributes and runs it: whatever the
  // manifest says, a Status and no unbounded allocation (output sizes are checked against files).
  static const std::vector<std::string> op_names = [] {
    std::vector<std::string> names;
    auto step = internal::ReadDumpManifest(internal::Env::Default(), GoodStepDir());
    if (!step.ok()) std::abort();
    for (const internal::DumpOp& op : step->ops) names.push_back(op.name);
    return names;
  }();
  for (const std::string& name : op_names) {
    auto replay = internal::ReplayOp(env, dir, name, internal::ReplayOptions());
    if (replay.ok()) (void)replay->Text();
  }
  return 0;
}
