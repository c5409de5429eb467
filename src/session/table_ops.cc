// table_ops.cc: the declarations of the table ops (TableHandle, SparseLookup, TableGather,
// TableGatherConcat, TableGradAggregate, TableApply, TableLookupGroup, TableLookupForward): one
// OpDef each, with their inputs, outputs, attributes and shape functions. Their kernels are the
// backend's (src/device/cpu/table_op_kernels.cc), the builders of recsdk/embedding.h are in
// embedding.cc.
#include "src/session/table_ops.h"

#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/graph/op_registry.h"

namespace recsdk::internal {
namespace {

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
  const int k = static_cast<int>(c.IntAttr("num_features"));
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
  return AddLookupOutputs(c, 1, k, has_mask, has_ts, c.BoolAttr("use_dynamic"),
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
  const int k = static_cast<int>(c.IntAttr("num_features"));
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
  const int k = static_cast<int>(c.IntAttr("num_features"));
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

constexpr AttrType kBool = AttrType::kBool;
constexpr AttrType kInt = AttrType::kInt;
constexpr AttrType kInts = AttrType::kInts;
constexpr AttrType kString = AttrType::kString;

// The attributes of a lookup (SparseLookup, and TableLookupForward, which keeps every attribute of
// the SparseLookup it replaces when GroupTableLookups turns one into the other).
std::vector<AttrDef> LookupAttrDefs() {
  return {RequiredAttr("table_name", kString), Attr("num_features", kInt, 1),
          Attr("is_train", kBool, true), Attr("is_grad", kBool, true),
          Attr("use_dynamic", kBool, true), Attr("send_count", kInt, 0),
          Attr("modify_graph", kBool, false), Attr("has_mask", kBool, false),
          Attr("has_timestamps", kBool, false),
          Attr("feature_weights", kInts, std::vector<int64_t>{}),
          // Set by ModifyGraph: the key stage feeds this lookup's outputs.
          Attr("moved_to_key_stage", kBool, false)};
}

// The table ops are stateful (they read or update a table) and have no gradient function: the
// embedding builders (embedding.cc) wire the backward pass themselves.
void RegisterTableOp(OpRegistry& r, OpDef def) {
  def.no_gradient = true;
  def.stateful = true;
  r.Register(std::move(def));
}

}  // namespace

void RegisterTableOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::Global();
    RegisterTableOp(
        r, {.type = kTableHandleOp,
            .inputs = {},
            .outputs = {"handle"},
            .attrs = {RequiredAttr("table_name", kString), RequiredAttr("dim", kInt),
                      RequiredAttr("table_config", kString), Attr("optimizer_config", kString, ""),
                      // Who set the thresholds in table_config (messages name it).
                      Attr("access_threshold_source", kString, ""),
                      Attr("eviction_threshold_source", kString, "")},
            .shape_fn = HandleShape});
    // SparseLookup's inputs: the handle, num_features ids, then a mask (has_mask) and timestamps
    // (has_timestamps); its outputs the unique rows and one restore per feature.
    RegisterTableOp(r, {.type = kSparseLookupOp,
                        .inputs = {"handle", "ids_mask_timestamps+"},
                        .outputs = {"unique_rows", "restore+"},
                        .attrs = LookupAttrDefs(),
                        .shape_fn = LookupShape});
    // TableGather: per feature the embeddings, then with padding_mask per feature its mask.
    RegisterTableOp(r,
                    {.type = kTableGatherOp,
                     .inputs = {"handle", "unique_rows", "restore+"},
                     .outputs = {"embeddings_then_masks+"},
                     .attrs = {RequiredAttr("table_name", kString), Attr("num_features", kInt, 1),
                               RequiredAttr("dim", kInt), RequiredAttr("combiner", kString),
                               Attr("is_grad", kBool, true), Attr("padding_mask", kBool, false)},
                     .shape_fn = GatherShape});
    // TableGradAggregate: the unique rows, num_features restores, then as many gradients.
    RegisterTableOp(r, {.type = kTableGradAggregateOp,
                        .inputs = {"unique_rows", "restores_then_grads{2,}"},
                        .outputs = {"row_grads"},
                        .attrs = {Attr("num_features", kInt, 1), RequiredAttr("dim", kInt),
                                  RequiredAttr("combiner", kString)},
                        .shape_fn = AggregateShape});
    RegisterTableOp(
        r, {.type = kTableGatherConcatOp,
            .inputs = {"segments+"},
            .outputs = {"concat"},
            .attrs = {RequiredAttr("segment_kinds", kInts),
                      RequiredAttr("combiners", AttrType::kStrings), RequiredAttr("dims", kInts),
                      // Set by fuse_gather_concat: the Concat and TableGathers it
                      // replaced (src/graph/fused_from.h).
                      Attr("fused_from", AttrType::kStrings, std::vector<std::string>{})},
            .shape_fn = GatherConcatShape});
    // TableApply: the handle, the step, then (unique rows, summed gradients) pairs.
    RegisterTableOp(r, {.type = kTableApplyOp,
                        .inputs = {"handle", "step", "rows_and_grads{2,}"},
                        .outputs = {},
                        .attrs = {RequiredAttr("table_name", kString)},
                        .shape_fn = ApplyShape});
    // TableLookupGroup: the handle, then each member's inputs; each member's outputs in turn.
    RegisterTableOp(r,
                    {.type = kTableLookupGroupOp,
                     .inputs = {"handle", "member_inputs{2,}"},
                     .outputs = {"member_outputs{2,}"},
                     .attrs = {RequiredAttr("table_name", kString), Attr("is_train", kBool, true),
                               RequiredAttr("member_names", AttrType::kStrings),
                               RequiredAttr("member_num_features", kInts),
                               RequiredAttr("member_has_mask", kInts),
                               RequiredAttr("member_has_timestamps", kInts),
                               RequiredAttr("member_use_dynamic", kInts),
                               RequiredAttr("member_send_count", kInts),
                               Attr("member_feature_weights", kInts, std::vector<int64_t>{})},
                     .shape_fn = GroupShape});
    std::vector<AttrDef> forward = LookupAttrDefs();
    forward.push_back(RequiredAttr("lookup_group", kString));
    RegisterTableOp(r, {.type = kTableLookupForwardOp,
                        .inputs = {"group_outputs+"},
                        .outputs = {"outputs+"},
                        .attrs = std::move(forward),
                        .shape_fn = ForwardShape});
  });
}

}  // namespace recsdk::internal
