// checkpoint_io.cc: payload files, table payloads and checksummed JSON documents of checkpoints.
// Threading: see checkpoint_io.h.
#include "src/checkpoint/checkpoint_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
#include "src/table/tiers/ssd_store.h"

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

// RowSource: a float32 rows payload read in pieces by a streamed restore
// (TableSnapshot::row_source), either verified whole beforehand (VerifiedRowSource) or checked
// as it is read (one pass: the CRC32C runs over the pieces read in order and is compared when
// the last row has been read; DataLoss then). Shared by the copies of the snapshot's function.
struct RowSource {
  std::unique_ptr<RandomAccessFile> file;
  std::string path;
  uint64_t header_bytes = 0;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
  // One pass: the CRC32C of the bytes [0, header_bytes + checked_rows * row_bytes), and the one
  // the manifest gives.
  bool checking = false;
  uint64_t checked_rows = 0;
  uint32_t crc = 0;
  uint32_t want_crc = 0;
  Status Read(size_t first, size_t count, float* out) {
    if (first > rows || count > rows - first) {
      return absl::InternalError(fmt::format("rows [{}, +{}) of \"{}\" asked, which has {} rows",
                                             first, count, path, rows));
    }
    if (checking && first > checked_rows) {
      return absl::InternalError(
          fmt::format("rows of \"{}\" read out of order ({} before {}) while checked as read", path,
                      first, checked_rows));
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
    if (checking && first + count > checked_rows) {
      const uint64_t skip = (checked_rows - first) * row_bytes;
      crc = Crc32cExtend(crc, dst + skip, n - skip);
      checked_rows = first + count;
      if (checked_rows == rows && crc != want_crc) {
        return Corrupt(
            path, fmt::format("its CRC32C is {:08x} but the manifest says {:08x}", crc, want_crc));
      }
    }
    return absl::OkStatus();
  }
};

// OpenRowSource: the rows payload's size and .npy header checked against the manifest, its rows
// to be checked as they are read (RowSource::checking).
StatusOr<std::shared_ptr<RowSource>> OpenRowSource(Env* env, const std::string& dir,
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
  if (header.size() + src->rows * src->row_bytes != info.bytes) {
    return Corrupt(path, fmt::format("the manifest says {} bytes but dtype and shape need {}",
                                     info.bytes, header.size() + src->rows * src->row_bytes));
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
  std::string head(header.size(), '\0');
  for (size_t done = 0; done < head.size();) {
    RECSDK_ASSIGN_OR_RETURN(const size_t got,
                            src->file->Read(done, head.size() - done, head.data() + done));
    if (got == 0) return Corrupt(path, "it ended early while being read");
    done += got;
  }
  if (head != header) return Corrupt(path, "its .npy header does not match the manifest");
  src->checking = true;
  src->crc = Crc32c(head.data(), head.size());
  src->want_crc = info.crc32c;
  if (src->rows == 0 && src->crc != src->want_crc) {
    return Corrupt(path, fmt::format("its CRC32C is {:08x} but the manifest says {:08x}", src->crc,
                                     src->want_crc));
  }
  return src;
}

// VerifiedRowSource: checks a rows payload as ReadPayload does (size, header, CRC32C over every
// byte), reading it in pieces through one reused buffer, and returns a source that reads its rows.
StatusOr<std::shared_ptr<RowSource>> VerifiedRowSource(Env* env, const std::string& dir,
                                                       const PayloadInfo& info) {
  // OpenRowSource checks the size and the header; the rows follow, extending its CRC32C.
  RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<RowSource> src, OpenRowSource(env, dir, info));
  const uint64_t begin = src->header_bytes;
  std::vector<char> buf(std::min<uint64_t>(kBlock, std::max<uint64_t>(info.bytes - begin, 1)));
  uint32_t crc = src->crc;
  for (uint64_t off = begin; off < info.bytes;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), info.bytes - off));
    RECSDK_ASSIGN_OR_RETURN(const size_t got, src->file->Read(off, want, buf.data()));
    if (got == 0) return Corrupt(src->path, "it ended early while being read");
    crc = Crc32cExtend(crc, buf.data(), got);
    off += got;
  }
  if (crc != info.crc32c) {
    return Corrupt(src->path, fmt::format("its CRC32C is {:08x} but the manifest says {:08x}", crc,
                                          info.crc32c));
  }
  src->checking = false;  // checked whole: its reads need not check again
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

