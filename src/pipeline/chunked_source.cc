// chunked_source.cc: see chunked_source.h.
#include "src/pipeline/chunked_source.h"

#include <algorithm>
#include <cstring>

#include "fmt/format.h"
#include "src/common/env.h"
#include "src/common/exception_guard.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "tbb/task_group.h"

namespace recsdk::internal {

FileCursor::~FileCursor() { Close(); }

Status FileCursor::Open(Env* env, const std::string& path) {
  Close();
  // Through the Env (a test's Env injects short reads and read errors; a remote file system
  // plugs in). The file was a regular file when the pattern was expanded, but it may have been
  // replaced since: the Default Env checks the descriptor itself and never blocks on a pipe.
  auto opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) {
    return Status(opened.status().code(), fmt::format("dataset: {}", opened.status().message()));
  }
  auto size = (*opened)->Size();
  if (!size.ok()) {
    return Status(size.status().code(), fmt::format("dataset: {}", size.status().message()));
  }
  file_ = std::move(*opened);
  size_ = static_cast<int64_t>(*size);
  offset_ = 0;
  path_ = path;
  return absl::OkStatus();
}

void FileCursor::Close() { file_.reset(); }

StatusOr<size_t> FileCursor::Read(char* out, size_t n) {
  // RandomAccessFile::Read may return fewer bytes than asked before the end (a short read): ask
  // again until n bytes or a read of 0 (the end of the file).
  size_t done = 0;
  while (done < n) {
    auto got = file_->Read(static_cast<uint64_t>(offset_) + done, n - done, out + done);
    if (!got.ok()) {
      return absl::DataLossError(fmt::format("read error in \"{}\" at byte offset {}: {}", path_,
                                             offset_ + static_cast<int64_t>(done),
                                             got.status().message()));
    }
    if (*got == 0) break;
    done += *got;
  }
  offset_ += static_cast<int64_t>(done);
  return done;
}

Status ValidateReaderOptions(const ReaderOptions& options, std::string_view who) {
  if (options.num_parse_threads < 1 || options.num_parse_threads > 1024) {
    return absl::InvalidArgumentError(
        fmt::format("{}: num_parse_threads {} is outside [1, 1024]; use 1 or the cores to spare",
                    who, options.num_parse_threads));
  }
  if (options.chunk_bytes < 4096 || options.chunk_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: chunk_bytes {} is outside [4096, 1 GiB]; the default 1 MiB suits most files", who,
        options.chunk_bytes));
  }
  if (options.max_line_bytes < 16 || options.max_line_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: max_line_bytes {} is outside [16, 1 GiB]; set it just above your longest line (a "
        "line is held in memory whole)",
        who, options.max_line_bytes));
  }
  return absl::OkStatus();
}

ChunkedSource::ChunkedSource(std::vector<std::string> files, ReaderOptions options,
                             std::string kind)
    : files_(std::move(files)), options_(options), kind_(std::move(kind)) {
  if (options_.num_parse_threads > 1) {
    arena_ = std::make_unique<tbb::task_arena>(options_.num_parse_threads);
  }
}

ChunkedSource::~ChunkedSource() = default;

Status ChunkedSource::Reset() {
  file_.Close();
  next_file_ = 0;
  file_open_ = false;
  exhausted_ = false;
  carry_.clear();
  discarding_line_ = false;
  line_base_ = 0;
  merge_file_ = -1;
  ready_.clear();
  return absl::OkStatus();
}

MalformedCounts ChunkedSource::malformed_counts() const {
  MalformedCounts c;
  for (int i = 0; i < kNumMalformedReasons; ++i) c.by_reason[i] = counts_[i].load();
  return c;
}

