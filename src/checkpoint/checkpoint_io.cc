// checkpoint_io.cc: payload files, table payloads and checksummed JSON documents of checkpoints.
// Threading: see checkpoint_io.h.
#include "src/checkpoint/checkpoint_io.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <numeric>
#include <optional>

#include "fmt/format.h"
#include "src/common/checked_math.h"
#include "src/common/crc32c.h"
#include "src/common/huge_pages.h"
#include "src/common/json_number.h"
#include "src/common/json_parse.h"
#include "src/common/memory_limit.h"
#include "src/common/status_macros.h"
#include "src/table/npy.h"

namespace recsdk::internal {
namespace {

// Payload bytes are checksummed and written in blocks of this size, so the CRC of a block runs
// while its bytes are still in cache.
constexpr size_t kBlock = 4 << 20;

uint64_t ItemSizeOf(std::string_view descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  return 0;
}

Status Corrupt(const std::string& path, std::string_view why) {
  return absl::DataLossError(fmt::format(
      "checkpoint file \"{}\" is corrupt: {}; restore from another checkpoint", path, why));
}

}  // namespace

nlohmann::json PayloadInfo::ToJson() const {
  return {{"file", file}, {"dtype", descr}, {"shape", shape}, {"bytes", bytes}, {"crc32c", crc32c}};
}

StatusOr<PayloadInfo> PayloadInfo::FromJson(const nlohmann::json& j, const std::string& where) {
  PayloadInfo p;
  try {
    p.file = j.at("file").get<std::string>();
    p.descr = j.at("dtype").get<std::string>();
    p.shape = j.at("shape").get<std::vector<int64_t>>();
    p.bytes = JsonNumber<uint64_t>(j.at("bytes"));
    p.crc32c = JsonNumber<uint32_t>(j.at("crc32c"));
  } catch (const std::exception& e) {
    return Corrupt(where, fmt::format("a payload entry is malformed ({})", e.what()));
  }
  if (!IsPlainFileName(p.file)) {
    return Corrupt(where, fmt::format("it names payload file {}, which is not a plain file "
                                      "name of the checkpoint directory (no '/' or \"..\")",
                                      QuoteBounded(p.file)));
  }
  if (ItemSizeOf(p.descr) == 0) {
    return Corrupt(where, fmt::format("payload \"{}\" has dtype {} (not <f4, <f8, <i4 or <i8)",
                                      p.file, QuoteBounded(p.descr)));
  }
  for (int64_t d : p.shape) {
    if (d < 0 || d > (int64_t{1} << 40)) {
      return Corrupt(where, fmt::format("payload \"{}\" has dimension {}", p.file, d));
    }
  }
  return p;
}

StatusOr<std::unique_ptr<PayloadWriter>> PayloadWriter::Open(Env* env, const std::string& dir,
                                                             const std::string& file,
                                                             std::string_view descr,
                                                             std::vector<int64_t> shape) {
  std::unique_ptr<PayloadWriter> w(new PayloadWriter());
  w->info_.file = file;
  w->info_.descr = std::string(descr);
  w->info_.shape = std::move(shape);
  w->path_ = JoinPath(dir, file);
  std::optional<uint64_t> bytes = ItemSizeOf(descr);
  for (int64_t d : w->info_.shape) {
    if (bytes && d >= 0) bytes = CheckedMul<uint64_t>(*bytes, static_cast<uint64_t>(d));
    if (!bytes || d < 0) break;
  }
  if (!bytes || ItemSizeOf(descr) == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "checkpoint file \"{}\": dtype {} and its shape give no valid size", w->path_, descr));
  }
  w->data_bytes_ = *bytes;
  const std::string header = NpyHeader(descr, w->info_.shape);
  RECSDK_ASSIGN_OR_RETURN(w->file_, env->NewWritableFile(w->path_));
  w->crc_ = Crc32c(header);
  RECSDK_RETURN_IF_ERROR(w->file_->Append(header));
  w->header_bytes_ = header.size();
  return w;
}

