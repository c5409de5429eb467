// table_ops.cc: sparse tables in the graph: the op definitions and CPU kernels of TableHandle,
// SparseLookup, TableGather, TableGradAggregate and TableApply, and the public builders of
// recsdk/embedding.h (create_table, sparse_lookup, the sparse optimizer's gradient and apply).
//
// Threading: kernels follow kernel.h (one node at a time per kernel). SparseLookup takes the
// table's resolve_mu, exclusively in training (Resolve changes which keys the table holds) and
// shared in evaluation (Resolve reads the key index, which a training resolve under
// stream_max_parallel_num or the key stage may be growing); TableGather and TableApply only touch
// the rows they are given (table.h allows them beside a Resolve).
#include "src/session/table_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/embedding.h"
#include "recsdk/gradients.h"
#include "recsdk/ops.h"
#include "recsdk/pipeline.h"
#include "src/common/json_number.h"
#include "src/common/json_parse.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/graph/op_registry.h"

namespace recsdk {

namespace internal {
namespace {

using nlohmann::json;

constexpr uint32_t kPaddingRow = EmbeddingTable::kPaddingRow;
constexpr uint32_t kDefaultRow = EmbeddingTable::kDefaultRow;

std::string CombinerName(const std::optional<Combiner>& c) {
  if (!c) return "none";
  switch (*c) {
    case Combiner::kSum:
      return "sum";
    case Combiner::kMean:
      return "mean";
    case Combiner::kSqrtn:
      return "sqrtn";
  }
  return "none";
}

// ParseCombiner: "none" -> nullopt.
StatusOr<std::optional<Combiner>> ParseCombiner(const std::string& s) {
  if (s == "none" || s.empty()) return std::optional<Combiner>();
  if (s == "sum") return std::optional<Combiner>(Combiner::kSum);
  if (s == "mean") return std::optional<Combiner>(Combiner::kMean);
  if (s == "sqrtn") return std::optional<Combiner>(Combiner::kSqrtn);
  return absl::InvalidArgumentError(
      fmt::format("combiner \"{}\" is unknown; use none, sum, mean or sqrtn", s));
}

json InitializerToJson(const Initializer& i) {
  return {{"kind", static_cast<int32_t>(i.kind)},
          {"value", i.value},
          {"min", i.min},
          {"max", i.max},
          {"mean", i.mean},
          {"stddev", i.stddev},
          {"seed", i.seed}};
}

Initializer InitializerFromJson(const json& j) {
  Initializer i;
  i.kind = JsonEnum(j.at("kind"), Initializer::Kind::kGlorotNormal);
  i.value = j.at("value").get<double>();
  i.min = j.at("min").get<double>();
  i.max = j.at("max").get<double>();
  i.mean = j.at("mean").get<double>();
  i.stddev = j.at("stddev").get<double>();
  i.seed = JsonNumber<int64_t>(j.at("seed"));
  return i;
}

// Float32 row of a [U] int32 tensor holding uint32 row ids.
inline uint32_t RowAt(const Tensor& unique_rows, int64_t i) {
  return static_cast<uint32_t>(unique_rows.data<int32_t>()[i]);
}

}  // namespace

std::string TableConfigToJson(const TableConfig& c) {
  json j = {{"name", c.name},
            {"key_dtype", std::string(DTypeName(c.key_dtype))},
            {"dim", c.dim},
            {"value_dtype", std::string(DTypeName(c.value_dtype))},
            {"initializer", InitializerToJson(c.initializer)},
            {"device_vocabulary_size", c.device_vocabulary_size},
            {"host_vocabulary_size", c.host_vocabulary_size},
            {"ssd_vocabulary_size", c.ssd_vocabulary_size},
            {"ssd_data_path", c.ssd_data_path},
            {"is_save", c.is_save},
            {"is_dp", c.is_dp},
            {"all2all_gradients_op", c.all2all_gradients_op},
            {"padding_keys", c.padding_keys},
            {"padding_keys_mask", c.padding_keys_mask},
            {"serving_default_value", c.serving_default_value},
            {"use_dynamic_expansion", c.use_dynamic_expansion},
            {"access_threshold", c.access_threshold},
            {"eviction_threshold", c.eviction_threshold},
            {"faae_coefficient", c.faae_coefficient}};
  return j.dump();
}

StatusOr<TableConfig> TableConfigFromJson(const std::string& text) {
  RECSDK_ASSIGN_OR_RETURN(json j, ParseJson(text, "table config attribute"));
  try {
    TableConfig c;
    c.name = j.at("name").get<std::string>();
    RECSDK_ASSIGN_OR_RETURN(c.key_dtype, ParseDType(j.at("key_dtype").get<std::string>()));
    c.dim = JsonNumber<int>(j.at("dim"));
    RECSDK_ASSIGN_OR_RETURN(c.value_dtype, ParseDType(j.at("value_dtype").get<std::string>()));
    c.initializer = InitializerFromJson(j.at("initializer"));
    c.device_vocabulary_size = JsonNumber<int64_t>(j.at("device_vocabulary_size"));
    c.host_vocabulary_size = JsonNumber<int64_t>(j.at("host_vocabulary_size"));
    c.ssd_vocabulary_size = JsonNumber<int64_t>(j.at("ssd_vocabulary_size"));
    c.ssd_data_path = j.at("ssd_data_path").get<std::vector<std::string>>();
    c.is_save = j.at("is_save").get<bool>();
    c.is_dp = j.at("is_dp").get<bool>();
    c.all2all_gradients_op = j.at("all2all_gradients_op").get<std::string>();
    c.padding_keys = j.at("padding_keys").get<std::vector<int64_t>>();
    c.padding_keys_mask = j.at("padding_keys_mask").get<bool>();
    c.serving_default_value = JsonNumber<float>(j.at("serving_default_value"));
    c.use_dynamic_expansion = j.at("use_dynamic_expansion").get<bool>();
    c.access_threshold = JsonNumber<int64_t>(j.at("access_threshold"));
    c.eviction_threshold = JsonNumber<int64_t>(j.at("eviction_threshold"));
    c.faae_coefficient = JsonNumber<float>(j.at("faae_coefficient"));
    return c;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("table config attribute: {}", e.what()));
  }
}

std::string OptimizerConfigToJson(const SparseOptimizerConfig& o) {
  json j = {{"kind", static_cast<int32_t>(o.kind)},
            {"learning_rate", o.learning_rate},
            {"weight_decay", o.weight_decay},
            {"initial_accumulator_value", o.initial_accumulator_value},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"epsilon", o.epsilon},
            {"adagrad_epsilon", o.adagrad_epsilon},
            {"learning_rate_power", o.learning_rate_power},
            {"l1", o.l1},
            {"l2", o.l2},
            {"l2_shrinkage", o.l2_shrinkage}};
  return j.dump();
}

