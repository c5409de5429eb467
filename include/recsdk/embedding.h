// recsdk/embedding.h: sparse tables in the graph: create_table, sparse_lookup and the sparse
// optimizer's gradient and apply ops (the spec's mx_rec.core.embedding and hash optimizers).
//
// create_table adds a table handle to the graph; the table itself (an EmbeddingTable, see
// table.h) is created in the Session that runs the graph, from the configs the handle carries.
// sparse_lookup adds two ops: "<name>/keys" (SparseLookup: dedup the ids, count admissions in
// training, resolve keys to rows, and output the unique rows and, per feature, the restore index
// of each id) and "<name>" (TableGather: read the rows, unpooled [B, n, dim] or pooled [B, dim]).
// With modify_graph=true (or when the ids come from FeatureSpecs) the key work moves to the host
// key stage ahead of compute (pipeline.h); the results are the same.
//
// All lookups of one table in a step share the key work: the ids of every feature of every
// sparse_lookup call of the table with the same is_train are deduplicated in one pass and
// resolved once, so admission counts each key's occurrences over all of them before any of them
// reads its row, and a key reads the same row in each. (In the graph, the Session merges such
// lookups into one op; in the key stage, the stage does it per batch. Lookups in the graph and
// lookups moved to the key stage are resolved apart; a lookup whose ids depend on another lookup
// of the table necessarily runs after it.) Each lookup keeps its own outputs, send_count and
// gradients. Hazard: a step that needs one lookup of such a group runs them all, so every
// member's ids must be fed.
//
// Gradients never form a dense [vocabulary, dim] tensor: SparseMinimize (or ComputeSparseGradients
// + ApplySparseGradients) differentiates the loss with respect to the lookups' outputs, sums the
// gradients per unique key (TableGradAggregate) and applies the table's sparse optimizer to those
// rows only (TableApply, once per table and step, whatever the number of lookups of the table).
//
// Threading: graph building is single-threaded, like Graph. The tables LookupTable and
// SessionTables return take the locks table.h asks of callers themselves, so any thread may call
// them while steps run and the key stage resolves ahead: an ExportNpy, ReadRow or size() from a
// monitoring thread waits for the key work or the row update in flight and sees whole rows.
// Eviction is the exception: it must not free rows of a step in flight, so evict between
// Session::Run calls (EvictHook in the training loop) or through KeyStage::AfterStep.
#ifndef RECSDK_EMBEDDING_H_
#define RECSDK_EMBEDDING_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/feature_spec.h"
#include "recsdk/graph.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/sparse_optimizers.h"
#include "recsdk/table.h"
#include "recsdk/variables.h"

namespace recsdk {

// Graph collections (node names, or "node:index" outputs) that sparse tables fill, named as in
// the spec so code ported from mx_rec finds them.
inline constexpr char kSparseTables[] = "sparse_tables";    // TableHandle nodes
inline constexpr char kSparseLookups[] = "sparse_lookups";  // TableGather nodes
// kSparseLookupLocalEmb: the lookup results ("node:index"), what tf.gradients(loss, emb) takes.
inline constexpr char kSparseLookupLocalEmb[] = "ASCEND_SPARSE_LOOKUP_LOCAL_EMB";
// kSparseLookupIdOffset: the unique rows of each lookup ("node:0"), the "addresses" the
// by-address optimizers write through (row ids; EmbeddingTable::RowAddresses maps them).
inline constexpr char kSparseLookupIdOffset[] = "ASCEND_SPARSE_LOOKUP_ID_OFFSET";

// kMaxLookupsPerTable: the most lookups one table may have in a graph, as in the spec: every
// feature of every sparse_lookup call of the table counts as one.
inline constexpr int kMaxLookupsPerTable = 128;

// SparseTable: the graph-side handle create_table returns. A cheap value.
class SparseTable {
 public:
  SparseTable() = default;
  // valid: false for a default-constructed handle.
  bool valid() const { return handle_.valid(); }
  // table_name: the spec's attribute name. Same as config().name.
  const std::string& table_name() const { return config_.name; }
  // dim: the table's embedding dimension (config().dim).
  int dim() const { return config_.dim; }
  // config: the table's config as the graph holds it now, which the Session creates the table
  // from: create_table's, plus the admission and eviction thresholds FeatureSpecs or
  // access_and_evict_config gave it since (see sparse_lookup). Parsed from the handle: O(size of
  // the config).
  TableConfig config() const;
  // optimizer: the table's sparse optimizer, as given to create_table.
  const SparseOptimizerConfig& optimizer() const { return optimizer_; }
  // handle: the TableHandle node's resource output.
  Output handle() const { return handle_; }