Status PayloadWriter::Append(const void* data, uint64_t bytes) {
  if (bytes > data_bytes_ - appended_) {
    return absl::InternalError(
        fmt::format("checkpoint file \"{}\": {} bytes appended past the {} "
                    "its shape holds",
                    path_, appended_ + bytes, data_bytes_));
  }
  const char* p = static_cast<const char*>(data);
  for (uint64_t off = 0; off < bytes; off += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, bytes - off));
    crc_ = Crc32cExtend(crc_, p + off, n);
    RECSDK_RETURN_IF_ERROR(file_->Append(std::string_view(p + off, n)));
  }
  appended_ += bytes;
  return absl::OkStatus();
}

StatusOr<PayloadInfo> PayloadWriter::Finish() {
  if (appended_ != data_bytes_) {
    return absl::InternalError(
        fmt::format("checkpoint file \"{}\": {} bytes written of the {} its shape holds", path_,
                    appended_, data_bytes_));
  }
  RECSDK_RETURN_IF_ERROR(file_->Sync());
  RECSDK_RETURN_IF_ERROR(file_->Close());
  info_.bytes = header_bytes_ + data_bytes_;
  info_.crc32c = crc_;
  return info_;
}

StatusOr<PayloadInfo> WritePayload(Env* env, const std::string& dir, const std::string& file,
                                   std::string_view descr, std::vector<int64_t> shape,
                                   const void* data, uint64_t data_bytes) {
  RECSDK_ASSIGN_OR_RETURN(auto w, PayloadWriter::Open(env, dir, file, descr, std::move(shape)));
  RECSDK_RETURN_IF_ERROR(w->Append(data, data_bytes));
  return w->Finish();
}

template <typename T, typename Alloc>
Status ReadPayload(Env* env, const std::string& dir, const PayloadInfo& info,
                   std::vector<T, Alloc>* out) {
  const std::string path = JoinPath(dir, info.file);
  if (ItemSizeOf(info.descr) != sizeof(T)) {
    return Corrupt(path, fmt::format("dtype {} where {}-byte items belong", info.descr, sizeof(T)));
  }
  uint64_t elements = 1;
  for (int64_t d : info.shape) {
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(d)) {
      return Corrupt(path, "its shape overflows");
    }
    elements *= static_cast<uint64_t>(d);
  }
  const std::string header = NpyHeader(info.descr, info.shape);
  const uint64_t want = header.size() + elements * sizeof(T);
  if (want != info.bytes) {
    return Corrupt(path, fmt::format("the manifest says {} bytes but dtype and shape need {}",
                                     info.bytes, want));
  }
  auto opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) {
    if (absl::IsNotFound(opened.status())) {
      return absl::DataLossError(
          fmt::format("checkpoint file \"{}\" is missing; restore from another checkpoint", path));
    }
    return opened.status();
  }
  const auto& f = *opened;
  RECSDK_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  if (size != info.bytes) {
    return Corrupt(path, fmt::format("it has {} bytes but the manifest says {} (truncated?)", size,
                                     info.bytes));
  }
  auto read_fully = [&](uint64_t offset, size_t n, char* dst) -> Status {
    size_t done = 0;
    while (done < n) {
      RECSDK_ASSIGN_OR_RETURN(const size_t got, f->Read(offset + done, n - done, dst + done));
      if (got == 0) return Corrupt(path, "it ended early while being read");
      done += got;
    }
    return absl::OkStatus();
  };
  std::string head(header.size(), '\0');
  RECSDK_RETURN_IF_ERROR(read_fully(0, head.size(), head.data()));
  // A sparse file can claim any size at no cost to its writer: check the bytes fit this process
  // before asking for them.
  RECSDK_RETURN_IF_ERROR(
      CheckAllocation(elements * sizeof(T), fmt::format("checkpoint file \"{}\"", path)));
  uint32_t crc = Crc32c(head);
  ResizeOnHugePages(*out, static_cast<size_t>(elements));
  char* dst = reinterpret_cast<char*>(out->data());
  const uint64_t data_bytes = elements * sizeof(T);
  for (uint64_t off = 0; off < data_bytes; off += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, data_bytes - off));
    RECSDK_RETURN_IF_ERROR(read_fully(head.size() + off, n, dst + off));
    crc = Crc32cExtend(crc, dst + off, n);
  }
  if (crc != info.crc32c) {
    return Corrupt(
        path, fmt::format("its CRC32C is {:08x} but the manifest says {:08x}", crc, info.crc32c));
  }
  if (head != header) return Corrupt(path, "its .npy header does not match the manifest");
  return absl::OkStatus();
}

