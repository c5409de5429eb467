// session.cc: Session and its executor.
//
// Create copies the graph and runs the session's graph passes on the copy in their documented order
// (src/session/passes/pass_manager.h: graph_run_mode, group_lookups, ...), each checked to leave
// the graph topologically ordered and valid against the op schemas. With op_debug_level > 0 it
// writes per-op debug information to kernel_meta_dir.
// A Run builds (or reuses) a plan: the nodes needed by the fetches and targets (pruned at fed
// outputs), in topological order, with per-output consumer counts so buffers are released right
// after their last consumer. Nodes run one at a time (the default) or, with DNN_V100:N, up to N
// at once as oneTBB tasks fed from a ready queue; everything runs inside a oneTBB arena of
// intra_op_parallelism threads, which kernels use for their parallel loops.
// Memory spaces: each node runs on the device the placement pass gave it (the session's device,
// or the host under mix_compile_mode), through that device's compute stream. When the device's
// memory is not the host's, fed host tensors are copied to the device at the edge, fetched device
// tensors are copied to the host, and every node's inputs and outputs are checked to be in its
// device's memory (a missing copy is an error naming the op and the edge, not a read of the wrong
// memory). RECSDK_TEST_DEVICE=<type> runs every session configured for "cpu" on that device
// instead: the separate_memory CTest label runs the graph and session tests so.
// Observers (RunOptions, the profiler under profiling_mode, and the dump observer under
// enable_dump / enable_dump_debug / enable_exception_dump) are called around each node, and
// OnNodeError for a failed kernel; with none, the executor's only extra work is one empty check per
// node.
#include "recsdk/session.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_group.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/device/kernel.h"
#include "src/graph/op_registry.h"
#include "src/precision/dump_observer.h"
#include "src/session/key_stage/key_stage_registry.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/profiler/profiler.h"
#include "src/session/runtime.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"

namespace recsdk {

using internal::Device;
using internal::OpKernel;
using internal::OpKernelContext;

namespace {

struct Plan {
  std::vector<int> order;                   // node ids to run, topological
  std::vector<std::vector<int>> consumers;  // per planned position: positions that consume it
  std::vector<int> pending_init;            // per position: number of planned producers
  std::vector<std::vector<int>>
      output_uses;            // per node id: uses of each output (consumers + fetches)
  std::vector<Output> feeds;  // resolved feed outputs
  std::vector<Output> fetches;
  absl::flat_hash_map<int, int> position;  // node id -> index in order
  bool has_gates = false;                  // a ControlGate runs: the executor applies its skip rule
};

}  // namespace

struct Session::Impl {
  std::unique_ptr<Graph> graph;
  SessionConfig config;
  std::unique_ptr<Device> device;
  // host: the CPU device for ops the placement pass put on the host (mix_compile_mode); null when
  // none is.
  std::unique_ptr<Device> host;
  std::vector<Device*> node_devices;  // by node id: where the node runs
  // separate_memory: the device's memory is not the host's: copies at the edge and memory checks.
  bool separate_memory = false;
  internal::ResourceMgr resources;
  std::vector<std::unique_ptr<OpKernel>> kernels;  // by node id
  absl::flat_hash_map<std::string, std::shared_ptr<Plan>> plans;
  std::unique_ptr<tbb::task_arena> arena;
  int inter_op = 1;       // DNN_V100: device ops at once
  int host_inter_op = 1;  // DNN_VM_TF: host ops (mix_compile_mode) at once
  int64_t steps = 0;
  bool closed = false;
  std::vector<std::string> applied_passes;
  std::unique_ptr<internal::Profiler> profiler;  // profiling_mode only
  // dumper: enable_dump, enable_dump_debug or enable_exception_dump only; null otherwise, so a
  // session without them observes nothing.
  std::unique_ptr<internal::DumpObserver> dumper;