Status ChunkedSource::ReadLines(Chunk* chunk, bool* file_done) {
  const size_t want = static_cast<size_t>(options_.chunk_bytes);
  std::string& data = chunk->data;
  data = std::move(carry_);
  carry_.clear();
  for (;;) {
    const size_t old = data.size();
    data.resize(old + want);
    auto got = file_.Read(data.data() + old, want);
    if (!got.ok()) return got.status();
    data.resize(old + *got);
    const bool eof = *got < want;
    if (discarding_line_) {
      const size_t nl = data.find('\n');
      if (nl == std::string::npos) {
        data.clear();
        if (eof) {
          *file_done = true;
          return absl::OkStatus();
        }
        continue;
      }
      data.erase(0, nl + 1);
      discarding_line_ = false;
    }
    const size_t last_nl = data.rfind('\n');
    if (eof) {
      if (CutAtLongLine(chunk)) return absl::OkStatus();  // the rest comes in the next chunk
      chunk->at_eof = true;
      *file_done = true;
      return absl::OkStatus();
    }
    if (last_nl != std::string::npos) {
      carry_.assign(data, last_nl + 1);
      data.resize(last_nl + 1);
      CutAtLongLine(chunk);
      return absl::OkStatus();
    }
    if (static_cast<int64_t>(data.size()) > options_.max_line_bytes) {
      // One line longer than allowed: report it and drop bytes up to its end.
      chunk->reader_errors.push_back(RowError{
          MalformedReason::kTruncated, 0, -1,
          fmt::format("line longer than max_line_bytes {} (raise ReaderOptions.max_line_bytes)",
                      options_.max_line_bytes)});
      chunk->reader_lines = 1;
      data.clear();
      discarding_line_ = true;
      return absl::OkStatus();
    }
  }
}

bool ChunkedSource::CutAtLongLine(Chunk* chunk) {
  std::string& data = chunk->data;
  const size_t limit = static_cast<size_t>(options_.max_line_bytes);
  // No line can be longer than the data, so the usual case (max_line_bytes above the chunk size)
  // costs nothing.
  if (data.size() <= limit) return false;
  size_t begin = 0;
  while (begin < data.size()) {
    const size_t nl = data.find('\n', begin);
    const size_t end = nl == std::string::npos ? data.size() : nl;
    if (end - begin > limit) {
      // Rows before the line are parsed from this chunk; the line is reported (one reader line,
      // numbered after them); what follows it goes back in front of the carry.
      const size_t next = nl == std::string::npos ? data.size() : nl + 1;
      carry_.insert(0, data, next, std::string::npos);
      chunk->reader_errors.push_back(
          RowError{MalformedReason::kTruncated, 0, -1,
                   fmt::format("line of {} bytes is longer than max_line_bytes {} (raise "
                               "ReaderOptions.max_line_bytes)",
                               end - begin, options_.max_line_bytes)});
      chunk->reader_lines = 1;
      data.resize(begin);
      return true;
    }
    begin = end + 1;
  }
  return false;
}

Status ChunkedSource::FillQueue() {
  const int max_chunks = 2 * options_.num_parse_threads;
  // With a worker arena each chunk's parse starts as soon as it is read, so reading the next chunk
  // (serial, on this thread) overlaps parsing the previous ones; this thread then joins the
  // parsing in wait(). The reserve keeps chunks[i] in place while tasks hold it.
  std::vector<Chunk> chunks;
  chunks.reserve(static_cast<size_t>(max_chunks));
  std::vector<ParsedChunk> parsed(static_cast<size_t>(max_chunks));
  tbb::task_group tasks;
  auto submit = [&](Chunk chunk) {
    chunks.push_back(std::move(chunk));
    if (arena_ == nullptr) return;
    const size_t i = chunks.size() - 1;
    arena_->execute([&, i] { tasks.run([&, i] { parsed[i] = ParseChunk(chunks[i]); }); });
  };
  auto read = [&]() -> Status {
    while (static_cast<int>(chunks.size()) < max_chunks) {
      if (!file_open_) {
        if (next_file_ >= static_cast<int>(files_.size())) break;
        const int index = next_file_++;
        RECSDK_RETURN_IF_ERROR(
            file_.Open(options_.env == nullptr ? Env::Default() : options_.env, files_[index]));
        file_open_ = true;
        carry_.clear();
        discarding_line_ = false;
        Chunk header;
        header.file_index = index;
        bool usable = true;
        RECSDK_RETURN_IF_ERROR(StartFile(index, &header, &usable));
        if (!usable) {
          file_.Close();
          file_open_ = false;
        }
        if (!header.reader_errors.empty()) submit(std::move(header));
        if (!usable) continue;
      }
      Chunk chunk;
      chunk.file_index = next_file_ - 1;
      bool done = false;
      RECSDK_RETURN_IF_ERROR(ReadChunk(&chunk, &done));
      if (done) {
        file_.Close();
        file_open_ = false;
      }
      if (!chunk.data.empty() || !chunk.reader_errors.empty() || !chunk.records.empty()) {
        submit(std::move(chunk));
      }
    }
    return absl::OkStatus();
  };
  const Status st = read();
  if (arena_ != nullptr) {
    arena_->execute([&] { tasks.wait(); });
  } else {
    for (size_t i = 0; i < chunks.size(); ++i) parsed[i] = ParseChunk(chunks[i]);
  }
  RECSDK_RETURN_IF_ERROR(st);
  if (chunks.empty()) {
    exhausted_ = true;
    return absl::OkStatus();
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    ready_.emplace_back(std::move(chunks[i]), std::move(parsed[i]));
  }
  return absl::OkStatus();
}

