// export.cc: ExportSavedModel (the inference bundle) and the Predictor that serves it
// (recsdk/export.h).
//
// The inference graph is cut from the session's graph: the nodes the outputs reach through data
// inputs, stopping at the serving inputs. A lookup ModifyGraph moved to the key stage keeps its
// inputs (the DatasetColumn id placeholders) in the graph, so it is exported like any other, with
// moved_to_key_stage cleared: the Predictor runs it in the graph, read-only, on the raw ids.
// Control inputs are not followed (they order updates in training) and are kept only between kept
// nodes. Lookups become read-only (is_train false), and each kept table is declared with a
// slot-free SGD optimizer (its learning rate is never used: serving never updates a row): its
// bundle payload is the embeddings alone. Dense variables and tables are written with the
// checkpoint code (session_state.h), so the bundle is verified by CRC32C like a checkpoint.
//
// Threading: see recsdk/export.h.
#include "recsdk/export.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/distributed.h"
#include "recsdk/embedding.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/checkpoint/session_state.h"
#include "src/checkpoint/sharded_write.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/json_number.h"
#include "src/common/status_macros.h"
#include "src/dist/parameter_server.h"
#include "src/dist/process_communicator.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"

namespace recsdk {
namespace internal {
namespace {

constexpr char kGraphFile[] = "graph.json";
constexpr char kServingFile[] = "serving.json";

std::string NodeOf(std::string_view tensor) {
  const size_t colon = tensor.find(':');
  return std::string(colon == std::string_view::npos ? tensor : tensor.substr(0, colon));
}

bool IsPlaceholder(const Node& n) { return n.type() == "Placeholder"; }

// ServedNames: `names` (the user's, when given) or else `tensors` themselves; InvalidArgument for
// a list of another length, an empty name or a repeated one. `what` is "input" or "output".
StatusOr<std::vector<std::string>> ServedNames(const std::vector<std::string>& tensors,
                                               const std::vector<std::string>& names,
                                               std::string_view what) {
  if (names.empty()) return tensors;
  if (names.size() != tensors.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "ExportSavedModel: ServingSignature.{}_names has {} names for {} {}s; give one name per "
        "{}, in the same order, or none",
        what, names.size(), tensors.size(), what, what));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || !seen.insert(names[i]).second) {
      return absl::InvalidArgumentError(fmt::format(
          "ExportSavedModel: ServingSignature.{}_names[{}] (for \"{}\") is {}; give each {} a "
          "distinct, non-empty name",
          what, i, tensors[i], names[i].empty() ? "empty" : "\"" + names[i] + "\" again", what));
    }
  }
  return names;
}

