// summary_writer.cc: SummaryWriter (recsdk/summary.h): a hand-written encoder of the few protocol
// buffer messages TensorBoard reads (Event, Summary, Summary.Value with simple_value), framed as
// TFRecords. Field numbers follow tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// tests/estimator/summary_writer_test.cc decodes the file with the real protobuf library.
//
// Files go through the Env (src/common/env.h): tests inject a failed write or a full disk, and
// the event file is created exclusively (O_EXCL), never overwriting another writer's.
//
// Threading: Impl::mu guards the buffer and the file.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "fmt/format.h"
#include "recsdk/summary.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/pipeline/crc32c.h"

namespace recsdk {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <typename T>
void PutFixed(std::string* out, T v) {  // little-endian on the x86-64/aarch64 targets we build
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out->append(bytes, sizeof(T));
}
void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// EventProto: an Event with wall_time, step and either file_version or one scalar summary.
std::string EventProto(double wall_time, int64_t step, std::string_view file_version,
                       std::string_view tag, float value) {
  std::string event;
  PutTag(&event, 1, 1);
  PutFixed(&event, wall_time);
  PutTag(&event, 2, 0);
  PutVarint(&event, static_cast<uint64_t>(step));  // int64: two's complement as a varint
  if (!file_version.empty()) {
    PutBytes(&event, 3, file_version);
    return event;
  }
  std::string summary_value;
  PutBytes(&summary_value, 1, tag);
  PutTag(&summary_value, 2, 5);
  PutFixed(&summary_value, value);
  std::string summary;
  PutBytes(&summary, 1, summary_value);
  PutBytes(&event, 5, summary);
  return event;
}

// Record: TFRecord framing: length, masked CRC of the length, data, masked CRC of the data.
std::string Record(std::string_view data) {
  std::string out;
  const uint64_t length = data.size();
  PutFixed(&out, length);
  PutFixed(&out, internal::MaskCrc(internal::Crc32c(out.data(), sizeof(length))));
  out.append(data);
  PutFixed(&out, internal::MaskCrc(internal::Crc32c(data)));
  return out;
}

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

struct SummaryWriter::Impl {
  // Records are appended to the file when this many bytes are buffered, and at Flush/Close.
  static constexpr size_t kBufferBytes = 64 << 10;

  std::mutex mu;
  std::string path;
  std::unique_ptr<internal::WritableFile> file;  // null once closed
  std::string buffer;

  Status Write(const std::string& record) {
    if (file == nullptr) {
      return absl::FailedPreconditionError(
          fmt::format("SummaryWriter \"{}\": written after Close", path));
    }
    buffer += record;
    if (buffer.size() >= kBufferBytes) return FlushBuffer();
    return absl::OkStatus();
  }
  Status FlushBuffer() {
    if (file == nullptr || buffer.empty()) return absl::OkStatus();
    Status s = file->Append(buffer);
    buffer.clear();  // a failed write is reported once, not retried with later records
    if (!s.ok()) {
      return Status(s.code(),
                    fmt::format("SummaryWriter: writing \"{}\" failed: {}", path, s.message()));
    }
    return absl::OkStatus();
  }
};

SummaryWriter::SummaryWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SummaryWriter::~SummaryWriter() { (void)Close(); }

StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Create(const std::string& logdir,
                                                               internal::Env* env) {
  if (logdir.empty()) {
    return absl::InvalidArgumentError(
        "SummaryWriter: logdir is empty; give the directory TensorBoard will read (model_dir)");
  }
  if (env == nullptr) env = internal::Env::Default();
  if (Status s = env->CreateDir(logdir); !s.ok()) {
    return Status(s.code(), fmt::format("SummaryWriter: cannot create directory \"{}\": {}", logdir,
                                        s.message()));
  }
  const double now = WallTime();
  const std::string base =
      fmt::format("{}/events.out.tfevents.{}.{}", logdir, static_cast<int64_t>(now), HostName());
  auto impl = std::make_unique<Impl>();
  Status last;
  for (int n = 0; n < 1000 && impl->file == nullptr; ++n) {
    impl->path = n == 0 ? base : fmt::format("{}.{}", base, n);
    auto f = env->NewExclusiveFile(impl->path);  // never overwrite another writer's file
    if (f.ok()) {
      impl->file = std::move(*f);
      break;
    }
    last = f.status();
    if (!absl::IsAlreadyExists(last)) break;
  }
  if (impl->file == nullptr) {
    return Status(last.code(), fmt::format("SummaryWriter: cannot create \"{}\": {}", impl->path,
                                           last.message()));
  }
  RECSDK_RETURN_IF_ERROR(impl->Write(Record(EventProto(now, 0, "brain.Event:2", {}, 0))));
  RECSDK_RETURN_IF_ERROR(impl->FlushBuffer());
  return std::unique_ptr<SummaryWriter>(new SummaryWriter(std::move(impl)));
}

Status SummaryWriter::AddScalar(std::string_view tag, double value, int64_t step) {
  if (tag.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("SummaryWriter \"{}\": a scalar needs a tag (e.g. \"loss\")", impl_->path));
  }
  const std::string record =
      Record(EventProto(WallTime(), step, {}, tag, static_cast<float>(value)));
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Write(record);
}

Status SummaryWriter::Flush() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->FlushBuffer();
}

Status SummaryWriter::Close() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->file == nullptr) return absl::OkStatus();
  Status s = impl_->FlushBuffer();
  Status closed = impl_->file->Close();
  impl_->file.reset();
  if (s.ok() && !closed.ok()) {
    s = Status(closed.code(), fmt::format("SummaryWriter: closing \"{}\" failed: {}", impl_->path,
                                          closed.message()));
  }
  return s;
}

const std::string& SummaryWriter::path() const { return impl_->path; }

}  // namespace recsdk
