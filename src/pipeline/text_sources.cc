// text_sources.cc: the Criteo TSV source (its parser is criteo_parse.h) and the schema-driven
// delimited text source. Parsing is per chunk (see chunked_source.h); the parsers write straight
// into the Batch's tensors, one pass over each line, no per-field allocation. Threading as
// ChunkedSource.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "fmt/format.h"
#include "src/common/finite_option.h"
#include "src/common/status_macros.h"
#include "src/pipeline/chunked_source.h"
#include "src/pipeline/criteo_parse.h"
#include "src/pipeline/text_parse.h"

namespace recsdk {
namespace internal {
namespace {

// CountRows: the lines in a chunk's text after the header, counting an unterminated last one.
int64_t CountLines(const char* p, const char* end) {
  int64_t n = 0;
  while (p < end) {
    const void* nl = std::memchr(p, '\n', end - p);
    ++n;
    if (nl == nullptr) break;
    p = static_cast<const char*>(nl) + 1;
  }
  return n;
}

std::string Excerpt(const char* p, const char* end) {
  std::string s(p, std::min<ptrdiff_t>(end - p, 40));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return "\"" + s + (end - p > 40 ? "...\"" : "\"");
}

class CriteoSource final : public ChunkedSource {
 public:
  CriteoSource(std::vector<std::string> files, CriteoOptions options)
      : ChunkedSource(std::move(files), options.reader, "Criteo file"), parser_(options) {}

 protected:
  Status StartFile(int, Chunk*, bool* usable) override {
    *usable = true;
    return absl::OkStatus();
  }
  Status ReadChunk(Chunk* chunk, bool* file_done) override { return ReadLines(chunk, file_done); }
  ParsedChunk ParseChunk(const Chunk& chunk) const override {
    return parser_.Parse(chunk.data, chunk.at_eof);
  }

 private:
  const CriteoParser parser_;
};

// ---------------------------------------------------------------------------------------------

class DelimitedSource final : public ChunkedSource {
 public:
  DelimitedSource(std::vector<std::string> files, DelimitedOptions options)
      : ChunkedSource(std::move(files), options.reader, "delimited file"),
        opt_(std::move(options)) {
    for (const SchemaColumn& c : opt_.schema) {
      if (c.kind == ColumnKind::kDense) dense_width_ += 1;
      if (c.kind == ColumnKind::kLabel) has_label_ = true;
      if (c.kind == ColumnKind::kTimestamp) has_timestamp_ = true;
    }
  }

 protected:
  Status StartFile(int, Chunk* chunk, bool* usable) override {
    *usable = true;
    first_chunk_of_file_ = true;
    (void)chunk;
    return absl::OkStatus();
  }
  Status ReadChunk(Chunk* chunk, bool* file_done) override {
    chunk->skip_first_line = opt_.skip_header && first_chunk_of_file_;
    first_chunk_of_file_ = false;
    return ReadLines(chunk, file_done);
  }
  ParsedChunk ParseChunk(const Chunk& chunk) const override;

