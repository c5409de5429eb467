// table_config_json.h: a table's configs as JSON text, the form a TableHandle node carries them in
// (and a graph file, a bundle or a checkpoint with it), and the combiner names of lookup nodes.
// Internal. Thread-safe (pure functions).
#ifndef RECSDK_TABLE_TABLE_CONFIG_JSON_H_
#define RECSDK_TABLE_TABLE_CONFIG_JSON_H_

#include <optional>
#include <string>

#include "recsdk/sparse_optimizers.h"
#include "recsdk/table.h"

namespace recsdk::internal {

std::string TableConfigToJson(const TableConfig& config);
// TableConfigFromJson: InvalidArgument naming the attribute and the field for text that is not
// such a config (read from files: bounded depth, every number range-checked).
StatusOr<TableConfig> TableConfigFromJson(const std::string& json);
std::string OptimizerConfigToJson(const SparseOptimizerConfig& config);
StatusOr<SparseOptimizerConfig> OptimizerConfigFromJson(const std::string& json);

// CombinerName: "sum", "mean", "sqrtn", or "none" for no combiner (unpooled lookups).
std::string CombinerName(const std::optional<Combiner>& combiner);
// ParseCombiner: the inverse; "none" or "" -> nullopt; InvalidArgument for other names.
StatusOr<std::optional<Combiner>> ParseCombiner(const std::string& name);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TABLE_CONFIG_JSON_H_