StatusOr<SparseOptimizerConfig> OptimizerConfigFromJson(const std::string& text) {
  RECSDK_ASSIGN_OR_RETURN(json j, ParseJson(text, "optimizer config attribute"));
  try {
    SparseOptimizerConfig o;
    o.kind = JsonEnum(j.at("kind"), SparseOptimizerKind::kFTRL);
    o.learning_rate = JsonNumber<float>(j.at("learning_rate"));
    o.weight_decay = JsonNumber<float>(j.at("weight_decay"));
    o.initial_accumulator_value = JsonNumber<float>(j.at("initial_accumulator_value"));
    o.beta1 = JsonNumber<float>(j.at("beta1"));
    o.beta2 = JsonNumber<float>(j.at("beta2"));
    o.epsilon = JsonNumber<float>(j.at("epsilon"));
    o.adagrad_epsilon =
        JsonNumberOr<float>(j, "adagrad_epsilon", 0.0f);  // absent in graphs saved before it
    o.learning_rate_power = JsonNumber<float>(j.at("learning_rate_power"));
    o.l1 = JsonNumber<float>(j.at("l1"));
    o.l2 = JsonNumber<float>(j.at("l2"));
    o.l2_shrinkage = JsonNumber<float>(j.at("l2_shrinkage"));
    return o;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("optimizer config attribute: {}", e.what()));
  }
}

StatusOr<TableResource*> GetOrCreateTable(ResourceMgr* resources, const Node& handle_node) {
  const std::string table_name = handle_node.StringAttr("table_name");
  const std::string key = TableResourceName(table_name);
  if (Resource* r = resources->Lookup(key)) return static_cast<TableResource*>(r);
  RECSDK_ASSIGN_OR_RETURN(TableConfig config,
                          TableConfigFromJson(handle_node.StringAttr("table_config")));
  RECSDK_ASSIGN_OR_RETURN(SparseOptimizerConfig optimizer,
                          OptimizerConfigFromJson(handle_node.StringAttr("optimizer_config")));
  // Create outside LookupOrCreate so a failure is reported instead of stored.
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingTable> table,
                          EmbeddingTable::Create(config, optimizer));
  // A tiered table's device tier is its own mapping (the slab, committed as rows arrive), counted
  // whole against variable_memory_max_size beside the dense variables, as the spec's device memory.
  std::unique_ptr<MemoryCharge> charge;
  if (const int64_t device_bytes = DeviceTierBytes(*table);
      device_bytes > 0 && resources->variable_allocator() != nullptr) {
    RECSDK_ASSIGN_OR_RETURN(
        charge, resources->variable_allocator()->Charge(
                    device_bytes, fmt::format("the device tier of table \"{}\" "
                                              "(device_vocabulary_size {} rows of {} bytes)",
                                              table_name, config.device_vocabulary_size,
                                              device_bytes / config.device_vocabulary_size)));
  }
  auto holder = std::make_shared<std::unique_ptr<EmbeddingTable>>(std::move(table));
  Resource* r = resources->LookupOrCreate(
      key, [&] { return std::make_unique<TableResource>(std::move(*holder), std::move(charge)); });
  return static_cast<TableResource*>(r);
}

