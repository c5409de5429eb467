// table_resource.cc: a Session's tables as resources, and the attributes of lookup nodes.
#include "src/device/table_resource.h"

#include <atomic>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/device.h"
#include "src/graph/op_registry.h"
#include "src/table/table_config_json.h"
#include "src/table/tier_lease.h"

namespace recsdk::internal {

namespace {
std::atomic<TableDecorator> table_decorator{nullptr};
}  // namespace

void SetTableDecorator(TableDecorator decorator) { table_decorator.store(decorator); }

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
  // A tiered table's device tier lives where the device's table kernels read it: in the device's
  // memory when the device gives some (allocated from its variable pool, so counted against
  // variable_memory_max_size), else in the table's own host mapping (the slab, committed as rows
  // arrive), counted whole against variable_memory_max_size beside the dense variables, as the
  // spec's device memory.
  std::unique_ptr<MemoryCharge> charge;
  const int64_t device_bytes = DeviceTierBytes(*table);
  bool in_device_memory = false;
  if (device_bytes > 0 && resources->device() != nullptr) {
    const DeviceTierShape shape = GetDeviceTierShape(*table);
    RECSDK_ASSIGN_OR_RETURN(
        std::unique_ptr<DeviceTierMemory> memory,
        resources->device()->CreateTableTierMemory(shape.rows, shape.row_floats,
                                                   fmt::format("table \"{}\"", table_name)));
    if (memory != nullptr) {
      RECSDK_RETURN_IF_ERROR(UseDeviceTierMemory(*table, std::move(memory)));
      in_device_memory = true;
    }
  }
  if (device_bytes > 0 && !in_device_memory && resources->variable_allocator() != nullptr) {
    RECSDK_ASSIGN_OR_RETURN(
        charge, resources->variable_allocator()->Charge(
                    device_bytes, fmt::format("the device tier of table \"{}\" "
                                              "(device_vocabulary_size {} rows of {} bytes)",
                                              table_name, config.device_vocabulary_size,
                                              device_bytes / config.device_vocabulary_size)));
  }
  if (TableDecorator decorate = table_decorator.load();
      decorate != nullptr && !resources->process_local_tables()) {
    RECSDK_ASSIGN_OR_RETURN(table, decorate(std::move(table)));
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
  const NodeAttrs attrs(node);  // absent attributes read as the declared defaults
  a.num_features = static_cast<int>(attrs.Int("num_features"));
  a.is_train = attrs.Bool("is_train");
  a.static_shape = !attrs.Bool("use_dynamic");
  a.send_count = attrs.Int("send_count");
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
    a.is_train = NodeAttrs(node).Bool("is_train");
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

}  // namespace recsdk::internal
