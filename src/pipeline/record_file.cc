// record_file.cc: recsdk's binary record files (layout in docs/binary_format.md): the writer
// (ConvertToRecordFile) and the RecordFileDataset source. Blocks are read serially and checked
// (CRC32C) and turned into tensors in parallel; a block's payload is read straight into one
// 64-byte aligned buffer and its columns are zero-copy views of it. Threading as ChunkedSource.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/checked_math.h"
#include "src/common/env.h"
#include "src/common/file_open.h"
#include "src/common/status_macros.h"
#include "src/pipeline/batch_row_store.h"
#include "src/pipeline/chunked_source.h"
#include "src/pipeline/crc32c.h"

namespace recsdk {
namespace internal {
namespace {

constexpr char kFileMagic[8] = {'R', 'S', 'D', 'K', 'R', 'E', 'C', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kBlockMagic = 0x4B4C4252;  // "RBLK" little-endian
constexpr size_t kBlockHeaderBytes = 24;
constexpr size_t kAlign = 64;
constexpr uint32_t kMaxColumns = 4096;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct ColumnLayout {
  std::string name;
  DType dtype;
  std::vector<int64_t> row_dims;  // shape without dimension 0
  size_t row_bytes = 0;
  bool operator==(const ColumnLayout& o) const {
    return name == o.name && dtype == o.dtype && row_dims == o.row_dims;
  }
};

void Put32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

bool Get32(const char*& p, const char* end, uint32_t* v) {
  if (end - p < 4) return false;
  std::memcpy(v, p, 4);
  p += 4;
  return true;
}
bool Get64(const char*& p, const char* end, uint64_t* v) {
  if (end - p < 8) return false;
  std::memcpy(v, p, 8);
  p += 8;
  return true;
}

bool Supported(DType d) {
  return d == DType::kFloat32 || d == DType::kInt64 || d == DType::kInt32 || d == DType::kUInt8;
}

std::string EncodeSchema(const std::vector<ColumnLayout>& cols) {
  std::string s;
  Put32(&s, static_cast<uint32_t>(cols.size()));
  for (const ColumnLayout& c : cols) {
    Put32(&s, static_cast<uint32_t>(c.name.size()));
    s += c.name;
    Put32(&s, static_cast<uint32_t>(c.dtype));
    Put32(&s, static_cast<uint32_t>(c.row_dims.size()));
    for (int64_t d : c.row_dims) Put64(&s, static_cast<uint64_t>(d));
  }
  return s;
}

// DecodeSchema: false (with *why) for a malformed schema, including one naming a column twice
// (a Batch holds each name once, so the second column would be dropped without a word).
bool DecodeSchema(std::string_view bytes, std::vector<ColumnLayout>* cols, std::string* why) {
  *why = "schema is malformed";
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  uint32_t n;
  if (!Get32(p, end, &n) || n == 0 || n > kMaxColumns) return false;
  for (uint32_t i = 0; i < n; ++i) {
    ColumnLayout c;
    uint32_t len, dtype, rank;
    if (!Get32(p, end, &len) || len > static_cast<uint32_t>(end - p)) return false;
    c.name.assign(p, len);
    p += len;
    for (const ColumnLayout& earlier : *cols) {
      if (earlier.name == c.name) {
        *why = fmt::format("schema names column \"{}\" twice", c.name);
        return false;
      }
    }
    if (!Get32(p, end, &dtype) || !Get32(p, end, &rank) || rank > 8) return false;
    c.dtype = static_cast<DType>(dtype);
    if (!Supported(c.dtype)) return false;
    int64_t elems = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      uint64_t d;
      if (!Get64(p, end, &d) || d > (uint64_t{1} << 24)) return false;
      c.row_dims.push_back(static_cast<int64_t>(d));
      elems *= static_cast<int64_t>(d);
      if (elems > (int64_t{1} << 24)) return false;
    }
    c.row_bytes = static_cast<size_t>(elems) * DTypeSize(c.dtype);
    cols->push_back(std::move(c));
  }
  return p == end;
}

std::vector<ColumnLayout> LayoutOf(const Batch& b) {
  std::vector<ColumnLayout> cols;
  for (const auto& [name, t] : b.columns()) {
    ColumnLayout c{name, t.dtype(), {}, 0};
    int64_t elems = 1;
    for (int i = 1; i < t.rank(); ++i) {
      c.row_dims.push_back(t.dim(i));
      elems *= t.dim(i);
    }
    c.row_bytes = static_cast<size_t>(elems) * DTypeSize(t.dtype());
    cols.push_back(std::move(c));
  }
  return cols;
}

// PayloadBytes: the bytes a block of `rows` rows holds; nullopt when that overflows (a row count
// from a damaged or crafted header).
std::optional<uint64_t> PayloadBytes(const std::vector<ColumnLayout>& cols, uint64_t rows) {
  uint64_t total = 0;
  for (const ColumnLayout& c : cols) {
    const std::optional<uint64_t> bytes = CheckedMul<uint64_t>(c.row_bytes, rows);
    if (!bytes.has_value()) return std::nullopt;
    const std::optional<uint64_t> aligned = CheckedAdd<uint64_t>(*bytes, kAlign - 1);
    if (!aligned.has_value()) return std::nullopt;
    const std::optional<uint64_t> sum = CheckedAdd<uint64_t>(total, *aligned / kAlign * kAlign);
    if (!sum.has_value()) return std::nullopt;
    total = *sum;
  }
  return total;
}

std::string BlockHeader(uint32_t rows, uint64_t payload_bytes, uint32_t payload_crc) {
  std::string h;
  Put32(&h, kBlockMagic);
  Put32(&h, rows);
  Put64(&h, payload_bytes);
  Put32(&h, MaskCrc(payload_crc));
  Put32(&h, MaskCrc(Crc32c(h.data(), h.size())));
  return h;
}

class RecordFileSource final : public ChunkedSource {
 public:
  RecordFileSource(std::vector<std::string> files, ReaderOptions options)
      : ChunkedSource(std::move(files), options, "record file") {}

