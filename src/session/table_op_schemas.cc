// table_op_schemas.cc: the attribute schemas of the table ops (TableHandle, SparseLookup, ...).
//
// The defaults are the fallbacks table_ops.cc passes to Node::IntAttr & co.; keep the two in step.
// TableLookupForward keeps every attribute of the SparseLookup it replaces (GroupTableLookups turns
// one into the other) and adds the name of its group.
//
// Threading: runs once, inside RegisterTableOps' call_once.
#include "src/graph/op_registry.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {
namespace {

using T = AttrValue::Type;

std::vector<AttrDef> LookupAttrSchema() {
  return {RequiredAttr("table_name", T::kString), Attr("num_features", T::kInt, 1),
          Attr("is_train", T::kBool, true), Attr("is_grad", T::kBool, true),
          Attr("use_dynamic", T::kBool, true), Attr("send_count", T::kInt, 0),
          Attr("modify_graph", T::kBool, false), Attr("has_mask", T::kBool, false),
          Attr("has_timestamps", T::kBool, false),
          Attr("feature_weights", T::kInts, std::vector<int64_t>{}),
          // Set by ModifyGraph: the key stage feeds this lookup's outputs.
          Attr("moved_to_key_stage", T::kBool, false)};
}

}  // namespace

void DeclareTableOpAttrSchemas(OpRegistry& r) {
  r.DeclareAttrsOrDie(
      kTableHandleOp,
      {RequiredAttr("table_name", T::kString), RequiredAttr("dim", T::kInt),
       RequiredAttr("table_config", T::kString), Attr("optimizer_config", T::kString, ""),
       // Who set the thresholds in table_config (messages name it).
       Attr("access_threshold_source", T::kString, ""),
       Attr("eviction_threshold_source", T::kString, "")});
  r.DeclareAttrsOrDie(kSparseLookupOp, LookupAttrSchema());
  std::vector<AttrDef> forward = LookupAttrSchema();
  forward.push_back(RequiredAttr("lookup_group", T::kString));
  r.DeclareAttrsOrDie(kTableLookupForwardOp, std::move(forward));
  r.DeclareAttrsOrDie(kTableGatherOp,
                      {RequiredAttr("table_name", T::kString), Attr("num_features", T::kInt, 1),
                       RequiredAttr("dim", T::kInt), RequiredAttr("combiner", T::kString),
                       Attr("is_grad", T::kBool, true), Attr("padding_mask", T::kBool, false)});
  r.DeclareAttrsOrDie(kTableGatherConcatOp,
                      {RequiredAttr("segment_kinds", T::kInts),
                       RequiredAttr("combiners", T::kStrings), RequiredAttr("dims", T::kInts),
                       // Set by fuse_gather_concat: the Concat and TableGathers it replaced
                       // (src/graph/fused_from.h).
                       Attr("fused_from", T::kStrings, std::vector<std::string>{})});
  r.DeclareAttrsOrDie(kTableGradAggregateOp,
                      {Attr("num_features", T::kInt, 1), RequiredAttr("dim", T::kInt),
                       RequiredAttr("combiner", T::kString)});
  r.DeclareAttrsOrDie(kTableApplyOp, {RequiredAttr("table_name", T::kString)});
  r.DeclareAttrsOrDie(
      kTableLookupGroupOp,
      {RequiredAttr("table_name", T::kString), Attr("is_train", T::kBool, true),
       RequiredAttr("member_names", T::kStrings), RequiredAttr("member_num_features", T::kInts),
       RequiredAttr("member_has_mask", T::kInts), RequiredAttr("member_has_timestamps", T::kInts),
       RequiredAttr("member_use_dynamic", T::kInts), RequiredAttr("member_send_count", T::kInts),
       Attr("member_feature_weights", T::kInts, std::vector<int64_t>{})});
}

}  // namespace recsdk::internal
