// embedding.cc: the public builders of recsdk/embedding.h: create_table, sparse_lookup (with its
// admission and eviction thresholds merged into the table's config), the sparse gradients and
// their apply, and a Session's tables (LookupTable, SessionTables). The ops they add are defined
// in table_ops.cc.
//
// Threading: graph building is single-threaded, like Graph. The tables LookupTable and
// SessionTables hand out lock themselves (src/table/locked_table.h): any thread may call them
// beside the steps and the key stage.
#include "recsdk/embedding.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/gradients.h"
#include "recsdk/initialize.h"
#include "recsdk/ops.h"
#include "recsdk/pipeline.h"
#include "recsdk/variables.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"

namespace recsdk {

// --- Public builders ------------------------------------------------------------------------

using internal::kDatasetColumnAttr;

StatusOr<SparseTable> create_table(const Scope& scope, const TableConfig& config_in,
                                   const SparseOptimizerConfig& optimizer) {
  internal::RegisterTableOps();
  if (!scope.ok()) return scope.status();
  // init(use_dynamic_expansion = true) is the spec's job-wide switch (mx-rec's create_table reads
  // ConfigInitializer's): every table created after it grows as keys arrive. A table that cannot
  // is an error naming init's option, never a table silently left without it. A table handed
  // back under variable reuse keeps what it was created with.
  bool reusing = false;
  if (scope.variable_reuse() != VariableReuse::kNone) {
    for (const std::string& name : scope.graph()->Collection(kSparseTables)) {
      const Node* n = scope.graph()->FindNode(name);
      if (n != nullptr && n->StringAttr("table_name") == config_in.name) reusing = true;
    }
  }
  const ConfigInitializer* initializer = ConfigInitializer::Get();
  const bool expansion_from_init = !reusing && initializer != nullptr &&
                                   initializer->options().use_dynamic_expansion &&
                                   !config_in.use_dynamic_expansion;
  TableConfig config = config_in;
  if (expansion_from_init) config.use_dynamic_expansion = true;
  auto from_init = [&](Status s) -> Status {
    if (s.ok() || !expansion_from_init) return s;
    return Status(s.code(),
                  fmt::format("create_table \"{}\": init(use_dynamic_expansion = true) turns on "
                              "use_dynamic_expansion for every table created after it, and this "
                              "table cannot have it: {}; call init with use_dynamic_expansion = "
                              "false, or change the table as that says",
                              config.name, s.message()));
  };
  RECSDK_RETURN_IF_ERROR(from_init(config.Validate()));
  RECSDK_RETURN_IF_ERROR(optimizer.Validate());
  Graph* g = scope.graph();
  for (const std::string& name : g->Collection(kSparseTables)) {
    Node* n = g->FindNode(name);
    if (n != nullptr && n->StringAttr("table_name") == config.name &&
        scope.variable_reuse() != VariableReuse::kNone) {
      // Variable reuse (the Estimator's train, eval and predict branches): the same table.
      if (n->IntAttr("dim") != config.dim ||
          n->StringAttr("optimizer_config") != internal::OptimizerConfigToJson(optimizer)) {
        return absl::InvalidArgumentError(fmt::format(
            "create_table \"{}\": under variable reuse the table exists with dim {} and "
            "optimizer {}, but this call asks for dim {} and {}; build the table the same way in "
            "every mode",
            config.name, n->IntAttr("dim"), n->StringAttr("optimizer_config"), config.dim,
            optimizer.ToString()));
      }
      SparseTable t;
      t.handle_ = Output(n, 0);
      t.config_ = config;
      t.optimizer_ = optimizer;
      return t;
    }
    if (n != nullptr && n->StringAttr("table_name") == config.name) {
      return absl::InvalidArgumentError(fmt::format(
          "create_table: the graph already has a table \"{}\" (node \"{}\"); table names must be "
          "unique, pick another name",
          config.name, name));
    }
  }
  if (config.use_dynamic_expansion && !optimizer.ByAddress()) {
    return from_init(absl::InvalidArgumentError(fmt::format(
        "create_table \"{}\": use_dynamic_expansion needs a by-address optimizer (SGDByAddr, "
        "AdagradByAddress, LazyAdamByAddress), got {}",
        config.name, optimizer.ToString())));
  }
  Node* n = scope.WithOpName(config.name)
                .AddNode(internal::kTableHandleOp, {},
                         {{"table_name", config.name},
                          {"dim", int64_t{config.dim}},
                          {"table_config", internal::TableConfigToJson(config)},
                          {"optimizer_config", internal::OptimizerConfigToJson(optimizer)}});
  if (n == nullptr) return scope.status();
  g->AddToCollection(kSparseTables, n->name());
  SparseTable t;
  t.handle_ = Output(n, 0);
  t.config_ = config;
  t.optimizer_ = optimizer;
  return t;
}

TableConfig SparseTable::config() const {
  if (handle_.valid()) {
    auto c = internal::TableConfigFromJson(handle_.node->StringAttr("table_config"));
    if (c.ok()) return *std::move(c);
  }
  return config_;
}

namespace {

// Where the admission and eviction thresholds of a table came from, kept on its TableHandle so a
// conflict can name both sides.
constexpr char kAccessSourceAttr[] = "access_threshold_source";
constexpr char kEvictionSourceAttr[] = "eviction_threshold_source";
constexpr char kTableConfigSource[] = "the table's TableConfig (create_table)";

// ThresholdSetting: thresholds a FeatureSpec or an access_and_evict_config asks of the table
// (-1: none), and who asks.
struct ThresholdSetting {
  int64_t access_threshold = -1;
  int64_t eviction_threshold = -1;
  std::string source;
};

// ThresholdUpdate: the table's config with the settings applied, not yet written back.
struct ThresholdUpdate {
  Node* handle = nullptr;
  TableConfig config;
  std::string access_source, eviction_source;
  bool changed = false;
};

// MergeThresholds: applies `settings` to the table's config in the graph. Admission and eviction
// are per table, so a threshold set twice must be set to the same value; -1 sets nothing.
// Changes nothing (CommitThresholds writes the result).
StatusOr<ThresholdUpdate> MergeThresholds(const SparseTable& table,
                                          const std::vector<ThresholdSetting>& settings) {
  ThresholdUpdate u;
  u.handle = table.handle().node;
  u.config = table.config();
  u.access_source = u.handle->StringAttr(kAccessSourceAttr,
                                         u.config.access_threshold >= 0 ? kTableConfigSource : "");
  u.eviction_source = u.handle->StringAttr(
      kEvictionSourceAttr, u.config.eviction_threshold >= 0 ? kTableConfigSource : "");
  auto merge = [&](std::string_view option, int64_t value, const std::string& source,
                   int64_t* current, std::string* current_source) -> Status {
    if (value == -1 || value == *current) return absl::OkStatus();
    if (*current == -1) {
      *current = value;
      *current_source = source;
      u.changed = true;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": {} {} from {} disagrees with {} {} from {}; admission and eviction are "
        "per table, so give {} the same value wherever it is set for table \"{}\" (its "
        "FeatureSpecs, access_and_evict_config, TableConfig), or -1 to leave it to the others",
        table.table_name(), option, value, source, option, *current, *current_source, option,
        table.table_name()));
  };
  for (const ThresholdSetting& st : settings) {
    RECSDK_RETURN_IF_ERROR(merge("access_threshold", st.access_threshold, st.source,
                                 &u.config.access_threshold, &u.access_source));
    RECSDK_RETURN_IF_ERROR(merge("eviction_threshold", st.eviction_threshold, st.source,
                                 &u.config.eviction_threshold, &u.eviction_source));
  }
  if (u.changed) {
    if (Status v = u.config.Validate(); !v.ok()) {
      auto from = [](const std::string& source) {
        return source.empty() ? std::string("set nowhere") : "from " + source;
      };
      return absl::InvalidArgumentError(
          fmt::format("{} (access_threshold {} {}, eviction_threshold {} {})", v.message(),
                      u.config.access_threshold, from(u.access_source), u.config.eviction_threshold,
                      from(u.eviction_source)));
    }
  }
  return u;
}

void CommitThresholds(const ThresholdUpdate& u) {
  if (!u.changed) return;
  u.handle->SetAttr("table_config", internal::TableConfigToJson(u.config));
  u.handle->SetAttr(kAccessSourceAttr, u.access_source);
  u.handle->SetAttr(kEvictionSourceAttr, u.eviction_source);
}

// Settings: the options' access_and_evict_config as a ThresholdSetting (checked), appended.
Status AddOptionSettings(const SparseLookupOptions& options, const std::string& name,
                         std::vector<ThresholdSetting>* settings) {
  if (!options.access_and_evict_config.has_value()) return absl::OkStatus();
  const AccessAndEvictConfig& c = *options.access_and_evict_config;
  if (c.access_threshold < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": access_and_evict_config access_threshold {} is below -1; use -1 to "
        "leave admission to the table or a count >= 0 to enable it",
        name, c.access_threshold));
  }
  if (c.eviction_threshold < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": access_and_evict_config eviction_threshold {} is below -1; use -1 "
        "to leave eviction to the table or a number of seconds >= 0 to enable it",
        name, c.eviction_threshold));
  }
  settings->push_back(ThresholdSetting{c.access_threshold, c.eviction_threshold,
                                       fmt::format("access_and_evict_config of sparse_lookup "
                                                   "\"{}\"",
                                                   name)});
  return absl::OkStatus();
}

