// recsdk/table.h: sparse embedding tables (the spec's create_table), the layer below the graph.
//
// A table maps int64 (or int32) feature ids to rows of float32 values: the embedding of `dim`
// floats followed by the sparse optimizer's slots. Rows live in one slab of fixed-size rows with a
// free list and never move once allocated; a fast open-addressing index maps keys to row ids.
// The graph ops built on top (create_table, sparse_lookup, the sparse optimizers' apply op) use
// this API in the order: dedup the batch's keys -> Resolve -> Gather* (forward), sum the
// gradients per unique key -> ApplyGradients (backward); the dedup and the sums are internal
// (src/table/dedup.h).
//
// Threading: the batch methods parallelise internally with oneTBB. Methods that change which
// keys the table holds (Resolve in training mode, Evict*, ImportNpy, LoadSnapshot) need exclusive
// access to the table. Resolve in evaluation mode, FindRow and ReadRow read the key index: they
// may overlap each other but none of those (the graph ops take a reader-writer lock per table
// and batch for this). Gather* and ApplyGradients/ApplyGradientsByAddress only touch the rows
// they are given, so they may run concurrently with each other and with a Resolve of a later
// batch as long as the row sets they write do not overlap and no eviction frees a row in flight.
#ifndef RECSDK_TABLE_H_
#define RECSDK_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "recsdk/dtype.h"
#include "recsdk/initializers.h"
#include "recsdk/sparse_optimizers.h"
#include "recsdk/status.h"