 private:
  friend StatusOr<SparseTable> create_table(const Scope&, const TableConfig&,
                                            const SparseOptimizerConfig&);
  Output handle_;
  TableConfig config_;
  SparseOptimizerConfig optimizer_;
};

// create_table: validates `config` and `optimizer` (the sparse optimizer decides the slots each
// row carries, so it is fixed when the table is made) and adds a TableHandle node named after the
// table. InvalidArgument for an invalid config or a second table of the same name in the graph
// -- except under a scope with variable reuse (Scope::WithVariableReuse, as the Estimator builds
// its train, eval and predict branches), where the existing table of that name is returned (its
// dim and optimizer must match), so all branches share one table.
StatusOr<SparseTable> create_table(const Scope& scope, const TableConfig& config,
                                   const SparseOptimizerConfig& optimizer);

// AccessAndEvictConfig: the spec's access_and_evict_config of sparse_lookup (a dictionary there):
// the admission and eviction thresholds of the lookup's table, for lookups that do not come from
// FeatureSpecs (the spec's automatic graph modification mode; here it works with
// modify_graph=false too). Same meaning and rules as TableConfig's fields of the same names.
struct AccessAndEvictConfig {
  // access_threshold: -1 (default) leaves admission as the table has it; >= 0 sets it; below -1
  // is an error.
  int64_t access_threshold = -1;
  // eviction_threshold: seconds; -1 (default) leaves eviction as the table has it; >= 0 sets it
  // (needs admission on the table, and the lookups' timestamps to advance the data time); below
  // -1 is an error.
  int64_t eviction_threshold = -1;
};

// SparseLookupOptions: the spec's sparse_lookup parameters.
struct SparseLookupOptions {
  // name: the lookup's op name; default "<table_name>_lookup".
  std::string name;
  // send_count: the static capacity of unique keys per batch (all features of this lookup
  // together; the keys of the table's other lookups do not count). With use_dynamic=false the
  // unique rows are padded to send_count, and a batch with more unique keys is an error naming the
  // table, the count and the limit. Ignored (may be 0) with use_dynamic=true.
  int64_t send_count = 0;
  // use_dynamic: dynamic shape (buffers sized per batch); false needs send_count > 0. Unset
  // (default): the job's setting, init's InitOptions::use_dynamic as the spec has it (true
  // without init); set, it overrides init's for this lookup. Read when sparse_lookup is called.
  std::optional<bool> use_dynamic;
  // is_train: training lookups count admissions, insert admitted keys and refresh timestamps;
  // evaluation lookups (false) only read (unknown keys read serving_default_value). Default true.
  bool is_train = true;
  // is_grad: whether the sparse optimizer trains the rows this lookup reads. Default true.
  bool is_grad = true;
  // modify_graph: move the key work to the key stage (automatic graph modification, see
  // ModifyGraph in pipeline.h). The ids, mask and timestamps must be dataset columns. Default
  // false.
  bool modify_graph = false;
  // combiner: absent (default) returns [B, n, dim]; kSum / kMean / kSqrtn pool over the n ids of
  // a sample to [B, dim] (mean and sqrtn count the sample's non-padding ids).
  std::optional<Combiner> combiner;
  // dim: the spec's sparse_lookup dim: read only the first `dim` columns of each row (a prefix),
  // so the result is [B, n, dim] or [B, dim], and only those columns train (the gradient of the
  // other columns is zero; the optimizer still visits the row, so its slots and any weight decay
  // advance as for a zero gradient). Absent (default, the spec's dim=None): the table's dim. Must
  // be in [1, the table's dim]; otherwise InvalidArgument naming both. Cost: the whole rows are
  // gathered and the prefix sliced from them, so a prefix saves no lookup time.
  std::optional<int64_t> dim;
  // mask: optional [B] float32 (the "mask" column of padded batches): rows with mask 0 read zeros,
  // count no admission and train nothing.
  Output mask;
  // timestamps: optional [B] int64 seconds (the FeatureSpec with is_timestamp): each key's last
  // access time for eviction. Without it keys take the table's current data time.
  Output timestamps;
  // access_and_evict_config: the table's admission and eviction thresholds (see
  // AccessAndEvictConfig). Admission is per table: a threshold set here, on a FeatureSpec or in
  // the TableConfig must agree with every other one set for the table (-1 sets nothing);
  // otherwise sparse_lookup is an InvalidArgument naming the table, both values and where they
  // come from, and changes nothing. Default: none.
  std::optional<AccessAndEvictConfig> access_and_evict_config;
};

// sparse_lookup: looks `ids` ([B, n] int64 or int32) up in `table`. Returns [B, n, dim] float32,
// or [B, dim] with a combiner (dim: the table's, or SparseLookupOptions::dim).
StatusOr<Output> sparse_lookup(const Scope& scope, const SparseTable& table, Output ids,
                               const SparseLookupOptions& options = {});
// sparse_lookup of several features of one table: their keys are deduplicated together in one
// pass (with those of the table's other lookups, see above). One result per feature; every ids
// tensor must have the same batch dimension. A table takes at most kMaxLookupsPerTable features
// over all its sparse_lookup calls; beyond that the call is an InvalidArgument.
StatusOr<std::vector<Output>> sparse_lookup(const Scope& scope, const SparseTable& table,
                                            const std::vector<Output>& ids,
                                            const SparseLookupOptions& options = {});
// sparse_lookup of FeatureSpecs (the spec's FeatureSpec mode): each spec's ids come from the
// dataset column spec.EffectiveIndexKey() ([batch_size, ids_per_sample] int64, see
// DatasetColumn in pipeline.h); the lookup is marked for the key stage (ModifyGraph moves it),
// and without ModifyGraph it runs in the graph fed by BatchFeeds, with the same results.
// `timestamp_spec` (is_timestamp) names the timestamp column, or is null; the specs are
// validated together with it (ValidateFeatureSpecs). Specs must name this table. A spec with
// `fields` (several fields in one table) reads its merged column, which MergeFeatureFields adds
// to the dataset's batches; ids_per_sample is then the sum of the fields' widths.
// The specs' settings take effect on the table: their access_threshold and eviction_threshold
// become the table's (the same agreement rule as access_and_evict_config: every spec, lookup and
// the TableConfig that sets a threshold of the table must set the same value), and each
// feature's faae_coefficient weighs its occurrences in the admission count (a key seen once in
// a feature with coefficient 3 counts 3; the table's own faae_coefficient multiplies on top).
StatusOr<std::vector<Output>> sparse_lookup(const Scope& scope, const SparseTable& table,
                                            const std::vector<FeatureSpec>& specs,
                                            int64_t batch_size, int64_t ids_per_sample,
                                            const FeatureSpec* timestamp_spec,
                                            const SparseLookupOptions& options = {});

// PaddingMask: the [B, n] float32 mask of the ids behind a sparse_lookup result (an Output it
// returned, pooled or not): 0 where the id is one of the table's padding_keys or its sample is
// masked out by SparseLookupOptions::mask, 1 elsewhere, so a model can exclude padding from what
// it computes. Tables created with padding_keys_mask = true produce it in every lookup (a second
// output of the "<name>" gather op, in the graph and in key-stage mode alike); for other tables,
// or an Output that is not a lookup result, InvalidArgument. Cheap: the mask is computed with the
// gather from the rows it already has. It has no gradient.
StatusOr<Output> PaddingMask(const Output& lookup_result);

// SparseGrad: the gradient of one lookup: per unique row, the sum of the gradients of the ids
// that map to it ([U, dim] float32), with the rows ([U] int32 row ids; sentinels train nothing).
struct SparseGrad {
  // table_name: the table the lookup reads.
  std::string table_name;
  Output unique_rows;      // the kSparseLookupIdOffset output
  Output summed;           // [U, dim]
  Node* lookup = nullptr;  // the TableGather node
};

// ComputeSparseGradients: d loss / d rows for every lookup with is_grad of the given tables (all
// tables when empty). Lookups the loss does not depend on are left out.
StatusOr<std::vector<SparseGrad>> ComputeSparseGradients(
    const Scope& scope, Output loss, const std::vector<SparseTable>& tables = {});

// SparseGradForLocalEmb: the SparseGrad of one lookup result from `grad` = d loss / d local_emb,
// for code written the spec's way: local_emb is an entry of the kSparseLookupLocalEmb collection
// (what tf.gradients(loss, emb) takes) and `grad` its gradient (Gradients in gradients.h); the
// result sums `grad` per unique row, and its unique_rows is the lookup's kSparseLookupIdOffset
// entry (the addresses). ApplySparseGradients of it is the spec's
// sparse_optimizer.apply_gradients([grad, addr]): with a by-address optimizer (which
// use_dynamic_expansion needs) the rows are updated through their addresses. InvalidArgument
// when local_emb is not a lookup result or grad does not match its shape.
StatusOr<SparseGrad> SparseGradForLocalEmb(const Scope& scope, Output local_emb, Output grad);

// SparseApplyOptions: the options of ApplySparseGradients.
struct SparseApplyOptions {
  // global_step: the step variable read for the 1-based step; default the graph's (created if
  // missing).
  const Variable* global_step = nullptr;
  // increment_global_step: also add one to the global step after the updates. Default false:
  // the dense optimizer's Minimize increments it.
  bool increment_global_step = false;
};
// ApplySparseGradients: one TableApply per table: gradients of several lookups of a table are
// summed per row first, then the table's optimizer updates each touched row once with step
// global_step + 1 (LazyAdam's bias correction). The apply runs after every lookup of the table
// in the step. Returns a NoOp target grouping the updates.
StatusOr<Node*> ApplySparseGradients(const Scope& scope, const std::vector<SparseGrad>& grads,
                                     const SparseApplyOptions& options = {});
// SparseMinimize: ComputeSparseGradients + ApplySparseGradients.
StatusOr<Node*> SparseMinimize(const Scope& scope, Output loss,
                               const std::vector<SparseTable>& tables = {},
                               const SparseApplyOptions& options = {});

// LookupTable: the table `name` of a Session, created from its graph's TableHandle if no step has
// run yet. NotFound naming the tables that exist. The pointer lives as long as the Session; the
// table locks itself (see Threading above).
StatusOr<EmbeddingTable*> LookupTable(Session& session, std::string_view name);
// set_threshold: changes the admission threshold of the session's table `table_name` during
// training (EmbeddingTable::SetAccessThreshold), under the table's key lock, so a key stage
// resolving ahead sees the old threshold for the batches it already resolved and the new one for
// every later batch. Errors as SetAccessThreshold's, and NotFound for an unknown table. Call it
// between Session::Run calls (SetThresholdHook in hooks.h does it at a given step).
Status set_threshold(Session& session, std::string_view table_name, int64_t access_threshold);

// SessionTables: every table of the session's graph, in creation order (for EvictHook).
StatusOr<std::vector<EmbeddingTable*>> SessionTables(Session& session);

}  // namespace recsdk

#endif  // RECSDK_EMBEDDING_H_