std::string LookupName(const SparseTable& table, const SparseLookupOptions& options) {
  return options.name.empty() ? table.table_name() + "_lookup" : options.name;
}

// BuildLookup: sparse_lookup of `ids`, with the features' admission weights (empty: all 1) and
// the thresholds `settings` ask of the table. Nothing changes unless it succeeds.
StatusOr<std::vector<Output>> BuildLookup(const Scope& scope, const SparseTable& table,
                                          const std::vector<Output>& ids,
                                          const SparseLookupOptions& options,
                                          const std::vector<int64_t>& feature_weights,
                                          std::vector<ThresholdSetting> settings) {
  if (!scope.ok()) return scope.status();
  if (!table.valid()) return absl::InvalidArgumentError("sparse_lookup: the table is invalid");
  const std::string name = LookupName(table, options);
  if (ids.empty() || ids.size() > static_cast<size_t>(kMaxLookupsPerTable)) {
    return absl::InvalidArgumentError(
        fmt::format("sparse_lookup \"{}\": {} ids inputs; pass 1 to {} features of table \"{}\"",
                    name, ids.size(), kMaxLookupsPerTable, table.table_name()));
  }
  // The limit holds per table across calls: every feature of every lookup of the table counts.
  int64_t earlier = 0, calls = 0;
  for (const Node* n : scope.graph()->nodes()) {
    if (n->type() == internal::kSparseLookupOp &&
        n->StringAttr("table_name") == table.table_name()) {
      earlier += internal::NodeAttrs(*n).Int("num_features");
      ++calls;
    }
  }
  if (earlier + static_cast<int64_t>(ids.size()) > kMaxLookupsPerTable) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": table \"{}\" would be looked up {} times ({} features in {} earlier "
        "sparse_lookup calls, {} in this one), but a table allows at most {} lookups; share "
        "fewer features per table (create another table for some of them) or merge id columns",
        name, table.table_name(), earlier + static_cast<int64_t>(ids.size()), earlier, calls,
        ids.size(), kMaxLookupsPerTable));
  }
  if (options.dim.has_value() && (*options.dim <= 0 || *options.dim > table.dim())) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": dim {} is outside [1, {}], the dim of table \"{}\"; ask for a "
        "prefix of at most {} columns, or leave dim unset for whole rows",
        name, *options.dim, table.dim(), table.table_name(), table.dim()));
  }
  // Unset, use_dynamic is the job's (init's), as the spec's lookups take it from init.
  const ConfigInitializer* initializer = ConfigInitializer::Get();
  const bool use_dynamic = options.use_dynamic.value_or(
      initializer != nullptr ? initializer->options().use_dynamic : true);
  if (!use_dynamic && options.send_count <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": static shape (use_dynamic=false{}) needs send_count > 0, got {}; "
        "set send_count to the most unique keys of a batch",
        name, options.use_dynamic.has_value() ? "" : ", from init(use_dynamic = false)",
        options.send_count));
  }
  // The optional inputs are checked here, by option name: the op's own check could only say
  // "input 3 must be float32", which a caller cannot map back to the option they set.
  if (options.mask.valid() && options.mask.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": option mask \"{}\" is {}; it must be float32 [B] (1 for real rows, "
        "0 for padding): pass the batch's \"mask\" column or Cast it to float32",
        name, options.mask.name(), DTypeName(options.mask.dtype())));
  }
  if (options.timestamps.valid() && options.timestamps.dtype() != DType::kInt64) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": option timestamps \"{}\" is {}; it must be int64 [B] seconds: "
        "pass the timestamp column (FeatureSpec is_timestamp) or Cast it to int64",
        name, options.timestamps.name(), DTypeName(options.timestamps.dtype())));
  }
  RECSDK_RETURN_IF_ERROR(AddOptionSettings(options, name, &settings));
  RECSDK_ASSIGN_OR_RETURN(ThresholdUpdate thresholds, MergeThresholds(table, settings));
  std::vector<Output> inputs = {table.handle()};
  inputs.insert(inputs.end(), ids.begin(), ids.end());
  if (options.mask.valid()) inputs.push_back(options.mask);
  if (options.timestamps.valid()) inputs.push_back(options.timestamps);
  const std::string combiner = internal::CombinerName(options.combiner);
  const int64_t k = static_cast<int64_t>(ids.size());
  AttrMap attrs = {{"table_name", table.table_name()},
                   {"num_features", k},
                   {"is_train", options.is_train},
                   {"is_grad", options.is_grad},
                   {"use_dynamic", use_dynamic},
                   {"send_count", options.send_count},
                   {"modify_graph", options.modify_graph},
                   {"has_mask", options.mask.valid()},
                   {"has_timestamps", options.timestamps.valid()}};
  if (std::any_of(feature_weights.begin(), feature_weights.end(),
                  [](int64_t w) { return w != 1; })) {
    attrs["feature_weights"] = feature_weights;
  }
  Node* keys =
      scope.WithOpName(name + "/keys").AddNode(internal::kSparseLookupOp, inputs, std::move(attrs));
  if (keys == nullptr) return scope.status();
  std::vector<Output> gather_in = {table.handle(), Output(keys, 0)};
  for (int64_t f = 0; f < k; ++f) gather_in.emplace_back(keys, static_cast<int>(1 + f));
  Node* gather =
      scope.WithOpName(name).AddNode(internal::kTableGatherOp, gather_in,
                                     {{"table_name", table.table_name()},
                                      {"num_features", k},
                                      {"dim", int64_t{table.dim()}},
                                      {"combiner", combiner},
                                      {"is_grad", options.is_grad},
                                      {"padding_mask", thresholds.config.padding_keys_mask}});
  if (gather == nullptr) return scope.status();
  CommitThresholds(thresholds);
  Graph* g = scope.graph();
  g->AddToCollection(kSparseLookups, gather->name());
  g->AddToCollection(kSparseLookupIdOffset, Output(keys, 0).name());
  std::vector<Output> out;
  for (int64_t f = 0; f < k; ++f) {
    out.emplace_back(gather, static_cast<int>(f));
    g->AddToCollection(kSparseLookupLocalEmb, out.back().name());
  }
  if (options.dim.has_value() && *options.dim < table.dim()) {
    // The prefix is a Slice of the gathered rows: its gradient (SliceGrad) pads the other
    // columns with zeros, so the rows' gradient stays [U, table dim] and the optimizer kernels
    // are unchanged. PaddingMask looks through this Slice to the gather.
    for (int64_t f = 0; f < k; ++f) {
      const int rank = out[f].shape().rank();
      std::vector<int64_t> begin(static_cast<size_t>(rank), 0), size(static_cast<size_t>(rank), -1);
      size.back() = *options.dim;
      out[f] = ops::Slice(scope.WithOpName(k == 1 ? name + "/dim_prefix"
                                                  : fmt::format("{}/dim_prefix_{}", name, f)),
                          out[f], begin, size);
    }
    if (!scope.ok()) return scope.status();
  }
  return out;
}

}  // namespace