 private:
  const DelimitedOptions opt_;
  int dense_width_ = 0;
  bool has_label_ = false;
  bool has_timestamp_ = false;
  bool first_chunk_of_file_ = true;
};

ParsedChunk DelimitedSource::ParseChunk(const Chunk& chunk) const {
  ParsedChunk out;
  const char* p = chunk.data.data();
  const char* end = p + chunk.data.size();
  const int64_t n = CountLines(p, end);
  out.lines = n;
  Tensor label, dense, timestamp;
  float* lp = nullptr;
  float* dp = nullptr;
  int64_t* tp = nullptr;
  if (has_label_) {
    label = Tensor(DType::kFloat32, Shape{n, 1});
    lp = label.data<float>();
  }
  dense = Tensor(DType::kFloat32, Shape{n, dense_width_});
  dp = dense.data<float>();
  if (has_timestamp_) {
    timestamp = Tensor(DType::kInt64, Shape{n});
    tp = timestamp.data<int64_t>();
  }
  std::vector<Tensor> sparse;
  std::vector<int64_t*> sp;
  for (const SchemaColumn& c : opt_.schema) {
    if (c.kind != ColumnKind::kSparse) continue;
    sparse.emplace_back(DType::kInt64, Shape{n, c.width});
    sp.push_back(sparse.back().data<int64_t>());
  }
  const int ncols = static_cast<int>(opt_.schema.size());
  int64_t r = 0;
  int64_t line = 0;
  if (chunk.skip_first_line && p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    p = nl == nullptr ? end : nl + 1;
    line = 1;
  }
  for (; p < end; ++line) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    const bool unterminated = nl == nullptr;
    const char* le = unterminated ? end : nl;
    const char* ce = (le > p && le[-1] == '\r') ? le - 1 : le;
    const char* line_begin = p;
    p = unterminated ? end : nl + 1;
    auto fail = [&](MalformedReason reason, std::string detail) {
      out.errors.push_back(RowError{reason, line, -1, std::move(detail)});
    };
    if (!IsValidUtf8(line_begin, ce - line_begin)) {
      fail(MalformedReason::kInvalidUtf8, "the line is not valid UTF-8");
      continue;
    }
    const int fields = 1 + static_cast<int>(std::count(line_begin, ce, opt_.delimiter));
    if (fields != ncols) {
      fail(unterminated && chunk.at_eof ? MalformedReason::kTruncated
                                        : MalformedReason::kWrongColumnCount,
           fmt::format("{} columns where the schema has {}", fields, ncols));
      continue;
    }
    const char* f = line_begin;
    int dense_i = 0, sparse_i = 0;
    bool ok = true;
    for (int c = 0; c < ncols && ok; ++c) {
      const SchemaColumn& col = opt_.schema[c];
      const char* fe = static_cast<const char*>(std::memchr(f, opt_.delimiter, ce - f));
      if (fe == nullptr) fe = ce;
      switch (col.kind) {
        case ColumnKind::kSkip:
          break;
        case ColumnKind::kLabel:
        case ColumnKind::kDense: {
          float v = col.default_value;
          if (fe != f && (!ParseFloat(f, fe, &v) || !std::isfinite(v))) {
            fail(MalformedReason::kBadNumber,
                 fmt::format("column \"{}\" {} is not a number", col.name, Excerpt(f, fe)));
            ok = false;
            break;
          }
          if (col.kind == ColumnKind::kLabel) {
            lp[r] = v;
          } else {
            dp[r * dense_width_ + dense_i++] = v;
          }
          break;
        }
        case ColumnKind::kTimestamp: {
          int64_t v = 0;
          if (fe != f && !ParseInt64(f, fe, &v)) {
            fail(MalformedReason::kBadNumber,
                 fmt::format("timestamp \"{}\" {} is not an integer", col.name, Excerpt(f, fe)));
            ok = false;
            break;
          }
          tp[r] = v;
          break;
        }
        case ColumnKind::kSparse: {
          int64_t* ids = sp[sparse_i++] + r * col.width;
          int k = 0;
          const char* v = f;
          while (ok && fe != f) {
            const char* ve = static_cast<const char*>(std::memchr(v, opt_.value_delimiter, fe - v));
            if (ve == nullptr) ve = fe;
            if (k >= col.width) {
              fail(MalformedReason::kWrongValueCount,
                   fmt::format("column \"{}\" has more than width {} ids", col.name, col.width));
              ok = false;
              break;
            }
            const bool parsed = col.hex ? ParseHex(v, ve, &ids[k]) : ParseInt64(v, ve, &ids[k]);
            if (!parsed) {
              fail(col.hex ? MalformedReason::kBadHex : MalformedReason::kBadNumber,
                   fmt::format("column \"{}\" id {} is not {}", col.name, Excerpt(v, ve),
                               col.hex ? "1-16 hex digits" : "a decimal int64"));
              ok = false;
              break;
            }
            ++k;
            if (ve == fe) break;
            v = ve + 1;
          }
          for (; ok && k < col.width; ++k) ids[k] = col.pad_id;
          break;
        }
      }
      f = fe + 1;
    }
    if (ok) ++r;
  }
  Status st;
  if (has_label_) st.Update(out.batch.AddColumn("label", std::move(label)));
  if (dense_width_ > 0) st.Update(out.batch.AddColumn("dense", std::move(dense)));
  int si = 0;
  for (const SchemaColumn& c : opt_.schema) {
    if (c.kind == ColumnKind::kSparse) st.Update(out.batch.AddColumn(c.name, sparse[si++]));
  }
  if (has_timestamp_) st.Update(out.batch.AddColumn("timestamp", std::move(timestamp)));
  TrimRows(&out.batch, r);
  return out;
}

}  // namespace

// ValidateSchema: shared by the delimited and TFRecord sources.
Status ValidateSchema(const std::vector<SchemaColumn>& schema, std::string_view who,
                      bool allow_dense_width) {
  if (schema.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the schema is empty; add one SchemaColumn per column", who));
  }
  int labels = 0, timestamps = 0;
  std::vector<std::string_view> names;
  for (const SchemaColumn& c : schema) {
    if (c.kind == ColumnKind::kSkip) continue;
    if (c.name.empty()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: a schema column of a kind other than kSkip has no name", who));
    }
    if (c.kind == ColumnKind::kSparse &&
        (c.name == "label" || c.name == "dense" || c.name == "timestamp" || c.name == "mask")) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: sparse column name \"{}\" is reserved (label, dense, timestamp, mask); rename it",
          who, c.name));
    }
    if (c.kind == ColumnKind::kSparse || c.kind == ColumnKind::kDense) {
      if (std::find(names.begin(), names.end(), c.name) != names.end()) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: column \"{}\" appears twice in the schema; names must be unique", who, c.name));
      }
      names.push_back(c.name);
    }
    const bool width_ok =
        c.kind == ColumnKind::kSparse
            ? c.width >= 1
            : (c.kind == ColumnKind::kDense && allow_dense_width ? c.width >= 1 : c.width == 1);
    if (!width_ok) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: column \"{}\" has width {}; sparse (and TFRecord dense) columns need width >= 1, "
          "others width 1",
          who, c.name, c.width));
    }
    if ((c.kind == ColumnKind::kDense || c.kind == ColumnKind::kLabel) &&
        !std::isfinite(c.default_value)) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: column \"{}\" has default_value {}, not a finite number: every empty field would "
          "feed it to the model; use a finite default such as 0",
          who, c.name, c.default_value));
    }
    labels += c.kind == ColumnKind::kLabel;
    timestamps += c.kind == ColumnKind::kTimestamp;
  }
  if (labels > 1 || timestamps > 1) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the schema has {} label and {} timestamp columns; at most one of each",
                    who, labels, timestamps));
  }
  return absl::OkStatus();
}

}  // namespace internal