namespace recsdk {

// TableConfig: the parameters of create_table, with the spec's names.
struct TableConfig {
  // name: unique name of the table; non-empty, [A-Za-z0-9_./-] only (it names files).
  std::string name;
  // key_dtype: DType::kInt64 (default) or DType::kInt32. Keys are passed as int64 either way; an
  // int32 table rejects keys outside the int32 range.
  DType key_dtype = DType::kInt64;
  // dim: floats per embedding; 1..8192. No default (0 is rejected).
  int dim = 0;
  // value_dtype: DType::kFloat32, the only supported value type.
  DType value_dtype = DType::kFloat32;
  // initializer (the spec's emb_initializer): distribution of a new key's embedding. Each key's
  // initial row is drawn from a Philox stream keyed by (seed, key), so it does not depend on
  // insertion order, batch or thread count. A seed of 0 derives one from `name`. Glorot kinds
  // use fan_in = fan_out = dim. Default TruncatedNormal(0, 0.05).
  Initializer initializer = Initializer::TruncatedNormal(0.0, 0.05);
  // device_vocabulary_size: rows on the device tier; > 0. No default. With a host tier the
  // device is a cache of it and must hold the unique keys of two consecutive batches (a Resolve
  // that needs more is FailedPrecondition naming the table, the number and this setting).
  int64_t device_vocabulary_size = 0;
  // host_vocabulary_size: rows in host memory; >= 0, default 0 (device only). With a host tier a
  // key's row lives in exactly one tier; Resolve moves the batch's rows to the device (the
  // coldest device rows not used by this or the previous batch go down) and returns device row
  // ids, so the graph ops see only device rows. The spec's key work must then run in the key
  // stage (modify_graph or FeatureSpec mode); every table of a session uses a host tier or none
  // does (both checked by KeyStage::Start). Not with use_dynamic_expansion. docs/tiers.md.
  int64_t host_vocabulary_size = 0;
  // ssd_vocabulary_size: rows on SSD; >= 0, default 0. Needs host_vocabulary_size > 0 and
  // ssd_data_path. The host tier's coldest rows go down to SSD when it fills.
  // capacity() = device + host + ssd vocabulary sizes.
  int64_t ssd_vocabulary_size = 0;
  // ssd_data_path: existing directories for the SSD tier, used in order as they fill; required
  // iff ssd_vocabulary_size > 0. Files "<table>.<n>.rows" (a '/' in the name becomes '_');
  // creating the table replaces those an earlier table of the same name left there, so two live
  // tables of one name must not share a folder.
  std::vector<std::string> ssd_data_path;
  // is_save: whether checkpoints (Saver, checkpoint.h) include this table. Default true.
  bool is_save = true;
  // is_dp: data-parallel table: on several ranks every rank holds the whole table (a replica) and
  // the ranks exchange only keys and gradients (gathered, summed in rank order, averaged), instead
  // of the default: sharded by key, rows sent to and from their owners. For small tables read by
  // every rank. Not with a by-address optimizer, use_dynamic_expansion or the key stage (each
  // refused with the reason). Default false. docs/distributed.md.
  bool is_dp = false;
  // all2all_gradients_op: how a key's gradients from the ranks of a distributed job combine at
  // its owner (sharded tables) or on every replica (is_dp): "sum" (default: the sum of the
  // ranks' gradients, N times one process's on the global batch when each rank's loss is the
  // mean over its share) or "sum_gradients_and_div_by_ranksize" (that sum divided by the ranks:
  // N ranks train the table as one process on the global batch). No effect in one process.
  // docs/distributed.md.
  std::string all2all_gradients_op = "sum";
  // padding_keys: keys that always read as zeros, never get a row and never train. Default none.
  std::vector<int64_t> padding_keys;
  // padding_keys_mask: whether sparse_lookup also produces a [batch, n] float32 mask (0 for
  // padding keys, 1 otherwise), read with PaddingMask(lookup_result) (embedding.h). Default false.
  bool padding_keys_mask = false;
  // serving_default_value: what every element of a not-admitted (or, in evaluation, unknown) key
  // reads as. Finite; default 0.
  float serving_default_value = 0.0f;
  // use_dynamic_expansion: the table grows as keys arrive instead of failing once the vocabulary
  // sizes are used up: it reserves address space for far more rows (see capacity()) and commits
  // memory as rows are first used. Needs a by-address optimizer (SGDByAddr, AdagradByAddress,
  // LazyAdamByAddress), as in the spec; device-only (host_vocabulary_size 0) and without
  // eviction (eviction_threshold -1), as the spec says. Default false, but create_table turns it
  // on for every table it creates while init(InitOptions::use_dynamic_expansion = true) is in
  // effect (the spec's job-wide switch); a table that cannot have it is then an InvalidArgument
  // naming init's option. EmbeddingTable::Create (this layer) takes the field as given.
  bool use_dynamic_expansion = false;
  // access_threshold: admission. A key's count grows by faae_coefficient x its occurrences in each
  // training batch; it gets a row once the count reaches the threshold. -1 (default) disables;
  // below -1 is an error. FeatureSpecs and sparse_lookup's access_and_evict_config may set it
  // (and eviction_threshold) for a table created with -1; a different value is an error.
  int64_t access_threshold = -1;
  // eviction_threshold: seconds of data time. A key whose last access is at least this much older
  // than the latest timestamp seen is evicted (row and admission count). -1 (default) disables;
  // below -1 is an error; needs access_threshold >= 0 (as in the spec).
  int64_t eviction_threshold = -1;
  // faae_coefficient: weight of one occurrence in the admission count; finite and > 0. Default 1.
  // Lookups of FeatureSpecs weigh each feature's occurrences by the spec's faae_coefficient as
  // well; this one multiplies on top.
  float faae_coefficient = 1.0f;