// InferenceGraph: the part of `g` the outputs need, read-only. Fills `kept` with node names.
StatusOr<std::unique_ptr<Graph>> InferenceGraph(const Graph& g, const ServingSignature& sig,
                                                std::set<std::string>* kept) {
  std::set<std::string> inputs;
  for (const std::string& in : sig.inputs) {
    const Node* n = g.FindNode(in);
    if (n == nullptr || !IsPlaceholder(*n)) {
      return absl::InvalidArgumentError(fmt::format(
          "ExportSavedModel: serving input \"{}\" is {}; list the Placeholder or DatasetColumn "
          "nodes the model is fed through",
          in, n == nullptr ? "not a node of the graph" : "a " + n->type() + " node"));
    }
    inputs.insert(in);
  }
  std::vector<const Node*> stack;
  for (const std::string& out : sig.outputs) {
    auto o = g.FindOutput(out);
    if (!o.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("ExportSavedModel: serving output \"{}\": {}", out, o.status().message()));
    }
    stack.push_back(o->node);
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!kept->insert(n->name()).second) continue;
    if (IsPlaceholder(*n) && !inputs.contains(n->name())) {
      return absl::InvalidArgumentError(fmt::format(
          "ExportSavedModel: the serving outputs depend on placeholder \"{}\", which is not a "
          "serving input; add it to ServingSignature.inputs",
          n->name()));
    }
    for (const Output& in : n->inputs()) stack.push_back(in.node);
  }
  auto out = std::make_unique<Graph>();
  out->set_random_seed(g.random_seed());
  RegisterTableOps();
  for (const Node* n : g.nodes()) {
    if (!kept->contains(n->name())) continue;
    NodeSpec spec;
    spec.name = n->name();
    spec.type = n->type();
    spec.device = n->device();
    spec.attrs = n->attrs();
    for (const Output& in : n->inputs()) {
      spec.inputs.push_back(out->FindNode(in.node->name())->output(in.index));
    }
    for (const Node* c : n->control_inputs()) {
      if (kept->contains(c->name())) spec.control_inputs.push_back(out->FindNode(c->name()));
    }
    if (n->type() == kSparseLookupOp || n->type() == kTableLookupGroupOp) {
      spec.attrs["is_train"] = false;
    }
    if (n->type() == kSparseLookupOp) {
      // A lookup ModifyGraph moved to the key stage runs in the serving graph (no key stage
      // there); a moved lookup refuses to run in a graph (table_op_kernels.cc). A
      // TableLookupGroup (in-graph lookups merged by the session) has no such attribute.
      spec.attrs["moved_to_key_stage"] = false;
    }
    if (n->type() == kTableHandleOp) {
      RECSDK_ASSIGN_OR_RETURN(TableConfig config,
                              TableConfigFromJson(n->StringAttr("table_config")));
      spec.attrs["optimizer_config"] =
          OptimizerConfigToJson(config.use_dynamic_expansion ? SparseOptimizerConfig::SGDByAddr(1)
                                                             : SparseOptimizerConfig::SGD(1));
      // Serving holds every row in one tier: a tiered training table's host and SSD rows become
      // device rows (a tiered table refuses in-graph lookups, and a serving table given the
      // training table's ssd_data_path would replace its files).
      if (config.host_vocabulary_size > 0 || config.ssd_vocabulary_size > 0) {
        config.device_vocabulary_size += config.host_vocabulary_size + config.ssd_vocabulary_size;
        config.host_vocabulary_size = 0;
        config.ssd_vocabulary_size = 0;
        config.ssd_data_path.clear();
        spec.attrs["table_config"] = TableConfigToJson(config);
      }
    }
    auto added = out->AddNode(std::move(spec));
    if (!added.ok()) {
      return absl::InternalError(fmt::format("ExportSavedModel: copying node \"{}\": {}", n->name(),
                                             added.status().message()));
    }
  }
  for (const auto& [key, names] : g.collections()) {
    for (const std::string& name : names) {
      if (kept->contains(NodeOf(name))) out->AddToCollection(key, name);
    }
  }
  return out;
}

// ServingRows: a snapshot's embeddings without the optimizer's slots, as a slot-free SGD table's.
TableSnapshot ServingRows(TableSnapshot s, bool by_address) {
  const size_t n = s.keys.size(), dim = static_cast<size_t>(s.dim),
               stride = dim + static_cast<size_t>(s.num_slots);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(s.rows.begin() + static_cast<ptrdiff_t>(i * stride), dim,
                s.rows.begin() + static_cast<ptrdiff_t>(i * dim));
  }
  s.rows.resize(n * dim);
  s.num_slots = 0;
  s.optimizer = by_address ? SparseOptimizerKind::kSGDByAddr : SparseOptimizerKind::kSGD;
  return s;
}

}  // namespace
}  // namespace internal

using internal::Env;
using internal::JoinPath;