StatusOr<std::unique_ptr<Dataset>> CriteoDataset(const std::vector<std::string>& files,
                                                 const CriteoOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::ValidateReaderOptions(options.reader, "CriteoDataset"));
  if (options.id_modulus < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "CriteoDataset: id_modulus {} is negative; use 0 (no modulus) or a positive size",
        options.id_modulus));
  }
  RECSDK_RETURN_IF_ERROR(internal::CheckFiniteOption(
      "CriteoDataset", "default_dense", options.default_dense,
      "every empty integer field would feed it to the model; use a finite value such as 0"));
  RECSDK_ASSIGN_OR_RETURN(auto sorted, ExpandFilePatterns(files, options.reader.env));
  return std::unique_ptr<Dataset>(new internal::CriteoSource(std::move(sorted), options));
}

StatusOr<std::unique_ptr<Dataset>> DelimitedDataset(const std::vector<std::string>& files,
                                                    const DelimitedOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::ValidateReaderOptions(options.reader, "DelimitedDataset"));
  RECSDK_RETURN_IF_ERROR(internal::ValidateSchema(options.schema, "DelimitedDataset", false));
  if (options.delimiter == '\n' || options.delimiter == options.value_delimiter) {
    return absl::InvalidArgumentError(
        "DelimitedDataset: delimiter must differ from newline and from value_delimiter");
  }
  RECSDK_ASSIGN_OR_RETURN(auto sorted, ExpandFilePatterns(files, options.reader.env));
  return std::unique_ptr<Dataset>(new internal::DelimitedSource(std::move(sorted), options));
}

}  // namespace recsdk
