// table_ops.h: internal pieces shared by the table ops (table_ops.cc), the graph modification
// pass (modify_graph.cc), the in-graph lookup grouping pass (group_lookups.cc) and the key stage
// (key_stage.cc): the table resource, the attributes of a SparseLookup node, and the key work of
// the lookups of one table on one batch (table_keys.cc).
//
// Threading: TableResource::resolve_mu guards the table's key index: the calls that change
// which keys a table holds (Resolve in training, eviction, import, restore) hold it exclusively;
// evaluation Resolves, which only read the index, hold it shared, so they run beside each other
// but never beside an insert or a rehash. LookupKeyWork is a per-call value.
#ifndef RECSDK_SESSION_TABLE_OPS_H_
#define RECSDK_SESSION_TABLE_OPS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/session.h"
#include "recsdk/table.h"
#include "recsdk/tensor.h"
#include "src/device/allocator.h"
#include "src/device/resource_mgr.h"
#include "src/table/tier_lease.h"

namespace recsdk::internal {

// Op type names.
inline constexpr char kTableHandleOp[] = "TableHandle";
inline constexpr char kSparseLookupOp[] = "SparseLookup";
inline constexpr char kTableGatherOp[] = "TableGather";
inline constexpr char kTableGradAggregateOp[] = "TableGradAggregate";
inline constexpr char kTableApplyOp[] = "TableApply";
inline constexpr char kTableLookupGroupOp[] = "TableLookupGroup";
inline constexpr char kTableLookupForwardOp[] = "TableLookupForward";
// TableGatherConcat: pooled TableGathers and dense columns concatenated along axis 1, each
// gathered straight into its columns (the fuse_gather_concat pass, src/session/passes/).
// Inputs, per segment in column order: a pooled gather's (handle, unique rows, restore), or one
// dense float32 [batch, width] tensor. Attrs: segment_kinds (0 dense, 1 gather), and per gather
// segment combiners and dims.
inline constexpr char kTableGatherConcatOp[] = "TableGatherConcat";

// DeclareTableOpAttrSchemas: the attribute schemas of the table ops (table_op_schemas.cc), declared
// by RegisterTableOps right after it registers them.
class OpRegistry;
void DeclareTableOpAttrSchemas(OpRegistry& registry);

// Attribute of placeholders: the Batch column a DatasetColumn is fed from.
inline constexpr char kDatasetColumnAttr[] = "dataset_column";
// Attributes of the placeholders ModifyGraph adds: the SparseLookup they replace and its output.
inline constexpr char kKeyStageLookupAttr[] = "key_stage_lookup";
inline constexpr char kKeyStageOutputAttr[] = "key_stage_output";

class TableResource final : public Resource {
 public:
  // charge: the table's device tier counted against variable_memory_max_size (tiered tables on
  // a session's device; null otherwise).
  TableResource(std::unique_ptr<EmbeddingTable> table, std::unique_ptr<MemoryCharge> charge)
      : charge_(std::move(charge)), table_(std::move(table)) {}
  std::string DebugString() const override { return "table \"" + table_->name() + "\""; }
  EmbeddingTable* table() const { return table_.get(); }

  // resolve_mu: exclusive for training resolves and eviction, shared for evaluation resolves
  // (see the file comment). One lock per batch and table, never per key.
  std::shared_mutex resolve_mu;

 private:
  std::unique_ptr<MemoryCharge> charge_;  // released after the table is gone
  std::unique_ptr<EmbeddingTable> table_;
};

// ResourceName: the ResourceMgr key of a table.
inline std::string TableResourceName(const std::string& table) { return "table:" + table; }

// Config (de)serialisation carried in TableHandle attributes.
std::string TableConfigToJson(const TableConfig& config);
StatusOr<TableConfig> TableConfigFromJson(const std::string& json);
std::string OptimizerConfigToJson(const SparseOptimizerConfig& config);
StatusOr<SparseOptimizerConfig> OptimizerConfigFromJson(const std::string& json);

// GetOrCreateTable: the table of a TableHandle node in `resources`, created on first use.
StatusOr<TableResource*> GetOrCreateTable(ResourceMgr* resources, const Node& handle_node);

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
// ReadLookupAttrs: the attributes of a SparseLookup node.
LookupAttrs ReadLookupAttrs(const Node& node);
// ReadGroupAttrs: the members of a TableLookupGroup node, in input order.
std::vector<LookupAttrs> ReadGroupAttrs(const Node& node);

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
// ResolveTableKeys: one Resolve of all the unique keys, then each lookup's unique rows. The
// caller holds the table's resolve_mu: exclusively in training, shared in evaluation. `lease`:
// the key stage's (tier_lease.h); null for in-graph lookups, which a table with a host tier
// refuses (FailedPrecondition: the spec runs the key work of tiered tables in the key stage).
Status ResolveTableKeys(EmbeddingTable* table, LookupMode mode, TableKeyWork* work,
                        const ResolveLease* lease = nullptr);

// GroupTableLookups: the graph pass Session::Create runs on its copy of the graph: all in-graph
// lookups (SparseLookup nodes not moved to the key stage) of one table with the same is_train
// become one TableLookupGroup node that does their key work together (one dedup, one resolve);
// each SparseLookup node becomes a TableLookupForward of its share of the group's outputs, so
// its name, outputs and consumers stay. A lookup whose inputs depend on another lookup of the
// group (or whose grouping would make a cycle through another group) is left out of it.
Status GroupTableLookups(Graph* graph);

// RegisterTableOps: the ops and CPU kernels of this file's family. Idempotent.
void RegisterTableOps();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_TABLE_OPS_H_