StatusOr<std::vector<Output>> sparse_lookup(const Scope& scope, const SparseTable& table,
                                            const std::vector<Output>& ids,
                                            const SparseLookupOptions& options) {
  return BuildLookup(scope, table, ids, options, {}, {});
}

StatusOr<Output> sparse_lookup(const Scope& scope, const SparseTable& table, Output ids,
                               const SparseLookupOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(auto out, sparse_lookup(scope, table, std::vector<Output>{ids}, options));
  return out[0];
}

StatusOr<std::vector<Output>> sparse_lookup(const Scope& scope, const SparseTable& table,
                                            const std::vector<FeatureSpec>& specs,
                                            int64_t batch_size, int64_t ids_per_sample,
                                            const FeatureSpec* timestamp_spec,
                                            const SparseLookupOptions& options) {
  if (!scope.ok()) return scope.status();
  if (!table.valid()) return absl::InvalidArgumentError("sparse_lookup: the table is invalid");
  // The specs are one feature list with their timestamp spec (eviction needs it).
  std::vector<FeatureSpec> all = specs;
  if (timestamp_spec != nullptr) {
    if (!timestamp_spec->is_timestamp) {
      return absl::InvalidArgumentError(fmt::format(
          "sparse_lookup: timestamp_spec \"{}\" has is_timestamp=false; pass the spec of the "
          "timestamp column (is_timestamp=true) or null",
          timestamp_spec->name));
    }
    all.push_back(*timestamp_spec);
  }
  RECSDK_RETURN_IF_ERROR(ValidateFeatureSpecs(all));
  std::vector<ThresholdSetting> settings;
  std::vector<int64_t> weights;
  for (const FeatureSpec& s : specs) {
    if (s.is_timestamp || s.EffectiveTableName() != table.table_name()) {
      return absl::InvalidArgumentError(fmt::format(
          "sparse_lookup: feature \"{}\" belongs to table \"{}\"{}, not \"{}\"; pass only the "
          "specs of this table",
          s.name, s.EffectiveTableName(), s.is_timestamp ? " (it is the timestamp)" : "",
          table.table_name()));
    }
    settings.push_back(ThresholdSetting{s.access_threshold, s.eviction_threshold,
                                        fmt::format("FeatureSpec \"{}\"", s.name)});
    weights.push_back(s.faae_coefficient);
  }
  // Conflicts are reported before the dataset columns are added, so a failed call adds nothing.
  {
    std::vector<ThresholdSetting> check = settings;
    RECSDK_RETURN_IF_ERROR(AddOptionSettings(options, LookupName(table, options), &check));
    RECSDK_RETURN_IF_ERROR(MergeThresholds(table, check).status());
  }
  std::vector<Output> ids;
  for (const FeatureSpec& s : specs) {
    const int64_t b = s.batch_size > 0 ? s.batch_size : batch_size;
    ids.push_back(DatasetColumn(scope, s.EffectiveIndexKey(), DType::kInt64,
                                Shape{b > 0 ? b : Shape::kUnknownDim, ids_per_sample}));
  }
  SparseLookupOptions o = options;
  o.modify_graph = true;
  if (timestamp_spec != nullptr) {
    o.timestamps = DatasetColumn(scope, timestamp_spec->EffectiveIndexKey(), DType::kInt64,
                                 Shape{batch_size > 0 ? batch_size : Shape::kUnknownDim});
  }
  return BuildLookup(scope, table, ids, o, weights, std::move(settings));
}