// RowsFileSink: a SnapshotRowSink writing rows.npy as the rows come; with `link_ssd`, it takes
// the SSD segments (hard links under "<prefix>ssd/", the slots in "<prefix>ssd_slots.npy").
class RowsFileSink final : public SnapshotRowSink {
 public:
  RowsFileSink(Env* env, const std::string& dir, std::string prefix, bool link_ssd)
      : env_(env),
        dir_(dir),
        prefix_(std::move(prefix)),
        file_(prefix_ + "rows.npy"),
        link_ssd_(link_ssd) {}
  Status Begin(const TableSnapshot& s) override {
    const int64_t rows = static_cast<int64_t>(s.keys.size() - linked_rows_);
    RECSDK_ASSIGN_OR_RETURN(
        writer_, PayloadWriter::Open(env_, dir_, file_, "<f4", {rows, s.dim + s.num_slots}));
    return absl::OkStatus();
  }
  StatusOr<bool> TakeSsdSegments(const SsdSegmentRefs& refs) override {
    // Hard links need the real file system (not a test's or a user's Env) and the same one.
    if (!link_ssd_ || env_ != Env::Default() || refs.files.empty()) return false;
    const std::string sub = prefix_ + "ssd";
    const std::string folder = JoinPath(dir_, sub);
    RECSDK_RETURN_IF_ERROR(env_->CreateDirExclusive(folder));
    for (size_t i = 0; i < refs.files.size(); ++i) {
      const std::string& from = refs.files[i];
      const std::string base = from.substr(from.find_last_of('/') + 1);
      const std::string to = JoinPath(folder, base);
      if (link(from.c_str(), to.c_str()) == 0) continue;
      const int err = errno;
      if (i == 0 &&
          (err == EXDEV || err == EPERM || err == EMLINK || err == ENOTSUP || err == EOPNOTSUPP)) {
        // Another file system (or one without hard links): copy the rows instead.
        RECSDK_RETURN_IF_ERROR(DeleteRecursively(env_, folder));
        return false;
      }
      return absl::ErrnoToStatus(
          err, fmt::format("checkpoint: cannot hard-link the ssd tier file \"{}\" as \"{}\"; "
                           "free space or save with SaverOptions::copy_ssd_rows",
                           from, to));
    }
    RECSDK_RETURN_IF_ERROR(env_->SyncDir(folder));
    std::vector<int64_t> slots(refs.slots.begin(), refs.slots.end());
    RECSDK_ASSIGN_OR_RETURN(
        PayloadInfo info,
        WritePayload(env_, dir_, prefix_ + "ssd_slots.npy", "<i8",
                     {static_cast<int64_t>(slots.size())}, slots.data(), slots.size() * 8));
    slots_info_ = info.ToJson();
    segments_ = {{"dir", sub},
                 {"file_name", refs.file_name},
                 {"files", refs.files.size()},
                 {"rows_per_file", refs.rows_per_file},
                 {"capacity", refs.capacity},
                 {"record_floats", refs.record_floats},
                 {"generation", refs.generation}};
    linked_rows_ = refs.slots.size();
    return true;
  }
  // AddSegments: the "ssd_segments" entry and the slots payload, when the segments were taken.
  void AddSegments(nlohmann::json& entry) const {
    if (segments_.is_null()) return;
    entry["ssd_segments"] = segments_;
    entry["files"]["ssd_slots"] = slots_info_;
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
  std::string prefix_;
  std::string file_;
  bool link_ssd_;
  size_t linked_rows_ = 0;
  nlohmann::json segments_;
  nlohmann::json slots_info_;
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
                                               TableSnapshot* snapshot, bool link_ssd) {
  RowsFileSink sink(env, dir, prefix, link_ssd);
  RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, table.SnapshotToSink(kind, sink));
  // The rows file is written; its sync (the long wait) overlaps the other files.
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json entry,
                          WriteTableFiles(env, dir, prefix, s, [&] { return sink.Finish(); }));
  sink.AddSegments(entry);
  if (snapshot != nullptr) *snapshot = std::move(s);
  return entry;
}