Status ChunkedSource::Merge(ParsedChunk& parsed, const Chunk& chunk, Batch* batch) {
  if (chunk.file_index != merge_file_) {
    merge_file_ = chunk.file_index;
    line_base_ = 0;
  }
  const std::string& path = files_[chunk.file_index];
  auto handle = [&](const RowError& e, int64_t line_base) -> Status {
    if (options_.malformed_policy == MalformedPolicy::kError) {
      const std::string where = e.line >= 0 ? fmt::format("line {}", line_base + e.line + 1)
                                            : fmt::format("byte offset {}", e.byte_offset);
      return absl::DataLossError(fmt::format(
          "{} \"{}\" {}: {}: {}; fix the input or set malformed_policy to MalformedPolicy::kSkip "
          "to skip and count such rows",
          kind_, path, where, MalformedReasonName(e.reason), e.detail));
    }
    counts_[static_cast<int>(e.reason)].fetch_add(1);
    if (!warned_.exchange(true)) {
      const std::string where = e.line >= 0 ? fmt::format("line {}", line_base + e.line + 1)
                                            : fmt::format("byte offset {}", e.byte_offset);
      LogWarning(
          "{} \"{}\" {}: skipping malformed input ({}: {}); further skips are counted silently, "
          "see Dataset::malformed_counts()",
          kind_, path, where, MalformedReasonName(e.reason), e.detail);
    }
    return absl::OkStatus();
  };
  for (const RowError& e : parsed.errors) RECSDK_RETURN_IF_ERROR(handle(e, line_base_));
  line_base_ += parsed.lines;
  for (const RowError& e : chunk.reader_errors) RECSDK_RETURN_IF_ERROR(handle(e, line_base_));
  line_base_ += chunk.reader_lines;
  *batch = std::move(parsed.batch);
  return absl::OkStatus();
}

StatusOr<bool> ChunkedSource::GetNext(Batch* batch) {
  return CatchExceptions(kind_ + " reader", [&] { return GetNextUnguarded(batch); });
}

StatusOr<bool> ChunkedSource::GetNextUnguarded(Batch* batch) {
  for (;;) {
    if (ready_.empty()) {
      if (exhausted_) return false;
      RECSDK_RETURN_IF_ERROR(FillQueue());
      continue;
    }
    auto [chunk, parsed] = std::move(ready_.front());
    ready_.pop_front();
    Batch out;
    RECSDK_RETURN_IF_ERROR(Merge(parsed, chunk, &out));
    if (out.num_rows() > 0) {
      *batch = std::move(out);
      return true;
    }
  }
}

// Strict UTF-8 validation with an ASCII fast path of 8 bytes at a time.
bool IsValidUtf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  const auto* end = p + n;
  while (p < end) {
    if (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        p += 8;
        continue;
      }
    }
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p < len) return false;
    for (int i = 1; i < len; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    p += len;
  }
  return true;
}

void TrimRows(Batch* batch, int64_t rows) {
  if (rows >= batch->num_rows()) return;
  StatusOr<Batch> kept = batch->Slice(0, std::max<int64_t>(rows, 0));
  if (kept.ok()) *batch = *std::move(kept);  // always: 0 <= rows < num_rows here
}

}  // namespace recsdk::internal
