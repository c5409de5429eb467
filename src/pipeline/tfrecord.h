// tfrecord.h: TFRecord framing and the tf.Example wire format, without TensorFlow or protobuf.
// Record: uint64 length (LE), uint32 masked CRC32C of the length bytes, data, uint32 masked
// CRC32C of the data. Example{features=1: Features{feature=1: map<string, Feature>}};
// Feature{oneof bytes_list=1, float_list=2, int64_list=3}, each list a repeated field 1 (packed
// or not). The writer and encoder exist for tests, tools and converters.
// Thread-safe (pure functions); TfRecordWriter is not thread-safe.
#ifndef RECSDK_PIPELINE_TFRECORD_H_
#define RECSDK_PIPELINE_TFRECORD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"

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

// TfRecordWriter: writes one TFRecord file through an Env, atomically: the records go to
// `path`.tmp and Close syncs and renames it onto `path`, so until Close succeeds the previous
// file at `path` is what readers see. A failed Write (a full disk, a short write) fails every
// later Write and Close with the same error; a failed Close (fsync, rename) or destruction
// without Close deletes the temporary and keeps the previous file. Errors name the file.
class TfRecordWriter {
 public:
  TfRecordWriter() = default;
  ~TfRecordWriter();  // without a successful Close: the records are dropped
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  // Open: starts `path` (abandoning a file opened before and not closed). `env`: the file
  // system (tests inject faults through it); null: the process's POSIX one.
  [[nodiscard]] Status Open(const std::string& path, Env* env = nullptr);
  [[nodiscard]] Status Write(std::string_view data);
  // Close: publishes the file. OK when no file is open.
  [[nodiscard]] Status Close();

 private:
  std::unique_ptr<AtomicFileWriter> file_;
};

// Proto wire-format reading helpers.
bool ReadVarint(const char*& p, const char* end, uint64_t* out);

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_TFRECORD_H_