namespace {

// RowSource: a float32 rows payload, verified whole beforehand, read in pieces by a streamed
// restore (TableSnapshot::row_source). Shared by the copies of the snapshot's function.
struct RowSource {
  std::unique_ptr<RandomAccessFile> file;
  std::string path;
  uint64_t header_bytes = 0;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
  Status Read(size_t first, size_t count, float* out) const {
    if (first > rows || count > rows - first) {
      return absl::InternalError(fmt::format("rows [{}, +{}) of \"{}\" asked, which has {} rows",
                                             first, count, path, rows));
    }
    char* dst = reinterpret_cast<char*>(out);
    const uint64_t offset = header_bytes + first * row_bytes;
    const uint64_t n = count * row_bytes;
    for (uint64_t done = 0; done < n;) {
      RECSDK_ASSIGN_OR_RETURN(const size_t got,
                              file->Read(offset + done, static_cast<size_t>(n - done), dst + done));
      if (got == 0)
        return Corrupt(path, "it ended early while being read (changed since it was verified?)");
      done += got;
    }
    return absl::OkStatus();
  }
};

// VerifiedRowSource: checks a rows payload as ReadPayload does (size, header, CRC32C over every
// byte), reading it in pieces through one reused buffer, and returns a source that reads its rows.
StatusOr<std::shared_ptr<RowSource>> VerifiedRowSource(Env* env, const std::string& dir,
                                                       const PayloadInfo& info) {
  const std::string path = JoinPath(dir, info.file);
  if (info.descr != "<f4" || info.shape.size() != 2 || info.shape[0] < 0 || info.shape[1] <= 0) {
    return Corrupt(path, "its rows are not a float32 [rows, width] payload");
  }
  auto src = std::make_shared<RowSource>();
  src->path = path;
  src->rows = static_cast<uint64_t>(info.shape[0]);
  src->row_bytes = static_cast<uint64_t>(info.shape[1]) * sizeof(float);
  if (src->rows > std::numeric_limits<uint64_t>::max() / 2 / src->row_bytes) {
    return Corrupt(path, "its shape overflows");
  }
  const std::string header = NpyHeader(info.descr, info.shape);
  src->header_bytes = header.size();
  const uint64_t data_bytes = src->rows * src->row_bytes;
  if (header.size() + data_bytes != info.bytes) {
    return Corrupt(path, fmt::format("the manifest says {} bytes but dtype and shape need {}",
                                     info.bytes, header.size() + data_bytes));
  }
  auto opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) {
    if (absl::IsNotFound(opened.status())) {
      return absl::DataLossError(
          fmt::format("checkpoint file \"{}\" is missing; restore from another checkpoint", path));
    }
    return opened.status();
  }
  src->file = std::move(*opened);
  RECSDK_ASSIGN_OR_RETURN(const uint64_t size, src->file->Size());
  if (size != info.bytes) {
    return Corrupt(path, fmt::format("it has {} bytes but the manifest says {} (truncated?)", size,
                                     info.bytes));
  }
  std::vector<char> buf(std::min<uint64_t>(kBlock, std::max<uint64_t>(info.bytes, 1)));
  uint32_t crc = 0;
  for (uint64_t off = 0; off < info.bytes;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), info.bytes - off));
    RECSDK_ASSIGN_OR_RETURN(const size_t got, src->file->Read(off, want, buf.data()));
    if (got == 0) return Corrupt(path, "it ended early while being read");
    if (off < header.size() &&
        std::string_view(buf.data(), std::min<size_t>(got, header.size() - off)) !=
            std::string_view(header).substr(off, std::min<size_t>(got, header.size() - off))) {
      return Corrupt(path, "its .npy header does not match the manifest");
    }
    crc = Crc32cExtend(crc, buf.data(), got);
    off += got;
  }
  if (crc != info.crc32c) {
    return Corrupt(
        path, fmt::format("its CRC32C is {:08x} but the manifest says {:08x}", crc, info.crc32c));
  }
  return src;
}

}  // namespace

