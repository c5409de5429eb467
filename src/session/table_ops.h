// table_ops.h: internal pieces shared by the table ops (table_ops.cc), the graph modification
// pass (modify_graph.cc) and the key stage (key_stage.cc): the table resource, the attributes
// of a SparseLookup node, and the key work of one lookup on one batch.
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
#include "src/device/resource_mgr.h"

namespace recsdk::internal {

// Op type names.
inline constexpr char kTableHandleOp[] = "TableHandle";
inline constexpr char kSparseLookupOp[] = "SparseLookup";
inline constexpr char kTableGatherOp[] = "TableGather";
inline constexpr char kTableGradAggregateOp[] = "TableGradAggregate";
inline constexpr char kTableApplyOp[] = "TableApply";
// Attribute of placeholders: the Batch column a DatasetColumn is fed from.
inline constexpr char kDatasetColumnAttr[] = "dataset_column";
// Attributes of the placeholders ModifyGraph adds: the SparseLookup they replace and its output.
inline constexpr char kKeyStageLookupAttr[] = "key_stage_lookup";
inline constexpr char kKeyStageOutputAttr[] = "key_stage_output";

class TableResource final : public Resource {
 public:
  explicit TableResource(std::unique_ptr<EmbeddingTable> table) : table_(std::move(table)) {}
  std::string DebugString() const override { return "table \"" + table_->name() + "\""; }
  EmbeddingTable* table() const { return table_.get(); }

  // resolve_mu: exclusive for training resolves and eviction, shared for evaluation resolves
  // (see the file comment). One lock per batch and table, never per key.
  std::shared_mutex resolve_mu;

 private:
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

// LookupAttrs: a SparseLookup node's attributes and input layout.
struct LookupAttrs {
  std::string table_name;
  int num_features = 1;
  bool is_train = true;
  bool static_shape = false;
  int64_t send_count = 0;
  bool has_mask = false;
  bool has_timestamps = false;
  // Input positions: 0 the table handle, 1..num_features the ids, then mask, then timestamps.
  int mask_input() const { return 1 + num_features; }
  int timestamps_input() const { return 1 + num_features + (has_mask ? 1 : 0); }
};
LookupAttrs ReadLookupAttrs(const Node& node);

// LookupKeyWork: the key work of one lookup on one batch.
struct LookupKeyWork {
  std::vector<int64_t> keys;       // ids of the valid (mask != 0) rows, features concatenated
  std::vector<int64_t> key_times;  // per unique key: latest timestamp (when timestamps given)
  DedupResult dedup;
  std::vector<uint32_t> rows;  // per unique key (plus a padding slot when masked rows exist)
  bool has_padding_slot = false;
  int64_t min_time = 0;  // oldest timestamp of the batch (eviction protection)
  bool has_time = false;
  // Outputs: unique rows [U] (or [send_count]) and per feature the restore index [B, n_i].
  Tensor unique_rows;
  std::vector<Tensor> restore;
};

// PrepareKeys: dedup and per-key timestamps; reads no table. ids: [B, n_i] int64/int32 each;
// mask: [B] float32 or null; timestamps: [B] int64 or null.
Status PrepareKeys(const LookupAttrs& attrs, const std::string& lookup_name,
                   const std::vector<const Tensor*>& ids, const Tensor* mask,
                   const Tensor* timestamps, LookupKeyWork* work);
// ResolveKeys: resolves the unique keys (caller holds the table's resolve_mu in training) and
// builds the output tensors. Errors name the lookup and the table (send_count exceeded, full).
Status ResolveKeys(const LookupAttrs& attrs, const std::string& lookup_name, EmbeddingTable* table,
                   LookupKeyWork* work);

// RegisterTableOps: the ops and CPU kernels of this file's family. Idempotent.
void RegisterTableOps();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_TABLE_OPS_H_
