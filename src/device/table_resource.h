// table_resource.h: what a backend's table kernels need to run a table op of the graph: the op
// names, a Session's table (TableResource, created from its TableHandle node on first use), and
// the attributes of a lookup node as plain data (LookupAttrs, src/table/table_key_work.h).
// The op definitions (shape functions, attribute schemas) and the builders of recsdk/embedding.h
// live with the Session (src/session/table_ops.h); the CPU kernels in
// src/device/cpu/table_op_kernels.cc.
//
// Threading: a TableResource's table locks itself (src/table/locked_table.h): the calls that
// change which keys a table holds (Resolve in training, eviction, import, restore) take its key
// lock exclusively; evaluation Resolves, which only read the index, take it shared, so they run
// beside each other but never beside an insert or a rehash. GetOrCreateTable is thread-safe (the
// ResourceMgr creates a table once).
#ifndef RECSDK_DEVICE_TABLE_RESOURCE_H_
#define RECSDK_DEVICE_TABLE_RESOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/table.h"
#include "src/device/allocator.h"
#include "src/device/resource_mgr.h"
#include "src/table/locked_table.h"
#include "src/table/table_key_work.h"

namespace recsdk::internal {

// Op type names.
inline constexpr char kTableHandleOp[] = "TableHandle";
inline constexpr char kSparseLookupOp[] = "SparseLookup";
inline constexpr char kTableGatherOp[] = "TableGather";
inline constexpr char kTableGradAggregateOp[] = "TableGradAggregate";
inline constexpr char kTableApplyOp[] = "TableApply";
inline constexpr char kTableLookupGroupOp[] = "TableLookupGroup";
inline constexpr char kTableLookupForwardOp[] = "TableLookupForward";
// TableLookupExchange, TableApplyExchange: the lookups (updates) of a step's sharded tables as
// one node making one exchange for all of them (src/dist/table_exchange_ops.cc registers them;
// named here so the layers below dist, the profiler's phases, can tell them apart).
inline constexpr char kTableLookupExchangeOp[] = "TableLookupExchange";
inline constexpr char kTableApplyExchangeOp[] = "TableApplyExchange";
// TableGatherConcat: pooled TableGathers and dense columns concatenated along axis 1, each
// gathered straight into its columns (the fuse_gather_concat pass, src/session/passes/).
// Inputs, per segment in column order: a pooled gather's (handle, unique rows, restore), or one
// dense float32 [batch, width] tensor. Attrs: segment_kinds (0 dense, 1 gather), and per gather
// segment combiners and dims.
inline constexpr char kTableGatherConcatOp[] = "TableGatherConcat";

// TableResource: a Session's table. The table is a LockedTable: every call of it takes the locks
// table.h's threading contract asks for (locked_table.h), and the key work of a
// batch holds one guard per table and batch (LockKeys), never one per key.
class TableResource final : public Resource {
 public:
  // charge: the table's device tier counted against variable_memory_max_size (tiered tables on
  // a session's device; null otherwise).
  TableResource(std::unique_ptr<EmbeddingTable> table, std::unique_ptr<MemoryCharge> charge)
      : charge_(std::move(charge)), table_(std::make_unique<LockedTable>(std::move(table))) {}
  std::string DebugString() const override { return "table \"" + table_->name() + "\""; }
  LockedTable* table() const { return table_.get(); }

 private:
  std::unique_ptr<MemoryCharge> charge_;  // released after the table is gone
  std::unique_ptr<LockedTable> table_;
};

// TableResourceName: the ResourceMgr key of a table.
inline std::string TableResourceName(const std::string& table) { return "table:" + table; }

// TableDecorator: turns a table GetOrCreateTable made into the one the Session holds; installed
// by a layer above (the distributed layer shards tables over the ranks: src/dist/sharded_table.h).
// Null (the default): the table as made.
using TableDecorator =
    StatusOr<std::unique_ptr<EmbeddingTable>> (*)(std::unique_ptr<EmbeddingTable>);
// SetTableDecorator: installs `decorator` for tables created from now on. Thread-safe.
void SetTableDecorator(TableDecorator decorator);

// GetOrCreateTable: the table of a TableHandle node in `resources`, created on first use from
// the configs in its attributes (and passed through the table decorator).
StatusOr<TableResource*> GetOrCreateTable(ResourceMgr* resources, const Node& handle_node);

// ReadLookupAttrs: the attributes of a SparseLookup node.
LookupAttrs ReadLookupAttrs(const Node& node);
// ReadGroupAttrs: the members of a TableLookupGroup node, in input order.
std::vector<LookupAttrs> ReadGroupAttrs(const Node& node);

// GatherConcatSegment: one segment of a TableGatherConcat: its first input and its width.
struct GatherConcatSegment {
  bool gather = false;
  int input = 0;
  int gather_index = 0;  // into combiners and dims
};
// GatherConcatSegments: the segments of a TableGatherConcat from its segment_kinds, checked
// against its inputs and dims; `error` makes the Status of a mismatch.
StatusOr<std::vector<GatherConcatSegment>> GatherConcatSegments(
    const std::vector<int64_t>& kinds, int64_t num_dims, int num_inputs,
    const std::function<Status(std::string)>& error);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_TABLE_RESOURCE_H_