template Status ReadPayload(Env*, const std::string&, const PayloadInfo&, std::vector<float>*);
template Status ReadPayload(Env*, const std::string&, const PayloadInfo&, RowBuffer*);
template Status ReadPayload(Env*, const std::string&, const PayloadInfo&, std::vector<int64_t>*);
template Status ReadPayload(Env*, const std::string&, const PayloadInfo&, std::vector<int32_t>*);
template Status ReadPayload(Env*, const std::string&, const PayloadInfo&, std::vector<double>*);

namespace {

// WriteTableFiles: the manifest entry of snapshot `s` after writing its payloads; `rows` writes
// (or finishes) the rows file on a thread of its own while this one writes the rest, so the
// smaller files' copies, checksums and syncs hide behind the big one.
StatusOr<nlohmann::json> WriteTableFiles(Env* env, const std::string& dir,
                                         const std::string& prefix, const TableSnapshot& s,
                                         const std::function<StatusOr<PayloadInfo>()>& rows_job) {
  const int64_t n = static_cast<int64_t>(s.keys.size());
  const int64_t pn = static_cast<int64_t>(s.pending_keys.size());
  nlohmann::json files = nlohmann::json::object();
  auto put = [&](const std::string& what, std::string_view descr, std::vector<int64_t> shape,
                 const void* data, uint64_t bytes) -> Status {
    RECSDK_ASSIGN_OR_RETURN(PayloadInfo info, WritePayload(env, dir, prefix + what + ".npy", descr,
                                                           std::move(shape), data, bytes));
    files[what] = info.ToJson();
    return absl::OkStatus();
  };
  std::future<StatusOr<PayloadInfo>> rows = std::async(std::launch::async, rows_job);
  auto rest = [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(put("keys", "<i8", {n}, s.keys.data(), s.keys.size() * 8));
    if (!s.timestamps.empty()) {
      RECSDK_RETURN_IF_ERROR(put("timestamps", "<i8", {n}, s.timestamps.data(), n * 8));
    }
    if (s.is_delta) {
      RECSDK_RETURN_IF_ERROR(put("removed_keys", "<i8",
                                 {static_cast<int64_t>(s.removed_keys.size())},
                                 s.removed_keys.data(), s.removed_keys.size() * 8));
    }
    RECSDK_RETURN_IF_ERROR(put("pending_keys", "<i8", {pn}, s.pending_keys.data(), pn * 8));
    RECSDK_RETURN_IF_ERROR(
        put("pending_counts", "<f4", {pn}, s.pending_counts.data(), pn * sizeof(float)));
    return put("pending_timestamps", "<i8", {pn}, s.pending_timestamps.data(), pn * 8);
  };
  const Status rest_status = rest();
  StatusOr<PayloadInfo> rows_info = rows.get();  // always joined, even after an error above
  RECSDK_RETURN_IF_ERROR(rest_status);
  RECSDK_RETURN_IF_ERROR(rows_info.status());
  files["rows"] = rows_info->ToJson();
  nlohmann::json entry{
      {"name", s.table_name},
      {"dim", s.dim},
      {"num_slots", s.num_slots},
      {"optimizer", std::string(SparseOptimizerKindName(s.optimizer))},
      {"optimizer_kind", static_cast<int>(s.optimizer)},
      {"key_dtype", std::string(DTypeName(s.key_dtype))},
      {"is_delta", s.is_delta},
      {"data_time", s.data_time},
      {"access_threshold", s.access_threshold},
      {"size", n},
      {"files", files},
  };
  // Format version 2: a tiered table's streamed rows are in storage order (keys unique, not
  // sorted); the reader puts them in key order (ReadTablePayloads) or streams them as they are.
  if (s.storage_order) entry["row_order"] = "storage";
  return entry;
}

// RowsFileSink: a SnapshotRowSink writing rows.npy as the rows come.
class RowsFileSink final : public SnapshotRowSink {
 public:
  RowsFileSink(Env* env, const std::string& dir, std::string file)
      : env_(env), dir_(dir), file_(std::move(file)) {}
  Status Begin(const TableSnapshot& s) override {
    RECSDK_ASSIGN_OR_RETURN(
        writer_, PayloadWriter::Open(env_, dir_, file_, "<f4",
                                     {static_cast<int64_t>(s.keys.size()), s.dim + s.num_slots}));
    return absl::OkStatus();
  }
  Status Rows(absl::Span<const float> rows) override {
    return writer_->Append(rows.data(), rows.size() * sizeof(float));
  }
  StatusOr<PayloadInfo> Finish() {
    if (writer_ == nullptr) return absl::InternalError("the table never began its snapshot");
    return writer_->Finish();
  }