  StatusOr<std::shared_ptr<Plan>> GetPlan(const FeedList& feeds,
                                          const std::vector<TensorName>& fetches,
                                          const std::vector<TensorName>& targets);
  Status Execute(const Plan& plan, const FeedList& feeds,
                 const std::vector<ExecutionObserver*>& observers, std::vector<Tensor>* outputs);
  // CheckMemory: with separate memory, `node`'s inputs (before it runs) or outputs (after) are
  // in the memory of the device it runs on (copies excepted on their host side).
  Status CheckMemory(const Node& node, const std::vector<const Tensor*>& inputs,
                     const std::vector<Tensor>* outputs) const;
};

namespace {

// CheckProfilingPoints: fp_point and bp_point name nodes of the graph (training_trace).
Status CheckProfilingPoints(const SessionConfig& config, const Graph& graph) {
  if (!config.profiling_mode) return absl::OkStatus();
  const std::vector<std::string> options = config.ProfilingOptions();
  if (std::find(options.begin(), options.end(), "training_trace") == options.end()) {
    return absl::OkStatus();
  }
  for (auto [option, name] :
       {std::pair<const char*, const std::string*>{"fp_point", &config.fp_point},
        std::pair<const char*, const std::string*>{"bp_point", &config.bp_point}}) {
    if (graph.FindNode(*name) == nullptr) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: \"{}\" is not a node of the graph; training_trace needs the name of an existing "
          "node (the first forward op for fp_point, the last backward op for bp_point)",
          option, *name));
    }
  }
  return absl::OkStatus();
}

// WriteKernelMeta: op_debug_level's per-op debug information and the passes that ran.
Status WriteKernelMeta(const SessionConfig& config, const Graph& graph,
                       const std::vector<internal::PassRecord>& passes,
                       const std::vector<std::string>& kernel_keys) {
  std::map<std::string, std::string> origin;  // node -> pass that created or rewrote it
  for (const internal::PassRecord& p : passes) {
    for (const std::string& n : p.created) origin[n] = p.name + " (created)";
    for (const std::string& n : p.rewritten) origin[n] = p.name + " (rewritten)";
  }
  if (Status s = internal::Env::Default()->CreateDir(config.kernel_meta_dir); !s.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("op_debug_level {}: cannot create kernel_meta_dir \"{}\": {}",
                    config.op_debug_level, config.kernel_meta_dir, s.message()));
  }
  std::string passes_text;
  for (const internal::PassRecord& p : passes) {
    passes_text += fmt::format("{} {} nodes {} -> {}, created {}, rewritten {}\n", p.name,
                               p.ran ? "ran" : "skipped", p.nodes_before, p.nodes_after,
                               p.created.size(), p.rewritten.size());
  }
  std::string ops_text;
  for (const Node* n : graph.nodes()) {
    std::vector<std::string> ins, outs;
    for (const Output& in : n->inputs()) {
      ins.push_back(
          fmt::format("{} {} {}", in.name(), DTypeName(in.dtype()), in.shape().ToString()));
    }
    for (int o = 0; o < n->num_outputs(); ++o) {
      outs.push_back(
          fmt::format("{} {}", DTypeName(n->output_dtype(o)), n->output_shape(o).ToString()));
    }
    auto it = origin.find(n->name());
    ops_text += fmt::format(
        "{}\n  type: {}\n  kernel: {}\n  inputs: [{}]\n  outputs: [{}]\n  "
        "pass: {}\n",
        n->name(), n->type(), kernel_keys[n->id()], fmt::join(ins, "; "), fmt::join(outs, "; "),
        it == origin.end() ? "user graph" : it->second);
  }
  for (auto [file, text] : {std::pair<const char*, const std::string*>{"passes.txt", &passes_text},
                            std::pair<const char*, const std::string*>{"ops.txt", &ops_text}}) {
    const std::string path = config.kernel_meta_dir + "/" + file;
    if (Status s = internal::WriteStringToFileAtomic(internal::Env::Default(), path, *text);
        !s.ok()) {
      return absl::Status(s.code(),
                          fmt::format("op_debug_level {}: {}", config.op_debug_level, s.message()));
    }
  }
  if (config.op_debug_level == 1 || config.op_debug_level == 2) {
    std::fprintf(stderr, "recsdk: op_debug_level %d: %d ops and %zu passes described in %s\n",
                 config.op_debug_level, graph.num_nodes(), passes.size(),
                 config.kernel_meta_dir.c_str());
  }
  return absl::OkStatus();
}

std::atomic<int64_t> session_counter{0};

}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() { (void)Close(); }