LookupAttrs ReadLookupAttrs(const Node& node) {
  LookupAttrs a;
  a.name = node.name();
  a.table_name = node.StringAttr("table_name");
  a.num_features = static_cast<int>(node.IntAttr("num_features", 1));
  a.is_train = node.BoolAttr("is_train", true);
  a.static_shape = !node.BoolAttr("use_dynamic", true);
  a.send_count = node.IntAttr("send_count", 0);
  a.has_mask = node.BoolAttr("has_mask");
  a.has_timestamps = node.BoolAttr("has_timestamps");
  a.feature_weights = node.IntsAttr("feature_weights");
  return a;
}

std::vector<LookupAttrs> ReadGroupAttrs(const Node& node) {
  const std::vector<std::string> names = node.StringsAttr("member_names");
  const std::vector<int64_t> features = node.IntsAttr("member_num_features");
  const std::vector<int64_t> masks = node.IntsAttr("member_has_mask");
  const std::vector<int64_t> times = node.IntsAttr("member_has_timestamps");
  const std::vector<int64_t> dynamic = node.IntsAttr("member_use_dynamic");
  const std::vector<int64_t> send = node.IntsAttr("member_send_count");
  const std::vector<int64_t> weights = node.IntsAttr("member_feature_weights");
  std::vector<LookupAttrs> out(names.size());
  size_t next_weight = 0;
  for (size_t m = 0; m < names.size(); ++m) {
    LookupAttrs& a = out[m];
    a.name = names[m];
    a.table_name = node.StringAttr("table_name");
    a.is_train = node.BoolAttr("is_train", true);
    a.num_features = static_cast<int>(features[m]);
    a.has_mask = masks[m] != 0;
    a.has_timestamps = times[m] != 0;
    a.static_shape = dynamic[m] == 0;
    a.send_count = send[m];
    a.feature_weights.assign(weights.begin() + next_weight,
                             weights.begin() + next_weight + a.num_features);
    next_weight += a.num_features;
  }
  return out;
}

namespace {

StatusOr<TableResource*> TableInput(OpKernelContext& ctx) {
  auto* t = dynamic_cast<TableResource*>(ResourceFromTensor(ctx.input(0)));
  if (t == nullptr) return ctx.Error("input 0 is not a table handle");
  return t;
}

Status CheckRestore(OpKernelContext& ctx, const Tensor& restore, int64_t num_unique) {
  const int32_t* r = restore.data<int32_t>();
  for (int64_t i = 0; i < restore.num_elements(); ++i) {
    if (r[i] < 0 || r[i] >= num_unique) {
      return ctx.Error("restore index {} at position {} is outside the {} unique rows", r[i], i,
                       num_unique);
    }
  }
  return absl::OkStatus();
}

Status HandleShape(InferenceContext& c) {
  c.AddOutput(DType::kResource, Shape{});
  return absl::OkStatus();
}

// AddLookupOutputs: checks one lookup's inputs, which start at `first` (ids, then mask and
// timestamps), and adds its outputs: unique rows [U] (or [send_count]) and the restore per feature.
Status AddLookupOutputs(InferenceContext& c, int first, int k, bool has_mask, bool has_ts,
                        bool dynamic, int64_t send_count) {
  int64_t batch = Shape::kUnknownDim;
  for (int i = first; i < first + k; ++i) {
    if (c.input_dtype(i) != DType::kInt64 && c.input_dtype(i) != DType::kInt32) {
      return c.Error("{} must be int64 or int32 ids", c.InputDesc(i));
    }
    RECSDK_RETURN_IF_ERROR(c.ExpectRank(i, 2));
    const int64_t b = c.input_shape(i).dim(0);
    if (b != Shape::kUnknownDim && batch != Shape::kUnknownDim && b != batch) {
      return c.Error("{} has batch {} but an earlier feature has {}", c.InputDesc(i), b, batch);
    }
    if (b != Shape::kUnknownDim) batch = b;
  }
  int next = first + k;
  if (has_mask && c.input_dtype(next) != DType::kFloat32) {
    return c.Error("the mask {} must be float32", c.InputDesc(next));
  }
  next += has_mask ? 1 : 0;
  if (has_ts && c.input_dtype(next) != DType::kInt64) {
    return c.Error("the timestamps {} must be int64", c.InputDesc(next));
  }
  if (!dynamic && send_count <= 0) {
    return c.Error("static shape (use_dynamic=false) needs send_count > 0, got {}", send_count);
  }
  c.AddOutput(DType::kInt32, Shape{dynamic ? Shape::kUnknownDim : send_count});
  for (int i = first; i < first + k; ++i) c.AddOutput(DType::kInt32, c.input_shape(i));
  return absl::OkStatus();
}

Status LookupShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
  const int k = static_cast<int>(c.IntAttr("num_features", 1));
  const bool has_mask = c.BoolAttr("has_mask");
  const bool has_ts = c.BoolAttr("has_timestamps");
  if (k < 1 || c.num_inputs() != 1 + k + (has_mask ? 1 : 0) + (has_ts ? 1 : 0)) {
    return c.Error("expects the table handle, {} ids inputs{}{}; got {} inputs", k,
                   has_mask ? ", a mask" : "", has_ts ? ", timestamps" : "", c.num_inputs());
  }
  const std::vector<int64_t> weights = c.IntsAttr("feature_weights");
  if (!weights.empty() && static_cast<int>(weights.size()) != k) {
    return c.Error("feature_weights has {} entries for {} features", weights.size(), k);
  }
  return AddLookupOutputs(c, 1, k, has_mask, has_ts, c.BoolAttr("use_dynamic", true),
                          c.IntAttr("send_count"));
}