 private:
  Env* env_;
  const std::string& dir_;
  std::string file_;
  std::unique_ptr<PayloadWriter> writer_;
};

}  // namespace

StatusOr<nlohmann::json> WriteTablePayloads(Env* env, const std::string& dir,
                                            const std::string& prefix, const TableSnapshot& s) {
  return WriteTableFiles(env, dir, prefix, s, [&] {
    return WritePayload(env, dir, prefix + "rows.npy", "<f4",
                        {static_cast<int64_t>(s.keys.size()), s.dim + s.num_slots}, s.rows.data(),
                        s.rows.size() * sizeof(float));
  });
}

StatusOr<nlohmann::json> SnapshotAndWriteTable(Env* env, const std::string& dir,
                                               const std::string& prefix, EmbeddingTable& table,
                                               EmbeddingTable::SnapshotKind kind,
                                               TableSnapshot* snapshot) {
  RowsFileSink sink(env, dir, prefix + "rows.npy");
  RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, table.SnapshotToSink(kind, sink));
  // The rows file is written; its sync (the long wait) overlaps the other files.
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json entry,
                          WriteTableFiles(env, dir, prefix, s, [&] { return sink.Finish(); }));
  if (snapshot != nullptr) *snapshot = std::move(s);
  return entry;
}

namespace {

struct TableHeader {
  std::string name;
  int dim = 0, num_slots = 0;
  SparseOptimizerKind optimizer = SparseOptimizerKind::kSGD;
  DType key_dtype = DType::kInt64;
  bool is_delta = false;
  int64_t data_time = 0;
  int64_t access_threshold = -1;
};

StatusOr<TableHeader> ParseTableHeader(const nlohmann::json& e, const std::string& where) {
  TableHeader h;
  std::string key_dtype;
  int kind = 0;
  try {
    h.name = e.at("name").get<std::string>();
    h.dim = JsonNumber<int>(e.at("dim"));
    h.num_slots = JsonNumber<int>(e.at("num_slots"));
    kind = JsonNumber<int>(e.at("optimizer_kind"));
    key_dtype = e.at("key_dtype").get<std::string>();
    h.is_delta = e.at("is_delta").get<bool>();
    h.data_time = JsonNumber<int64_t>(e.at("data_time"));
    h.access_threshold = JsonNumberOr<int64_t>(e, "access_threshold", -1);
  } catch (const std::exception& ex) {
    return Corrupt(where, fmt::format("a table entry is malformed ({})", ex.what()));
  }
  if (kind < 0 || kind > static_cast<int>(SparseOptimizerKind::kFTRL)) {
    return Corrupt(where, fmt::format("table \"{}\" has optimizer kind {}", h.name, kind));
  }
  h.optimizer = static_cast<SparseOptimizerKind>(kind);
  auto dt = ParseDType(key_dtype);
  if (!dt.ok() || (*dt != DType::kInt64 && *dt != DType::kInt32)) {
    return Corrupt(where, fmt::format("table \"{}\" has key dtype \"{}\"", h.name, key_dtype));
  }
  h.key_dtype = *dt;
  return h;
}

}  // namespace