StatusOr<Output> PaddingMask(const Output& result) {
  // A lookup with SparseLookupOptions::dim returns a Slice of the gather's output that keeps
  // every id and only cuts columns, so the gather's mask is its mask too. Another Slice (one a
  // user made that drops samples or ids) is not a lookup result.
  auto is_column_prefix = [](const Node& slice) {
    const std::vector<int64_t> begin = slice.IntsAttr("begin"), size = slice.IntsAttr("size");
    if (size.empty() || begin.size() != size.size()) return false;
    for (size_t i = 0; i < begin.size(); ++i) {
      if (begin[i] != 0 || (i + 1 < size.size() && size[i] != -1)) return false;
    }
    return true;
  };
  const Output lookup_result =
      result.node != nullptr && result.node->type() == "Slice" &&
              result.node->input(0).node->type() == internal::kTableGatherOp &&
              is_column_prefix(*result.node)
          ? result.node->input(0)
          : result;
  const Node* n = lookup_result.node;
  if (n == nullptr || n->type() != internal::kTableGatherOp ||
      lookup_result.index >= internal::NodeAttrs(*n).Int("num_features")) {
    return absl::InvalidArgumentError(fmt::format(
        "PaddingMask: \"{}\" is not a result of sparse_lookup; pass an Output sparse_lookup "
        "returned",
        lookup_result.valid() ? lookup_result.name() : std::string("(invalid)")));
  }
  if (!n->BoolAttr("padding_mask")) {
    return absl::InvalidArgumentError(fmt::format(
        "PaddingMask: sparse_lookup \"{}\" of table \"{}\" has no padding mask because the "
        "table's padding_keys_mask is false; create the table with padding_keys_mask = true",
        n->name(), n->StringAttr("table_name")));
  }
  return Output(
      const_cast<Node*>(n),
      static_cast<int>(internal::NodeAttrs(*n).Int("num_features")) + lookup_result.index);
}