StatusOr<std::unique_ptr<Session>> Session::Create(const Graph& graph,
                                                   const SessionConfig& user_config) {
  internal::InitializeRuntime();
  RECSDK_RETURN_IF_ERROR(user_config.Validate());
  SessionConfig config = user_config;
  // A backend author's switch (and the separate_memory CTest label's): every session configured
  // for the host runs on another registered device.
  if (const char* test_device = std::getenv("RECSDK_TEST_DEVICE");
      test_device != nullptr && *test_device != '\0' && config.device == "cpu") {
    config.device = test_device;
  }
  if (!graph.status().ok()) {
    return absl::InvalidArgumentError(
        fmt::format("the graph holds a construction error: {}", graph.status().message()));
  }
  auto impl = std::make_unique<Impl>();
  impl->graph = graph.Copy();
  RECSDK_ASSIGN_OR_RETURN(std::vector<internal::PassRecord> passes,
                          internal::RunSessionPasses(config, impl->graph.get()));
  for (const internal::PassRecord& p : passes) {
    if (p.ran) impl->applied_passes.push_back(p.name);
  }
  RECSDK_RETURN_IF_ERROR(CheckProfilingPoints(config, *impl->graph));
  impl->config = config;
  RECSDK_ASSIGN_OR_RETURN(impl->device,
                          internal::DeviceRegistry::Global().Create(config.device, config));
  impl->resources.set_variable_allocator(&impl->device->variable_allocator());
  impl->resources.set_data_transfer(&impl->device->data_transfer());
  impl->resources.set_device(impl->device.get());
  impl->separate_memory = impl->device->memory_kind() == MemoryKind::kDevice;
  impl->inter_op = config.ParsedStreamLimits()["DNN_V100"];
  impl->host_inter_op = config.ParsedStreamLimits()["DNN_VM_TF"];
  impl->arena = std::make_unique<tbb::task_arena>(impl->device->IntraOpThreads());
  // Implementation mode per op type.
  std::set<std::string> implmode_ops;
  for (absl::string_view t :
       absl::StrSplit(config.optypelist_for_implmode, ',', absl::SkipEmpty())) {
    implmode_ops.insert(std::string(t));
  }
  const internal::KernelRegistry& kernels = internal::KernelRegistry::Global();
  std::vector<std::string> kernel_keys;
  for (Node* node : impl->graph->nodes()) {
    const std::string& placed = node->device();
    const std::string type = placed.empty() ? config.device : placed.substr(0, placed.find(':'));
    // The placement pass put an op on the host ("cpu") only under mix_compile_mode.
    if (type != config.device && !(type == "cpu" && config.mix_compile_mode)) {
      return absl::InvalidArgumentError(
          fmt::format("op \"{}\" ({}) is placed on \"{}\" but the session runs on \"{}\"; remove "
                      "the placement or change "
                      "SessionConfig::device",
                      node->name(), node->type(), placed, config.device));
    }
    if (type != config.device && impl->host == nullptr) {
      RECSDK_ASSIGN_OR_RETURN(impl->host, internal::DeviceRegistry::Global().Create("cpu", config));
    }
    impl->node_devices.push_back(type == config.device ? impl->device.get() : impl->host.get());
    const std::string mode = implmode_ops.empty() || implmode_ops.contains(node->type())
                                 ? config.op_select_implmode
                                 : std::string("high_performance");
    const DType dtype = internal::KernelDType(*node);
    const internal::KernelFactory* factory = kernels.Find(node->type(), type, dtype, mode);
    if (factory == nullptr) {
      return absl::UnimplementedError(fmt::format(
          "op \"{}\" ({}) has no {} kernel for dtype {}; the device supports this op for [{}]{}",
          node->name(), node->type(), type, DTypeName(dtype),
          fmt::join(
              [&] {
                std::vector<std::string> names;
                for (DType d : kernels.DTypesFor(node->type(), type))
                  names.emplace_back(d == DType::kInvalid ? "any" : DTypeName(d));
                return names;
              }(),
              ", "),
          type == "cpu" ? " (mix_compile_mode cannot help: the cpu device is the host)" : ""));
    }
    RECSDK_ASSIGN_OR_RETURN(auto kernel, (*factory)(*node));
    impl->kernels.push_back(std::move(kernel));
    kernel_keys.push_back(fmt::format("{} on {}, dtype {}, impl mode {}", node->type(), type,
                                      DTypeName(dtype), mode));
  }
  if (config.op_debug_level > 0) {
    RECSDK_RETURN_IF_ERROR(WriteKernelMeta(config, *impl->graph, passes, kernel_keys));
  }
  if (config.profiling_mode) {
    impl->profiler = std::make_unique<internal::Profiler>(
        config, fmt::format("{}_{}", static_cast<int64_t>(::getpid()), session_counter++));
  }
  if (config.enable_dump || config.enable_dump_debug || config.enable_exception_dump == 1) {
    RECSDK_ASSIGN_OR_RETURN(impl->dumper, internal::DumpObserver::Create(
                                              config, impl->device->name(), session_counter++));
  }
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

StatusOr<std::shared_ptr<Plan>> Session::Impl::GetPlan(const FeedList& feeds,
                                                       const std::vector<TensorName>& fetches,
                                                       const std::vector<TensorName>& targets) {
  std::string key;
  for (const auto& f : feeds) key += f.first.name + ",";
  key += "|";
  for (const auto& f : fetches) key += f.name + ",";
  key += "|";
  for (const auto& t : targets) key += t.name + ",";
  if (auto it = plans.find(key); it != plans.end()) return it->second;

  auto plan = std::make_shared<Plan>();
  const int n = graph->num_nodes();
  std::vector<char> fed(n, 0);
  // The spelling each fed tensor was first given under: "x" and "x:0" are one tensor, and the
  // second feed silently replaced the first (the Predictor's rule, same words).
  std::map<std::pair<int, int>, std::string_view> fed_as;
  for (const auto& [name, tensor] : feeds) {
    auto out = graph->FindOutput(name.name);
    if (!out.ok())
      return absl::InvalidArgumentError(
          fmt::format("feed \"{}\": {}", name.name, out.status().message()));
    const auto [first, inserted] = fed_as.try_emplace({out->node->id(), out->index}, name.name);
    if (!inserted) {
      return absl::InvalidArgumentError(fmt::format(
          "Session::Run: input \"{}\" is fed twice{}; feed each tensor once", name.name,
          first->second == name.name ? "" : fmt::format(" (first as \"{}\")", first->second)));
    }
    plan->feeds.push_back(*out);
    fed[out->node->id()] = 1;
  }
  std::vector<int> roots;
  for (const auto& f : fetches) {
    auto out = graph->FindOutput(f.name);
    if (!out.ok())
      return absl::InvalidArgumentError(
          fmt::format("fetch \"{}\": {}", f.name, out.status().message()));
    if (out->dtype() == DType::kResource) {
      return absl::InvalidArgumentError(
          fmt::format("fetch \"{}\" is a resource handle ({}), not a value; fetch \"{}/read\" for "
                      "a variable's value",
                      f.name, out->node->type(), out->node->name()));
    }
    plan->fetches.push_back(*out);
    roots.push_back(out->node->id());
  }
  for (const auto& t : targets) {
    // A target is a node; it may have no outputs (NoOp, Assign), so look it up by name first.
    if (const Node* node = graph->FindNode(t.name)) {
      roots.push_back(node->id());
      continue;
    }
    auto out = graph->FindOutput(t.name);
    if (!out.ok())
      return absl::InvalidArgumentError(
          fmt::format("target \"{}\": {}", t.name, out.status().message()));
    roots.push_back(out->node->id());
  }
  std::vector<char> needed(n, 0);
  std::vector<int> stack = roots;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = 1;
    if (fed[id]) continue;
    const Node* node = graph->node(id);
    for (const Output& in : node->inputs()) stack.push_back(in.node->id());
    for (const Node* c : node->control_inputs()) stack.push_back(c->id());
  }
  for (int id = 0; id < n; ++id) {
    if (needed[id] && !fed[id]) {
      plan->position[id] = static_cast<int>(plan->order.size());
      plan->order.push_back(id);
      plan->has_gates = plan->has_gates || graph->node(id)->type() == "ControlGate";
    }
  }
  plan->consumers.resize(plan->order.size());
  plan->pending_init.assign(plan->order.size(), 0);
  plan->output_uses.resize(n);
  for (int id = 0; id < n; ++id) plan->output_uses[id].assign(graph->node(id)->num_outputs(), 0);
  for (size_t p = 0; p < plan->order.size(); ++p) {
    const Node* node = graph->node(plan->order[p]);
    std::set<int> producers;
    for (const Output& in : node->inputs()) {
      plan->output_uses[in.node->id()][in.index]++;
      if (plan->position.contains(in.node->id())) producers.insert(plan->position[in.node->id()]);
    }
    for (const Node* c : node->control_inputs()) {
      if (plan->position.contains(c->id())) producers.insert(plan->position[c->id()]);
    }
    for (int prod : producers) plan->consumers[prod].push_back(static_cast<int>(p));
    plan->pending_init[p] = static_cast<int>(producers.size());
  }
  for (const Output& f : plan->fetches) plan->output_uses[f.node->id()][f.index]++;
  plans[key] = plan;
  return plan;
}