Status CheckTableCompatible(const nlohmann::json& entry, const EmbeddingTable& table,
                            const std::string& manifest_path) {
  RECSDK_ASSIGN_OR_RETURN(TableHeader h, ParseTableHeader(entry, manifest_path));
  auto differs = [&](std::string_view what, const std::string& theirs, const std::string& ours) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\": the checkpoint \"{}\" has {} {} but the session's table has {} {}; restore "
        "into a model whose table has the same dim, key dtype and sparse optimizer",
        table.name(), manifest_path, what, theirs, what, ours));
  };
  if (h.dim != table.dim()) {
    return differs("dim", std::to_string(h.dim), std::to_string(table.dim()));
  }
  if (h.key_dtype != table.config().key_dtype) {
    return differs("key dtype", std::string(DTypeName(h.key_dtype)),
                   std::string(DTypeName(table.config().key_dtype)));
  }
  if (h.optimizer != table.optimizer().kind) {
    return differs("optimizer", std::string(SparseOptimizerKindName(h.optimizer)),
                   std::string(SparseOptimizerKindName(table.optimizer().kind)));
  }
  if (h.num_slots != table.num_slots()) {
    return differs("optimizer slots per row", std::to_string(h.num_slots),
                   std::to_string(table.num_slots()));
  }
  return absl::OkStatus();
}

namespace {
StatusOr<TableSnapshot> ReadTableFiles(Env* env, const std::string& dir,
                                       const nlohmann::json& entry, const TableHeader& h,
                                       bool stream_rows);

// SortSnapshotByKey: a storage-order snapshot (keys, rows, timestamps) put in key order, as every
// reader of an in-memory snapshot expects. Needs a second row buffer while it permutes.
void SortSnapshotByKey(TableSnapshot& s) {
  const size_t n = s.keys.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.keys[a] < s.keys[b]; });
  const size_t rf = n == 0 ? 0 : s.rows.size() / n;
  RowBuffer rows(s.rows.size());
  std::vector<int64_t> keys(n);
  std::vector<int64_t> timestamps(s.timestamps.size());
  for (size_t i = 0; i < n; ++i) {
    keys[i] = s.keys[order[i]];
    std::memcpy(rows.data() + i * rf, s.rows.data() + order[i] * rf, rf * sizeof(float));
    if (!timestamps.empty()) timestamps[i] = s.timestamps[order[i]];
  }
  s.keys = std::move(keys);
  s.rows = std::move(rows);
  s.timestamps = std::move(timestamps);
  s.storage_order = false;
}
}  // namespace

StatusOr<bool> StorageOrder(const nlohmann::json& entry, const std::string& where,
                            const std::string& table) {
  if (!entry.contains("row_order")) return false;
  const nlohmann::json& order = entry["row_order"];
  if (order.is_string() && order.get<std::string>() == "storage") return true;
  if (order.is_string() && order.get<std::string>() == "key") return false;
  return Corrupt(where, fmt::format("table \"{}\" has row_order {} (expected \"key\" or "
                                    "\"storage\")",
                                    table, order.dump()));
}

