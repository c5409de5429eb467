// tfrecord.cc: TFRecord framing, tf.Example encoding/decoding and the TfRecordDataset source.
// Threading as ChunkedSource: records are framed serially, then CRC-checked and decoded in
// parallel per chunk.
#include "src/pipeline/tfrecord.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/checked_math.h"
#include "src/common/file_open.h"
#include "src/common/hash.h"
#include "src/common/status_macros.h"
#include "src/pipeline/chunked_source.h"
#include "src/pipeline/crc32c.h"

namespace recsdk {
namespace internal {

Status ValidateSchema(const std::vector<SchemaColumn>& schema, std::string_view who,
                      bool allow_dense_width);

namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, int field, int wire) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | wire);
}
void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}
void PutLe32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

}  // namespace

bool ReadVarint(const char*& p, const char* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = static_cast<uint8_t>(*p++);
    if (shift == 63 && b > 1) return false;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

std::string EncodeExample(const std::vector<ExampleFeature>& features) {
  std::string feats;
  for (const ExampleFeature& f : features) {
    std::string list;
    int which;
    if (auto* b = std::get_if<std::vector<std::string>>(&f.values)) {
      which = 1;
      for (const std::string& s : *b) PutBytes(&list, 1, s);
    } else if (auto* fl = std::get_if<std::vector<float>>(&f.values)) {
      which = 2;
      if (f.packed) {
        std::string packed;
        for (float v : *fl) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          PutLe32(&packed, bits);
        }
        PutBytes(&list, 1, packed);
      } else {
        for (float v : *fl) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          PutTag(&list, 1, 5);
          PutLe32(&list, bits);
        }
      }
    } else {
      which = 3;
      const auto& iv = std::get<std::vector<int64_t>>(f.values);
      if (f.packed) {
        std::string packed;
        for (int64_t v : iv) PutVarint(&packed, static_cast<uint64_t>(v));
        PutBytes(&list, 1, packed);
      } else {
        for (int64_t v : iv) {
          PutTag(&list, 1, 0);
          PutVarint(&list, static_cast<uint64_t>(v));
        }
      }
    }
    std::string feature;
    PutBytes(&feature, which, list);
    std::string entry;
    PutBytes(&entry, 1, f.name);
    PutBytes(&entry, 2, feature);
    PutBytes(&feats, 1, entry);
  }
  std::string example;
  PutBytes(&example, 1, feats);
  return example;
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  const uint64_t len = data.size();
  char lb[8];
  std::memcpy(lb, &len, 8);
  out.append(lb, 8);
  PutLe32(&out, MaskCrc(Crc32c(lb, 8)));
  out.append(data);
  PutLe32(&out, MaskCrc(Crc32c(data)));
  return out;
}

TfRecordWriter::~TfRecordWriter() = default;

namespace {

Status WriterError(const Status& s, const std::string& path) {
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("TfRecordWriter: writing \"{}\" failed, the file there is "
                                      "unchanged: {}",
                                      path, s.message()));
}

}  // namespace

Status TfRecordWriter::Open(const std::string& path, Env* env) {
  file_.reset();
  auto f = AtomicFileWriter::Create(env == nullptr ? Env::Default() : env, path);
  if (!f.ok()) return WriterError(f.status(), path);
  file_ = std::move(*f);
  return absl::OkStatus();
}

Status TfRecordWriter::Write(std::string_view data) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError("TfRecordWriter: Write before Open; open a file first");
  }
  return WriterError(file_->Append(FrameRecord(data)), file_->path());
}

Status TfRecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  std::unique_ptr<AtomicFileWriter> f = std::move(file_);
  return WriterError(f->Commit(), f->path());
}