// TableLookupGroup: the handle, then each member's inputs; each member's outputs in turn.
Status GroupShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
  const std::vector<int64_t> features = c.IntsAttr("member_num_features");
  const std::vector<int64_t> masks = c.IntsAttr("member_has_mask");
  const std::vector<int64_t> times = c.IntsAttr("member_has_timestamps");
  const std::vector<int64_t> dynamic = c.IntsAttr("member_use_dynamic");
  const std::vector<int64_t> send = c.IntsAttr("member_send_count");
  const size_t m = features.size();
  if (m == 0 || masks.size() != m || times.size() != m || dynamic.size() != m || send.size() != m) {
    return c.Error("member attributes disagree on the number of members");
  }
  int next = 1;
  for (size_t i = 0; i < m; ++i) {
    const int k = static_cast<int>(features[i]);
    if (k < 1 || next + k + masks[i] + times[i] > c.num_inputs()) {
      return c.Error("member {} expects {} ids inputs beyond input {}", i, k, next);
    }
    RECSDK_RETURN_IF_ERROR(
        AddLookupOutputs(c, next, k, masks[i] != 0, times[i] != 0, dynamic[i] != 0, send[i]));
    next += k + static_cast<int>(masks[i] + times[i]);
  }
  if (next != c.num_inputs()) return c.Error("{} inputs left over", c.num_inputs() - next);
  return absl::OkStatus();
}

// TableLookupForward: its inputs, unchanged.
Status ForwardShape(InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) c.AddOutput(c.input_dtype(i), c.input_shape(i));
  return absl::OkStatus();
}

Status GatherShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(1, DType::kInt32));
  const int k = static_cast<int>(c.IntAttr("num_features", 1));
  if (c.num_inputs() != 2 + k) return c.Error("expects handle, unique rows and {} restore", k);
  const int64_t dim = c.IntAttr("dim");
  RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(c.StringAttr("combiner")));
  for (int i = 2; i < 2 + k; ++i) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, DType::kInt32));
    RECSDK_RETURN_IF_ERROR(c.ExpectRank(i, 2));
    const Shape& s = c.input_shape(i);
    c.AddOutput(DType::kFloat32, combiner ? Shape{s.dim(0), dim} : Shape{s.dim(0), s.dim(1), dim});
  }
  // With padding_mask, per feature the [B, n] mask of its ids follows the embeddings.
  if (c.BoolAttr("padding_mask")) {
    for (int i = 2; i < 2 + k; ++i) c.AddOutput(DType::kFloat32, c.input_shape(i));
  }
  return absl::OkStatus();
}

// GatherConcatSegment: one segment of a TableGatherConcat: its first input and its width.
struct GatherConcatSegment {
  bool gather = false;
  int input = 0;
  int gather_index = 0;  // into combiners and dims
};

StatusOr<std::vector<GatherConcatSegment>> GatherConcatSegments(
    const std::vector<int64_t>& kinds, int64_t num_dims, int num_inputs,
    const std::function<Status(std::string)>& error) {
  std::vector<GatherConcatSegment> out;
  int input = 0, gathers = 0;
  for (int64_t kind : kinds) {
    if (kind != 0 && kind != 1) return error(fmt::format("segment kind {} is not 0 or 1", kind));
    out.push_back({kind == 1, input, gathers});
    input += kind == 1 ? 3 : 1;
    gathers += kind == 1 ? 1 : 0;
  }
  if (input != num_inputs || gathers != num_dims) {
    return error(fmt::format("{} segments ({} gathers) need {} inputs and {} dims, got {} and {}",
                             kinds.size(), gathers, input, gathers, num_inputs, num_dims));
  }
  return out;
}

Status GatherConcatShape(InferenceContext& c) {
  const std::vector<int64_t> dims = c.IntsAttr("dims");
  RECSDK_ASSIGN_OR_RETURN(
      auto segments,
      GatherConcatSegments(c.IntsAttr("segment_kinds"), static_cast<int64_t>(dims.size()),
                           c.num_inputs(), [&](std::string m) { return c.Error("{}", m); }));
  int64_t batch = -1, width = 0;
  for (const GatherConcatSegment& s : segments) {
    if (s.gather) {
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(s.input, DType::kResource));
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(s.input + 1, DType::kInt32));
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(s.input + 2, DType::kInt32));
      RECSDK_RETURN_IF_ERROR(c.ExpectRank(s.input + 2, 2));
    } else {
      RECSDK_RETURN_IF_ERROR(c.ExpectDType(s.input, DType::kFloat32));
      RECSDK_RETURN_IF_ERROR(c.ExpectRank(s.input, 2));
    }
    const Shape& in = c.input_shape(s.gather ? s.input + 2 : s.input);
    if (batch < 0) batch = in.dim(0);
    const int64_t w = s.gather ? dims[s.gather_index] : in.dim(1);
    width = width < 0 || w < 0 ? -1 : width + w;
  }
  c.AddOutput(DType::kFloat32, Shape{batch, width});
  return absl::OkStatus();
}