StatusOr<TableSnapshot> ReadTablePayloads(Env* env, const std::string& dir,
                                          const nlohmann::json& entry, bool stream_rows) {
  const std::string where = JoinPath(dir, kManifestFile);
  RECSDK_ASSIGN_OR_RETURN(TableHeader h, ParseTableHeader(entry, where));
  StatusOr<TableSnapshot> read = ReadTableFiles(env, dir, entry, h, stream_rows);
  if (!read.ok() && absl::IsResourceExhausted(read.status())) {
    return absl::ResourceExhaustedError(
        fmt::format("table \"{}\": {}", h.name, read.status().message()));
  }
  return read;
}

namespace {

StatusOr<TableSnapshot> ReadTableFiles(Env* env, const std::string& dir,
                                       const nlohmann::json& entry, const TableHeader& h,
                                       bool stream_rows) {
  const std::string where = JoinPath(dir, kManifestFile);
  RECSDK_ASSIGN_OR_RETURN(const bool storage_order, StorageOrder(entry, where, h.name));
  // A full table in storage order (a tiered table's) is streamed when asked: its rows are
  // verified here and read again, piece by piece, as the table loads them.
  const bool streamed = stream_rows && storage_order && !h.is_delta;
  TableSnapshot s;
  s.table_name = h.name;
  s.dim = h.dim;
  s.num_slots = h.num_slots;
  s.optimizer = h.optimizer;
  s.key_dtype = h.key_dtype;
  s.is_delta = h.is_delta;
  s.data_time = h.data_time;
  s.access_threshold = h.access_threshold;
  if (!entry.contains("files") || !entry["files"].is_object()) {
    return Corrupt(where, fmt::format("table \"{}\" lists no files", h.name));
  }
  const nlohmann::json& files = entry["files"];
  auto info_of = [&](const std::string& what) -> StatusOr<PayloadInfo> {
    if (!files.contains(what)) {
      return Corrupt(where, fmt::format("table \"{}\" does not list its {}", h.name, what));
    }
    return PayloadInfo::FromJson(files[what], where);
  };
  auto read = [&](const std::string& what, auto* out) -> Status {
    RECSDK_ASSIGN_OR_RETURN(PayloadInfo info, info_of(what));
    return ReadPayload(env, dir, info, out);
  };
  RECSDK_ASSIGN_OR_RETURN(PayloadInfo keys_info, info_of("keys"));
  RECSDK_ASSIGN_OR_RETURN(PayloadInfo rows_info, info_of("rows"));
  if (keys_info.shape.size() != 1 || rows_info.shape.size() != 2 ||
      rows_info.shape[0] != keys_info.shape[0] || rows_info.shape[1] != h.dim + h.num_slots) {
    return Corrupt(
        JoinPath(dir, rows_info.file),
        fmt::format("rows of table \"{}\" are not [{}, {}]", h.name,
                    keys_info.shape.empty() ? -1 : keys_info.shape[0], h.dim + h.num_slots));
  }
  // The rows are nearly all the bytes: read and checksummed on a thread of their own while this
  // one reads the rest.
  std::future<Status> rows = std::async(std::launch::async, [&]() -> Status {
    if (!streamed) return ReadPayload(env, dir, rows_info, &s.rows);
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<RowSource> src, VerifiedRowSource(env, dir, rows_info));
    s.row_source = [src](size_t first, size_t count, float* out) {
      return src->Read(first, count, out);
    };
    return absl::OkStatus();
  });
  auto rest = [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(ReadPayload(env, dir, keys_info, &s.keys));
    if (files.contains("timestamps")) RECSDK_RETURN_IF_ERROR(read("timestamps", &s.timestamps));
    if (h.is_delta) RECSDK_RETURN_IF_ERROR(read("removed_keys", &s.removed_keys));
    RECSDK_RETURN_IF_ERROR(read("pending_keys", &s.pending_keys));
    RECSDK_RETURN_IF_ERROR(read("pending_counts", &s.pending_counts));
    return read("pending_timestamps", &s.pending_timestamps);
  };
  const Status rest_status = rest();
  const Status rows_status = rows.get();  // always joined, even after an error above
  RECSDK_RETURN_IF_ERROR(rest_status);
  RECSDK_RETURN_IF_ERROR(rows_status);
  if (!s.timestamps.empty() && s.timestamps.size() != s.keys.size()) {
    return Corrupt(JoinPath(dir, keys_info.file),
                   fmt::format("table \"{}\" has {} keys but {} timestamps", h.name, s.keys.size(),
                               s.timestamps.size()));
  }
  if (storage_order && !streamed) SortSnapshotByKey(s);
  s.storage_order = streamed;
  // Keys are written sorted (or in storage order) and unique: name the file and the first key
  // that is not, so a hand-made or damaged file can be found (the table would refuse it without
  // saying where). A streamed table's keys are checked by the table (a sorted copy).
  const auto bad =
      streamed ? s.keys.end()
               : std::adjacent_find(s.keys.begin(), s.keys.end(), std::greater_equal<int64_t>());
  if (bad != s.keys.end()) {
    return Corrupt(JoinPath(dir, keys_info.file),
                   fmt::format("the keys of table \"{}\" are not sorted and unique: key {} at "
                               "position {} is {} key {}",
                               h.name, *bad, bad - s.keys.begin(),
                               *bad == *(bad + 1) ? "repeated as" : "followed by", *(bad + 1)));
  }
  // Lengths that go together, checked here so that no reader of a snapshot (a table, the
  // re-sharding of a restore) indexes one array by another's length.
  if (!s.timestamps.empty() && s.timestamps.size() != s.keys.size()) {
    return Corrupt(JoinPath(dir, keys_info.file),
                   fmt::format("table \"{}\" has {} keys but {} timestamps", h.name, s.keys.size(),
                               s.timestamps.size()));
  }
  if (s.pending_counts.size() != s.pending_keys.size() ||
      s.pending_timestamps.size() != s.pending_keys.size()) {
    return Corrupt(JoinPath(dir, keys_info.file),
                   fmt::format("table \"{}\" has {} pending keys but {} pending counts and {} "
                               "pending timestamps",
                               h.name, s.pending_keys.size(), s.pending_counts.size(),
                               s.pending_timestamps.size()));
  }
  return s;
}

}  // namespace

