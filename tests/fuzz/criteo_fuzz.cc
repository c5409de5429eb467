// criteo_fuzz.cc: libFuzzer target for the Criteo TSV reader (CriteoDataset: the SWAR fast path,
// hex ids, line framing across chunks, max_line_bytes). Input: one policy byte (see
// fuzz_util.h; bit 1 also turns on the log1p transform and an id modulus), then the file.
#include "recsdk/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string path = fuzz::WriteInput("in.tsv", data + 1, size - 1);
  CriteoOptions o;
  o.reader.malformed_policy = fuzz::PolicyOf(data[0]);
  o.reader.chunk_bytes = 4096;
  o.reader.max_line_bytes = 1024;
  if (data[0] & 2) {
    o.dense_transform = DenseTransform::kLog1p;
    o.id_modulus = 1000003;
  }
  fuzz::DrainAll(CriteoDataset({path}, o));
  return 0;
}
