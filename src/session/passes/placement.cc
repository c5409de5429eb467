// placement.cc: the "placement" pass (order 1000, last): which device runs each op, and the
// copies where an edge crosses memory spaces.
//
// With SessionConfig::device other than "cpu", each op goes to the device when the device has a
// kernel for it (its own or its alias's, KernelRegistry::AddAlias); otherwise, under
// mix_compile_mode, to the host ("cpu:0"), and without it the pass fails naming the op, its dtype
// and the option (the spec's rule). An op the user placed on "cpu" explicitly runs on the host,
// which also needs mix_compile_mode. When the device's memory is not the host's, every data edge
// from an op in one memory space to an op in the other gets a copy (CopyHostToDevice or
// CopyDeviceToHost, run by the device), made once per producer output and placed right after its
// producer; resource handles cross as they are (they are host values that name a resource, not
// data). Feeds and fetches cross at the Session's edge, not here. The key stage stays on the host
// (its work is outside the graph). With "cpu" the pass does nothing.
//
// Variables stay where they live. When the device's memory is not the host's, its variables
// (VarHandle: the variable pool is the device's) and its tables (the rows a table op reads or
// updates: a tiered table's device tier is the device's memory) belong to the device, so an op
// that reads or writes a variable's contents (any op with a VarHandle's handle as an input) or a
// table's rows (TableGather, TableGatherConcat, TableApply and the sharded tables' exchanges) runs
// on the device, mix_compile_mode or not: a host kernel would read or write device memory in
// place. When the device has no kernel for such an op, or the user placed it on the host, the pass
// fails naming the op, the variable or table, and the device. An untiered table keeps its rows in
// host memory on every device, so under mix_compile_mode its row ops run on the host (as ops
// without a device kernel do); without it, on the device, whose table kernels handle host rows.
// Table ops that only touch the key index (SparseLookup, TableLookupGroup, TableHandle) are host
// work and may run there.
#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/device/kernel.h"
#include "src/session/passes/pass_manager.h"
#include "src/table/table_config_json.h"

namespace recsdk::internal {
namespace {

constexpr char kHostDevice[] = "cpu";

std::string DeviceType(const std::string& placed) { return placed.substr(0, placed.find(':')); }

// kTableRowOps: the table ops whose kernels read or update a table's rows (the others touch only
// its key index, host memory on every device).
constexpr const char* kTableRowOps[] = {"TableGather", "TableGatherConcat", "TableApply",
                                        "TableLookupExchange", "TableApplyExchange"};

// HandleSource: the node that made the resource `in` (through ops that forward a handle).
const Node* HandleSource(Output in) {
  for (int hops = 0; hops < 16; ++hops) {
    const Node* n = in.node;
    if (n->type() == "VarHandle" || n->type() == "TableHandle") return n;
    if (n->num_inputs() == 0 || n->input(0).dtype() != DType::kResource) return n;
    in = n->input(0);
  }
  return in.node;
}

// VariableUse: what an op reads or writes that a device may hold ("variable \"w\"", "table
// \"t\""), and whether its data is in host memory on every device (an untiered table's rows: only
// a tiered table's device tier goes to the device's memory, src/device/table_resource.cc).
struct VariableUse {
  std::string what;
  bool rows_on_host = false;
};

std::optional<VariableUse> UsedVariable(const Node& node) {
  const bool row_op =
      std::find_if(std::begin(kTableRowOps), std::end(kTableRowOps),
                   [&](const char* t) { return node.type() == t; }) != std::end(kTableRowOps);
  std::optional<VariableUse> use;
  for (int i = 0; i < node.num_inputs(); ++i) {
    if (node.input(i).dtype() != DType::kResource) continue;
    const Node* source = HandleSource(node.input(i));
    if (source->type() == "VarHandle") {
      return VariableUse{fmt::format("variable \"{}\"", source->name()), false};
    }
    if (row_op && source->type() == "TableHandle") {
      // A config that does not parse fails when the table is made; count it as tiered here.
      const StatusOr<TableConfig> config = TableConfigFromJson(source->StringAttr("table_config"));
      const bool on_host = config.ok() && config->host_vocabulary_size == 0;
      // Several tables (TableGatherConcat): on the host only when every one's rows are.
      if (!use || (use->rows_on_host && !on_host)) {
        use = VariableUse{fmt::format("table \"{}\"", source->StringAttr("table_name")), on_host};
      }
    }
  }
  return use;
}

class PlacementPass final : public GraphPass {
 public:
  bool Enabled(const PassContext& ctx) const override { return ctx.config.device != kHostDevice; }

