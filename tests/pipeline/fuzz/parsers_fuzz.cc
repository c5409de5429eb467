// parsers_fuzz.cc: libFuzzer target for the pipeline parsers. The first input byte picks the
// format (Criteo, delimited, TFRecord, record file) and the policy; the rest is the file. Build
// with clang and -DRECSDK_PIPELINE_FUZZ=ON (tests/pipeline/CMakeLists.txt); run e.g.
//   ./pipeline_parsers_fuzz -max_total_time=60
#include <unistd.h>

#include <cstdio>
#include <string>

#include "recsdk/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = "/tmp/recsdk_fuzz_" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  using namespace recsdk;
  const MalformedPolicy policy = (data[0] & 4) ? MalformedPolicy::kSkip : MalformedPolicy::kError;
  StatusOr<std::unique_ptr<Dataset>> ds;
  switch (data[0] & 3) {
    case 0: {
      CriteoOptions o;
      o.reader.malformed_policy = policy;
      ds = CriteoDataset({path}, o);
      break;
    }
    case 1: {
      DelimitedOptions o;
      o.reader.malformed_policy = policy;
      o.schema = {{"label", ColumnKind::kLabel},
                  {"d", ColumnKind::kDense},
                  {"s", ColumnKind::kSparse, 2},
                  {"ts", ColumnKind::kTimestamp}};
      ds = DelimitedDataset({path}, o);
      break;
    }
    case 2: {
      TfRecordOptions o;
      o.reader.malformed_policy = policy;
      o.schema = {{"label", ColumnKind::kLabel},
                  {"dense", ColumnKind::kDense, 2},
                  {"ids", ColumnKind::kSparse, 2}};
      ds = TfRecordDataset({path}, o);
      break;
    }
    default: {
      ReaderOptions o;
      o.malformed_policy = policy;
      ds = RecordFileDataset({path}, o);
      break;
    }
  }
  if (!ds.ok()) return 0;
  Batch b;
  for (int i = 0; i < 100; ++i) {
    auto more = (*ds)->GetNext(&b);
    if (!more.ok() || !*more) break;
  }
  return 0;
}