namespace {

// Where each schema column's values go in a row.
struct Slot {
  ColumnKind kind;
  int width;
  int column;        // output column (label 0, dense 1, sparse 2+k, timestamp last)
  int dense_offset;  // kDense: first value in the dense row
  const SchemaColumn* schema;
};

enum class ListKind { kNone, kBytes, kFloat, kInt64 };

// A decoded Feature: which list and the raw bytes of the list message.
struct FeatureView {
  ListKind kind = ListKind::kNone;
  std::string_view list;
};

// Iterates the fields of a message. Returns false on malformed wire data.
template <typename Fn>
bool ForEachField(std::string_view msg, Fn&& fn) {
  const char* p = msg.data();
  const char* end = p + msg.size();
  while (p < end) {
    uint64_t tag;
    if (!ReadVarint(p, end, &tag)) return false;
    const int field = static_cast<int>(tag >> 3);
    const int wire = static_cast<int>(tag & 7);
    if (field == 0) return false;
    uint64_t v = 0;
    std::string_view bytes;
    switch (wire) {
      case 0:
        if (!ReadVarint(p, end, &v)) return false;
        break;
      case 1:
        if (end - p < 8) return false;
        std::memcpy(&v, p, 8);
        p += 8;
        break;
      case 2: {
        uint64_t len;
        if (!ReadVarint(p, end, &len) || len > static_cast<uint64_t>(end - p)) return false;
        bytes = std::string_view(p, len);
        p += len;
        break;
      }
      case 5: {
        if (end - p < 4) return false;
        uint32_t w;
        std::memcpy(&w, p, 4);
        v = w;
        p += 4;
        break;
      }
      default:
        return false;  // groups (3, 4) are not used by tf.Example
    }
    if (!fn(field, wire, v, bytes)) return false;
  }
  return true;
}

class TfRecordSource final : public ChunkedSource {
 public:
  TfRecordSource(std::vector<std::string> files, TfRecordOptions options)
      : ChunkedSource(std::move(files), options.reader, "TFRecord file"), opt_(std::move(options)) {
    int sparse = 0;
    for (const SchemaColumn& c : opt_.schema) {
      if (c.kind == ColumnKind::kSkip) continue;
      Slot s{c.kind, c.width, 0, 0, &c};
      switch (c.kind) {
        case ColumnKind::kLabel:
          has_label_ = true;
          break;
        case ColumnKind::kDense:
          s.dense_offset = dense_width_;
          dense_width_ += c.width;
          break;
        case ColumnKind::kSparse:
          s.column = sparse++;
          break;
        case ColumnKind::kTimestamp:
          has_timestamp_ = true;
          break;
        case ColumnKind::kSkip:
          break;
      }
      slots_.emplace(c.name, static_cast<int>(slot_list_.size()));
      slot_list_.push_back(s);
    }
    num_sparse_ = sparse;
  }

 protected:
  Status StartFile(int, Chunk*, bool* usable) override {
    *usable = true;
    return absl::OkStatus();
  }
  Status ReadChunk(Chunk* chunk, bool* file_done) override;
  ParsedChunk ParseChunk(const Chunk& chunk) const override;

 private:
  struct RowOut {
    float* label;
    float* dense;
    std::vector<int64_t*> sparse;
    int64_t* timestamp;
  };
  // DecodeExample writes one record's values into row `r`; on failure sets reason and detail.
  bool DecodeExample(std::string_view data, int64_t r, RowOut& out, MalformedReason* reason,
                     std::string* detail) const;

  // PerSample: how a value count the schema expects reads when line_per_sample packs several
  // samples into a record ("" for one).
  std::string PerSample(int64_t width) const {
    return opt_.line_per_sample > 1 ? fmt::format(" ({} samples x {})", opt_.line_per_sample, width)
                                    : std::string();
  }

