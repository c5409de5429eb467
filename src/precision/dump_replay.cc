// dump_replay.cc: `recsdk replay-op` (see dump_replay.h).
#include "src/precision/dump_replay.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <utility>

#include "fmt/format.h"
#include "recsdk/config.h"
#include "recsdk/graph.h"
#include "recsdk/ops.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "src/common/status_macros.h"
#include "src/graph/attr_json.h"
#include "src/graph/op_registry.h"
#include "src/precision/dump_reader.h"

namespace recsdk::internal {

namespace {

// FindOp: the step and the manifest entry of `name`; NotFound listing a few ops that are there.
StatusOr<std::pair<DumpStep, size_t>> FindOp(Env* env, const std::string& root,
                                             const std::string& name, int64_t step) {
  RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> dirs, FindStepDirs(env, root));
  std::vector<std::string> seen;
  int64_t steps = 0;
  for (const std::string& dir : dirs) {
    RECSDK_ASSIGN_OR_RETURN(DumpStep s, ReadDumpManifest(env, dir));
    if (step >= 0 && s.step != step) continue;
    ++steps;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      if (s.ops[i].name == name) return std::pair<DumpStep, size_t>(std::move(s), i);
      if (seen.size() < 8 && std::find(seen.begin(), seen.end(), s.ops[i].name) == seen.end()) {
        seen.push_back(s.ops[i].name);
      }
    }
  }
  if (steps == 0) {
    return absl::NotFoundError(
        fmt::format("\"{}\" holds no dumped step {}; give a step it holds", root, step));
  }
  return absl::NotFoundError(fmt::format(
      "op \"{}\" is not in the dump \"{}\" ({} step(s) read); ops it holds include: \"{}\"", name,
      root, steps, fmt::join(seen, "\", \"")));
}

// Refuse: FailedPrecondition naming the op and why it cannot be replayed.
Status Refuse(const DumpOp& op, std::string_view why) {
  return absl::FailedPreconditionError(
      fmt::format("op \"{}\" ({}) cannot be replayed: {}", op.name, op.type, why));
}

// CheckReplayable: the reasons an op cannot be rerun from its dump alone.
Status CheckReplayable(const DumpOp& op) {
  const OpDef* def = OpRegistry::Global().Find(op.type);
  if (def == nullptr) {
    return Refuse(op, "its op type is not registered in this build of recsdk");
  }
  if (def->stateful) {
    return Refuse(op,
                  "it is stateful (it reads or writes variables, tables or a random stream), so "
                  "its result depends on state the dump does not hold; compare its inputs and "
                  "outputs across runs with compare-dumps instead");
  }
  for (const DumpTensor& in : op.inputs) {
    if (in.dtype == "resource") {
      return Refuse(op, fmt::format("input {} is a resource handle (a table or variable), whose "
                                    "contents the dump does not hold",
                                    in.port));
    }
    if (in.file.empty()) {
      return Refuse(op, fmt::format("input {} was not dumped{}; dump with dump_mode \"all\"",
                                    in.port, in.skipped.empty() ? "" : " (" + in.skipped + ")"));
    }
  }
  if (op.attrs.is_null()) {
    return Refuse(op,
                  "its manifest entry records no attributes (a dump written before manifests "
                  "did); dump the step again with this recsdk");
  }
  if (!op.attrs_omitted.empty()) {
    return Refuse(op,
                  fmt::format("its attribute(s) \"{}\" were too large to record in the manifest",
                              fmt::join(op.attrs_omitted, "\", \"")));
  }
  return absl::OkStatus();
}

StatusOr<Tensor> PayloadTensor(const DumpStep& step, const DumpTensor& t, std::string payload) {
  RECSDK_ASSIGN_OR_RETURN(DType dtype, ParseDType(t.dtype));
  RECSDK_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Create(dtype, Shape(t.shape)));
  if (tensor.TotalBytes() != payload.size()) {
    return absl::DataLossError(
        fmt::format("dumped tensor \"{}/{}\" holds {} bytes, not the {} of "
                    "its dtype and shape; dump the step again",
                    step.dir, t.file, payload.size(), tensor.TotalBytes()));
  }
  if (!payload.empty()) std::memcpy(tensor.raw_data(), payload.data(), payload.size());
  return tensor;
}