 protected:
  Status StartFile(int, Chunk* chunk, bool* usable) override;
  Status ReadChunk(Chunk* chunk, bool* file_done) override;
  ParsedChunk ParseChunk(const Chunk& chunk) const override;

 private:
  std::vector<ColumnLayout> layout_;  // of the first readable file
  bool have_layout_ = false;
};

Status RecordFileSource::StartFile(int, Chunk* chunk, bool* usable) {
  FileCursor& f = file();
  auto bad = [&](std::string detail) {
    chunk->reader_errors.push_back(RowError{MalformedReason::kBadHeader, -1, 0, std::move(detail)});
    *usable = false;
    return absl::OkStatus();
  };
  char head[16];
  RECSDK_ASSIGN_OR_RETURN(size_t got, f.Read(head, 16));
  if (got < 16 || std::memcmp(head, kFileMagic, 8) != 0) {
    return bad("not a recsdk record file (bad magic)");
  }
  uint32_t version, schema_bytes;
  std::memcpy(&version, head + 8, 4);
  std::memcpy(&schema_bytes, head + 12, 4);
  if (version != kVersion) {
    return bad(
        fmt::format("format version {} is not supported (this build reads {})", version, kVersion));
  }
  if (schema_bytes > (1u << 24)) return bad("schema size is implausible");
  std::string schema(schema_bytes + 4, '\0');
  RECSDK_ASSIGN_OR_RETURN(got, f.Read(schema.data(), schema.size()));
  if (got < schema.size()) return bad("header cut short");
  uint32_t crc;
  std::memcpy(&crc, schema.data() + schema_bytes, 4);
  schema.resize(schema_bytes);
  if (UnmaskCrc(crc) != Crc32c(schema)) return bad("schema fails its CRC32C");
  std::vector<ColumnLayout> cols;
  std::string why;
  if (!DecodeSchema(schema, &cols, &why)) return bad(std::move(why));
  if (!have_layout_) {
    layout_ = std::move(cols);
    have_layout_ = true;
  } else if (!(cols == layout_)) {
    return absl::InvalidArgumentError(fmt::format(
        "record file \"{}\": its columns differ from the first file's; convert all files of one "
        "dataset with the same source",
        f.path()));
  }
  *usable = true;
  return absl::OkStatus();
}

Status RecordFileSource::ReadChunk(Chunk* chunk, bool* file_done) {
  FileCursor& f = file();
  const int64_t at = f.offset();
  auto abandon = [&](MalformedReason reason, std::string detail) {
    chunk->reader_errors.push_back(RowError{reason, -1, at, std::move(detail)});
    *file_done = true;
    return absl::OkStatus();
  };
  char h[kBlockHeaderBytes];
  RECSDK_ASSIGN_OR_RETURN(size_t got, f.Read(h, kBlockHeaderBytes));
  if (got < kBlockHeaderBytes) {
    return abandon(MalformedReason::kTruncated,
                   "file ends without its end-of-file block (cut short)");
  }
  uint32_t magic, rows, pcrc, hcrc;
  uint64_t payload;
  std::memcpy(&magic, h, 4);
  std::memcpy(&rows, h + 4, 4);
  std::memcpy(&payload, h + 8, 8);
  std::memcpy(&pcrc, h + 16, 4);
  std::memcpy(&hcrc, h + 20, 4);
  if (magic != kBlockMagic || UnmaskCrc(hcrc) != Crc32c(h, 20)) {
    return abandon(MalformedReason::kCrcMismatch,
                   "block header is damaged, so block boundaries are lost; the rest of the file "
                   "is dropped");
  }
  if (rows == 0) {
    *file_done = true;  // the end-of-file block
    if (f.offset() != f.size()) {
      // Whatever follows (often a second file appended to the first) would be dropped silently.
      return absl::DataLossError(fmt::format(
          "record file \"{}\": {} bytes follow the end-of-file block at byte offset {}; a record "
          "file ends with that block (were two files concatenated?); list each file separately "
          "or convert the data again",
          f.path(), f.size() - f.offset(), at));
    }
    return absl::OkStatus();
  }
  const std::optional<uint64_t> need = PayloadBytes(layout_, rows);
  if (!need.has_value() || payload != *need) {
    return abandon(
        MalformedReason::kBadHeader,
        need.has_value()
            ? fmt::format("block of {} rows declares {} payload bytes; the schema needs {}", rows,
                          payload, *need)
            : fmt::format("block of {} rows is larger than any file can hold", rows));
  }
  if (payload > static_cast<uint64_t>(std::max<int64_t>(f.size() - f.offset(), 0))) {
    return abandon(MalformedReason::kTruncated, "block payload cut short");
  }
  chunk->data.resize(payload);
  RECSDK_ASSIGN_OR_RETURN(got, f.Read(chunk->data.data(), payload));
  if (got < payload) return abandon(MalformedReason::kTruncated, "block payload cut short");
  chunk->records.push_back(RecordRef{0, static_cast<size_t>(rows), at, pcrc});
  return absl::OkStatus();
}

ParsedChunk RecordFileSource::ParseChunk(const Chunk& chunk) const {
  ParsedChunk out;
  if (chunk.records.empty()) return out;
  const RecordRef& rec = chunk.records[0];
  if (UnmaskCrc(rec.masked_crc) != Crc32c(chunk.data)) {
    out.errors.push_back(RowError{MalformedReason::kCrcMismatch, -1, rec.file_offset,
                                  fmt::format("block of {} rows fails its CRC32C", rec.size)});
    return out;
  }
  const int64_t rows = static_cast<int64_t>(rec.size);
  std::shared_ptr<TensorBuffer> buffer = AllocateHostBuffer(chunk.data.size());
  std::memcpy(buffer->data(), chunk.data.data(), chunk.data.size());
  size_t offset = 0;
  for (const ColumnLayout& c : layout_) {
    Shape s(absl::Span<const int64_t>(c.row_dims.data(), c.row_dims.size()));
    s.InsertDim(0, rows);
    Status st = out.batch.AddColumn(c.name, Tensor(c.dtype, s, buffer, offset));
    (void)st;
    offset += AlignUp(c.row_bytes * rows);
  }
  return out;
}

// Context: `s` (the Env's error, naming the file and errno's reason) prefixed with the writer and
// what stays intact, so a user knows the conversion did not happen and that the old file is fine.
Status Context(const Status& s, const std::string& path) {
  if (s.ok()) return s;
  return Status(s.code(),
                fmt::format("ConvertToRecordFile: writing \"{}\" failed, the file there is "
                            "unchanged: {}",
                            path, s.message()));
}

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<Dataset>> RecordFileDataset(const std::vector<std::string>& files,
                                                     const ReaderOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::ValidateReaderOptions(options, "RecordFileDataset"));
  RECSDK_ASSIGN_OR_RETURN(auto sorted, ExpandFilePatterns(files, options.env));
  return std::unique_ptr<Dataset>(new internal::RecordFileSource(std::move(sorted), options));
}

StatusOr<int64_t> ConvertToRecordFile(Dataset& source, const std::string& path, int64_t block_rows,
                                      internal::Env* env) {
  using namespace internal;
  if (block_rows < 1 || block_rows > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        fmt::format("ConvertToRecordFile: block_rows {} is outside [1, 2^30]", block_rows));
  }
  if (env == nullptr) env = Env::Default();
  // Written under a temporary name and renamed: on any failure (a full disk, a short write, a
  // failed sync, a bad batch) the previous file at `path` stays as it was.
  auto writer = AtomicFileWriter::Create(env, path);
  if (!writer.ok()) return Context(writer.status(), path);
  AtomicFileWriter& f = **writer;
  auto fail = [&](Status s) {
    f.Abandon();
    return s;
  };
  auto write = [&](std::string_view bytes) { return Context(f.Append(bytes), path); };
  BatchRowStore store;
  std::vector<ColumnLayout> layout;
  int64_t total = 0;
  const std::string zeros(kAlign, '\0');
  auto flush = [&]() -> Status {
    if (store.size() == 0) return absl::OkStatus();
    Batch b = store.TakeBatch();
    std::string payload;
    payload.reserve(PayloadBytes(layout, b.num_rows()).value_or(0));
    for (size_t i = 0; i < layout.size(); ++i) {
      const Tensor& t = b.columns()[i].second;
      payload.append(static_cast<const char*>(t.raw_data()), t.TotalBytes());
      payload.append(zeros.data(), AlignUp(t.TotalBytes()) - t.TotalBytes());
    }
    const std::string h =
        BlockHeader(static_cast<uint32_t>(b.num_rows()), payload.size(), Crc32c(payload));
    RECSDK_RETURN_IF_ERROR(write(h));
    RECSDK_RETURN_IF_ERROR(write(payload));
    total += b.num_rows();
    return absl::OkStatus();
  };
  for (;;) {
    Batch b;
    StatusOr<bool> more = source.GetNext(&b);
    if (!more.ok()) return fail(more.status());
    if (!*more) break;
    if (layout.empty()) {
      layout = LayoutOf(b);
      for (const ColumnLayout& c : layout) {
        if (!Supported(c.dtype)) {
          return fail(absl::InvalidArgumentError(fmt::format(
              "ConvertToRecordFile: column \"{}\" is {}; supported are float32, int64, int32, "
              "uint8",
              c.name, DTypeName(c.dtype))));
        }
      }
      const std::string schema = EncodeSchema(layout);
      std::string head(kFileMagic, 8);
      Put32(&head, kVersion);
      Put32(&head, static_cast<uint32_t>(schema.size()));
      head += schema;
      Put32(&head, MaskCrc(Crc32c(schema)));
      if (Status s = write(head); !s.ok()) return fail(s);
      store.Init(b);
    }
    if (Status s = store.CheckLayout(b); !s.ok()) return fail(s);
    int64_t r = 0;
    while (r < b.num_rows()) {
      const int64_t take = std::min(b.num_rows() - r, block_rows - store.size());
      store.AppendRows(b, r, r + take);
      r += take;
      if (store.size() == block_rows) {
        if (Status s = flush(); !s.ok()) return fail(s);
      }
    }
  }
  if (layout.empty()) {
    return fail(absl::InvalidArgumentError(
        "ConvertToRecordFile: the source yielded no rows; nothing to convert"));
  }
  if (Status s = flush(); !s.ok()) return fail(s);
  const std::string eof = BlockHeader(0, 0, Crc32c("", 0));
  if (Status s = write(eof); !s.ok()) return fail(s);
  RECSDK_RETURN_IF_ERROR(Context(f.Commit(), path));
  return total;
}

}  // namespace recsdk