Status Session::Impl::Execute(const Plan& plan, const FeedList& feeds,
                              const std::vector<ExecutionObserver*>& observers,
                              std::vector<Tensor>* outputs) {
  const int n = graph->num_nodes();
  std::vector<std::vector<Tensor>> values(n);
  std::vector<std::vector<std::atomic<int>>> uses(n);
  for (int id = 0; id < n; ++id) {
    const int outs = graph->node(id)->num_outputs();
    if (plan.position.contains(id) ||
        std::any_of(plan.feeds.begin(), plan.feeds.end(),
                    [&](const Output& o) { return o.node->id() == id; })) {
      values[id].resize(outs);
      uses[id] = std::vector<std::atomic<int>>(outs);
      for (int o = 0; o < outs; ++o) uses[id][o].store(plan.output_uses[id][o]);
    }
  }
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Output& o = plan.feeds[i];
    const Tensor& t = feeds[i].second;
    if (t.dtype() != o.dtype() || !t.shape().IsCompatibleWith(o.shape())) {
      return absl::InvalidArgumentError(fmt::format(
          "feed \"{}\": got {} {} but the graph expects {} {}", feeds[i].first.name,
          DTypeName(t.dtype()), t.shape().ToString(), DTypeName(o.dtype()), o.shape().ToString()));
    }
    Device* where = node_devices[o.node->id()];
    if (separate_memory && where->memory_kind() == MemoryKind::kDevice && t.on_host() &&
        t.num_elements() > 0) {
      // The feed crosses into the device's memory here, at the Session's edge.
      auto on_device = where->graph_allocator().AllocateTensor(t.dtype(), t.shape(),
                                                               internal::Fill::kUninitialized);
      Status s = on_device.ok() ? where->data_transfer().CopyHostToDevice(t, &*on_device)
                                : on_device.status();
      if (!s.ok()) {
        return Status(s.code(), fmt::format("feed \"{}\" (copied to {}): {}", feeds[i].first.name,
                                            where->name(), s.message()));
      }
      values[o.node->id()][o.index] = *std::move(on_device);
    } else {
      values[o.node->id()][o.index] = t;
    }
  }
  const int64_t step = steps;
  // ControlGate (precision_ops.cc): a node whose kernel asked to skip its control dependents
  // closes; a node with a control input from a closed one, or a data input from a skipped one,
  // is skipped (never computed). Each entry is written by its node's task before any consumer is
  // released, so no lock is needed. A plan without a gate pays nothing for this.
  std::vector<char> closed, skipped;
  if (plan.has_gates) {
    closed.assign(n, 0);
    skipped.assign(n, 0);
  }
  auto run_node = [&](int pos) -> Status {
    const int id = plan.order[pos];
    const Node& node = *graph->node(id);
    bool skip = false;
    if (plan.has_gates) {
      for (const Node* c : node.control_inputs()) skip = skip || closed[c->id()] != 0;
      for (const Output& in : node.inputs()) skip = skip || skipped[in.node->id()] != 0;
    }
    if (skip) {
      skipped[id] = 1;
      for (const Output& in : node.inputs()) {
        if (uses[in.node->id()][in.index].fetch_sub(1) == 1)
          values[in.node->id()][in.index] = Tensor();
      }
      return absl::OkStatus();
    }
    std::vector<const Tensor*> inputs;
    inputs.reserve(node.num_inputs());
    for (const Output& in : node.inputs()) inputs.push_back(&values[in.node->id()][in.index]);
    Device* const runs_on = node_devices[id];
    if (separate_memory) RECSDK_RETURN_IF_ERROR(CheckMemory(node, inputs, nullptr));
    OpKernelContext ctx(node, runs_on, &resources, step, graph->random_seed(), std::move(inputs),
                        &values[id]);
    internal::Stream& stream = runs_on->compute_stream();
    // Isolation: while this kernel waits inside its own parallel loops, the thread must not pick
    // up another node (which could, e.g., lock the variable this kernel holds).
    Status s;
    // NameOp: a kernel's error names its op (kernels usually do; the prefix is added otherwise).
    auto name_op = [&] {
      const std::string prefix = fmt::format("op \"{}\" ({})", node.name(), node.type());
      if (s.message().find(prefix) == std::string_view::npos &&
          s.message().find("op \"" + node.name()) == std::string_view::npos) {
        s = Status(s.code(), fmt::format("{} on {}: {}", prefix, runs_on->name(), s.message()));
      }
    };
    auto compute = [&] { return kernels[id]->Compute(ctx); };
    if (observers.empty()) {
      tbb::this_task_arena::isolate([&] { s = stream.Run(compute); });
      if (!s.ok()) name_op();
    } else {
      // name() returns a fresh string: keep it alive for the string_view in `exec`.
      const std::string device_name = runs_on->name();
      NodeExecution exec;
      exec.node = &node;
      exec.device = device_name;
      exec.thread = tbb::this_task_arena::current_thread_index();
      exec.step = step;
      exec.inputs = &ctx.inputs();
      const std::function<StatusOr<Tensor>(const Tensor&)> to_host =
          [runs_on](const Tensor& t) -> StatusOr<Tensor> {
        RECSDK_ASSIGN_OR_RETURN(Tensor host, Tensor::Create(t.dtype(), t.shape()));
        RECSDK_RETURN_IF_ERROR(runs_on->data_transfer().CopyDeviceToHost(t, &host));
        return host;
      };
      exec.to_host = &to_host;
      exec.start_ns = internal::NowNs();
      for (ExecutionObserver* o : observers) o->BeforeNode(exec);
      tbb::this_task_arena::isolate([&] { s = stream.Run(compute); });
      exec.end_ns = internal::NowNs();
      exec.outputs = &values[id];
      if (s.ok()) {
        for (ExecutionObserver* o : observers) o->AfterNode(exec);
        // stop_on_overflow: the dump observer saw this op overflow; nothing after it runs.
        if (dumper != nullptr) s = dumper->StopStatus();
      } else {
        name_op();
        for (ExecutionObserver* o : observers) o->OnNodeError(exec, &s);
      }
    }
    if (!s.ok()) return s;
    if (separate_memory) RECSDK_RETURN_IF_ERROR(CheckMemory(node, ctx.inputs(), &values[id]));
    if (plan.has_gates && ctx.skip_control_dependents()) closed[id] = 1;
    for (int o = 0; o < node.num_outputs(); ++o) {
      const Tensor& t = values[id][o];
      if (!t.IsInitialized() && plan.output_uses[id][o] > 0) {
        return absl::InternalError(
            fmt::format("op \"{}\" ({}) did not produce output {}", node.name(), node.type(), o));
      }
    }
    // Release inputs after their last consumer.
    for (const Output& in : node.inputs()) {
      if (uses[in.node->id()][in.index].fetch_sub(1) == 1)
        values[in.node->id()][in.index] = Tensor();
    }
    return absl::OkStatus();
  };

  Status status;
  arena->execute([&] {
    // Host ops of a session on another device count against DNN_VM_TF, the others DNN_V100.
    auto on_host_engine = [&](int pos) {
      return host != nullptr && node_devices[plan.order[pos]] == host.get();
    };
    if ((inter_op <= 1 && (host == nullptr || host_inter_op <= 1)) || plan.order.size() < 2) {
      for (size_t p = 0; p < plan.order.size() && status.ok(); ++p)
        status = run_node(static_cast<int>(p));
      return;
    }
    // Up to inter_op device nodes and host_inter_op host nodes run at once as oneTBB tasks; a
    // finished node releases its consumers.
    std::mutex mu;
    std::deque<int> ready;
    std::vector<int> pending = plan.pending_init;
    int running[2] = {0, 0};  // device, host
    const int limit[2] = {inter_op, host_inter_op};
    for (size_t p = 0; p < pending.size(); ++p) {
      if (pending[p] == 0) ready.push_back(static_cast<int>(p));
    }
    tbb::task_group group;
    std::function<void()> pump = [&] {
      std::vector<int> launch;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = ready.begin(); status.ok() && it != ready.end();) {
          const int engine = on_host_engine(*it) ? 1 : 0;
          if (running[engine] >= limit[engine]) {
            ++it;
            continue;
          }
          launch.push_back(*it);
          it = ready.erase(it);
          ++running[engine];
        }
      }
      for (int pos : launch) {
        group.run([&, pos] {
          Status s = run_node(pos);
          {
            std::lock_guard<std::mutex> lock(mu);
            if (!s.ok() && status.ok()) status = s;
            --running[on_host_engine(pos) ? 1 : 0];
            for (int c : plan.consumers[pos]) {
              if (--pending[c] == 0) ready.push_back(c);
            }
          }
          pump();
        });
      }
    };
    pump();
    group.wait();
  });
  RECSDK_RETURN_IF_ERROR(status);
  outputs->clear();
  for (const Output& f : plan.fetches) {
    if (plan.has_gates && skipped[f.node->id()]) {
      return absl::FailedPreconditionError(
          fmt::format("fetch \"{}\": its op was skipped this step by a ControlGate (an update "
                      "that loss scaling skipped); fetch a value computed before the gate",
                      f.name()));
    }
    const Tensor& value = values[f.node->id()][f.index];
    if (value.on_host()) {
      outputs->push_back(value);
      continue;
    }
    // The fetch crosses out of the device's memory here, at the Session's edge.
    RECSDK_ASSIGN_OR_RETURN(Tensor host, Tensor::Create(value.dtype(), value.shape()));
    if (Status s = node_devices[f.node->id()]->data_transfer().CopyDeviceToHost(value, &host);
        !s.ok()) {
      return Status(s.code(), fmt::format("fetch \"{}\": {}", f.name(), s.message()));
    }
    outputs->push_back(std::move(host));
  }
  return absl::OkStatus();
}

