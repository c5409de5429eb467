// chunked_source.h: the engine under the file sources. A source reads its files in order, one
// chunk at a time (serial: text cut at line boundaries, whole TFRecord records, whole binary
// blocks), parses up to 2 * num_parse_threads chunks in parallel on a oneTBB arena, and yields
// their rows in file order, so output is deterministic whatever the thread count and memory is
// bounded by the chunks in flight. Malformed rows found by the reader or the parser are handled
// here, by the policy: an error naming file, line or byte offset and reason, or a skip counted per
// reason with one warning per source.
// Threading: GetNext/Reset from one thread; ParseChunk runs concurrently on worker threads and
// must only read the source's immutable configuration. malformed_counts() is thread-safe.
#ifndef RECSDK_PIPELINE_CHUNKED_SOURCE_H_
#define RECSDK_PIPELINE_CHUNKED_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "recsdk/dataset.h"
#include "recsdk/env.h"
#include "tbb/task_arena.h"

namespace recsdk::internal {

// RowError: one malformed row or record. Exactly one of line / byte_offset is >= 0.
struct RowError {
  MalformedReason reason;
  int64_t line = -1;         // 0-based line index within the chunk (text)
  int64_t byte_offset = -1;  // absolute byte offset in the file (binary formats)
  std::string detail;
};

// RecordRef: where one framed record lies in a chunk's data.
struct RecordRef {
  size_t offset;  // in Chunk::data
  size_t size;
  int64_t file_offset;  // of the record's frame in the file
  uint32_t masked_crc;  // as stored after the data
};

struct Chunk {
  int file_index = 0;
  std::string data;
  bool at_eof = false;           // text: the last line may lack its newline
  bool skip_first_line = false;  // text: a header line
  std::vector<RecordRef> records;
  std::vector<RowError> reader_errors;  // found while framing; they follow all parsed rows
  int64_t reader_lines = 0;             // lines the reader consumed without passing them on
};

struct ParsedChunk {
  Batch batch;
  int64_t lines = 0;  // lines in the chunk, for line numbers of later chunks
  std::vector<RowError> errors;
};

// TrimRows: shrinks every column of *batch to its first `rows` rows (zero-copy) after a parser
// dropped malformed rows; `rows` is at most batch->num_rows() (the rows the parser kept).
void TrimRows(Batch* batch, int64_t rows);

// FileCursor: sequential reads of one file with its byte offset. Not thread-safe.
class FileCursor {
 public:
  ~FileCursor();
  // Open: `path` through `env` (never null).
  Status Open(Env* env, const std::string& path);
  void Close();
  // Read reads up to n bytes (fewer only at end of file); returns the count.
  StatusOr<size_t> Read(char* out, size_t n);
  int64_t offset() const { return offset_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<RandomAccessFile> file_;
  int64_t offset_ = 0;
  int64_t size_ = 0;
  std::string path_;
};

class ChunkedSource : public Dataset {
 public:
  ChunkedSource(std::vector<std::string> files, ReaderOptions options, std::string kind);
  ~ChunkedSource() override;

  StatusOr<bool> GetNext(Batch* batch) override;
  Status Reset() override;
  MalformedCounts malformed_counts() const override;

 protected:
  // StartFile is called after `file()` opened file `file_index`; it may read a header. Set
  // *usable = false (and add reader_errors to *chunk) to skip the file.
  virtual Status StartFile(int file_index, Chunk* chunk, bool* usable) = 0;
  // ReadChunk fills *chunk from `file()`; set *file_done when the file is exhausted (the chunk
  // may still carry data). Serial.
  virtual Status ReadChunk(Chunk* chunk, bool* file_done) = 0;
  // ParseChunk: concurrent, const.
  virtual ParsedChunk ParseChunk(const Chunk& chunk) const = 0;

  FileCursor& file() { return file_; }
  const ReaderOptions& options() const { return options_; }
  const std::vector<std::string>& files() const { return files_; }

  // Text helper for ReadChunk: reads the next run of whole lines into chunk->data.
  Status ReadLines(Chunk* chunk, bool* file_done);

 private:
  StatusOr<bool> GetNextUnguarded(Batch* batch);
  Status FillQueue();
  // CutAtLongLine: when chunk->data holds a line longer than max_line_bytes, keeps the lines
  // before it, reports it as a reader error and puts the bytes after it back in front of the
  // carry; returns whether it cut.
  bool CutAtLongLine(Chunk* chunk);
  // Merge applies the policy to one parsed chunk; *batch gets its rows.
  Status Merge(ParsedChunk& parsed, const Chunk& chunk, Batch* batch);

  const std::vector<std::string> files_;
  const ReaderOptions options_;
  const std::string kind_;
  std::unique_ptr<tbb::task_arena> arena_;

  FileCursor file_;
  int next_file_ = 0;
  bool file_open_ = false;
  bool exhausted_ = false;
  std::string carry_;             // text: a partial line from the previous read
  bool discarding_line_ = false;  // text: skipping the rest of an over-long line
  int64_t line_base_ = 0;         // lines of the current merge file before the next chunk
  int merge_file_ = -1;
  std::deque<std::pair<Chunk, ParsedChunk>> ready_;
  std::array<std::atomic<int64_t>, kNumMalformedReasons> counts_{};
  std::atomic<bool> warned_{false};
};

// Text helpers shared by the parsers.
// IsValidUtf8: strict (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(const char* p, size_t n);
// Validates ReaderOptions; `who` names the source in the message.
Status ValidateReaderOptions(const ReaderOptions& options, std::string_view who);

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_CHUNKED_SOURCE_H_