StatusOr<ReplayResult> Replay(Env* env, const std::string& root, const std::string& name,
                              const ReplayOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(auto found, FindOp(env, root, name, options.step));
  const DumpStep& step = found.first;
  const DumpOp& op = step.ops[found.second];
  RECSDK_RETURN_IF_ERROR(CheckReplayable(op));
  RECSDK_ASSIGN_OR_RETURN(
      AttrMap attrs,
      AttrMapFromJson(op.attrs, fmt::format("dump manifest \"{}/manifest.json\", op \"{}\"",
                                            step.dir, op.name)));

  // The one-op graph: a placeholder per input, fed the dumped input.
  Graph graph;
  Scope root_scope(&graph);
  FeedList feeds;
  std::vector<Output> inputs;
  for (const DumpTensor& in : op.inputs) {
    RECSDK_ASSIGN_OR_RETURN(std::string payload, ReadDumpTensor(env, step, in));
    RECSDK_ASSIGN_OR_RETURN(Tensor value, PayloadTensor(step, in, std::move(payload)));
    Output feed = ops::Placeholder(root_scope.WithOpName(fmt::format("replay_input_{}", in.port)),
                                   value.dtype(), value.shape());
    RECSDK_RETURN_IF_ERROR(graph.status());
    inputs.push_back(feed);
    feeds.emplace_back(feed.node->name(), std::move(value));
  }
  // The placeholders took unique names; the op keeps its own unless one of them took it.
  NodeSpec spec;
  spec.name = graph.FindNode(op.name) == nullptr ? op.name : graph.UniqueName(op.name);
  spec.type = op.type;
  spec.inputs = inputs;
  spec.attrs = std::move(attrs);
  auto node = graph.AddNode(std::move(spec));
  if (!node.ok()) {
    return Refuse(
        op, fmt::format("rebuilding it from the manifest failed: {}", node.status().message()));
  }

  ReplayResult result;
  result.step_dir = step.dir;
  result.step = step.step;
  result.op = op.name;
  result.type = op.type;
  result.threshold = options.threshold;
  // Every output must be dumped and described as the rebuilt op infers it: the comparison needs
  // them, and so the sizes the kernel will allocate are those of files already checked (a
  // manifest's attributes alone could ask for any size).
  const Node& rebuilt = **node;
  if (static_cast<size_t>(rebuilt.num_outputs()) != op.outputs.size()) {
    return absl::DataLossError(fmt::format(
        "dump manifest \"{}/manifest.json\": op \"{}\" ({}) lists {} output(s), the op has {}; "
        "dump the step again",
        step.dir, op.name, op.type, op.outputs.size(), rebuilt.num_outputs()));
  }
  std::vector<TensorName> fetches;
  std::vector<std::string> dumped_payloads;
  for (int o = 0; o < rebuilt.num_outputs(); ++o) {
    const DumpTensor& out = op.outputs[o];
    if (out.file.empty() || out.port != o) {
      return Refuse(op, fmt::format("output {} was not dumped{}; dump with dump_mode \"all\"", o,
                                    out.skipped.empty() ? "" : " (" + out.skipped + ")"));
    }
    const Shape dumped_shape(out.shape);
    if (out.dtype != DTypeName(rebuilt.output_dtype(o)) ||
        !rebuilt.output_shape(o).IsCompatibleWith(dumped_shape)) {
      return Refuse(
          op, fmt::format("rebuilt from the manifest, its output {} is {} {}, the dump's "
                          "is {} {}: the manifest does not describe this op",
                          o, DTypeName(rebuilt.output_dtype(o)), rebuilt.output_shape(o).ToString(),
                          out.dtype, dumped_shape.ToString()));
    }
    RECSDK_ASSIGN_OR_RETURN(std::string payload, ReadDumpTensor(env, step, out));
    dumped_payloads.push_back(std::move(payload));
    fetches.emplace_back(fmt::format("{}:{}", rebuilt.name(), o));
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                          Session::Create(graph, SessionConfig()));
  auto replayed = session->Run(feeds, fetches);
  if (!replayed.ok()) {
    return Status(replayed.status().code(),
                  fmt::format("replaying op \"{}\" ({}) of \"{}\" on the CPU failed: {}", op.name,
                              op.type, step.dir, replayed.status().message()));
  }
  for (size_t i = 0; i < fetches.size(); ++i) {
    const DumpTensor& out = op.outputs[i];
    const std::string& payload = dumped_payloads[i];
    const Tensor& t = (*replayed)[i];
    DumpTensor mine;
    mine.port = out.port;
    mine.dtype = std::string(DTypeName(t.dtype()));
    mine.shape.assign(t.shape().dims().begin(), t.shape().dims().end());
    const std::string mine_payload =
        t.TotalBytes() == 0 ? std::string()
                            : std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes());
    TensorComparison row;
    row.step = step.step;
    row.op = op.name;
    row.type = op.type;
    row.direction = "output";
    row.port = out.port;
    CompareTensors(out, payload, mine, mine_payload, options.threshold, &row);
    result.rows.push_back(std::move(row));
  }
  return result;
}

}  // namespace

bool ReplayResult::all_agree() const {
  return std::all_of(rows.begin(), rows.end(), [](const TensorComparison& r) { return r.agree; });
}

std::string ReplayResult::Text() const {
  std::string text =
      fmt::format("replayed op \"{}\" ({}) of step {} ({}) on the CPU\n", op, type, step, step_dir);
  text += fmt::format("{:<8} {:>9} {:>11} {:>11} {:>9}\n", "tensor", "cosine", "max_abs", "max_rel",
                      "first");
  for (const TensorComparison& r : rows) {
    text += fmt::format("{:<8} {:>9.6f} {:>11.4g} {:>11.4g} {:>9}{}{}\n",
                        fmt::format("out:{}", r.port), r.cosine, r.max_abs, r.max_rel,
                        r.first_diff < 0 ? std::string("-") : std::to_string(r.first_diff),
                        r.agree ? "" : "  DIFF", r.note.empty() ? "" : " (" + r.note + ")");
  }
  if (all_agree()) {
    text += fmt::format(
        "agrees: the dumped outputs are what the CPU computes from the dumped inputs (cosine >= "
        "{})\n",
        threshold);
  } else {
    text += fmt::format(
        "differs: the dumped outputs are not what the CPU computes from the dumped inputs (cosine "
        "< {} or NaN/Inf placement); the op's kernel on the dumped device is suspect\n",
        threshold);
  }
  return text;
}

StatusOr<ReplayResult> ReplayOp(Env* env, const std::string& root, const std::string& op,
                                const ReplayOptions& options) {
  if (!(options.threshold >= -1 && options.threshold <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("--threshold {}: a cosine similarity is in [-1, 1]; the spec's default is 0.98",
                    options.threshold));
  }
  try {
    return Replay(env, root, op, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        fmt::format("replaying op \"{}\" of \"{}\": out of memory", op, root));
  } catch (const std::exception& e) {
    // A Status at the boundary, never an exception (STYLE.md).
    return absl::InternalError(
        fmt::format("replaying op \"{}\" of \"{}\": {}", op, root, e.what()));
  }
}

}  // namespace recsdk::internal