  const TfRecordOptions opt_;
  absl::flat_hash_map<std::string, int> slots_;
  std::vector<Slot> slot_list_;
  int dense_width_ = 0;
  int num_sparse_ = 0;
  bool has_label_ = false;
  bool has_timestamp_ = false;
};

Status TfRecordSource::ReadChunk(Chunk* chunk, bool* file_done) {
  FileCursor& f = file();
  // A chunk's rows are its records x line_per_sample: the row cap keeps a file of tiny (even
  // empty) records from asking for rows without bound; real records are far larger.
  constexpr int64_t kMaxChunkRows = 1 << 16;
  while (static_cast<int64_t>(chunk->data.size()) < options().chunk_bytes &&
         static_cast<int64_t>(chunk->records.size()) * opt_.line_per_sample < kMaxChunkRows) {
    const int64_t frame_offset = f.offset();
    char header[12];
    RECSDK_ASSIGN_OR_RETURN(size_t got, f.Read(header, 12));
    if (got == 0) {
      *file_done = true;
      return absl::OkStatus();
    }
    auto abandon = [&](MalformedReason reason, std::string detail) {
      chunk->reader_errors.push_back(RowError{reason, -1, frame_offset, std::move(detail)});
      *file_done = true;
      return absl::OkStatus();
    };
    if (got < 12) {
      return abandon(MalformedReason::kTruncated,
                     fmt::format("record header cut short ({} of 12 bytes); the rest of the file "
                                 "is dropped",
                                 got));
    }
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, header, 8);
    std::memcpy(&len_crc, header + 8, 4);
    if (UnmaskCrc(len_crc) != Crc32c(header, 8)) {
      return abandon(MalformedReason::kCrcMismatch,
                     "the length field fails its CRC32C, so record boundaries are lost; the rest "
                     "of the file is dropped");
    }
    const int64_t remaining = f.size() - f.offset();
    // A length near 2^64 must not wrap `len + 4` into a small number.
    if (!FitsWithin<uint64_t>(len, 4, static_cast<uint64_t>(std::max<int64_t>(remaining, 0)))) {
      return abandon(
          MalformedReason::kTruncated,
          fmt::format("record of {} bytes but only {} bytes remain in the file", len, remaining));
    }
    const size_t at = chunk->data.size();
    chunk->data.resize(at + len + 4);
    RECSDK_ASSIGN_OR_RETURN(size_t body, f.Read(chunk->data.data() + at, len + 4));
    if (body < len + 4) {
      chunk->data.resize(at);
      return abandon(MalformedReason::kTruncated, "record data cut short");
    }
    uint32_t data_crc;
    std::memcpy(&data_crc, chunk->data.data() + at + len, 4);
    chunk->data.resize(at + len);
    chunk->records.push_back(RecordRef{at, static_cast<size_t>(len), frame_offset, data_crc});
  }
  return absl::OkStatus();
}