  // Validate: InvalidArgument naming the table, the option, its value, the rule and the fix.
  Status Validate() const;
};

// LookupMode: training lookups count admissions, insert admitted keys and refresh timestamps;
// evaluation lookups only read.
enum class LookupMode { kTrain, kEval };

// Combiner of pooled lookups over the n ids of a sample. kMean and kSqrtn divide by the number
// (or its square root) of the sample's non-padding ids; a sample of only padding reads zeros.
enum class Combiner { kSum, kMean, kSqrtn };

// RowBufferAllocator: the allocator of a snapshot's rows (RowBuffer). Value-initialisation
// (vector::resize) leaves the floats uninitialised: snapshots resize their row buffers and
// overwrite every element at once, so the zero fill would be a wasted pass over hundreds of
// megabytes. Large buffers (1 MiB and up) are their own mappings with transparent huge pages, so
// filling hundreds of megabytes takes hundreds of page faults, not hundreds of thousands, and a
// restore can move a buffer's pages into a table instead of copying them (AdoptSnapshot).
// allocate throws std::bad_alloc when memory runs out.
struct RowBufferAllocator : std::allocator<float> {
  // value_type, rebind: the allocator interface; it allocates floats only.
  using value_type = float;
  template <typename U>
  struct rebind {
    static_assert(std::is_same_v<U, float>, "RowBufferAllocator allocates floats only");
    // other: this allocator.
    using other = RowBufferAllocator;
  };
  // allocate, deallocate: as std::allocator's. construct: with no arguments, leaves the float
  // uninitialised (the point of this allocator); with arguments, constructs it from them.
  float* allocate(size_t n);
  void deallocate(float* p, size_t n) noexcept;
  void construct(float* p) noexcept { ::new (static_cast<void*>(p)) float; }
  template <typename... Args>
  void construct(float* p, Args&&... args) {
    ::new (static_cast<void*>(p)) float(std::forward<Args>(args)...);
  }
};
// RowBuffer: the rows of a snapshot, [rows, dim + slots] floats.
using RowBuffer = std::vector<float, RowBufferAllocator>;

// TableSnapshot: a table's rows at one moment (EmbeddingTable::Snapshot), in key order.
struct TableSnapshot {
  // table_name, dim, num_slots, optimizer, key_dtype, is_delta: identity of the table the rows
  // came from; LoadSnapshot checks them against its own.
  std::string table_name;
  int dim = 0;
  int num_slots = 0;
  SparseOptimizerKind optimizer = SparseOptimizerKind::kSGD;
  DType key_dtype = DType::kInt64;
  bool is_delta = false;
  // keys: sorted, unique. rows: [keys.size(), dim + num_slots] embedding then slots.
  // timestamps: [keys.size()] last access per key, or empty when the table does not evict.
  std::vector<int64_t> keys;
  RowBuffer rows;
  std::vector<int64_t> timestamps;
  // removed_keys: deltas only: keys evicted since the previous snapshot (sorted, unique).
  std::vector<int64_t> removed_keys;
  // pending_keys, pending_counts, pending_timestamps: keys counting toward admission without a
  // row yet: key, count, latest timestamp (sorted).
  std::vector<int64_t> pending_keys;
  std::vector<float> pending_counts;
  std::vector<int64_t> pending_timestamps;
  // data_time: the table's data time (INT64_MIN before any timestamp).
  int64_t data_time = 0;
  // access_threshold: the admission threshold at the snapshot (set_threshold may have changed
  // it since creation); -1 for a table without admission.
  int64_t access_threshold = -1;
  // storage_order: false (Snapshot): keys sorted. true (SnapshotToSink of a tiered table, and a
  // streamed restore of its checkpoint): keys unique, in the order the tiers stored their rows
  // (device, host, then SSD slots in file order), timestamps and rows in the same order, so the
  // SSD files are read sequentially. LoadSnapshot takes either.
  bool storage_order = false;
  // row_source: set only by a streamed restore (a checkpoint's rows file, already verified):
  // rows then stays empty and LoadSnapshot / AdoptSnapshot read the rows of a kFull snapshot in
  // pieces, row_source(first, count, out) filling rows [first, first + count) of the keys' order
  // into `out`, so a tiered table larger than memory restores with bounded memory.
  std::function<Status(size_t first, size_t count, float* out)> row_source;
  // verify_rows: set with a row_source whose rows were not verified yet (a one-pass restore): the
  // source checks them as it reads them, in order, and fails at the first bad piece. LoadSnapshot
  // into an empty table then loads in one pass and, on a failure, empties the table again (its
  // SSD slots freed); into a table that holds rows it calls verify_rows (a whole read) first, so
  // that a failure changes nothing.
  std::function<Status()> verify_rows;
};

// SsdSegmentRefs: the SSD-resident rows of a full SnapshotToSink by reference (a checkpoint that
// hard-links the SSD tier's segment files instead of copying their rows; docs/tiers.md).
struct SsdSegmentRefs {
  // files: the segment files, in slot order (file i holds slots [i * rows_per_file, ...)).
  std::vector<std::string> files;
  // file_name: the files' name stem ("<file_name>.<index>.rows").
  std::string file_name;
  // rows_per_file, capacity: the store's layout (slots per file, slots in all).
  uint32_t rows_per_file = 0;
  uint32_t capacity = 0;
  // record_floats: floats per record (the row, its optimizer slots and 2 floats of use history).
  int record_floats = 0;
  // generation: the hold this snapshot takes; a checkpoint of an older generation is refused
  // once a later one was committed (its slots may have been reused).
  uint64_t generation = 0;
  // slots: the slot of each SSD-resident key, in the order of the snapshot's keys after those
  // whose rows go through SnapshotRowSink::Rows (which are the first keys).
  std::vector<uint32_t> slots;
};

// SnapshotRowSink: receives the rows of EmbeddingTable::SnapshotToSink in pieces, so a
// synchronous checkpoint writes them straight from the table through one small buffer instead of
// copying every row into a snapshot first (twice the table's memory, and a large fresh buffer
// whose pages the kernel must zero before the copy).
class SnapshotRowSink {
 public:
  virtual ~SnapshotRowSink() = default;
  // Begin: the snapshot without its rows (every other field filled, rows empty), before any
  // Rows call. The reference is valid only during the call.
  [[nodiscard]] virtual Status Begin(const TableSnapshot& snapshot) = 0;
  // Rows: the next rows in the order of the snapshot's keys, [rows.size() / (dim + num_slots), dim
  // + num_slots]; the span is valid only during the call.
  [[nodiscard]] virtual Status Rows(absl::Span<const float> rows) = 0;
  // TakeSsdSegments: offered, before Begin, by a full snapshot of a table with SSD-resident rows.
  // Return true to keep those rows where they are (the sink then links `refs.files` and records
  // the slots; Rows gets only the other rows, the first keys); false (the default) to get every
  // row through Rows. A table whose segments were taken keeps their slots unchanged until
  // SettleSsdHold(true) of a later snapshot, so the sink's owner must call SettleSsdHold once
  // its checkpoint is committed (true) or has failed (false).
  [[nodiscard]] virtual StatusOr<bool> TakeSsdSegments(const SsdSegmentRefs& refs) {
    (void)refs;
    return false;
  }
};

// EmbeddingTable: one sparse table. Create with EmbeddingTable::Create.
class EmbeddingTable {
 public:
  // kPaddingRow, kDefaultRow: row ids a lookup may return besides real rows. Both read without
  // touching memory and never train: kPaddingRow reads zeros, kDefaultRow reads
  // serving_default_value.
  static constexpr uint32_t kPaddingRow = 0xFFFFFFFFu;
  static constexpr uint32_t kDefaultRow = 0xFFFFFFFEu;
  // kMaxRows: the most rows a table can hold (row ids are uint32 below the sentinels).
  static constexpr int64_t kMaxRows = 0xFFFFFFFDll;

