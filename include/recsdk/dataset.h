// recsdk/dataset.h: datasets that feed training: sources, transforms and the Batch they yield.
//
// A Dataset is a pull-based stream of Batches. Sources (Criteo TSV, schema-driven delimited
// text, TFRecord files of tf.Example, recsdk's own binary record files, in-memory columns, a
// synthetic generator) yield blocks of rows; transforms (Shard, Shuffle, BatchRows, Repeat,
// Map, Prefetch) wrap a dataset and yield a new stream. Every element is a Batch: named columns
// whose dimension 0 is the row. Column names used by the built-in sources:
//   "label"      [B,1] float32
//   "dense"      [B,D] float32 (the dense features, in schema order)
//   <feature>    [B,n] int64   (one column per sparse feature; n ids per sample)
//   "timestamp"  [B]   int64   (seconds; only when the source has one)
//   "mask"       [B]   float32 (only after BatchRows(..., pad_remainder): 1 real row, 0 padding)
// A FeatureSpec's index_key names the column its ids come from, which is where the key stage
// (dedup, admission, key->row resolution) plugs in: it consumes the Batches a dataset yields.
//
// Threading: a Dataset is not thread-safe; one consumer calls GetNext. Sources parse on oneTBB
// threads internally and Prefetch runs its input on a background thread; both are invisible to
// the caller and stop cleanly when the dataset is destroyed. malformed_counts() may be read from
// any thread.
#ifndef RECSDK_DATASET_H_
#define RECSDK_DATASET_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "recsdk/feature_spec.h"
#include "recsdk/status.h"
#include "recsdk/tensor.h"

namespace recsdk {

class Env;  // recsdk/env.h

// ---------------------------------------------------------------------------------------------
// Batch

// Batch: named columns sharing dimension 0. Copying is cheap (tensors share buffers).
class Batch {
 public:
  Batch() = default;

  // num_rows: dimension 0 of the columns (0 for an empty batch).
  int64_t num_rows() const { return num_rows_; }
  // num_valid: the rows that hold real data; num_rows() - num_valid() trailing rows are padding
  // (only after BatchRows(..., pad_remainder = true)). Results for padded rows must be dropped.
  int64_t num_valid() const { return num_valid_; }
  // set_num_valid: sets num_valid (a transform that pads rows does).
  void set_num_valid(int64_t n) { num_valid_ = n; }

  // AddColumn appends a column; InvalidArgument when the name exists, the tensor has rank 0 or its
  // dimension 0 differs from the other columns'.
  [[nodiscard]] Status AddColumn(std::string name, Tensor tensor);
  // SetColumn replaces (or adds) a column; same rules as AddColumn.
  [[nodiscard]] Status SetColumn(std::string_view name, Tensor tensor);
  // column: the column's tensor, or nullptr. O(columns).
  const Tensor* column(std::string_view name) const;
  // Column: like column() but NotFound naming the column and the ones that exist.
  StatusOr<Tensor> Column(std::string_view name) const;
  // has_column: the batch has a column of that name. O(columns).
  bool has_column(std::string_view name) const { return column(name) != nullptr; }
  // columns: every column, (name, tensor), in the order they were added.
  const std::vector<std::pair<std::string, Tensor>>& columns() const { return columns_; }
  // mask: the "mask" column or nullptr when the batch was not padded.
  const Tensor* mask() const { return column("mask"); }

  // Slice shares rows [begin, end) of every column (zero-copy); num_valid is clipped.
  // InvalidArgument naming the range when it is not inside [0, num_rows()].
  StatusOr<Batch> Slice(int64_t begin, int64_t end) const;
  // DebugString: "Batch(rows=..., valid=..., name=tensor summary, ...)", for messages.
  std::string DebugString() const;