Status Session::Impl::CheckMemory(const Node& node, const std::vector<const Tensor*>& inputs,
                                  const std::vector<Tensor>* outputs) const {
  const bool on_device = node_devices[node.id()]->memory_kind() == MemoryKind::kDevice;
  auto misplaced = [&](const Tensor& t, bool host_side) {
    if (!t.IsInitialized() || t.num_elements() == 0 || t.dtype() == DType::kResource) return false;
    return t.on_host() != (host_side || !on_device);
  };
  if (outputs == nullptr) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!misplaced(*inputs[i], node.type() == "CopyHostToDevice")) continue;
      const Output& in = node.input(static_cast<int>(i));
      return absl::InternalError(fmt::format(
          "op \"{}\" ({}) on {} reads input {} (\"{}\", from op {}) in {} memory: a copy between "
          "memory spaces is missing (the kernel of \"{}\" must allocate its outputs through its "
          "context, or the placement pass missed this edge)",
          node.name(), node.type(), node_devices[node.id()]->name(), i, in.name(), in.node->type(),
          MemoryKindName(inputs[i]->memory_kind()), in.node->name()));
    }
    return absl::OkStatus();
  }
  for (size_t o = 0; o < outputs->size(); ++o) {
    if (!misplaced((*outputs)[o], node.type() == "CopyDeviceToHost")) continue;
    return absl::InternalError(fmt::format(
        "op \"{}\" ({}) on {} produced output {} in {} memory: its kernel must allocate outputs "
        "through its context (OpKernelContext::allocate_output) or copy them to the device",
        node.name(), node.type(), node_devices[node.id()]->name(), o,
        MemoryKindName((*outputs)[o].memory_kind())));
  }
  return absl::OkStatus();
}