Status AggregateShape(InferenceContext& c) {
  const int k = static_cast<int>(c.IntAttr("num_features", 1));
  if (c.num_inputs() != 1 + 2 * k)
    return c.Error("expects unique rows, {} restore, {} grads", k, k);
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kInt32));
  for (int i = 1; i <= 2 * k; ++i) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, i <= k ? DType::kInt32 : DType::kFloat32));
  }
  c.AddOutput(DType::kFloat32, Shape{c.input_shape(0).dim(0), c.IntAttr("dim")});
  return absl::OkStatus();
}

Status ApplyShape(InferenceContext& c) {
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(0, DType::kResource));
  RECSDK_RETURN_IF_ERROR(c.ExpectDType(1, DType::kInt64));
  if (c.num_inputs() < 4 || c.num_inputs() % 2 != 0) {
    return c.Error("expects handle, step and (unique rows, summed gradients) pairs");
  }
  for (int i = 2; i < c.num_inputs(); i += 2) {
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(i, DType::kInt32));
    RECSDK_RETURN_IF_ERROR(c.ExpectDType(i + 1, DType::kFloat32));
  }
  return absl::OkStatus();
}

OpDef Stateful(std::string type, int min_in, int max_in, ShapeFn fn) {
  OpDef d;
  d.type = std::move(type);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.shape_fn = std::move(fn);
  d.no_gradient = true;
  d.stateful = true;
  return d;
}

// --- Kernels ------------------------------------------------------------------------------

Status TableHandleKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, GetOrCreateTable(ctx.resources(), ctx.node()));
  ctx.set_output(0, MakeResourceTensor(t));
  return absl::OkStatus();
}

// RunLookups: the key work of lookups of one table and one mode whose inputs follow the handle
// in the order of `attrs`; their outputs in the same order.
Status RunLookups(OpKernelContext& ctx, const std::vector<LookupAttrs>& attrs) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  std::vector<LookupBatch> lookups(attrs.size());
  int next = 1;
  for (size_t l = 0; l < attrs.size(); ++l) {
    const LookupAttrs& a = attrs[l];
    LookupBatch& b = lookups[l];
    b.attrs = &a;
    for (int f = 0; f < a.num_features; ++f) b.ids.push_back(&ctx.input(next + f));
    if (a.has_mask) b.mask = &ctx.input(next + a.mask_input());
    if (a.has_timestamps) b.timestamps = &ctx.input(next + a.timestamps_input());
    next += a.num_inputs();
  }
  TableKeyWork work;
  work.table_name = attrs.front().table_name;
  RECSDK_RETURN_IF_ERROR(PrepareTableKeys(lookups, &work));
  if (attrs.front().is_train) {
    std::unique_lock<std::shared_mutex> lock(t->resolve_mu);
    RECSDK_RETURN_IF_ERROR(ResolveTableKeys(t->table(), LookupMode::kTrain, &work));
  } else {
    // Reads the key index: no training resolve may insert (or rehash) meanwhile.
    std::shared_lock<std::shared_mutex> lock(t->resolve_mu);
    RECSDK_RETURN_IF_ERROR(ResolveTableKeys(t->table(), LookupMode::kEval, &work));
  }
  int out = 0;
  for (TableKeyWork::Part& part : work.parts) {
    ctx.set_output(out++, std::move(part.unique_rows));
    for (Tensor& r : part.restore) ctx.set_output(out++, std::move(r));
  }
  return absl::OkStatus();
}

Status SparseLookupKernel(OpKernelContext& ctx) {
  // A moved lookup runs only in its key stage: running it here would do its key work (for a
  // training lookup: admission and inserts) on whatever batch fed the ids, e.g. an evaluation one.
  if (ctx.node().BoolAttr("moved_to_key_stage")) {
    const bool train = ctx.node().BoolAttr("is_train", true);
    return absl::FailedPreconditionError(fmt::format(
        "sparse_lookup \"{}\" (table \"{}\", is_train {}) was moved to the key stage "
        "(ModifyGraph) but this step did not feed its results: feed the step from a {} key stage "
        "(KeyStageChannel::{}), and fetch only outputs of that channel's lookups",
        ctx.node().name(), ctx.node().StringAttr("table_name"), train,
        train ? "training" : "evaluation", train ? "kTrain" : "kEval"));
  }
  return RunLookups(ctx, {ReadLookupAttrs(ctx.node())});
}

Status TableLookupGroupKernel(OpKernelContext& ctx) {
  return RunLookups(ctx, ReadGroupAttrs(ctx.node()));
}

Status TableLookupForwardKernel(OpKernelContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) ctx.set_output(i, ctx.input(i));
  return absl::OkStatus();
}

