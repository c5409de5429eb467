// delimited_fuzz.cc: libFuzzer target for the schema-driven delimited text reader
// (DelimitedDataset): numbers, multi-valued hex and decimal ids, UTF-8 checks, headers, lines
// across chunks. Input: one policy byte (see fuzz_util.h; bit 1 also skips a header line), then
// the file.
#include "recsdk/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace recsdk;
  const std::string path = fuzz::WriteInput("in.csv", data + 1, size - 1);
  DelimitedOptions o;
  o.reader.malformed_policy = fuzz::PolicyOf(data[0]);
  o.reader.chunk_bytes = 4096;
  o.reader.max_line_bytes = 512;
  o.skip_header = (data[0] & 2) != 0;
  SchemaColumn hex{"h", ColumnKind::kSparse, 2};
  hex.hex = true;
  o.schema = {{"label", ColumnKind::kLabel}, {"d", ColumnKind::kDense},
              {"s", ColumnKind::kSparse, 3}, hex,
              {"skip", ColumnKind::kSkip},   {"ts", ColumnKind::kTimestamp}};
  fuzz::DrainAll(DelimitedDataset({path}, o));
  return 0;
}