Status Session::Run(const FeedList& feeds, const std::vector<TensorName>& fetches,
                    const std::vector<TensorName>& targets, std::vector<Tensor>* outputs) {
  return Run(RunOptions{}, feeds, fetches, targets, outputs);
}

Status Session::Run(const RunOptions& options, const FeedList& feeds,
                    const std::vector<TensorName>& fetches, const std::vector<TensorName>& targets,
                    std::vector<Tensor>* outputs) {
  if (impl_->closed)
    return absl::FailedPreconditionError("Session::Run after Close(); create a new Session");
  std::vector<Tensor> discarded;
  if (outputs == nullptr) {
    if (!fetches.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "Session::Run: outputs is null but {} fetches were asked (first \"{}\"); pass a "
          "std::vector<Tensor>* to receive them, or fetch nothing",
          fetches.size(), fetches.front().name));
    }
    outputs = &discarded;
  }
  RECSDK_ASSIGN_OR_RETURN(auto plan, impl_->GetPlan(feeds, fetches, targets));
  std::vector<ExecutionObserver*> observers;
  for (ExecutionObserver* o : options.observers) {
    if (o == nullptr) {
      return absl::InvalidArgumentError("RunOptions::observers holds a null observer; remove it");
    }
    observers.push_back(o);
  }
  if (impl_->profiler != nullptr) observers.push_back(impl_->profiler.get());
  if (impl_->dumper != nullptr) observers.push_back(impl_->dumper.get());
  const int64_t step = impl_->steps;
  if (impl_->dumper != nullptr) impl_->dumper->BeginRun(step);
  if (impl_->profiler != nullptr) impl_->profiler->BeginRun(step);
  for (ExecutionObserver* o : options.observers) o->BeforeRun(step);
  Status status;
  try {
    status = impl_->Execute(*plan, feeds, observers, outputs);
  } catch (const std::exception& e) {
    status = absl::InternalError(fmt::format("Session::Run: unexpected exception: {}", e.what()));
  }
  // The step's dump is published (and a failed dump write reported) before observers hear of
  // the Run's end.
  if (impl_->dumper != nullptr) status = impl_->dumper->EndRun(step, std::move(status));
  for (ExecutionObserver* o : options.observers) o->AfterRun(step, status);
  if (impl_->profiler != nullptr && status.ok()) status = impl_->profiler->EndRun(step);
  RECSDK_RETURN_IF_ERROR(status);
  ++impl_->steps;
  return absl::OkStatus();
}