 private:
  std::vector<std::pair<std::string, Tensor>> columns_;
  int64_t num_rows_ = 0;
  int64_t num_valid_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Malformed input

// MalformedPolicy: what a source does with a malformed row or record.
enum class MalformedPolicy {
  // kError: GetNext returns DataLoss/InvalidArgument naming the file, the line (text) or record
  // byte offset (binary formats) and the reason. The default.
  kError = 0,
  // kSkip: drop the row, count it per reason (malformed_counts()), warn once per source.
  kSkip = 1,
};

// MalformedReason: why a row or record was rejected. Values are stable (they index counters).
enum class MalformedReason {
  kWrongColumnCount = 0,
  kBadNumber = 1,
  kBadHex = 2,
  kTruncated = 3,  // a line cut short at end of file, or a record/block cut short
  kInvalidUtf8 = 4,
  kCrcMismatch = 5,
  kBadProtobuf = 6,
  kMissingFeature = 7,   // a tf.Example lacks a required feature
  kWrongValueCount = 8,  // more values than the schema's width, or a dense width mismatch
  kBadHeader = 9,        // a binary record file with a bad magic, version or schema
};
// kNumMalformedReasons: the number of MalformedReason values. MalformedReasonName: a reason in
// words ("wrong column count", "bad number", ...).
inline constexpr int kNumMalformedReasons = 10;
std::string_view MalformedReasonName(MalformedReason reason);

// MalformedCounts: rows/records skipped under MalformedPolicy::kSkip, per reason.
struct MalformedCounts {
  // by_reason: the count of each reason, indexed by its value. count: the count of one reason.
  // total: the sum. DebugString: "reason: count" for each reason counted, "none" when none is.
  std::array<int64_t, kNumMalformedReasons> by_reason{};
  int64_t count(MalformedReason r) const { return by_reason[static_cast<int>(r)]; }
  int64_t total() const;
  std::string DebugString() const;
};

// ---------------------------------------------------------------------------------------------
// Dataset

// Dataset: a pull-based stream of Batches (see the file comment). Not copyable. Threading: one
// consumer at a time; malformed_counts() may be read from any thread.
class Dataset {
 public:
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // GetNext: the next Batch into *batch and true, or false at the end of the stream. An error
  // (bad input under kError, I/O) is returned once; the dataset should then be discarded.
  virtual StatusOr<bool> GetNext(Batch* batch) = 0;
  // Reset rewinds to the start of the stream (Repeat calls it between epochs). Shuffle draws a
  // new order per epoch unless told otherwise.
  [[nodiscard]] virtual Status Reset() = 0;
  // malformed_counts: what the source(s) under this dataset skipped so far. Thread-safe.
  virtual MalformedCounts malformed_counts() const = 0;
  // SkipBatches: moves past the next `n` (>= 0) batches as if GetNext had returned them: a
  // checkpoint records how many batches training consumed, and a resumed run skips them (see
  // KeyStageOptions::start_batch). Returns how many were skipped (fewer at the end of the
  // stream). The default reads and discards them, which lands exactly where an uninterrupted run
  // would be for every deterministic pipeline (shuffles with a seed included), at the cost of
  // reading them. Sources that can seek override it in O(1): InMemoryDataset,
  // InMemoryDatasetFromBatches and SyntheticDataset. InvalidArgument for n < 0.
  virtual StatusOr<int64_t> SkipBatches(int64_t n);

