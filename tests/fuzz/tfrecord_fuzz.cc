// tfrecord_fuzz.cc: libFuzzer target for TFRecord framing and tf.Example decoding
// (TfRecordDataset). Input: one byte (bit 0: the policy, see fuzz_util.h; bits 1-2: line_per_sample
// 1, 2, 3 or 4), then the file.
#include "recsdk/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string path = fuzz::WriteInput("in.tfrecord", data + 1, size - 1);
  TfRecordOptions o;
  o.reader.malformed_policy = fuzz::PolicyOf(data[0]);
  o.line_per_sample = 1 + ((data[0] >> 1) & 3);
  o.reader.chunk_bytes = 4096;  // several chunks per input: the framing across chunk ends
  o.schema = {{"label", ColumnKind::kLabel},
              {"dense", ColumnKind::kDense, 2},
              {"ids", ColumnKind::kSparse, 3},
              {"ts", ColumnKind::kTimestamp, 1, false, false}};
  fuzz::DrainAll(TfRecordDataset({path}, o));
  return 0;
}