  // Create: validates both configs (and their combination) and reserves the slab and index.
  // Memory is committed as rows are first used.
  [[nodiscard]] static StatusOr<std::unique_ptr<EmbeddingTable>> Create(
      const TableConfig& config, const SparseOptimizerConfig& optimizer);

  virtual ~EmbeddingTable() = default;
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  // config, optimizer: the table's configs (config's access_threshold follows
  // SetAccessThreshold). name, dim: config().name and config().dim.
  const TableConfig& config() const { return config_; }
  const SparseOptimizerConfig& optimizer() const { return optimizer_; }
  const std::string& name() const { return config_.name; }
  int dim() const { return config_.dim; }
  // num_slots, row_floats: optimizer floats per row, and dim + num_slots.
  int num_slots() const { return num_slots_; }
  int row_floats() const { return config_.dim + num_slots_; }

  // size: keys holding a row. capacity: the most rows the table can hold, the limit past which
  // Resolve and ImportNpy return ResourceExhausted; fixed for the table's life. Without
  // use_dynamic_expansion it is device + host + ssd vocabulary sizes. With it, it is what the
  // address space reserved at creation holds: min(kMaxRows, 2^40 bytes / (4 * row_floats())).
  // Memory is committed as rows are first used, so a dynamically expanding table grows in size()
  // and MemoryBytes(), never in capacity().
  virtual int64_t size() const = 0;
  virtual int64_t capacity() const = 0;
  // MemoryBytes: bytes the table holds now: committed rows, index, timestamps, admission counts,
  // free list. O(1).
  virtual int64_t MemoryBytes() const = 0;
  // data_time: the largest timestamp seen by training lookups (the "now" of eviction);
  // INT64_MIN before any.
  virtual int64_t data_time() const = 0;