 protected:
  Dataset() = default;
};

// ---------------------------------------------------------------------------------------------
// Sources

// ExpandFilePatterns turns paths, directories (their regular files) and glob patterns into one
// sorted, de-duplicated list, so every run and every rank sees the same order. NotFound when a
// pattern matches nothing. env: the file system to list (null: Env::Default()).
StatusOr<std::vector<std::string>> ExpandFilePatterns(const std::vector<std::string>& patterns,
                                                      Env* env = nullptr);

// ReaderOptions: shared by the file sources.
struct ReaderOptions {
  // malformed_policy: see MalformedPolicy. Default kError.
  MalformedPolicy malformed_policy = MalformedPolicy::kError;
  // num_parse_threads: oneTBB threads parsing chunks in parallel; in [1, 1024]. Default 1.
  int num_parse_threads = 1;
  // chunk_bytes: bytes read per chunk (text: cut at a line boundary; TFRecord: whole records);
  // in [4096, 1 GiB]. Default 1 MiB. At most 2 * num_parse_threads chunks are in memory at once.
  int64_t chunk_bytes = 1 << 20;
  // max_line_bytes: every line (text sources) longer than this, newline excluded, is an error
  // (kError) or skipped and counted as kTruncated (kSkip). In [16, 1 GiB]. Default 16 MiB.
  int64_t max_line_bytes = 16 << 20;
  // env: the file system the files are listed and read through (tests inject faults; a remote
  // file system plugs in). Not owned; must outlive the source. Default null: Env::Default().
  Env* env = nullptr;
};

// DenseTransform: applied to the integer features of Criteo data.
enum class DenseTransform {
  kNone = 0,
  // kLog1p: x -> log(1 + max(x, 0)). Negative counts (a few Criteo rows have -1, -2, ...)
  // clamp to 0 first, as the usual Criteo preprocessing (DLRM) does.
  kLog1p = 1,
};

// CriteoOptions: the Criteo display-advertising TSV format: label, 13 integer features, 26
// categorical features as hex strings, tab-separated, any field but the label may be empty.
struct CriteoOptions {
  // reader: the file reading options. dense_transform: applied to the 13 integer features. Default
  // kNone.
  ReaderOptions reader;
  DenseTransform dense_transform = DenseTransform::kNone;
  // default_dense: the value of an empty integer field (before the transform). Default 0.
  float default_dense = 0.0f;
  // default_id: the id of an empty categorical field. Default 0.
  int64_t default_id = 0;
  // id_modulus: when > 0, ids are (hex value mod id_modulus), e.g. to bound vocabularies.
  int64_t id_modulus = 0;
  // sparse_prefix: the sparse columns are named <prefix>1 .. <prefix>26. Default "C".
  std::string sparse_prefix = "C";
};
// CriteoDataset yields label [B,1], dense [B,13] and C1..C26 [B,1] int64, blocks of at most one
// chunk's rows. Hex values are read as unsigned 64-bit and stored bit-for-bit in int64.
StatusOr<std::unique_ptr<Dataset>> CriteoDataset(const std::vector<std::string>& files,
                                                 const CriteoOptions& options = {});

// ColumnKind: the role of one column in a schema.
enum class ColumnKind { kLabel = 0, kDense = 1, kSparse = 2, kTimestamp = 3, kSkip = 4 };

// SchemaColumn: one column of a delimited file or one feature of a tf.Example.
struct SchemaColumn {
  // name: the Batch column (kSparse, kTimestamp) or the tf.Example feature it comes from. kind: the
  // column's role. Default kSkip.
  std::string name;
  ColumnKind kind = ColumnKind::kSkip;
  // width: values per sample. kSparse: ids per sample (the Batch column is [B,width]); a field
  // with fewer ids is padded with pad_id, more is malformed (kWrongValueCount). kDense: floats per
  // sample (delimited text: 1). Others: 1.
  int width = 1;
  // hex: kSparse ids written as hexadecimal (delimited text only). Default decimal.
  bool hex = false;
  // required: a tf.Example without this feature is malformed (kMissingFeature); when false the
  // sample gets pad_id / default_value. Delimited text: an empty field is always allowed.
  bool required = true;
  // pad_id: the id filling missing sparse slots. default_value: empty dense/label fields.
  int64_t pad_id = 0;
  float default_value = 0.0f;
};

// DelimitedOptions: a generic delimited text reader driven by a schema (one SchemaColumn per
// field, in order; the field count must match).
struct DelimitedOptions {
  // reader: the file reading options. schema: one SchemaColumn per field, in order. delimiter:
  // between fields. Default ','.
  ReaderOptions reader;
  std::vector<SchemaColumn> schema;
  char delimiter = ',';
  // value_delimiter: separates the ids of a multi-valued sparse field ("3|17|9").
  char value_delimiter = '|';
  // skip_header: the first line of every file is a header.
  bool skip_header = false;
};
// DelimitedDataset: label [B,1] (when the schema has one), dense [B,D] (all kDense columns in
// order), one [B,width] int64 column per kSparse column, timestamp [B] int64 (when present).
// Text must be valid UTF-8 (checked, kInvalidUtf8).
StatusOr<std::unique_ptr<Dataset>> DelimitedDataset(const std::vector<std::string>& files,
                                                    const DelimitedOptions& options);

// TfRecordOptions: TFRecord files of tf.Example protos. Each SchemaColumn names a feature of the
// Example: kLabel (float_list or int64_list, one value), kDense (float_list or int64_list of
// `width` values), kSparse (int64_list of up to `width` ids; a bytes_list is hashed to int64
// with a stable 64-bit fingerprint), kTimestamp (int64_list, one value). kSkip is ignored.
// Record framing is checked with CRC32C; the protobuf is decoded without protobuf/TensorFlow.
//
// line_per_sample (the DCNv2 guide's option): each record packs this many samples, and every
// feature's list holds that many times its per-sample values, sample after sample (label: n
// values, dense: n x width, sparse: exactly n x width ids, timestamp: n). The reader yields n rows
// per record; a record whose list has another count is malformed (kWrongValueCount), whole.
struct TfRecordOptions {
  // reader: the file reading options. schema: the features to read (see above).
  ReaderOptions reader;
  std::vector<SchemaColumn> schema;
  // line_per_sample: samples per record, in [1, kMaxLinePerSample]. Default 1: one sample per
  // record, and a sparse feature may hold fewer than `width` ids (padded with pad_id).
  int64_t line_per_sample = 1;
  // kMaxLinePerSample: the largest line_per_sample accepted.
  static constexpr int64_t kMaxLinePerSample = 1 << 16;
};
// TfRecordDataset: a column per schema entry, as DelimitedDataset's; blocks of at most one chunk's
// records.
StatusOr<std::unique_ptr<Dataset>> TfRecordDataset(const std::vector<std::string>& files,
                                                   const TfRecordOptions& options);

// RecordFileDataset reads recsdk binary record files (docs/binary_format.md), the fastest source
// for repeated epochs. Every file must carry the same columns. Yields one Batch per block.
StatusOr<std::unique_ptr<Dataset>> RecordFileDataset(const std::vector<std::string>& files,
                                                     const ReaderOptions& options = {});

// ConvertToRecordFile drains `source` (from its current position) into a binary record file at
// `path`, `block_rows` rows per checksummed block. Returns the number of rows written. Columns
// must be float32, int64, int32 or uint8. The file is written as `path`.tmp, synced and renamed:
// on any failure (the source's error, a full disk, a short write, a failed fsync) the previous
// file at `path` is left as it was and the temporary is deleted; the error names `path` and the
// cause (ResourceExhausted for a full disk). `env`: the file system (tests inject faults through
// it); null: the process's POSIX one.
StatusOr<int64_t> ConvertToRecordFile(Dataset& source, const std::string& path,
                                      int64_t block_rows = 8192, Env* env = nullptr);

// InMemoryColumn: one column of an in-memory dataset: `values` holds rows * width values.
struct InMemoryColumn {
  // name: the Batch column. values: rows * width floats or int64s, row by row.
  std::string name;
  std::variant<std::vector<float>, std::vector<int64_t>> values;
  // width: values per row; the Batch column is [B,width], or [B] when width is 0 (a scalar per
  // row, like "timestamp").
  int64_t width = 1;
};
// InMemoryDataset yields the rows in order in Batches of at most block_rows (>= 1). Columns
// must agree on the row count (InvalidArgument otherwise).
StatusOr<std::unique_ptr<Dataset>> InMemoryDataset(std::vector<InMemoryColumn> columns,
                                                   int64_t block_rows = 1024);
// InMemoryDatasetFromBatches yields the given batches in order, as they are (num_valid and any
// "mask" column included; tensors are shared, not copied); Reset starts again from the first.
// Every batch must have batch 0's columns in the same order, each with the same dtype and the same
// dimensions past the first (InvalidArgument naming the batch and the column otherwise); row counts
// may differ.
StatusOr<std::unique_ptr<Dataset>> InMemoryDatasetFromBatches(std::vector<Batch> batches);

// SyntheticOptions: a reproducible click-through dataset with a planted logistic signal.
// Sample r (0-based) depends only on (seed, r): ids of feature f follow a Zipf law of exponent
// zipf_exponent over [0, vocabulary_sizes[f]) (id 0 most frequent); dense values are uniform in
// [0,1); label ~ Bernoulli(sigmoid(bias + sum_f w_f(id_f) + sum_j v_j * dense_j)) where the
// per-id weights w_f(id) ~ N(0, id_weight_scale^2) and v_j ~ N(0, dense_weight_scale^2) are
// fixed by the seed. TrueLogit() exposes that function so tests can compare a model with it.
struct SyntheticOptions {
  int64_t num_rows = 100000;                                                 // >= 0
  std::vector<int64_t> vocabulary_sizes = std::vector<int64_t>(26, 100000);  // each >= 1
  int ids_per_feature = 1;                                                   // >= 1
  int num_dense = 13;                                                        // >= 0
  double zipf_exponent = 1.05;                                               // > 0
  // id_weight_scale, dense_weight_scale, bias: the planted model's weight scales and bias (above).
  // Defaults 1, 0.5 and -1.
  float id_weight_scale = 1.0f;
  float dense_weight_scale = 0.5f;
  float bias = -1.0f;
  // with_timestamps: add "timestamp" [B] int64: start_timestamp + r * timestamp_step.
  bool with_timestamps = false;
  // start_timestamp, timestamp_step: the first row's timestamp (seconds) and the step per row.
  // Defaults 1700000000 and 1.
  int64_t start_timestamp = 1700000000;
  int64_t timestamp_step = 1;
  // seed: fixes the planted weights and every sample. Default 1.
  uint64_t seed = 1;
  int64_t block_rows = 4096;  // >= 1
  // sparse_prefix: sparse columns are <prefix>1 .. <prefix>F.
  std::string sparse_prefix = "C";
};
// SyntheticDataset: label [B,1], dense [B,num_dense], <prefix>1.. [B,ids_per_feature] int64 (and
// timestamp [B]), in blocks of block_rows. InvalidArgument naming an option that breaks its rule.
StatusOr<std::unique_ptr<Dataset>> SyntheticDataset(const SyntheticOptions& options);
// SyntheticTrueLogit: the planted logit of a row of a synthetic dataset with these options:
// ids[f * ids_per_feature + k] and dense[j]. Pure function; thread-safe.
double SyntheticTrueLogit(const SyntheticOptions& options, absl::Span<const int64_t> ids,
                          absl::Span<const float> dense);

// ---------------------------------------------------------------------------------------------
// Transforms. Each takes ownership of its input.

// Shard keeps rows i with i % rank_size == rank_id (i counts rows from the start of each epoch),
// so ranks see disjoint, deterministic parts. 0 <= rank_id < rank_size.
StatusOr<std::unique_ptr<Dataset>> Shard(std::unique_ptr<Dataset> input, int64_t rank_size,
                                         int64_t rank_id);

// ShuffleOptions: reshuffle_each_iteration draws a new order each epoch (seed mixed with the
// epoch number); otherwise every epoch repeats the first one's order.
struct ShuffleOptions {
  // reshuffle_each_iteration: see above. Default true.
  bool reshuffle_each_iteration = true;
  // output_rows: rows per yielded Batch. Default 1024.
  int64_t output_rows = 1024;
};
// Shuffle: a uniform reservoir of buffer_size rows (>= 1), as tf.data's shuffle: each incoming
// row replaces a random buffered row, which is emitted. Same seed, same data -> same order.
// Memory: buffer_size rows.
StatusOr<std::unique_ptr<Dataset>> Shuffle(std::unique_ptr<Dataset> input, int64_t buffer_size,
                                           uint64_t seed, const ShuffleOptions& options = {});

// BatchOptions for BatchRows().
struct BatchOptions {
  // drop_remainder: drop a last batch smaller than batch_size (static shapes for training).
  bool drop_remainder = false;
  // pad_remainder: pad a last smaller batch to batch_size with zero rows, and add a "mask" [B]
  // float32 column (1 real, 0 padding) to every batch, num_valid() counting the real rows, so
  // evaluation/prediction results can be trimmed back. Exclusive with drop_remainder.
  bool pad_remainder = false;
};
// BatchRows is the spec's Batch(batch_size, drop_remainder) (named apart from the Batch class):
// it regroups rows into Batches of exactly batch_size rows, except the last one (see
// BatchOptions). batch_size is in [1, 2^24] (16777216; InvalidArgument outside): a batch is held in
// memory whole. Zero-copy when a batch lies inside one input block.
StatusOr<std::unique_ptr<Dataset>> BatchRows(std::unique_ptr<Dataset> input, int64_t batch_size,
                                             const BatchOptions& options = {});

// Repeat: the input `epochs` times (>= 1), or forever with -1. Stops when an epoch is empty.
StatusOr<std::unique_ptr<Dataset>> Repeat(std::unique_ptr<Dataset> input, int64_t epochs);

// MapFn: transforms one Batch; an error stops the stream.
using MapFn = std::function<StatusOr<Batch>(Batch)>;
// Map: the input with `fn` applied to each Batch.
StatusOr<std::unique_ptr<Dataset>> Map(std::unique_ptr<Dataset> input, MapFn fn);

// MergeFeatureFields: for every spec with `fields` (FeatureSpec), adds to each batch the column
// spec.EffectiveIndexKey(): the fields' int64 ids side by side ([B, sum of the fields' widths]),
// each moved into its field's key range (spec.field_keys). The field columns stay. Specs without
// fields pass through; the specs are validated first (ValidateFeatureSpecs). Per batch:
// NotFound naming a missing field column and the batch's columns, InvalidArgument for a field
// that is not int64 [B] or [B, n], a merged column the batch already has, or (kOffset) an id
// outside its field's range, naming the feature, field, row, id and range.
StatusOr<std::unique_ptr<Dataset>> MergeFeatureFields(std::unique_ptr<Dataset> input,
                                                      std::vector<FeatureSpec> specs);

// Prefetch runs the input on a background thread, at most `buffer_batches` (>= 1) batches ahead.
// A slow consumer never makes memory grow; destroying the dataset stops the thread.
StatusOr<std::unique_ptr<Dataset>> Prefetch(std::unique_ptr<Dataset> input, int64_t buffer_batches);

}  // namespace recsdk

#endif  // RECSDK_DATASET_H_