StatusOr<LoopResult> Session::RunLoop(int64_t iterations, const BatchSource& next,
                                      const std::vector<TensorName>& fetches,
                                      const std::vector<TensorName>& targets,
                                      const RunOptions& options) {
  if (iterations != impl_->config.iterations_per_loop) {
    return absl::InvalidArgumentError(fmt::format(
        "RunLoop: iterations {} differs from SessionConfig::iterations_per_loop {}; the two must "
        "be equal (set_iteration_per_loop and the session option)",
        iterations, impl_->config.iterations_per_loop));
  }
  if (!next) return absl::InvalidArgumentError("RunLoop: the BatchSource is empty");
  LoopResult result;
  FeedList feeds;
  for (int64_t i = 0; i < iterations; ++i) {
    feeds.clear();
    RECSDK_ASSIGN_OR_RETURN(bool more, next(&feeds));
    if (!more) break;
    std::vector<Tensor> outputs;
    if (Status s = Run(options, feeds, fetches, targets, &outputs); !s.ok()) {
      return Status(s.code(),
                    fmt::format("RunLoop step {} of {}: {}", i + 1, iterations, s.message()));
    }
    result.outputs = std::move(outputs);
    ++result.steps;
  }
  return result;
}

const std::vector<std::string>& Session::applied_passes() const { return impl_->applied_passes; }