Status TableGatherKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  const EmbeddingTable& table = *t->table();
  const Tensor& unique = ctx.input(1);
  const int k = static_cast<int>(ctx.node().IntAttr("num_features", 1));
  RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(ctx.node().StringAttr("combiner")));
  const int64_t dim = table.dim();
  const auto rows = absl::Span<const uint32_t>(
      reinterpret_cast<const uint32_t*>(unique.data<int32_t>()), unique.num_elements());
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(2 + f);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, unique.num_elements()));
    const auto idx = absl::Span<const uint32_t>(
        reinterpret_cast<const uint32_t*>(restore.data<int32_t>()), restore.num_elements());
    const int64_t b = restore.dim(0), n = restore.dim(1);
    // Both gathers write every element of their output: no zero-fill.
    if (!combiner) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(f, Shape{b, n, dim}));
      RECSDK_RETURN_IF_ERROR(table.GatherRestored(rows, idx, out->flat<float>()));
    } else {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(f, Shape{b, dim}));
      RECSDK_RETURN_IF_ERROR(table.GatherPooled(rows, idx, b, n, *combiner, out->flat<float>()));
    }
    if (ctx.node().BoolAttr("padding_mask")) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output(k + f, Shape{b, n}));
      RECSDK_RETURN_IF_ERROR(table.PaddingMask(rows, idx, mask->flat<float>()));
    }
  }
  return absl::OkStatus();
}

// TableGatherConcatKernel: each pooled gather writes its [batch, dim] straight into its columns
// of the [batch, width] output (no per-table buffer, no concat copy); dense segments are copied.
Status TableGatherConcatKernel(OpKernelContext& ctx) {
  const std::vector<int64_t> dims = ctx.node().IntsAttr("dims");
  const std::vector<std::string> combiners = ctx.node().StringsAttr("combiners");
  RECSDK_ASSIGN_OR_RETURN(
      auto segments,
      GatherConcatSegments(ctx.node().IntsAttr("segment_kinds"), static_cast<int64_t>(dims.size()),
                           ctx.num_inputs(), [&](std::string m) { return ctx.Error("{}", m); }));
  if (combiners.size() != dims.size()) {
    return ctx.Error("{} combiners for {} gathers", combiners.size(), dims.size());
  }
  int64_t batch = -1, width = 0;
  for (const GatherConcatSegment& s : segments) {
    const Tensor& in = ctx.input(s.gather ? s.input + 2 : s.input);
    if (in.rank() != 2)
      return ctx.Error("input {} is {}, not a matrix", s.input, in.shape().ToString());
    if (batch >= 0 && in.dim(0) != batch) {
      return ctx.Error(
          "segments have batch {} and {}: feed every lookup and dense input the same "
          "batch",
          batch, in.dim(0));
    }
    batch = in.dim(0);
    width += s.gather ? dims[s.gather_index] : in.dim(1);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(
                                            0, Shape{std::max<int64_t>(batch, 0), width}));
  float* o = out->data<float>();
  int64_t column = 0;
  for (const GatherConcatSegment& s : segments) {
    const absl::Span<float> at =
        out->flat<float>().subspan(static_cast<size_t>(std::min(column, out->num_elements())));
    if (!s.gather) {
      const Tensor& in = ctx.input(s.input);
      const int64_t w = in.dim(1);
      const float* src = in.data<float>();
      ParallelFor(batch, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(w, 1)),
                  [&](int64_t b0, int64_t b1) {
                    for (int64_t b = b0; b < b1; ++b) {
                      std::copy_n(src + b * w, w, o + b * width + column);
                    }
                  });
      column += w;
      continue;
    }
    auto* t = dynamic_cast<TableResource*>(ResourceFromTensor(ctx.input(s.input)));
    if (t == nullptr) return ctx.Error("input {} is not a table handle", s.input);
    const EmbeddingTable& table = *t->table();
    const int64_t dim = dims[s.gather_index];
    if (table.dim() != dim) {
      return ctx.Error("table \"{}\" has dim {}, the fused gather expects {}", table.name(),
                       table.dim(), dim);
    }
    const Tensor& unique = ctx.input(s.input + 1);
    const Tensor& restore = ctx.input(s.input + 2);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, unique.num_elements()));
    RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(combiners[s.gather_index]));
    if (!combiner) return ctx.Error("gather segment {} is not pooled", s.gather_index);
    RECSDK_RETURN_IF_ERROR(table.GatherPooledStrided(
        absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(unique.data<int32_t>()),
                                   unique.num_elements()),
        absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(restore.data<int32_t>()),
                                   restore.num_elements()),
        restore.dim(0), restore.dim(1), *combiner, width, at));
    column += dim;
  }
  return absl::OkStatus();
}