bool TfRecordSource::DecodeExample(std::string_view data, int64_t r, RowOut& out,
                                   MalformedReason* reason, std::string* detail) const {
  // Defaults first, for the record's `lps` rows; features seen later overwrite them.
  const int64_t lps = opt_.line_per_sample;
  std::vector<uint8_t> seen(slot_list_.size(), 0);
  for (const Slot& s : slot_list_) {
    for (int64_t row = r; row < r + lps; ++row) {
      switch (s.kind) {
        case ColumnKind::kLabel:
          out.label[row] = s.schema->default_value;
          break;
        case ColumnKind::kDense:
          for (int k = 0; k < s.width; ++k) {
            out.dense[row * dense_width_ + s.dense_offset + k] = s.schema->default_value;
          }
          break;
        case ColumnKind::kSparse:
          for (int k = 0; k < s.width; ++k) {
            out.sparse[s.column][row * s.width + k] = s.schema->pad_id;
          }
          break;
        case ColumnKind::kTimestamp:
          out.timestamp[row] = 0;
          break;
        case ColumnKind::kSkip:
          break;
      }
    }
  }
  bool semantic_error = false;
  auto fail = [&](MalformedReason why, std::string what) {
    *reason = why;
    *detail = std::move(what);
    semantic_error = true;
    return false;
  };
  auto on_entry = [&](std::string_view entry) -> bool {
    std::string_view key;
    std::string_view feature;
    if (!ForEachField(entry, [&](int field, int wire, uint64_t, std::string_view bytes) {
          if (field == 1 && wire == 2) key = bytes;
          if (field == 2 && wire == 2) feature = bytes;
          return field > 2 || wire == 2;
        })) {
      return false;
    }
    auto it = slots_.find(absl::string_view(key.data(), key.size()));
    if (it == slots_.end()) return true;  // a feature the schema does not use
    const Slot& s = slot_list_[it->second];
    FeatureView fv;
    if (!ForEachField(feature, [&](int field, int wire, uint64_t, std::string_view bytes) {
          if (field >= 1 && field <= 3) {
            if (wire != 2) return false;
            fv.kind = static_cast<ListKind>(field);
            fv.list = bytes;
          }
          return true;
        })) {
      return false;
    }
    // Decode the list's values into a small buffer (ints or floats), checking the count.
    std::vector<int64_t> ints;
    std::vector<float> floats;
    bool ok = true;
    if (fv.kind == ListKind::kBytes) {
      ok = ForEachField(fv.list, [&](int field, int wire, uint64_t, std::string_view bytes) {
        if (field == 1) {
          if (wire != 2) return false;
          ints.push_back(static_cast<int64_t>(Fingerprint64(bytes)));
        }
        return true;
      });
    } else if (fv.kind == ListKind::kFloat) {
      ok = ForEachField(fv.list, [&](int field, int wire, uint64_t v, std::string_view bytes) {
        if (field != 1) return true;
        if (wire == 5) {
          const uint32_t w = static_cast<uint32_t>(v);
          float f;
          std::memcpy(&f, &w, 4);
          floats.push_back(f);
          return true;
        }
        if (wire != 2 || bytes.size() % 4 != 0) return false;
        for (size_t i = 0; i < bytes.size(); i += 4) {
          float f;
          std::memcpy(&f, bytes.data() + i, 4);
          floats.push_back(f);
        }
        return true;
      });
    } else if (fv.kind == ListKind::kInt64) {
      ok = ForEachField(fv.list, [&](int field, int wire, uint64_t v, std::string_view bytes) {
        if (field != 1) return true;
        if (wire == 0) {
          ints.push_back(static_cast<int64_t>(v));
          return true;
        }
        if (wire != 2) return false;
        const char* p = bytes.data();
        const char* e = p + bytes.size();
        while (p < e) {
          uint64_t x;
          if (!ReadVarint(p, e, &x)) return false;
          ints.push_back(static_cast<int64_t>(x));
        }
        return true;
      });
    }
    if (!ok) return false;
    const bool is_float = fv.kind == ListKind::kFloat;
    const size_t count = is_float ? floats.size() : ints.size();
    seen[it->second] = 1;
    switch (s.kind) {
      case ColumnKind::kLabel:
      case ColumnKind::kDense: {
        if (fv.kind == ListKind::kBytes) {
          return fail(MalformedReason::kBadNumber,
                      fmt::format("feature \"{}\" is a bytes_list; a number list was expected",
                                  s.schema->name));
        }
        const int64_t expected = lps * s.width;
        if (count != static_cast<size_t>(expected)) {
          return fail(MalformedReason::kWrongValueCount,
                      fmt::format("feature \"{}\" has {} values where the schema says {}{}",
                                  s.schema->name, count, expected, PerSample(s.width)));
        }
        // Value k belongs to row r + k / width, position k % width (sample after sample).
        for (int64_t k = 0; k < expected; ++k) {
          const float v = is_float ? floats[k] : static_cast<float>(ints[k]);
          if (!std::isfinite(v)) {
            return fail(MalformedReason::kBadNumber,
                        fmt::format("feature \"{}\" holds a non-finite value", s.schema->name));
          }
          const int64_t row = r + k / s.width;
          if (s.kind == ColumnKind::kLabel) {
            out.label[row] = v;
          } else {
            out.dense[row * dense_width_ + s.dense_offset + k % s.width] = v;
          }
        }
        return true;
      }
      case ColumnKind::kSparse:
      case ColumnKind::kTimestamp: {
        if (is_float) {
          return fail(MalformedReason::kBadNumber,
                      fmt::format("feature \"{}\" is a float_list; ids need an int64_list or a "
                                  "bytes_list",
                                  s.schema->name));
        }
        // One sample per record: a sparse list may hold fewer ids than `width` (padded). Several:
        // every list holds exactly its samples' values, or the samples cannot be told apart.
        const size_t per_sample = s.kind == ColumnKind::kSparse ? s.width : 1;
        const size_t limit = lps * per_sample;
        if (count > limit || ((s.kind == ColumnKind::kTimestamp || lps > 1) && count != limit)) {
          return fail(MalformedReason::kWrongValueCount,
                      fmt::format("feature \"{}\" has {} values; the schema allows {}{}",
                                  s.schema->name, count, limit, PerSample(per_sample)));
        }
        if (s.kind == ColumnKind::kTimestamp) {
          std::copy(ints.begin(), ints.end(), out.timestamp + r);
        } else {
          int64_t* dst = out.sparse[s.column] + r * s.width;
          std::copy(ints.begin(), ints.end(), dst);
          std::fill(dst + count, dst + limit, s.schema->pad_id);
        }
        return true;
      }
      case ColumnKind::kSkip:
        return true;
    }
    return true;
  };
  auto on_features = [&](std::string_view features) {
    return ForEachField(features, [&](int field, int wire, uint64_t, std::string_view bytes) {
      if (field != 1) return true;
      if (wire != 2) return false;
      return on_entry(bytes);
    });
  };
  const bool ok = ForEachField(data, [&](int field, int wire, uint64_t, std::string_view bytes) {
    if (field != 1) return true;
    if (wire != 2) return false;
    return on_features(bytes);
  });
  if (!ok) {
    if (!semantic_error) {
      *reason = MalformedReason::kBadProtobuf;
      *detail = "the record is not a valid tf.Example protobuf";
    }
    return false;
  }
  for (size_t i = 0; i < slot_list_.size(); ++i) {
    if (!seen[i] && slot_list_[i].schema->required) {
      *reason = MalformedReason::kMissingFeature;
      *detail = fmt::format(
          "the Example has no feature \"{}\" (mark it required=false to use "
          "defaults)",
          slot_list_[i].schema->name);
      return false;
    }
  }
  return true;
}