  // Resolve: maps each unique key to a row id (rows.size() == unique_keys.size()).
  // counts: occurrences per key in the batch, or empty for one each.
  // timestamps: per key, the latest timestamp of its occurrences, or empty (keys then take the
  // current data_time). In kTrain: admission counts grow, admitted new keys get a row initialised
  // from the initializer, timestamps refresh. Keys not admitted (and in kEval, unknown keys) map
  // to kDefaultRow; padding keys to kPaddingRow. Errors (nothing is changed then):
  // ResourceExhausted when admitted new keys exceed the free rows; InvalidArgument for a key
  // outside an int32 table's range, or when rows (and counts or timestamps, when not empty) do
  // not hold one entry per key. Needs exclusive access in kTrain.
  [[nodiscard]] virtual Status Resolve(absl::Span<const int64_t> unique_keys,
                                       absl::Span<const uint32_t> counts,
                                       absl::Span<const int64_t> timestamps, LookupMode mode,
                                       absl::Span<uint32_t> rows) = 0;

  // The reads and updates below take row ids from Resolve (or sentinels). Each checks its
  // arguments before touching memory and returns InvalidArgument naming the table, with nothing
  // written, when an output or gradient span does not hold exactly the elements named, when a
  // restore index is past unique_rows, or when a row id is not one of the table's rows. The checks
  // are one pass over the 4-byte ids, small beside the 64-byte-plus rows they guard.
  //
  // Gather: out[i, :] = embedding of rows[i] (out is [rows.size(), dim]).
  [[nodiscard]] virtual Status Gather(absl::Span<const uint32_t> rows,
                                      absl::Span<float> out) const = 0;
  // GatherRestored: out[i, :] = embedding of unique_rows[restore_index[i]]: the unpooled lookup
  // result [restore_index.size(), dim] from a dedup'ed batch.
  [[nodiscard]] virtual Status GatherRestored(absl::Span<const uint32_t> unique_rows,
                                              absl::Span<const uint32_t> restore_index,
                                              absl::Span<float> out) const = 0;
  // GatherPooled: out[b, :] = combiner over j < n of the embedding of
  // unique_rows[restore_index[b * n + j]]; restore_index.size() must be batch * n and out
  // [batch, dim].
  [[nodiscard]] virtual Status GatherPooled(absl::Span<const uint32_t> unique_rows,
                                            absl::Span<const uint32_t> restore_index, int64_t batch,
                                            int64_t n, Combiner combiner,
                                            absl::Span<float> out) const = 0;
  // GatherPooledStrided: GatherPooled into rows `out_stride` floats apart: out[b * out_stride + d]
  // for d < dim, leaving the floats between rows untouched, e.g. one table's columns of a
  // concatenated [batch, width] activation (the fused gather + concat). out_stride >= dim, and out
  // must hold at least (batch - 1) * out_stride + dim floats.
  [[nodiscard]] virtual Status GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                                                   absl::Span<const uint32_t> restore_index,
                                                   int64_t batch, int64_t n, Combiner combiner,
                                                   int64_t out_stride,
                                                   absl::Span<float> out) const = 0;
  // PaddingMask: mask[i] = 0 where position i holds a padding key, else 1
  // (mask is [restore_index.size()]).
  [[nodiscard]] virtual Status PaddingMask(absl::Span<const uint32_t> unique_rows,
                                           absl::Span<const uint32_t> restore_index,
                                           absl::Span<float> mask) const = 0;