StatusOr<std::vector<SparseGrad>> ComputeSparseGradients(const Scope& scope, Output loss,
                                                         const std::vector<SparseTable>& tables) {
  if (!scope.ok()) return scope.status();
  Graph* g = scope.graph();
  std::vector<Node*> lookups;
  std::vector<Output> xs;
  for (const std::string& name : g->Collection(kSparseLookups)) {
    Node* n = g->FindNode(name);
    if (n == nullptr) continue;
    if (n->type() != internal::kTableGatherOp) {
      // The collection is part of a loaded graph: a name in it that is no lookup result is bad
      // input, not a node whose inputs this code may index.
      return absl::InvalidArgumentError(fmt::format(
          "ComputeSparseGradients: collection \"{}\" names node \"{}\" ({}), which is not a "
          "sparse_lookup result ({}); fix the graph's collection",
          kSparseLookups, n->name(), n->type(), internal::kTableGatherOp));
    }
    const internal::NodeAttrs attrs(*n);  // absent attributes read as the declared defaults
    if (!attrs.Bool("is_grad")) continue;
    const std::string table = n->StringAttr("table_name");
    if (!tables.empty() && std::none_of(tables.begin(), tables.end(), [&](const SparseTable& t) {
          return t.table_name() == table;
        })) {
      continue;
    }
    lookups.push_back(n);
    // The embeddings only: padding masks (the outputs after them) have no gradient.
    const int k = static_cast<int>(attrs.Int("num_features"));
    for (int o = 0; o < k; ++o) xs.push_back(n->output(o));
  }
  if (lookups.empty()) {
    return absl::InvalidArgumentError(
        "ComputeSparseGradients: the graph has no trainable sparse_lookup (is_grad=true) of the "
        "given tables");
  }
  RECSDK_ASSIGN_OR_RETURN(std::vector<Output> grads, Gradients(scope, {loss}, xs));
  std::vector<SparseGrad> out;
  size_t next = 0;
  const Scope s = scope.NewSubScope("sparse_gradients");
  for (Node* n : lookups) {
    const int k = static_cast<int>(internal::NodeAttrs(*n).Int("num_features"));
    std::vector<Output> restore, gs;
    for (int f = 0; f < k; ++f) {
      const Output& grad = grads[next++];
      if (!grad.valid()) continue;
      restore.push_back(n->input(2 + f));
      gs.push_back(grad);
    }
    if (gs.empty()) continue;
    std::vector<Output> in = {n->input(1)};
    in.insert(in.end(), restore.begin(), restore.end());
    in.insert(in.end(), gs.begin(), gs.end());
    Node* agg = s.WithOpName(n->name()).AddNode(internal::kTableGradAggregateOp, in,
                                                {{"num_features", static_cast<int64_t>(gs.size())},
                                                 {"dim", n->IntAttr("dim")},
                                                 {"combiner", n->StringAttr("combiner")}});
    if (agg == nullptr) return scope.status();
    out.push_back(SparseGrad{n->StringAttr("table_name"), n->input(1), Output(agg, 0), n});
  }
  return out;
}