Status ExportSavedModel(Session& session, const std::string& export_path,
                        const ServingSignature& signature, Env* env) {
  // "dir/bundle/" means "dir/bundle": the temporary "<dir>.tmp-<pid>" must be its sibling.
  const std::string export_dir = internal::NormalizeDir(export_path);
  if (signature.outputs.empty()) {
    return absl::InvalidArgumentError(
        "ExportSavedModel: ServingSignature.outputs is empty; list the tensors to serve");
  }
  if (export_dir.empty()) {
    return absl::InvalidArgumentError("ExportSavedModel: export_dir is empty");
  }
  if (env == nullptr) env = Env::Default();
  if (env->FileExists(export_dir)) {
    RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(export_dir));
    if (!children.empty()) {
      return absl::FailedPreconditionError(
          fmt::format("ExportSavedModel: \"{}\" exists and is not empty; export to a new directory",
                      export_dir));
    }
    // The empty directory is replaced by the bundle (removed just before the rename, by the one
    // process that renames).
  }
  RECSDK_ASSIGN_OR_RETURN(const std::vector<std::string> input_names,
                          internal::ServedNames(signature.inputs, signature.input_names, "input"));
  RECSDK_ASSIGN_OR_RETURN(
      const std::vector<std::string> output_names,
      internal::ServedNames(signature.outputs, signature.output_names, "output"));
  std::set<std::string> kept;
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph,
                          internal::InferenceGraph(session.graph(), signature, &kept));
  RECSDK_ASSIGN_OR_RETURN(internal::SessionState all,
                          internal::CollectSessionState(session, /*saved_tables_only=*/false));
  internal::SessionState state;
  for (const std::string& v : all.var_names) {
    if (kept.contains(v)) state.var_names.push_back(v);
  }
  for (Node* n : graph->nodes()) {
    if (n->type() != internal::kTableHandleOp) continue;
    for (const internal::TableRef& t : all.tables) {
      if (t.name == n->StringAttr("table_name")) state.tables.push_back(t);
    }
  }
  // A job with ps ranks: the ps ranks hold the sharded tables' rows but run no graph. The
  // workers announce the export (its directory and the serving graph's sharded tables) and
  // every rank joins the sharded write: each ps writes its shard of those tables
  // (internal::ExportPsShard), a worker none, and the chief the rest, as in a job without ps.
  dist::JobLayout job_layout;
  const bool with_ps = dist::ProcessJob(&job_layout) && job_layout.ps > 0;
  if (with_ps && job_layout.is_ps) {
    return absl::FailedPreconditionError(
        "ExportSavedModel: this process is a ps rank; the workers export, and the ps joins "
        "through its serving loop (RunParameterServer, or the Estimator's ExportSavedModel on "
        "the ps)");
  }
  std::string ps_text = export_dir;
  if (with_ps) {
    for (const internal::TableRef& t : state.tables) {
      if (internal::IsSharded(t)) ps_text += "\n" + t.name;
    }
    std::erase_if(state.tables, [](const internal::TableRef& t) { return internal::IsSharded(t); });
  }
  StatusOr<internal::SaveJob> job =
      internal::SnapshotSession(session, state, EmbeddingTable::SnapshotKind::kFullKeepTracking);
  for (size_t i = 0; job.ok() && i < job->tables.size(); ++i) {
    const bool by_address = state.tables[i].resource->table()->config().use_dynamic_expansion;
    job->tables[i] = internal::ServingRows(std::move(job->tables[i]), by_address);
  }
  int world = 1;
  int rank = 0;
  if (with_ps) {
    if (!dist::ProcessWorld(&rank, &world)) {
      return absl::InternalError("ExportSavedModel: a job with ps ranks but no communicator");
    }
  } else {
    RECSDK_ASSIGN_OR_RETURN(world, get_rank_size());
    RECSDK_ASSIGN_OR_RETURN(rank, get_rank_id());
  }
  if (world == 1) RECSDK_RETURN_IF_ERROR(job.status());

  const std::string parent = internal::Dirname(export_dir);
  RECSDK_RETURN_IF_ERROR(env->CreateDir(parent));
  const std::string tmp = fmt::format("{}.tmp-{}", export_dir, static_cast<int>(getpid()));
  // write: the bundle's files into `tmp`, then renamed into place; `parts` says what of `out`.
  auto write = [&](const internal::SaveJob& out, const internal::ManifestParts& parts) -> Status {
    const std::string graph_json = graph->ToJson();
    RECSDK_RETURN_IF_ERROR(
        internal::WriteStringToFileSync(env, JoinPath(tmp, internal::kGraphFile), graph_json));
    // Each input: "name" the user's, "node" the placeholder; each output: "name" the user's,
    // "tensor" the graph's. Bundles written before names existed have no "node", and plain
    // tensor strings as outputs; Load reads both.
    nlohmann::json inputs = nlohmann::json::array();
    for (size_t i = 0; i < signature.inputs.size(); ++i) {
      const Node* n = graph->FindNode(signature.inputs[i]);
      inputs.push_back({{"name", input_names[i]},
                        {"node", signature.inputs[i]},
                        {"dtype", std::string(DTypeName(n->output_dtype(0)))},
                        {"shape", n->output_shape(0).ToString()}});
    }
    nlohmann::json outputs = nlohmann::json::array();
    for (size_t i = 0; i < signature.outputs.size(); ++i) {
      outputs.push_back({{"name", output_names[i]}, {"tensor", signature.outputs[i]}});
    }
    nlohmann::json serving = {{"format_version", internal::kCheckpointFormatVersion},
                              {"inputs", inputs},
                              {"outputs", outputs},
                              {"graph_bytes", graph_json.size()},
                              {"graph_crc32c", internal::Crc32c(graph_json)}};
    RECSDK_RETURN_IF_ERROR(internal::WriteJsonDocument(env, JoinPath(tmp, internal::kServingFile),
                                                       std::move(serving), /*atomic=*/false));
    RECSDK_RETURN_IF_ERROR(internal::WriteCheckpointFiles(env, tmp, out, parts).status());
    if (env->FileExists(export_dir)) RECSDK_RETURN_IF_ERROR(env->DeleteDir(export_dir));
    RECSDK_RETURN_IF_ERROR(env->RenameFile(tmp, export_dir));
    return env->SyncDir(parent);
  };
  // make_tmp: whatever is at the temporary name goes, never followed (a planted link must not
  // get its target's files deleted or written); the directory is then made exclusively.
  auto make_tmp = [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(internal::DeleteRecursively(env, tmp));
    return env->CreateDirExclusive(tmp);
  };
  auto failed = [&](const Status& s) {
    internal::DeleteRecursively(env, tmp).IgnoreError();
    return Status(s.code(), fmt::format("ExportSavedModel: writing \"{}\" failed and nothing was "
                                        "left there; fix the cause and export again: {}",
                                        export_dir, s.message()));
  };
  if (world == 1) {
    Status s = make_tmp();
    if (s.ok()) s = write(*job, {});
    return s.ok() ? s : failed(s);
  }
  // Several ranks: one bundle. Each rank writes the rows of its shard of the sharded tables;
  // rank 0 gathers the shards into the bundle beside the graph, the variables and the tables
  // every rank holds whole (internal::RunShardedWrite); Predictor::Load merges the shards.
  internal::SaveJob shard_job;
  internal::SaveJob top_job;
  if (job.ok()) {
    top_job.vars = std::move(job->vars);
    top_job.run_count = job->run_count;
    for (size_t i = 0; i < job->tables.size(); ++i) {
      (internal::IsSharded(state.tables[i]) ? shard_job : top_job)
          .tables.push_back(std::move(job->tables[i]));
    }
  }
  internal::ShardedWrite w;
  w.what = fmt::format("ExportSavedModel: the bundle \"{}\"", export_dir);
  w.shard_tmp = [&](int r) { return fmt::format("{}.tmp-shard-{}-of-{}", export_dir, r, world); };
  w.write_shard = [&](const std::string& dir) {
    return internal::WriteCheckpointFiles(env, dir, shard_job);
  };
  w.commit = [&](const std::vector<std::string>& shard_ids) -> StatusOr<std::string> {
    internal::ManifestParts parts;
    parts.shard_ids = shard_ids;
    Status s = make_tmp();
    if (s.ok() && with_ps) {
      // The workers' shard directories are empty; ps rank owner_first + p's is shard p of P
      // (the bundle then reads as one exported by P ranks).
      const int first = job_layout.owner_first();
      for (int r = 0; s.ok() && r < first; ++r) {
        s = internal::DeleteRecursively(env, w.shard_tmp(r));
      }
      for (int p = 0; s.ok() && p < job_layout.owners(); ++p) {
        const std::string from = w.shard_tmp(first + p);
        if (!env->FileExists(from)) {
          s = absl::FailedPreconditionError(fmt::format(
              "ps rank {} wrote its shard to \"{}\", which the chief cannot see: the directory "
              "must be one every rank sees (one host, or a file system shared by the hosts)",
              first + p, from));
        } else {
          s = env->RenameFile(from, JoinPath(tmp, internal::ShardDirName(p, job_layout.owners())));
        }
      }
      parts.shard_ids.assign(shard_ids.begin() + first, shard_ids.end());
    } else if (s.ok()) {
      s = internal::MoveShardsInto(env, world, w, tmp);
    }
    if (s.ok()) s = write(top_job, parts);
    if (!s.ok()) return failed(s);
    return std::string();
  };
  if (with_ps) {
    const Status announced = dist::AnnounceCommand(dist::PsCommand::kExport, -1, ps_text);
    if (!announced.ok()) {
      return Status(announced.code(),
                    fmt::format("ExportSavedModel: rank {}: announcing the export of \"{}\" to the "
                                "ps ranks: {}",
                                rank, export_dir, announced.message()));
    }
  }
  return internal::RunShardedWrite(env, rank, world, job.status(), w).status();
}