  // ApplyGradients: one optimizer step on each row: summed_grads is [rows.size(), dim], one
  // aggregated gradient per unique row; step is the 1-based global step (LazyAdam's bias
  // correction). Sentinel rows are skipped. Each row must appear once (rows updated twice in one
  // call race between threads; sum a row's gradients into one first).
  [[nodiscard]] virtual Status ApplyGradients(absl::Span<const uint32_t> rows,
                                              absl::Span<const float> summed_grads,
                                              int64_t step) = 0;
  // RowAddresses: the address of each row's first float (nullptr for sentinels); stable until
  // the row is evicted. With a host tier the rows are device rows, and an address stays valid
  // while the batch whose Resolve returned the row is in flight (the rows of the last two
  // Resolves, or of the key stage's batches not yet consumed, never move). The by-address
  // optimizers and the LOCAL_EMB-style collections use them. InvalidArgument when the spans differ
  // in size or a row id is not one of the table's rows.
  [[nodiscard]] virtual Status RowAddresses(absl::Span<const uint32_t> rows,
                                            absl::Span<float*> addresses) = 0;
  // ApplyGradientsByAddress: ApplyGradients through addresses from RowAddresses; null skipped.
  // InvalidArgument when summed_grads is not [addresses.size(), dim] or an address is not the
  // start of one of this table's rows.
  [[nodiscard]] virtual Status ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                                       absl::Span<const float> summed_grads,
                                                       int64_t step) = 0;

  // EvictStale: evicts every key (row and admission count) last accessed at or before
  // data_time() - eviction_threshold; returns how many. FailedPrecondition without eviction.
  // O(capacity). Exclusive access; never while a batch in flight refers to the rows.
  [[nodiscard]] virtual StatusOr<int64_t> EvictStale() = 0;
  // EvictLastAccessedAtOrBefore: the same with an explicit cutoff timestamp.
  [[nodiscard]] virtual StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) = 0;

  // SetAccessThreshold (the spec's set_threshold): changes the admission threshold of a table
  // created with admission (access_threshold >= 0) to `access_threshold` (>= 0); config() shows
  // the new value. Keys already counted keep their counts and are admitted by the new threshold at
  // their next occurrence. InvalidArgument for a value below 0; FailedPrecondition naming the
  // table for a table without admission (admission cannot be switched on or off mid-training).
  // Exclusive access (set_threshold in embedding.h takes the key stage's lock for you).
  [[nodiscard]] virtual Status SetAccessThreshold(int64_t access_threshold) = 0;

  // FindRow: the row of `key`, or kDefaultRow when it has none (kPaddingRow for padding keys).
  virtual uint32_t FindRow(int64_t key) const = 0;
  // ReadRow: copies of the embedding and the slots of `key`; NotFound when it has no row.
  [[nodiscard]] virtual StatusOr<std::vector<float>> ReadRow(int64_t key) const = 0;
  // AdmissionCount: the pending admission count of a key without a row (0 when none).
  virtual float AdmissionCount(int64_t key) const = 0;

  // ExportNpy: keys ([n] int64, or int32 for int32 tables) and embeddings ([n, dim] float32) as
  // numpy .npy v1.0 files, sorted by key. O(size log size).
  [[nodiscard]] virtual Status ExportNpy(const std::string& keys_path,
                                         const std::string& values_path) const = 0;
  // ImportNpy: sets the embeddings of the keys in the files (new keys get a row with fresh
  // optimizer slots; padding keys are skipped). Both files are read and checked before anything
  // changes, so on any error the table is unchanged. NotFound when a file does not exist;
  // PermissionDenied when it cannot be read; InvalidArgument when it is not a regular file;
  // DataLoss for a truncated or corrupt file, files that disagree (dtype, shape, dim) or a key
  // listed twice;
  // ResourceExhausted when the rows do not fit. Exclusive access.
  [[nodiscard]] virtual Status ImportNpy(const std::string& keys_path,
                                         const std::string& values_path) = 0;
  // Snapshot: the table's state at this moment, for checkpoints (checkpoint.h writes it; the
  // table has no file format of its own). kFull: every row (embedding + slots), its timestamp,
  // the pending admission counts and data_time. kDelta: only the rows changed (inserted, trained,
  // imported, touched) since the previous Snapshot of either kind, and the keys evicted since
  // (removed_keys), plus all pending admission counts and data_time. kFull and kDelta restart the
  // change tracking, so after a snapshot that is not written, the next delta is incomplete:
  // take a kFull one instead. Rows and their slots are copied together, so a row never mixes
  // two steps. O(capacity) for the scan plus O(rows copied). Exclusive access (no step running).
  // kFullKeepTracking: a kFull snapshot that leaves the change tracking as it is (exports,
  // which must not break the delta chain of the checkpoints).
  enum class SnapshotKind { kFull, kDelta, kFullKeepTracking };
  [[nodiscard]] virtual StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) = 0;
  // SnapshotToSink: Snapshot, with the rows handed to `sink` (Begin, then Rows in key order, or
  // on a tiered table in storage order (TableSnapshot::storage_order), a few MiB at a time) instead
  // of copied into the result, whose rows stay empty. The table is held as by Snapshot until it
  // returns. An error from the sink stops the snapshot and is returned, and the change tracking is
  // then left as it was, so the next delta stays complete.
  [[nodiscard]] virtual StatusOr<TableSnapshot> SnapshotToSink(SnapshotKind kind,
                                                               SnapshotRowSink& sink) = 0;
  // SettleSsdHold: ends the SSD slot hold that the last full SnapshotToSink prepared (see
  // SnapshotRowSink::TakeSsdSegments). committed true: its checkpoint is committed, so the slots
  // it refers to stay untouched from now on and those of the previous hold are released (reused
  // by later writes); false: the checkpoint failed and the previous hold stays. Call it after
  // every full SnapshotToSink whose sink may have taken the segments; a no-op for tables without
  // an SSD tier. DataLoss naming the file when the release cannot be recorded in the SSD files
  // (then nothing is released).
  [[nodiscard]] virtual Status SettleSsdHold(bool committed) {
    (void)committed;
    return Status();
  }
  // LoadSnapshot: replaces the contents with a kFull snapshot, or (kDelta) applies a delta on
  // top of the current contents: evicts its removed_keys, then writes its rows. Everything is
  // checked before anything changes, so on error the table is unchanged: FailedPrecondition when
  // dim, slots, optimizer or key dtype differ (naming both values); DataLoss for inconsistent
  // arrays, duplicate keys or keys outside an int32 table's range; ResourceExhausted when the
  // rows do not fit. Resets the change tracking. Exclusive access.
  [[nodiscard]] virtual Status LoadSnapshot(const TableSnapshot& snapshot) = 0;
  // AdoptSnapshot: LoadSnapshot that may take the snapshot's row buffer instead of copying it. A
  // full snapshot into a table without tiers moves the buffer's pages into the table's rows (no
  // copy, and no fresh pages for the kernel to zero); the snapshot's rows then read as zeros, and
  // its other fields are unchanged. Same checks, errors and guarantees as LoadSnapshot.
  [[nodiscard]] virtual Status AdoptSnapshot(TableSnapshot&& snapshot) = 0;
  // CheckSnapshots: every check LoadSnapshot makes, for `chain` (a kFull snapshot then deltas,
  // or deltas alone on the current contents) loaded in that order, without changing a row: OK
  // means that loading each in turn can then fail only on an I/O error of a tier. On a tiered
  // table it also makes the SSD files the rows will need (so a full disk is found here, before
  // anything changed). A restore of several tables checks them all before loading any.
  // O(keys of the chain). Exclusive access.
  [[nodiscard]] virtual Status CheckSnapshots(absl::Span<const TableSnapshot> chain) = 0;

  // Save / Restore of a single table moved to the checkpoint layer: SaveTable / RestoreTable in
  // recsdk/checkpoint.h (same directory layout as a checkpoint's table payloads, CRC32C-checked).

 protected:
  // EmbeddingTable: for the implementations Create makes.
  EmbeddingTable(const TableConfig& config, const SparseOptimizerConfig& optimizer)
      : config_(config), optimizer_(optimizer), num_slots_(optimizer.NumSlots(config.dim)) {}

  TableConfig config_;  // only access_threshold changes after creation (SetAccessThreshold)
  // optimizer_, num_slots_: the sparse optimizer and its floats per row.
  const SparseOptimizerConfig optimizer_;
  const int num_slots_;
};

