// tfrecord.h: TFRecord framing and the tf.Example wire format, without TensorFlow or protobuf.
// Record: uint64 length (LE), uint32 masked CRC32C of the length bytes, data, uint32 masked
// CRC32C of the data. Example{features=1: Features{feature=1: map<string, Feature>}};
// Feature{oneof bytes_list=1, float_list=2, int64_list=3}, each list a repeated field 1 (packed
// or not). The writer and encoder exist for tests, tools and converters.
// Thread-safe (pure functions); TfRecordWriter is not thread-safe.
#ifndef RECSDK_PIPELINE_TFRECORD_H_
#define RECSDK_PIPELINE_TFRECORD_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "recsdk/status.h"

namespace recsdk::internal {

// ExampleFeature: one feature of an Example, for encoding.
struct ExampleFeature {
  std::string name;
  std::variant<std::vector<std::string>, std::vector<float>, std::vector<int64_t>> values;
  bool packed = true;  // float/int64 lists: packed (the default of proto3) or one field per value
};
// EncodeExample serialises a tf.Example.
std::string EncodeExample(const std::vector<ExampleFeature>& features);

// FrameRecord: the bytes of one TFRecord around `data`.
std::string FrameRecord(std::string_view data);

class TfRecordWriter {
 public:
  ~TfRecordWriter();
  Status Open(const std::string& path);
  Status Write(std::string_view data);
  Status Close();

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// Proto wire-format reading helpers.
bool ReadVarint(const char*& p, const char* end, uint64_t* out);

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_TFRECORD_H_