namespace internal {

Status ExportPsShard(Session& session, std::string_view text) {
  dist::JobLayout layout;
  int rank = 0, world = 1;
  if (!dist::ProcessJob(&layout) || !layout.is_ps || !dist::ProcessWorld(&rank, &world)) {
    return absl::FailedPreconditionError("ExportPsShard: this process is not a ps rank");
  }
  // text: the bundle's directory, then one sharded table of the serving graph per line.
  std::vector<std::string> lines;
  for (size_t start = 0;;) {
    const size_t end = text.find('\n', start);
    lines.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  const std::string export_dir = lines.front();
  Env* env = Env::Default();
  Status before = absl::OkStatus();
  SessionState state;
  StatusOr<SessionState> all = CollectSessionState(session, /*saved_tables_only=*/false);
  if (!all.ok()) before = all.status();
  for (size_t i = 1; before.ok() && i < lines.size(); ++i) {
    auto it = std::find_if(all->tables.begin(), all->tables.end(),
                           [&](const TableRef& t) { return t.name == lines[i] && IsSharded(t); });
    if (it == all->tables.end()) {
      before = absl::FailedPreconditionError(fmt::format(
          "ps rank {} holds no sharded table \"{}\" that the workers export; the ps must build "
          "the workers' model",
          rank, lines[i]));
    } else {
      state.tables.push_back(*it);
    }
  }
  StatusOr<SaveJob> job =
      before.ok() ? SnapshotSession(session, state, EmbeddingTable::SnapshotKind::kFullKeepTracking)
                  : StatusOr<SaveJob>(before);
  for (size_t i = 0; job.ok() && i < job->tables.size(); ++i) {
    const bool by_address = state.tables[i].resource->table()->config().use_dynamic_expansion;
    job->tables[i] = ServingRows(std::move(job->tables[i]), by_address);
  }
  ShardedWrite w;
  w.what = fmt::format("ExportSavedModel: the bundle \"{}\"", export_dir);
  w.shard_tmp = [&](int r) { return fmt::format("{}.tmp-shard-{}-of-{}", export_dir, r, world); };
  w.write_shard = [&](const std::string& dir) { return WriteCheckpointFiles(env, dir, *job); };
  w.commit = [](const std::vector<std::string>&) -> StatusOr<std::string> {
    return absl::InternalError("a ps rank never commits a bundle (rank 0 does)");
  };
  return RunShardedWrite(env, rank, world, job.status(), w).status();
}

}  // namespace internal

struct Predictor::Impl {
  ServingSignature signature;
  std::unique_ptr<Session> session;
  std::vector<TensorName> fetches;
};

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

const ServingSignature& Predictor::signature() const { return impl_->signature; }

StatusOr<std::unique_ptr<Predictor>> Predictor::Load(const std::string& bundle_dir,
                                                     const SessionConfig& config) {
  const std::string export_dir = internal::NormalizeDir(bundle_dir);
  auto load = [&]() -> StatusOr<std::unique_ptr<Predictor>> {
    Env* env = Env::Default();
    const std::string serving_path = JoinPath(export_dir, internal::kServingFile);
    auto serving = internal::ReadJsonDocument(env, serving_path);
    if (!serving.ok()) {
      if (absl::IsNotFound(serving.status())) {
        return absl::NotFoundError(fmt::format(
            "Predictor: \"{}\" is not an exported model (no {}); export one with ExportSavedModel",
            export_dir, internal::kServingFile));
      }
      return serving.status();
    }
    auto impl = std::make_unique<Impl>();
    uint64_t graph_bytes = 0;
    uint32_t graph_crc = 0;
    try {
      ServingSignature& sig = impl->signature;
      for (const auto& in : serving->at("inputs")) {
        sig.input_names.push_back(in.at("name").get<std::string>());
        sig.inputs.push_back(in.contains("node") ? in.at("node").get<std::string>()
                                                 : sig.input_names.back());
      }
      for (const auto& out : serving->at("outputs")) {
        if (out.is_string()) {  // a bundle written before output names existed
          sig.outputs.push_back(out.get<std::string>());
          sig.output_names.push_back(sig.outputs.back());
        } else {
          sig.outputs.push_back(out.at("tensor").get<std::string>());
          sig.output_names.push_back(out.at("name").get<std::string>());
        }
      }
      graph_bytes = internal::JsonNumber<uint64_t>(serving->at("graph_bytes"));
      graph_crc = internal::JsonNumber<uint32_t>(serving->at("graph_crc32c"));
    } catch (const std::exception& e) {
      return absl::DataLossError(fmt::format(
          "Predictor: \"{}\" is malformed ({}); export the model again", serving_path, e.what()));
    }
    const std::string graph_path = JoinPath(export_dir, internal::kGraphFile);
    auto graph_json = internal::ReadFileToString(env, graph_path);
    if (!graph_json.ok() || graph_json->size() != graph_bytes ||
        internal::Crc32c(*graph_json) != graph_crc) {
      return absl::DataLossError(fmt::format(
          "Predictor: \"{}\" is missing, truncated or corrupt (size or CRC32C differ from {}); "
          "export the model again",
          graph_path, serving_path));
    }
    internal::RegisterTableOps();
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Graph::FromJson(*graph_json));
    RECSDK_ASSIGN_OR_RETURN(impl->session, Session::Create(*graph, config));
    // Serving tables hold every key of the bundle (a bundle exported by several ranks too), and
    // a lookup asks no other process.
    internal::SessionResources(*impl->session)->set_process_local_tables(true);
    RECSDK_ASSIGN_OR_RETURN(internal::SessionState state,
                            internal::CollectSessionState(*impl->session, false));
    RECSDK_ASSIGN_OR_RETURN(internal::LoadedCheckpoint ckpt,
                            internal::LoadCheckpoint(env, export_dir));
    RECSDK_RETURN_IF_ERROR(internal::ApplyCheckpoint(*impl->session, state, ckpt));
    for (const std::string& o : impl->signature.outputs) impl->fetches.emplace_back(o);
    return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
  };
  try {
    return load();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "Predictor: out of memory loading \"{}\"; raise the process's memory limit", export_dir));
  }
}

