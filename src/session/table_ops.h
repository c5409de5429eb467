// table_ops.h: the table ops in the graph, as the Session side sees them: their definitions
// (table_ops.cc: one OpDef each, with its attributes and shape function), the attributes the
// graph passes read and write (modify_graph.cc, passes/, key_stage.cc), and the lookup grouping
// pass. The pieces a backend's kernels need (op names, TableResource, LookupAttrs, the key work)
// are one layer down and included here: src/device/table_resource.h,
// src/table/table_key_work.h, src/table/table_config_json.h. The builders of
// recsdk/embedding.h are in embedding.cc; the CPU kernels in src/device/cpu/table_op_kernels.cc.
#ifndef RECSDK_SESSION_TABLE_OPS_H_
#define RECSDK_SESSION_TABLE_OPS_H_

#include "recsdk/graph.h"
#include "recsdk/session.h"
#include "src/device/table_resource.h"
#include "src/table/table_config_json.h"
#include "src/table/table_key_work.h"

namespace recsdk::internal {

// Attribute of placeholders: the Batch column a DatasetColumn is fed from.
inline constexpr char kDatasetColumnAttr[] = "dataset_column";
// Attributes of the placeholders ModifyGraph adds: the SparseLookup they replace and its output.
inline constexpr char kKeyStageLookupAttr[] = "key_stage_lookup";
inline constexpr char kKeyStageOutputAttr[] = "key_stage_output";

// GroupTableLookups: the graph pass Session::Create runs on its copy of the graph: all in-graph
// lookups (SparseLookup nodes not moved to the key stage) of one table with the same is_train
// become one TableLookupGroup node that does their key work together (one dedup, one resolve);
// each SparseLookup node becomes a TableLookupForward of its share of the group's outputs, so
// its name, outputs and consumers stay. A lookup whose inputs depend on another lookup of the
// group (or whose grouping would make a cycle through another group) is left out of it.
Status GroupTableLookups(Graph* graph);

// RegisterTableOps: the definitions of the table ops (their kernels register with their backend:
// RegisterCpuBackend). Idempotent.
void RegisterTableOps();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_TABLE_OPS_H_