bool LinkedSsd(const nlohmann::json& entry) {
  return entry.is_object() && entry.contains("ssd_segments");
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

// LinkedSegments: the SSD rows of a version-3 table entry, read from the segment files hard-linked
// into the checkpoint (SsdStore::Open on them; every record checked against its CRC32C, seeded
// with its slot). Rows [0, slots.size()) of the SSD part, which follows the rows file's rows.
struct LinkedSegments {
  std::unique_ptr<SsdStore> store;
  std::vector<uint32_t> slots;
  size_t row_floats = 0;     // the table's row (embedding + optimizer slots)
  size_t record_floats = 0;  // a record: the row and its use history
  std::string folder;
  Status Read(size_t first, size_t count, float* out) const {
    if (first > slots.size() || count > slots.size() - first) {
      return absl::InternalError(fmt::format("ssd rows [{}, +{}) of \"{}\" asked, which has {}",
                                             first, count, folder, slots.size()));
    }
    const size_t per = std::max<size_t>(1, (size_t{4} << 20) / (record_floats * sizeof(float)));
    std::vector<float> records(std::min(count, per) * record_floats);
    for (size_t b = 0; b < count; b += per) {
      const size_t e = std::min(count, b + per);
      RECSDK_RETURN_IF_ERROR(
          store->Read(absl::MakeConstSpan(slots).subspan(first + b, e - b), records.data()));
      for (size_t i = b; i < e; ++i) {
        std::memcpy(out + i * row_floats, records.data() + (i - b) * record_floats,
                    row_floats * sizeof(float));
      }
    }
    return absl::OkStatus();
  }
};

bool PlainSegmentName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// OpenLinkedSegments: the entry's "ssd_segments" checked and opened, with `slots` (the SSD rows'
// slots, from ssd_slots.npy) live. DataLoss naming the file for anything missing or malformed;
// FailedPrecondition when a later checkpoint released the rows (they may have been reused).
StatusOr<std::shared_ptr<LinkedSegments>> OpenLinkedSegments(const std::string& dir,
                                                             const nlohmann::json& entry,
                                                             const TableHeader& h,
                                                             std::vector<int64_t> slots) {
  const std::string where = JoinPath(dir, kManifestFile);
  const nlohmann::json& g = entry["ssd_segments"];
  std::string sub, file_name;
  uint64_t rows_per_file = 0, capacity = 0, generation = 0;
  int record_floats = 0;
  try {
    sub = g.at("dir").get<std::string>();
    file_name = g.at("file_name").get<std::string>();
    rows_per_file = JsonNumber<uint64_t>(g.at("rows_per_file"));
    capacity = JsonNumber<uint64_t>(g.at("capacity"));
    record_floats = JsonNumber<int>(g.at("record_floats"));
    generation = JsonNumber<uint64_t>(g.at("generation"));
  } catch (const std::exception& ex) {
    return Corrupt(where, fmt::format("table \"{}\" has a malformed ssd_segments entry ({})",
                                      h.name, ex.what()));
  }
  const int row_floats = h.dim + h.num_slots;
  if (!PlainSegmentName(sub) || !PlainSegmentName(file_name) || rows_per_file == 0 ||
      capacity == 0 || capacity > 0xFFFFFFFFull || rows_per_file > capacity ||
      record_floats != row_floats + 2) {
    return Corrupt(where, fmt::format("table \"{}\" has ssd_segments {} (expected plain names, "
                                      "0 < rows_per_file <= capacity < 2^32 and record_floats {})",
                                      h.name, g.dump(), row_floats + 2));
  }
  auto segments = std::make_shared<LinkedSegments>();
  segments->folder = JoinPath(dir, sub);
  segments->row_floats = static_cast<size_t>(row_floats);
  segments->record_floats = static_cast<size_t>(record_floats);
  segments->slots.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || static_cast<uint64_t>(slots[i]) >= capacity) {
      return Corrupt(JoinPath(dir, fmt::format("{}", sub)),
                     fmt::format("table \"{}\": ssd slot {} at position {} is outside the "
                                 "segments' {} slots",
                                 h.name, slots[i], i, capacity));
    }
    segments->slots[i] = static_cast<uint32_t>(slots[i]);
  }
  struct stat st = {};
  if (stat(segments->folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::DataLossError(fmt::format(
        "checkpoint folder \"{}\" (the SSD rows of table \"{}\", hard links to its SSD tier's "
        "files) is missing; restore from another checkpoint",
        segments->folder, h.name));
  }
  SsdStoreOptions o;
  o.row_floats = record_floats;
  o.capacity = static_cast<uint32_t>(capacity);
  o.folders = {segments->folder};
  o.file_name = file_name;
  o.rows_per_file = static_cast<uint32_t>(rows_per_file);
  auto opened = SsdStore::Open(o, segments->slots);
  if (!opened.ok()) {
    return absl::DataLossError(
        fmt::format("checkpoint of table \"{}\": its linked SSD segments in \"{}\" cannot be "
                    "read: {}",
                    h.name, segments->folder, opened.status().message()));
  }
  segments->store = *std::move(opened);
  if (segments->store->ReleasedGeneration() >= generation) {
    return absl::FailedPreconditionError(fmt::format(
        "checkpoint \"{}\": the SSD rows of table \"{}\" (linked segments, generation {}) were "
        "released when a later full checkpoint of the same run was committed (generation {}), "
        "so their slots may hold other rows now; restore the latest checkpoint, or save with "
        "SaverOptions::copy_ssd_rows for checkpoints that each stay restorable",
        dir, h.name, generation, segments->store->ReleasedGeneration()));
  }
  return segments;
}

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
  // Version 3: the SSD-resident rows (the last keys, in storage order) are in linked segments.
  const bool linked = LinkedSsd(entry);
  if (linked && (h.is_delta || !storage_order)) {
    return Corrupt(where, fmt::format("table \"{}\" has ssd_segments but is {}", h.name,
                                      h.is_delta ? "a delta" : "not in storage order"));
  }
  std::vector<int64_t> ssd_slots;
  if (linked) RECSDK_RETURN_IF_ERROR(read("ssd_slots", &ssd_slots));
  const int64_t file_rows =
      keys_info.shape.empty() ? -1 : keys_info.shape[0] - static_cast<int64_t>(ssd_slots.size());
  if (keys_info.shape.size() != 1 || rows_info.shape.size() != 2 || file_rows < 0 ||
      rows_info.shape[0] != file_rows || rows_info.shape[1] != h.dim + h.num_slots) {
    return Corrupt(JoinPath(dir, rows_info.file),
                   fmt::format("rows of table \"{}\" are not [{}, {}]", h.name, file_rows,
                               h.dim + h.num_slots));
  }
  std::shared_ptr<LinkedSegments> segments;
  if (linked) {
    RECSDK_ASSIGN_OR_RETURN(segments, OpenLinkedSegments(dir, entry, h, std::move(ssd_slots)));
  }
  // The rows are nearly all the bytes: read and checksummed on a thread of their own while this
  // one reads the rest.
  std::future<Status> rows = std::async(std::launch::async, [&]() -> Status {
    const size_t rf = static_cast<size_t>(h.dim + h.num_slots);
    const size_t mem = static_cast<size_t>(file_rows);
    if (!streamed) {
      RECSDK_RETURN_IF_ERROR(ReadPayload(env, dir, rows_info, &s.rows));
      if (segments == nullptr) return absl::OkStatus();
      s.rows.resize((mem + segments->slots.size()) * rf);
      return segments->Read(0, segments->slots.size(), s.rows.data() + mem * rf);
    }
    // One pass: the rows are checked as the table reads them (the rows file's CRC32C over the
    // pieces in order, each SSD record's own CRC32C), and verify_rows reads everything first for
    // a table that holds rows (LoadSnapshot decides; see TableSnapshot::verify_rows).
    RECSDK_ASSIGN_OR_RETURN(std::shared_ptr<RowSource> src, OpenRowSource(env, dir, rows_info));
    s.verify_rows = [env, dir, rows_info, segments, rf]() -> Status {
      RECSDK_RETURN_IF_ERROR(VerifiedRowSource(env, dir, rows_info).status());
      if (segments == nullptr) return absl::OkStatus();
      const size_t per = std::max<size_t>(1, (size_t{4} << 20) / (rf * sizeof(float)));
      std::vector<float> piece(std::min(segments->slots.size(), per) * rf);
      for (size_t b = 0; b < segments->slots.size(); b += per) {
        const size_t e = std::min(segments->slots.size(), b + per);
        RECSDK_RETURN_IF_ERROR(segments->Read(b, e - b, piece.data()));
      }
      return absl::OkStatus();
    };
    if (segments == nullptr) {
      s.row_source = [src](size_t first, size_t count, float* out) {
        return src->Read(first, count, out);
      };
      return absl::OkStatus();
    }
    s.row_source = [src, segments, mem, rf](size_t first, size_t count, float* out) -> Status {
      const size_t end = first + count;
      if (first < mem) {
        RECSDK_RETURN_IF_ERROR(src->Read(first, std::min(end, mem) - first, out));
      }
      if (end > mem) {
        const size_t from = std::max(first, mem);
        RECSDK_RETURN_IF_ERROR(segments->Read(from - mem, end - from, out + (from - first) * rf));
      }
      return absl::OkStatus();
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