ParsedChunk TfRecordSource::ParseChunk(const Chunk& chunk) const {
  ParsedChunk out;
  const int64_t lps = opt_.line_per_sample;
  const int64_t n = static_cast<int64_t>(chunk.records.size()) * lps;
  Tensor label, dense, timestamp;
  RowOut row{};
  if (has_label_) {
    label = Tensor(DType::kFloat32, Shape{n, 1});
    row.label = label.data<float>();
  }
  if (dense_width_ > 0) {
    dense = Tensor(DType::kFloat32, Shape{n, dense_width_});
    row.dense = dense.data<float>();
  }
  if (has_timestamp_) {
    timestamp = Tensor(DType::kInt64, Shape{n});
    row.timestamp = timestamp.data<int64_t>();
  }
  std::vector<Tensor> sparse;
  for (const Slot& s : slot_list_) {
    if (s.kind != ColumnKind::kSparse) continue;
    sparse.emplace_back(DType::kInt64, Shape{n, s.width});
    row.sparse.push_back(sparse.back().data<int64_t>());
  }
  int64_t r = 0;
  for (const RecordRef& rec : chunk.records) {
    const std::string_view data(chunk.data.data() + rec.offset, rec.size);
    if (UnmaskCrc(rec.masked_crc) != Crc32c(data)) {
      out.errors.push_back(RowError{MalformedReason::kCrcMismatch, -1, rec.file_offset,
                                    "record data fails its CRC32C"});
      continue;
    }
    MalformedReason reason;
    std::string detail;
    if (DecodeExample(data, r, row, &reason, &detail)) {
      r += lps;
    } else {
      out.errors.push_back(RowError{reason, -1, rec.file_offset, std::move(detail)});
    }
  }
  Status st;
  if (has_label_) st.Update(out.batch.AddColumn("label", std::move(label)));
  if (dense_width_ > 0) st.Update(out.batch.AddColumn("dense", std::move(dense)));
  int si = 0;
  for (const Slot& s : slot_list_) {
    if (s.kind == ColumnKind::kSparse) st.Update(out.batch.AddColumn(s.schema->name, sparse[si++]));
  }
  if (has_timestamp_) st.Update(out.batch.AddColumn("timestamp", std::move(timestamp)));
  TrimRows(&out.batch, r);
  return out;
}

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<Dataset>> TfRecordDataset(const std::vector<std::string>& files,
                                                   const TfRecordOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::ValidateReaderOptions(options.reader, "TfRecordDataset"));
  RECSDK_RETURN_IF_ERROR(internal::ValidateSchema(options.schema, "TfRecordDataset", true));
  if (options.line_per_sample < 1 || options.line_per_sample > TfRecordOptions::kMaxLinePerSample) {
    return absl::InvalidArgumentError(fmt::format(
        "TfRecordDataset: line_per_sample {} is outside [1, {}]; it is the number of samples "
        "each record packs (1 for one tf.Example per sample)",
        options.line_per_sample, TfRecordOptions::kMaxLinePerSample));
  }
  RECSDK_ASSIGN_OR_RETURN(auto sorted, ExpandFilePatterns(files, options.reader.env));
  return std::unique_ptr<Dataset>(new internal::TfRecordSource(std::move(sorted), options));
}

}  // namespace recsdk