StatusOr<std::vector<Tensor>> Predictor::Predict(const FeedList& inputs) {
  const ServingSignature& sig = impl_->signature;
  // Fed under the input names; "name:0" is accepted for "name", as before names existed.
  auto index_of = [&](const std::string& name) -> size_t {
    for (const std::string& n : {name, internal::NodeOf(name)}) {
      for (size_t i = 0; i < sig.input_names.size(); ++i) {
        if (sig.input_names[i] == n) return i;
      }
    }
    return sig.input_names.size();
  };
  std::vector<bool> fed(sig.inputs.size(), false);
  FeedList feeds;
  feeds.reserve(inputs.size());
  for (const auto& [name, tensor] : inputs) {
    const size_t i = index_of(name.name);
    const bool known = i < sig.inputs.size();
    if (!known || fed[i]) {
      return absl::InvalidArgumentError(fmt::format(
          "Predictor: input \"{}\" is {}; the serving inputs are [{}]", name.name,
          known ? "fed twice" : "not a serving input", fmt::join(sig.input_names, ", ")));
    }
    fed[i] = true;
    feeds.emplace_back(sig.inputs[i], tensor);
  }
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    if (!fed[i]) {
      return absl::InvalidArgumentError(
          fmt::format("Predictor: serving input \"{}\" is not fed", sig.input_names[i]));
    }
  }
  return impl_->session->Run(feeds, impl_->fetches);
}

StatusOr<std::map<std::string, Tensor>> Predictor::PredictNamed(const FeedList& inputs) {
  RECSDK_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, Predict(inputs));
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outputs.size(); ++i) {
    named.emplace(impl_->signature.output_names[i], std::move(outputs[i]));
  }
  return named;
}

}  // namespace recsdk