StatusOr<std::vector<Tensor>> Session::Run(const FeedList& feeds,
                                           const std::vector<TensorName>& fetches,
                                           const std::vector<TensorName>& targets) {
  std::vector<Tensor> outputs;
  RECSDK_RETURN_IF_ERROR(Run(feeds, fetches, targets, &outputs));
  return outputs;
}

Status Session::Close() {
  if (impl_ == nullptr || impl_->closed) return absl::OkStatus();
  impl_->closed = true;
  // Key stages still running on this session stop before its tables go.
  internal::DetachKeyStages(this);
  // Profiles are written in the background: wait for them (and report a failed write).
  const Status profiles = impl_->profiler != nullptr ? impl_->profiler->Flush() : absl::OkStatus();
  impl_->plans.clear();
  impl_->kernels.clear();
  impl_->resources.Clear();
  RECSDK_RETURN_IF_ERROR(impl_->device->Synchronize());
  return profiles;
}

void Session::SetRunCount(int64_t runs) { impl_->steps = runs; }

internal::ResourceMgr* internal::SessionAccess::Resources(Session& session) {
  return &session.impl_->resources;
}

const Graph& Session::graph() const { return *impl_->graph; }
const SessionConfig& Session::config() const { return impl_->config; }

SessionStats Session::stats() const {
  SessionStats s;
  s.graph_bytes_in_use = impl_->device->graph_allocator().in_use();
  s.graph_peak_bytes = impl_->device->graph_allocator().peak();
  s.variable_bytes_in_use = impl_->device->variable_allocator().in_use();
  s.graph_cached_bytes = impl_->device->graph_allocator().cached_bytes();
  s.graph_fresh_allocations = impl_->device->graph_allocator().fresh_allocations();
  s.steps = impl_->steps;
  s.overflow_count = impl_->dumper != nullptr ? impl_->dumper->overflow_count() : 0;
  const internal::TierSwapCounters& swaps = impl_->device->tier_swaps();
  s.tier_swap_in_bytes = swaps.swap_in_bytes.load(std::memory_order_relaxed);
  s.tier_swap_out_bytes = swaps.swap_out_bytes.load(std::memory_order_relaxed);
  s.tier_swap_in_host_waits = swaps.swap_in_host_waits.load(std::memory_order_relaxed);
  s.tier_swap_out_host_waits = swaps.swap_out_host_waits.load(std::memory_order_relaxed);
  s.tier_swap_compute_waits = swaps.compute_waits.load(std::memory_order_relaxed);
  return s;
}

}  // namespace recsdk