StatusOr<SparseGrad> SparseGradForLocalEmb(const Scope& scope, Output local_emb, Output grad) {
  if (!scope.ok()) return scope.status();
  Node* n = local_emb.node;
  if (n == nullptr || n->type() != internal::kTableGatherOp ||
      local_emb.index >= internal::NodeAttrs(*n).Int("num_features")) {
    return absl::InvalidArgumentError(fmt::format(
        "SparseGradForLocalEmb: \"{}\" is not a lookup result; pass an entry of the {} "
        "collection",
        local_emb.valid() ? local_emb.name() : std::string("(invalid)"), kSparseLookupLocalEmb));
  }
  if (!grad.valid() || grad.dtype() != DType::kFloat32 ||
      !grad.shape().IsCompatibleWith(local_emb.shape())) {
    return absl::InvalidArgumentError(fmt::format(
        "SparseGradForLocalEmb: the gradient of \"{}\" must be float32 {} like it, got {}",
        local_emb.name(), local_emb.shape().ToString(),
        grad.valid() ? fmt::format("{} {}", DTypeName(grad.dtype()), grad.shape().ToString())
                     : std::string("an invalid output")));
  }
  const Scope s = scope.NewSubScope("sparse_gradients");
  Node* agg = s.WithOpName(local_emb.node->name())
                  .AddNode(internal::kTableGradAggregateOp,
                           {n->input(1), n->input(2 + local_emb.index), grad},
                           {{"num_features", int64_t{1}},
                            {"dim", n->IntAttr("dim")},
                            {"combiner", n->StringAttr("combiner")}});
  if (agg == nullptr) return scope.status();
  return SparseGrad{n->StringAttr("table_name"), n->input(1), Output(agg, 0), n};
}

