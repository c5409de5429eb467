// record_file_fuzz.cc: libFuzzer target for recsdk's binary record files (RecordFileDataset):
// header, schema, block framing, payload checks and the end block. Input: one policy byte (see
// fuzz_util.h), then the file.
#include "recsdk/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string path = fuzz::WriteInput("in.rrec", data + 1, size - 1);
  ReaderOptions o;
  o.malformed_policy = fuzz::PolicyOf(data[0]);
  o.chunk_bytes = 4096;
  fuzz::DrainAll(RecordFileDataset({path}, o));
  return 0;
}