Status TableGradAggregateKernel(OpKernelContext& ctx) {
  const Tensor& unique = ctx.input(0);
  const int k = static_cast<int>(ctx.node().IntAttr("num_features", 1));
  const int64_t dim = ctx.node().IntAttr("dim");
  RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(ctx.node().StringAttr("combiner")));
  const int64_t num_unique = unique.num_elements();
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, Shape{num_unique, dim}));
  float* acc = out->data<float>();  // zero-filled
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(1 + f);
    const Tensor& grad = ctx.input(1 + k + f);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, num_unique));
    const int64_t b = restore.dim(0), n = restore.dim(1);
    const int64_t want = combiner ? b * dim : b * n * dim;
    if (grad.num_elements() != want) {
      return ctx.Error("gradient {} of feature {} does not match restore {} and dim {}",
                       grad.shape().ToString(), f, restore.shape().ToString(), dim);
    }
    const int32_t* r = restore.data<int32_t>();
    const float* g = grad.data<float>();
    if (!combiner) {
      if (k == 1) {
        // One feature: the table core's aggregation (parallel, exact per-key sums).
        RECSDK_RETURN_IF_ERROR(AggregateGradients(
            absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(r), b * n),
            grad.flat<float>(), static_cast<int>(dim), num_unique, out->flat<float>()));
        continue;
      }
      for (int64_t p = 0; p < b * n; ++p) {
        float* o = acc + r[p] * dim;
        const float* gp = g + p * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += gp[d];
      }
      continue;
    }
    // A sum needs no count of the sample's valid ids (its scale is 1, and 1 * g is g exactly).
    const uint32_t* urows = reinterpret_cast<const uint32_t*>(unique.data<int32_t>());
    const bool sum = *combiner == Combiner::kSum;
    for (int64_t s = 0; s < b; ++s) {
      const int32_t* rs = r + s * n;
      float scale = 1.0f;
      if (!sum) {
        int64_t valid = 0;
        for (int64_t j = 0; j < n; ++j) valid += urows[rs[j]] != kPaddingRow;
        if (valid == 0) continue;
        scale = *combiner == Combiner::kMean ? 1.0f / static_cast<float>(valid)
                                             : 1.0f / std::sqrt(static_cast<float>(valid));
      }
      const float* gs = g + s * dim;
      for (int64_t j = 0; j < n; ++j) {
        const int32_t u = rs[j];
        if (urows[u] == kPaddingRow) continue;
        float* o = acc + u * dim;
        if (sum) {
          for (int64_t d = 0; d < dim; ++d) o[d] += gs[d];
        } else {
          for (int64_t d = 0; d < dim; ++d) o[d] += scale * gs[d];
        }
      }
    }
  }
  return absl::OkStatus();
}

Status TableApplyKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  EmbeddingTable& table = *t->table();
  const Tensor& step = ctx.input(1);
  if (step.dtype() != DType::kInt64 || step.num_elements() != 1) {
    return ctx.Error("step must be an int64 scalar");
  }
  const int64_t dim = table.dim();
  const int parts = (ctx.num_inputs() - 2) / 2;
  std::vector<uint32_t> rows;
  std::vector<float> merged;
  const uint32_t* row_ptr = nullptr;
  const float* grad_ptr = nullptr;
  int64_t count = 0;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(2 + 2 * p);
    const Tensor& g = ctx.input(3 + 2 * p);
    if (g.num_elements() != u.num_elements() * dim) {
      return ctx.Error("summed gradients {} do not match {} rows of dim {} of table \"{}\"",
                       g.shape().ToString(), u.num_elements(), dim, table.name());
    }
  }
  if (parts == 1) {
    const Tensor& u = ctx.input(2);
    row_ptr = reinterpret_cast<const uint32_t*>(u.data<int32_t>());
    grad_ptr = ctx.input(3).data<float>();
    count = u.num_elements();
  } else {
    // Several lookups of one table: one summed gradient per row, so each row updates once.
    absl::flat_hash_map<uint32_t, int64_t> slot;
    for (int p = 0; p < parts; ++p) {
      const Tensor& u = ctx.input(2 + 2 * p);
      const float* g = ctx.input(3 + 2 * p).data<float>();
      for (int64_t i = 0; i < u.num_elements(); ++i) {
        const uint32_t row = RowAt(u, i);
        if (row == kPaddingRow || row == kDefaultRow) continue;
        auto [it, inserted] = slot.try_emplace(row, static_cast<int64_t>(rows.size()));
        if (inserted) {
          rows.push_back(row);
          merged.resize(merged.size() + dim, 0.0f);
        }
        float* o = merged.data() + it->second * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += g[i * dim + d];
      }
    }
    row_ptr = rows.data();
    grad_ptr = merged.data();
    count = static_cast<int64_t>(rows.size());
  }
  const int64_t step1 = step.scalar<int64_t>() + 1;
  const auto row_span = absl::Span<const uint32_t>(row_ptr, count);
  const auto grad_span = absl::Span<const float>(grad_ptr, count * dim);
  if (table.optimizer().ByAddress()) {
    std::vector<float*> addresses(count);
    RECSDK_RETURN_IF_ERROR(table.RowAddresses(row_span, absl::MakeSpan(addresses)));
    return table.ApplyGradientsByAddress(addresses, grad_span, step1);
  }
  return table.ApplyGradients(row_span, grad_span, step1);
}

}  // namespace

void RegisterTableOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::Global();
    r.Register(Stateful(kTableHandleOp, 0, 0, HandleShape));
    r.Register(Stateful(kSparseLookupOp, 2, -1, LookupShape));
    r.Register(Stateful(kTableGatherOp, 3, -1, GatherShape));
    r.Register(Stateful(kTableGradAggregateOp, 3, -1, AggregateShape));
    r.Register(Stateful(kTableGatherConcatOp, 1, -1, GatherConcatShape));
    r.Register(Stateful(kTableApplyOp, 4, -1, ApplyShape));
    r.Register(Stateful(kTableLookupGroupOp, 3, -1, GroupShape));
    r.Register(Stateful(kTableLookupForwardOp, 1, -1, ForwardShape));
    DeclareTableOpAttrSchemas(r);
    KernelRegistry& k = KernelRegistry::Global();
    const DType any = DType::kInvalid;
    k.RegisterFn(kTableHandleOp, kCpu, {any}, TableHandleKernel);
    k.RegisterFn(kSparseLookupOp, kCpu, {any}, SparseLookupKernel);
    k.RegisterFn(kTableGatherOp, kCpu, {any}, TableGatherKernel);
    k.RegisterFn(kTableGradAggregateOp, kCpu, {any}, TableGradAggregateKernel);
    k.RegisterFn(kTableGatherConcatOp, kCpu, {any}, TableGatherConcatKernel);
    k.RegisterFn(kTableApplyOp, kCpu, {any}, TableApplyKernel);
    k.RegisterFn(kTableLookupGroupOp, kCpu, {any}, TableLookupGroupKernel);
    k.RegisterFn(kTableLookupForwardOp, kCpu, {any}, TableLookupForwardKernel);
  });
}

}  // namespace internal

// --- Public builders ------------------------------------------------------------------------

using internal::kDatasetColumnAttr;

StatusOr<SparseTable> create_table(const Scope& scope, const TableConfig& config,
                                   const SparseOptimizerConfig& optimizer) {
  internal::RegisterTableOps();
  if (!scope.ok()) return scope.status();
  RECSDK_RETURN_IF_ERROR(config.Validate());
  RECSDK_RETURN_IF_ERROR(optimizer.Validate());
  Graph* g = scope.graph();
  for (const std::string& name : g->Collection(kSparseTables)) {
    Node* n = g->FindNode(name);
    if (n != nullptr && n->StringAttr("table_name") == config.name &&
        scope.variable_reuse() != VariableReuse::kNone) {
      // Variable reuse (the Estimator's train, eval and predict branches): the same table.
      if (n->IntAttr("dim", 0) != config.dim ||
          n->StringAttr("optimizer_config") != internal::OptimizerConfigToJson(optimizer)) {
        return absl::InvalidArgumentError(fmt::format(
            "create_table \"{}\": under variable reuse the table exists with dim {} and "
            "optimizer {}, but this call asks for dim {} and {}; build the table the same way in "
            "every mode",
            config.name, n->IntAttr("dim", 0), n->StringAttr("optimizer_config"), config.dim,
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
    return absl::InvalidArgumentError(fmt::format(
        "create_table \"{}\": use_dynamic_expansion needs a by-address optimizer (SGDByAddr, "
        "AdagradByAddress, LazyAdamByAddress), got {}",
        config.name, optimizer.ToString()));
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
      earlier += n->IntAttr("num_features", 1);
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
  if (!options.use_dynamic && options.send_count <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "sparse_lookup \"{}\": static shape (use_dynamic=false) needs send_count > 0, got {}; set "
        "send_count to the most unique keys of a batch",
        name, options.send_count));
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
                   {"use_dynamic", options.use_dynamic},
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

StatusOr<Output> PaddingMask(const Output& lookup_result) {
  const Node* n = lookup_result.node;
  if (n == nullptr || n->type() != internal::kTableGatherOp ||
      lookup_result.index >= n->IntAttr("num_features", 1)) {
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
  return Output(const_cast<Node*>(n),
                static_cast<int>(n->IntAttr("num_features", 1)) + lookup_result.index);
}

StatusOr<std::vector<SparseGrad>> ComputeSparseGradients(const Scope& scope, Output loss,
                                                         const std::vector<SparseTable>& tables) {
  if (!scope.ok()) return scope.status();
  Graph* g = scope.graph();
  std::vector<Node*> lookups;
  std::vector<Output> xs;
  for (const std::string& name : g->Collection(kSparseLookups)) {
    Node* n = g->FindNode(name);
    if (n == nullptr || !n->BoolAttr("is_grad", true)) continue;
    const std::string table = n->StringAttr("table_name");
    if (!tables.empty() && std::none_of(tables.begin(), tables.end(), [&](const SparseTable& t) {
          return t.table_name() == table;
        })) {
      continue;
    }
    lookups.push_back(n);
    // The embeddings only: padding masks (the outputs after them) have no gradient.
    const int k = static_cast<int>(n->IntAttr("num_features", 1));
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
    const int k = static_cast<int>(n->IntAttr("num_features", 1));
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
      local_emb.index >= n->IntAttr("num_features", 1)) {
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
                              internal::GetOrCreateTable(session.resource_mgr(), *n));
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

}  // namespace recsdk