Status WriteJsonDocument(Env* env, const std::string& path, nlohmann::json doc, bool atomic) {
  doc.erase("crc32c");
  const uint32_t crc = Crc32c(doc.dump());
  doc["crc32c"] = crc;
  // No trailing newline: the text must be exactly what dump(1) gives (ReadJsonDocument checks),
  // so that truncation or edits of whitespace are caught too.
  const std::string text = doc.dump(1);
  if (atomic) return WriteStringToFileAtomic(env, path, text);
  return WriteStringToFileSync(env, path, text);
}

StatusOr<nlohmann::json> ReadJsonDocument(Env* env, const std::string& path) {
  RECSDK_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path));
  auto parsed =
      ParseJson(text, fmt::format("checkpoint file \"{}\"", path), absl::StatusCode::kDataLoss);
  if (!parsed.ok()) {
    return absl::DataLossError(
        fmt::format("{}; restore from another checkpoint", parsed.status().message()));
  }
  nlohmann::json doc = std::move(*parsed);
  if (!doc.is_object()) return Corrupt(path, "it is not a JSON object");
  if (doc.dump(1) != text) return Corrupt(path, "its text differs from what was written");
  if (!doc.contains("crc32c") || !doc["crc32c"].is_number_unsigned()) {
    return Corrupt(path, "it has no crc32c");
  }
  const uint64_t want = JsonNumber<uint64_t>(doc["crc32c"]);
  doc.erase("crc32c");
  const uint32_t crc = Crc32c(doc.dump());
  if (crc != want) {
    return Corrupt(path, fmt::format("its CRC32C is {:08x} but it says {:08x}", crc, want));
  }
  return doc;
}

}  // namespace recsdk::internal