StatusOr<Node*> ApplySparseGradients(const Scope& scope, const std::vector<SparseGrad>& grads,
                                     const SparseApplyOptions& options) {
  if (!scope.ok()) return scope.status();
  Graph* g = scope.graph();
  Variable step =
      options.global_step != nullptr ? *options.global_step : GetOrCreateGlobalStep(scope);
  const Scope s = scope.NewSubScope("sparse_optimizer");
  std::vector<std::string> order;
  std::map<std::string, std::vector<const SparseGrad*>> by_table;
  for (const SparseGrad& gr : grads) {
    if (!by_table.contains(gr.table_name)) order.push_back(gr.table_name);
    by_table[gr.table_name].push_back(&gr);
  }
  std::vector<Node*> updates;
  for (const std::string& table : order) {
    Node* handle = nullptr;
    for (const std::string& name : g->Collection(kSparseTables)) {
      Node* n = g->FindNode(name);
      if (n != nullptr && n->StringAttr("table_name") == table) handle = n;
    }
    if (handle == nullptr) {
      return absl::NotFoundError(fmt::format("ApplySparseGradients: no table \"{}\"", table));
    }
    std::vector<Output> in = {Output(handle, 0), step.value()};
    for (const SparseGrad* gr : by_table[table]) {
      in.push_back(gr->unique_rows);
      in.push_back(gr->summed);
    }
    // Every lookup of the table reads its rows before the update writes them.
    std::vector<Node*> readers;
    for (const std::string& name : g->Collection(kSparseLookups)) {
      Node* n = g->FindNode(name);
      if (n != nullptr && n->StringAttr("table_name") == table) readers.push_back(n);
    }
    Node* apply = s.WithControlDependencies(readers)
                      .WithOpName("apply_" + table)
                      .AddNode(internal::kTableApplyOp, in, {{"table_name", table}});
    if (apply == nullptr) return scope.status();
    updates.push_back(apply);
  }
  if (options.increment_global_step) {
    updates.push_back(
        AssignAdd(s.WithControlDependencies(updates).WithOpName("increment_global_step"), step,
                  ops::Const(s, int64_t{1})));
  }
  Node* train = ops::Group(s.WithOpName("train_op"), updates);
  if (!scope.ok()) return scope.status();
  return train;
}