  Status Run(const PassContext& ctx, Graph* graph) override {
    const SessionConfig& config = ctx.config;
    RECSDK_ASSIGN_OR_RETURN(MemoryKind memory, DeviceRegistry::Global().Memory(config.device));
    const std::string device_name = config.device + ":0";
    const std::string host_name = std::string(kHostDevice) + ":0";
    const KernelRegistry& kernels = KernelRegistry::Global();
    const std::vector<Node*> nodes = graph->nodes();
    std::vector<char> on_host(graph->num_nodes(), 0);
    for (Node* node : nodes) {
      const std::string placed = DeviceType(node->device());
      if (!placed.empty() && placed != config.device && placed != kHostDevice) {
        // Session::Create names a placement on a third device.
        continue;
      }
      const DType dtype = KernelDType(*node);
      const bool host_kernel = kernels.Find(node->type(), kHostDevice, dtype, "") != nullptr;
      if (const std::optional<VariableUse> use =
              memory == MemoryKind::kDevice ? UsedVariable(*node) : std::nullopt;
          use.has_value()) {
        if (use->rows_on_host) {
          // An untiered table's rows are host memory: under mix_compile_mode its row ops run on
          // the host (no round trip through the device); otherwise the device's kernel, which
          // reads host rows (separate_memory) or stages them (cuda), by the usual rule below.
          if (config.mix_compile_mode && host_kernel && placed != config.device) {
            on_host[node->id()] = 1;
            node->set_device(host_name);
            continue;
          }
        } else {
          const bool device_kernel =
              kernels.Find(node->type(), config.device, dtype, "") != nullptr;
          if (placed == kHostDevice || !device_kernel) {
            return absl::FailedPreconditionError(fmt::format(
                "op \"{}\" ({}) reads or writes {}, which lives in the memory of device \"{}\", "
                "but {}; an op on a variable runs where the variable lives: {}",
                node->name(), node->type(), use->what, config.device,
                placed == kHostDevice
                    ? fmt::format("it is placed on \"{}\" (the host)", node->device())
                    : fmt::format("\"{}\" has no kernel for it (dtype {})", config.device,
                                  DTypeName(dtype)),
                placed == kHostDevice ? "remove the placement"
                                      : fmt::format("register a {} kernel for {}, or run the "
                                                    "session on \"cpu\"",
                                                    config.device, node->type())));
          }
          node->set_device(device_name);
          continue;
        }
      }
      if (placed == kHostDevice) {
        if (!config.mix_compile_mode) {
          return absl::InvalidArgumentError(fmt::format(
              "op \"{}\" ({}) is placed on \"{}\" (the host) but the session runs on \"{}\"; set "
              "mix_compile_mode true to run it on the host, or remove the placement",
              node->name(), node->type(), node->device(), config.device));
        }
        on_host[node->id()] = 1;
      } else if (kernels.Find(node->type(), config.device, dtype, "") == nullptr) {
        if (!config.mix_compile_mode || !host_kernel) {
          return absl::UnimplementedError(
              fmt::format("op \"{}\" ({}) has no {} kernel for dtype {}; {}", node->name(),
                          node->type(), config.device, DTypeName(dtype),
                          host_kernel ? "set mix_compile_mode true to run it on the host"
                                      : "the host has no kernel for it either"));
        }
        on_host[node->id()] = 1;
      }
      node->set_device(on_host[node->id()] ? host_name : device_name);
    }
    if (memory != MemoryKind::kDevice) return absl::OkStatus();

    // Copies: (producer id, output, to the device?) -> the copy's output.
    std::map<std::tuple<int, int, bool>, Output> copies;
    std::map<int, std::vector<Node*>> after;  // producer id -> copies of its outputs
    for (Node* consumer : nodes) {
      const bool consumer_on_host =
          on_host[consumer->id()] != 0 || consumer->type() == "CopyHostToDevice";
      for (int i = 0; i < consumer->num_inputs(); ++i) {
        const Output in = consumer->input(i);
        if (in.dtype() == DType::kResource) continue;
        const bool produced_on_host =
            on_host[in.node->id()] != 0 || in.node->type() == "CopyDeviceToHost";
        if (produced_on_host == consumer_on_host) continue;
        const bool to_device = !consumer_on_host;
        auto key = std::make_tuple(in.node->id(), in.index, to_device);
        auto it = copies.find(key);
        if (it == copies.end()) {
          NodeSpec spec;
          spec.name = graph->UniqueName(
              fmt::format("{}/{}{}", in.node->name(), to_device ? "to_device" : "to_host",
                          in.index == 0 ? "" : fmt::format("_{}", in.index)));
          spec.type = to_device ? "CopyHostToDevice" : "CopyDeviceToHost";
          spec.inputs = {in};
          spec.device = device_name;
          RECSDK_ASSIGN_OR_RETURN(Node * copy, graph->AddNode(std::move(spec)));
          after[in.node->id()].push_back(copy);
          it = copies.emplace(key, Output(copy, 0)).first;
        }
        consumer->set_input(i, it->second);
      }
    }
    if (copies.empty()) return absl::OkStatus();
    std::vector<Node*> order;
    order.reserve(static_cast<size_t>(graph->num_nodes()));
    for (Node* node : nodes) {
      order.push_back(node);
      if (auto it = after.find(node->id()); it != after.end()) {
        order.insert(order.end(), it->second.begin(), it->second.end());
      }
    }
    return graph->Reorder(order);
  }
};

}  // namespace

std::unique_ptr<GraphPass> MakePlacementPass() { return std::make_unique<PlacementPass>(); }

}  // namespace recsdk::internal
