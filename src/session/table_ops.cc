// table_ops.cc: the definitions of the table ops (TableHandle, SparseLookup, TableGather,
// TableGatherConcat, TableGradAggregate, TableApply, TableLookupGroup, TableLookupForward): their
// inputs and shape functions. Their kernels are the backend's (src/device/cpu/table_op_kernels.cc),
// the builders of recsdk/embedding.h are in embedding.cc.
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
  });
}

}  // namespace recsdk::internal