StatusOr<Node*> SparseMinimize(const Scope& scope, Output loss,
                               const std::vector<SparseTable>& tables,
                               const SparseApplyOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(auto grads, ComputeSparseGradients(scope, loss, tables));
  return ApplySparseGradients(scope, grads, options);
}

namespace {
std::vector<Node*> TableHandleNodes(const Graph& g) {
  std::vector<Node*> out;
  for (Node* n : g.nodes()) {
    if (n->type() == internal::kTableHandleOp) out.push_back(n);
  }
  return out;
}
}  // namespace

StatusOr<EmbeddingTable*> LookupTable(Session& session, std::string_view name) {
  internal::RegisterTableOps();
  std::vector<std::string> names;
  for (Node* n : TableHandleNodes(session.graph())) {
    if (n->StringAttr("table_name") == name) {
      RECSDK_ASSIGN_OR_RETURN(internal::TableResource * t,
                              internal::GetOrCreateTable(internal::SessionResources(session), *n));
      return t->table();
    }
    names.push_back(n->StringAttr("table_name"));
  }
  return absl::NotFoundError(
      fmt::format("LookupTable: the session's graph has no table \"{}\"; its tables are [{}]", name,
                  fmt::join(names, ", ")));
}

StatusOr<std::vector<EmbeddingTable*>> SessionTables(Session& session) {
  std::vector<EmbeddingTable*> out;
  for (Node* n : TableHandleNodes(session.graph())) {
    RECSDK_ASSIGN_OR_RETURN(EmbeddingTable * t, LookupTable(session, n->StringAttr("table_name")));
    out.push_back(t);
  }
  return out;
}

// get_dense_and_sparse_variable (recsdk/estimator.h): here, beside create_table, not in estimator/,
// because Session-mode code and the hash optimizers (this layer) call it.
StatusOr<std::pair<std::vector<Variable>, std::vector<SparseTable>>> get_dense_and_sparse_variable(
    Graph* graph) {
  std::pair<std::vector<Variable>, std::vector<SparseTable>> out;
  out.first = TrainableVariables(*graph);
  const Scope reuse = Scope(graph).WithVariableReuse(VariableReuse::kReuse);
  for (const std::string& name : graph->Collection(kSparseTables)) {
    const Node* n = graph->FindNode(name);
    if (n == nullptr) continue;
    RECSDK_ASSIGN_OR_RETURN(TableConfig config,
                            internal::TableConfigFromJson(n->StringAttr("table_config")));
    RECSDK_ASSIGN_OR_RETURN(SparseOptimizerConfig optimizer,
                            internal::OptimizerConfigFromJson(n->StringAttr("optimizer_config")));
    RECSDK_ASSIGN_OR_RETURN(SparseTable table, create_table(reuse, config, optimizer));
    out.second.push_back(std::move(table));
  }
  return out;
}

}  // namespace recsdk
