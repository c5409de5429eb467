// table_key_work.h: the key work of the lookups of one table on one batch, shared by the
// in-graph lookup kernels (device/cpu/table_op_kernels.cc) and the key stage
// (session/key_stage/key_stage.cc): check the ids, deduplicate the keys of all the table's lookups
// in one pass, resolve them with one Resolve, and give each lookup its unique rows and restore
// indices. Internal. Knows nothing of the graph: a lookup's attributes are plain data here.
//
// Threading: PrepareTableKeys touches only its arguments (callers run it for several batches at
// once); ResolveTableKeys needs the table alone in training and beside readers only in evaluation
// (a guard of the Session's LockedTable, locked_table.h). TableKeyWork is a per-call value.
#ifndef RECSDK_TABLE_TABLE_KEY_WORK_H_
#define RECSDK_TABLE_TABLE_KEY_WORK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/table.h"
#include "recsdk/tensor.h"
#include "src/table/dedup.h"
#include "src/table/tier_lease.h"

namespace recsdk::internal {

// LookupAttrs: one lookup's attributes (a SparseLookup node's, or one member's of a
// TableLookupGroup) and its input layout.
struct LookupAttrs {
  std::string name;  // the SparseLookup node, for messages and key-stage feeds
  std::string table_name;
  int num_features = 1;
  bool is_train = true;
  bool static_shape = false;
  int64_t send_count = 0;
  bool has_mask = false;
  bool has_timestamps = false;
  // feature_weights: per feature, the weight of one occurrence in the admission count
  // (FeatureSpec::faae_coefficient); empty means 1 for every feature.
  std::vector<int64_t> feature_weights;
  // Input positions relative to the lookup's first ids input: 0..num_features-1 the ids, then
  // the mask, then the timestamps. A SparseLookup node's first ids input is 1 (after the handle).
  int num_inputs() const { return num_features + (has_mask ? 1 : 0) + (has_timestamps ? 1 : 0); }
  int mask_input() const { return num_features; }
  int timestamps_input() const { return num_features + (has_mask ? 1 : 0); }
};
// LookupBatch: one lookup's tensors for one batch. ids: [B, n_f] int64/int32 per feature;
// mask: [B] float32 or null; timestamps: [B] int64 or null.
struct LookupBatch {
  const LookupAttrs* attrs = nullptr;
  std::vector<const Tensor*> ids;
  const Tensor* mask = nullptr;
  const Tensor* timestamps = nullptr;
};

// TableKeyWork: the key work of every lookup of one table with one mode, on one batch: the
// keys of all of them are deduplicated in one pass and resolved with one Resolve, so admission
// counts every occurrence of a key in the batch before any lookup reads its row, and each key
// reads one row whichever lookup it is in. Each lookup still gets its own outputs (the rows of
// its own keys, in their order of first occurrence, and per feature the restore index into
// them), exactly what it would get alone, so its send_count, gradients and apply are unchanged.
struct TableKeyWork {
  std::string table_name;
  std::vector<int64_t> keys;       // ids of valid (mask != 0) rows, lookups and features in order
  DedupResult dedup;               // one pass over `keys`
  std::vector<uint32_t> counts;    // per unique key: occurrences weighted by feature_weights
  std::vector<int64_t> key_times;  // per unique key: latest timestamp, or empty (none given)
  bool untimed_keys = false;       // some key only occurs in lookups without timestamps
  int64_t min_time = 0;            // oldest timestamp of the valid rows (eviction protection)
  bool has_time = false;
  bool has_untimed_lookup = false;  // a lookup without timestamps (its keys take the data time)
  std::vector<uint32_t> rows;       // per unique key, after ResolveTableKeys
  // One lookup's share.
  struct Part {
    const LookupAttrs* attrs = nullptr;
    size_t first_key = 0, num_keys = 0;  // its range of `keys`
    std::vector<uint32_t> unique;        // its unique keys, as indices into dedup.unique_keys
    bool has_padding_slot = false;       // masked rows read the extra slot after `unique`
    // Outputs: unique rows [U_part (+1)] (or [send_count]) and per feature the restore [B, n_f].
    Tensor unique_rows;
    std::vector<Tensor> restore;
  };
  std::vector<Part> parts;
};

// PrepareTableKeys: checks the lookups' tensors and send_count, concatenates their keys, dedups
// them and builds the per-lookup restore indices; reads no table, so batches may overlap here.
// Every lookup must be of table `work->table_name` and of the same mode.
Status PrepareTableKeys(const std::vector<LookupBatch>& lookups, TableKeyWork* work);
// ResolveTableKeys: one Resolve of all the unique keys, then each lookup's unique rows. `table`
// is the one a guard of the table's LockedTable gives: exclusive in training, shared in
// evaluation. `lease`:
// the key stage's (tier_lease.h); null for in-graph lookups, which a table with a host tier
// refuses (FailedPrecondition: the spec runs the key work of tiered tables in the key stage).
Status ResolveTableKeys(EmbeddingTable* table, LookupMode mode, TableKeyWork* work,
                        const ResolveLease* lease = nullptr);

// ResolveTableKeys in three steps, for a caller that resolves the keys of several tables together
// (one exchange for a group of sharded tables: src/dist/table_exchange_ops.cc): PrepareResolve
// (the tier check and the keys' times), then the caller's Resolve of work->dedup.unique_keys
// with ResolveCounts(*work) and work->key_times into work->rows (sized), then FinishTableKeys
// (each lookup's unique rows).
Status PrepareResolve(EmbeddingTable* table, TableKeyWork* work, const ResolveLease* lease);
const std::vector<uint32_t>& ResolveCounts(const TableKeyWork& work);
void FinishTableKeys(TableKeyWork* work);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TABLE_KEY_WORK_H_