// EvictHook: triggers eviction during training (the spec's EvictHook). A training loop calls
// AfterStep once per step; the Estimator's hook list takes the same object. Not thread-safe.
class EvictHook {
 public:
  // evict_enable: switch. evict_time_interval: seconds of data time between evictions (<= 0
  // disables this trigger). evict_step_interval: global steps between evictions (<= 0 disables).
  explicit EvictHook(bool evict_enable = true, int64_t evict_time_interval = 24 * 60 * 60,
                     int64_t evict_step_interval = 10000);

  // Validate: InvalidArgument when enabled with both triggers disabled.
  Status Validate() const;
  // AfterStep: when a trigger is due, runs EvictStale on every table with eviction_threshold
  // >= 0 and returns the keys evicted (0 when not due or disabled).
  StatusOr<int64_t> AfterStep(int64_t global_step, absl::Span<EmbeddingTable* const> tables);

  // evict_enable, evict_time_interval, evict_step_interval: the constructor's arguments.
  bool evict_enable() const { return evict_enable_; }
  int64_t evict_time_interval() const { return evict_time_interval_; }
  int64_t evict_step_interval() const { return evict_step_interval_; }

 private:
  bool evict_enable_;
  int64_t evict_time_interval_;
  int64_t evict_step_interval_;
  int64_t last_step_ = 0;
  bool has_last_time_ = false;
  int64_t last_time_ = 0;
};

}  // namespace recsdk

#endif  // RECSDK_TABLE_H_
