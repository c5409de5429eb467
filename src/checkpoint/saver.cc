// saver.cc: the Saver (recsdk/checkpoint.h): snapshots of the session's dense variables and
// tables, written as checkpoint directories with a manifest, an index naming the latest, delta
// chains and retention; and SaveTable / RestoreTable for one table.
//
// A save is two phases. Snapshot: with the tables' resolve locks held exclusively (the key stage
// may be resolving a later batch), copy every variable's bytes and every table's rows; this is
// the only part that must not overlap a step. Write: payloads into model_dir/.tmp-ckpt-<step>,
// each synced; manifest.json last; the directory synced and renamed to ckpt-<step>; model_dir
// synced; then the index rewritten atomically; then old checkpoints deleted. A crash before the
// index rename leaves the previous index (and so the previous checkpoint) the latest.
//
// Threading: see recsdk/checkpoint.h (one thread, between Session::Run calls).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/checkpoint.h"
#include "recsdk/embedding.h"
#include "recsdk/variables.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/session/table_ops.h"

namespace recsdk {
namespace internal {
namespace {

constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kTmpPrefix[] = ".tmp-ckpt-";

std::string CheckpointName(int64_t step) { return fmt::format("{}{}", kCheckpointPrefix, step); }

StatusOr<std::string_view> NpyDescr(DType dtype, const std::string& var) {
  switch (dtype) {
    case DType::kFloat32:
      return std::string_view("<f4");
    case DType::kFloat64:
      return std::string_view("<f8");
    case DType::kInt32:
      return std::string_view("<i4");
    case DType::kInt64:
      return std::string_view("<i8");
    default:
      return absl::UnimplementedError(
          fmt::format("variable \"{}\" has dtype {}, which checkpoints do not hold yet (float32, "
                      "float64, int32 and int64 only)",
                      var, DTypeName(dtype)));
  }
}

// Deletes a checkpoint directory (its files, then itself). Best effort for leftovers.
Status DeleteDirRecursively(Env* env, const std::string& dir) {
  RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
  for (const std::string& c : children) RECSDK_RETURN_IF_ERROR(env->DeleteFile(JoinPath(dir, c)));
  return env->DeleteDir(dir);
}

struct VarSnapshot {
  std::string name;
  DType dtype = DType::kInvalid;
  Shape shape;
  std::string bytes;
};

struct TableRef {
  std::string name;
  TableResource* resource = nullptr;
};

struct SaveJob {
  int64_t step = 0;
  bool delta = false;
  std::vector<std::string> chain;  // the full checkpoint and deltas this one builds on
  std::vector<VarSnapshot> vars;
  std::vector<TableSnapshot> tables;
};

struct IndexEntry {
  std::string name;
  std::vector<std::string> chain;
};

struct Index {
  std::vector<IndexEntry> checkpoints;  // oldest first; the last is the latest
};

StatusOr<Index> ReadIndex(Env* env, const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, kIndexFile);
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonDocument(env, path));
  Index index;
  try {
    for (const auto& e : doc.at("checkpoints")) {
      index.checkpoints.push_back(
          {e.at("name").get<std::string>(), e.at("chain").get<std::vector<std::string>>()});
    }
  } catch (const std::exception& ex) {
    return absl::DataLossError(
        fmt::format("checkpoint index \"{}\" is corrupt: {}; restore a checkpoint by its directory",
                    path, ex.what()));
  }
  return index;
}

Status WriteIndex(Env* env, const std::string& model_dir, const Index& index) {
  nlohmann::json list = nlohmann::json::array();
  for (const IndexEntry& e : index.checkpoints)
    list.push_back({{"name", e.name}, {"chain", e.chain}});
  nlohmann::json doc = {{"format_version", kCheckpointFormatVersion},
                        {"latest", index.checkpoints.empty() ? "" : index.checkpoints.back().name},
                        {"checkpoints", list}};
  return WriteJsonDocument(env, JoinPath(model_dir, kIndexFile), std::move(doc), /*atomic=*/true);
}

}  // namespace

// CheckpointSet: the session-independent part: writing a SaveJob, reading a checkpoint and its
// chain. Shared by Saver and ExportSavedModel's readers.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::string dir;
  std::vector<std::string> chain;
  std::map<std::string, VarSnapshot> vars;  // from the checkpoint itself (deltas hold all vars)
  // Per table: the full snapshot, then the deltas in order.
  std::map<std::string, std::vector<TableSnapshot>> tables;
  std::map<std::string, nlohmann::json> table_entries;  // of the full checkpoint
  std::string manifest_path;
};

StatusOr<nlohmann::json> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFile);
  auto doc = ReadJsonDocument(env, path);
  if (!doc.ok() && absl::IsNotFound(doc.status())) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is missing; restore from another checkpoint", path));
  }
  RECSDK_RETURN_IF_ERROR(doc.status());
  try {
    const int version = doc->at("format_version").get<int>();
    if (version != kCheckpointFormatVersion) {
      return absl::FailedPreconditionError(
          fmt::format("checkpoint \"{}\" has format version {} but this recsdk reads version {}",
                      path, version, kCheckpointFormatVersion));
    }
    (void)doc->at("step").get<int64_t>();
    (void)doc->at("chain").get<std::vector<std::string>>();
    if (!doc->at("variables").is_array() || !doc->at("tables").is_array()) throw std::exception();
  } catch (const std::exception&) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: a field is missing or malformed; restore from "
        "another checkpoint",
        path));
  }
  return doc;
}

StatusOr<VarSnapshot> ReadVariable(Env* env, const std::string& dir, const nlohmann::json& e,
                                   const std::string& where) {
  VarSnapshot v;
  std::string dtype;
  try {
    v.name = e.at("name").get<std::string>();
    dtype = e.at("dtype").get<std::string>();
  } catch (const std::exception&) {
    return absl::DataLossError(
        fmt::format("checkpoint manifest \"{}\" has a malformed variable", where));
  }
  auto dt = ParseDType(dtype);
  if (!dt.ok()) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\": variable \"{}\" has dtype \"{}\"", where, v.name, dtype));
  }
  v.dtype = *dt;
  RECSDK_ASSIGN_OR_RETURN(PayloadInfo info, PayloadInfo::FromJson(e.at("payload"), where));
  v.shape = Shape(absl::MakeConstSpan(info.shape));
  auto read = [&](auto tag) -> Status {
    std::vector<decltype(tag)> data;
    RECSDK_RETURN_IF_ERROR(ReadPayload(env, dir, info, &data));
    v.bytes.assign(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(data[0]));
    return absl::OkStatus();
  };
  switch (v.dtype) {
    case DType::kFloat32:
      RECSDK_RETURN_IF_ERROR(read(float{}));
      break;
    case DType::kFloat64:
      RECSDK_RETURN_IF_ERROR(read(double{}));
      break;
    case DType::kInt32:
      RECSDK_RETURN_IF_ERROR(read(int32_t{}));
      break;
    case DType::kInt64:
      RECSDK_RETURN_IF_ERROR(read(int64_t{}));
      break;
    default:
      return absl::DataLossError(fmt::format(
          "checkpoint manifest \"{}\": variable \"{}\" has dtype {}", where, v.name, dtype));
  }
  return v;
}

// LoadCheckpoint: reads and verifies `dir` and (for a delta) its chain, siblings of `dir`.
StatusOr<LoadedCheckpoint> LoadCheckpoint(Env* env, const std::string& dir) {
  LoadedCheckpoint out;
  out.dir = dir;
  out.manifest_path = JoinPath(dir, kManifestFile);
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(env, dir));
  out.step = manifest["step"].get<int64_t>();
  out.chain = manifest["chain"].get<std::vector<std::string>>();
  for (const auto& e : manifest["variables"]) {
    RECSDK_ASSIGN_OR_RETURN(VarSnapshot v, ReadVariable(env, dir, e, out.manifest_path));
    out.vars[v.name] = std::move(v);
  }
  const std::string parent = Dirname(dir);
  std::vector<std::string> dirs;
  for (const std::string& name : out.chain) {
    if (name.empty() || name.find('/') != std::string::npos || name == "..") {
      return absl::DataLossError(fmt::format("checkpoint manifest \"{}\" names \"{}\" in its chain",
                                             out.manifest_path, name));
    }
    dirs.push_back(JoinPath(parent, name));
  }
  dirs.push_back(dir);
  for (size_t i = 0; i < dirs.size(); ++i) {
    nlohmann::json m;
    if (i + 1 == dirs.size()) {
      m = manifest;
    } else {
      RECSDK_ASSIGN_OR_RETURN(m, ReadManifest(env, dirs[i]));
    }
    const bool want_delta = i > 0;
    for (const auto& e : m["tables"]) {
      RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, ReadTablePayloads(env, dirs[i], e));
      if (s.is_delta != want_delta) {
        return absl::DataLossError(
            fmt::format("checkpoint manifest \"{}\": table \"{}\" is {} where the chain needs a {}",
                        JoinPath(dirs[i], kManifestFile), s.table_name,
                        s.is_delta ? "a delta" : "full", want_delta ? "delta" : "full snapshot"));
      }
      if (i == 0) out.table_entries[s.table_name] = e;
      auto& list = out.tables[s.table_name];
      if (list.size() != i) {
        return absl::DataLossError(fmt::format(
            "checkpoint \"{}\": table \"{}\" is missing from an earlier checkpoint of its chain",
            dirs[i], s.table_name));
      }
      list.push_back(std::move(s));
    }
  }
  for (const auto& [name, list] : out.tables) {
    if (list.size() != dirs.size()) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\": table \"{}\" is missing from a later checkpoint of its chain", dir,
          name));
    }
  }
  return out;
}

}  // namespace internal

using internal::Env;
using internal::JoinPath;

struct Saver::Impl {
  Session* session = nullptr;
  SaverOptions options;
  Env* env = nullptr;
  std::vector<std::string> var_names;
  std::vector<internal::TableRef> tables;
  // The chain a delta would build on: empty until a save or restore, cleared by a failed save.
  std::vector<std::string> chain;

  StatusOr<internal::SaveJob> Snapshot(int64_t step, bool delta);
  StatusOr<std::string> Write(const internal::SaveJob& job);
  StatusOr<std::string> SaveImpl(int64_t step, bool delta);
  StatusOr<std::string> ResolveCheckpoint(std::string_view checkpoint) const;
};

Saver::Saver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Saver::~Saver() = default;

StatusOr<std::unique_ptr<Saver>> Saver::Create(Session& session, const SaverOptions& options) {
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError(
        "SaverOptions.model_dir is empty; set it to the directory for checkpoints");
  }
  if (options.keep_checkpoint_max < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "SaverOptions.keep_checkpoint_max is {}; it must be >= 1, or 0 to keep all checkpoints",
        options.keep_checkpoint_max));
  }
  if (options.restore_model_version < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "SaverOptions.restore_model_version is {}; it must be a checkpoint's step, or -1 for the "
        "latest",
        options.restore_model_version));
  }
  auto impl = std::make_unique<Impl>();
  impl->session = &session;
  impl->options = options;
  impl->env = options.env != nullptr ? options.env : Env::Default();
  for (const Variable& v : GlobalVariables(session.graph())) impl->var_names.push_back(v.name());
  internal::RegisterTableOps();
  for (Node* n : session.graph().nodes()) {
    if (n->type() != internal::kTableHandleOp) continue;
    RECSDK_ASSIGN_OR_RETURN(internal::TableResource * r,
                            internal::GetOrCreateTable(session.resource_mgr(), *n));
    if (!r->table()->config().is_save) continue;
    impl->tables.push_back({r->table()->name(), r});
  }
  RECSDK_RETURN_IF_ERROR(impl->env->CreateDir(options.model_dir));
  return std::unique_ptr<Saver>(new Saver(std::move(impl)));
}

StatusOr<internal::SaveJob> Saver::Impl::Snapshot(int64_t step, bool delta) {
  internal::SaveJob job;
  job.step = step;
  job.delta = delta;
  if (delta) job.chain = chain;
  internal::ResourceMgr* rm = session->resource_mgr();
  for (const std::string& name : var_names) {
    auto* v = dynamic_cast<internal::VariableResource*>(rm->Lookup(name));
    internal::VarSnapshot s;
    s.name = name;
    {
      if (v != nullptr) {
        std::lock_guard<std::mutex> lock(v->mu);
        if (v->initialized()) {
          s.dtype = v->value.dtype();
          s.shape = v->value.shape();
          s.bytes.assign(static_cast<const char*>(v->value.raw_data()), v->value.TotalBytes());
        }
      }
    }
    if (s.dtype == DType::kInvalid) {
      return absl::FailedPreconditionError(fmt::format(
          "Saver: variable \"{}\" is not initialised; run the init op (GlobalVariablesInitializer) "
          "or Restore before saving",
          name));
    }
    job.vars.push_back(std::move(s));
  }
  for (const internal::TableRef& t : tables) {
    std::unique_lock<std::shared_mutex> lock(t.resource->resolve_mu);
    RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, t.resource->table()->Snapshot(
                                                 delta ? EmbeddingTable::SnapshotKind::kDelta
                                                       : EmbeddingTable::SnapshotKind::kFull));
    job.tables.push_back(std::move(s));
  }
  return job;
}

StatusOr<std::string> Saver::Impl::Write(const internal::SaveJob& job) {
  const std::string& model_dir = options.model_dir;
  const std::string name = internal::CheckpointName(job.step);
  const std::string final_dir = JoinPath(model_dir, name);
  const std::string tmp = JoinPath(model_dir, fmt::format("{}{}-{}", internal::kTmpPrefix, job.step,
                                                          static_cast<int>(getpid())));
  // Leftovers of an earlier crash of this step: start clean.
  if (env->FileExists(tmp)) RECSDK_RETURN_IF_ERROR(internal::DeleteDirRecursively(env, tmp));
  RECSDK_RETURN_IF_ERROR(env->CreateDir(tmp));

  nlohmann::json vars = nlohmann::json::array();
  for (size_t i = 0; i < job.vars.size(); ++i) {
    const internal::VarSnapshot& v = job.vars[i];
    RECSDK_ASSIGN_OR_RETURN(std::string_view descr, internal::NpyDescr(v.dtype, v.name));
    std::vector<int64_t> shape(v.shape.dims().begin(), v.shape.dims().end());
    RECSDK_ASSIGN_OR_RETURN(internal::PayloadInfo info,
                            internal::WritePayload(env, tmp, fmt::format("var_{}.npy", i), descr,
                                                   shape, v.bytes.data(), v.bytes.size()));
    vars.push_back(
        {{"name", v.name}, {"dtype", std::string(DTypeName(v.dtype))}, {"payload", info.ToJson()}});
  }
  nlohmann::json tables_json = nlohmann::json::array();
  for (size_t i = 0; i < job.tables.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(
        nlohmann::json entry,
        internal::WriteTablePayloads(env, tmp, fmt::format("table_{}_", i), job.tables[i]));
    tables_json.push_back(std::move(entry));
  }
  nlohmann::json manifest = {{"format_version", internal::kCheckpointFormatVersion},
                             {"step", job.step},
                             {"kind", job.delta ? "delta" : "full"},
                             {"chain", job.chain},
                             {"variables", vars},
                             {"tables", tables_json}};
  RECSDK_RETURN_IF_ERROR(internal::WriteJsonDocument(env, JoinPath(tmp, internal::kManifestFile),
                                                     manifest, /*atomic=*/false));
  RECSDK_RETURN_IF_ERROR(env->SyncDir(tmp));

  // The index, read before anything is renamed: a corrupt index is rebuilt from this save on.
  internal::Index index;
  if (env->FileExists(JoinPath(model_dir, internal::kIndexFile))) {
    auto read = internal::ReadIndex(env, model_dir);
    if (read.ok()) {
      index = std::move(*read);
    } else {
      internal::LogWarning("Saver: ignoring the unreadable index: {}", read.status().message());
    }
  }
  // Replacing a checkpoint of the same step: move the old one aside first, delete it after.
  std::string aside;
  if (env->FileExists(final_dir)) {
    aside = tmp + ".old";
    RECSDK_RETURN_IF_ERROR(env->RenameFile(final_dir, aside));
  }
  RECSDK_RETURN_IF_ERROR(env->RenameFile(tmp, final_dir));
  RECSDK_RETURN_IF_ERROR(env->SyncDir(model_dir));

  std::vector<internal::IndexEntry>& list = index.checkpoints;
  list.erase(
      std::remove_if(list.begin(), list.end(), [&](const auto& e) { return e.name == name; }),
      list.end());
  list.push_back({name, job.chain});
  // Retention: the newest keep_checkpoint_max, and every checkpoint their chains build on.
  std::vector<std::string> doomed;
  const size_t keep = static_cast<size_t>(options.keep_checkpoint_max);
  if (keep > 0 && list.size() > keep) {
    std::set<std::string> needed;
    for (size_t i = list.size() - keep; i < list.size(); ++i) {
      needed.insert(list[i].name);
      needed.insert(list[i].chain.begin(), list[i].chain.end());
    }
    std::vector<internal::IndexEntry> kept;
    for (auto& e : list) {
      if (needed.contains(e.name)) {
        kept.push_back(std::move(e));
      } else {
        doomed.push_back(e.name);
      }
    }
    list = std::move(kept);
  }
  RECSDK_RETURN_IF_ERROR(internal::WriteIndex(env, model_dir, index));
  if (!aside.empty()) {
    if (Status s = internal::DeleteDirRecursively(env, aside); !s.ok()) {
      internal::LogWarning("Saver: could not delete the replaced checkpoint: {}", s.message());
    }
  }
  for (const std::string& d : doomed) {
    if (Status s = internal::DeleteDirRecursively(env, JoinPath(model_dir, d)); !s.ok()) {
      internal::LogWarning("Saver: could not delete old checkpoint \"{}\": {}", d, s.message());
    }
  }
  return final_dir;
}

StatusOr<std::string> Saver::Impl::SaveImpl(int64_t step, bool delta) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        fmt::format("Saver: global_step {} is negative; pass the training step (>= 0)", step));
  }
  // Whatever happens from here, a failure breaks the delta chain: the tables' change tracking
  // restarts at the snapshot, so a later delta would miss this one's rows.
  std::vector<std::string> previous = std::move(chain);
  chain.clear();
  if (delta) chain = previous;
  auto job = Snapshot(step, delta);
  if (!job.ok()) {
    chain.clear();
    return job.status();
  }
  auto dir = Write(*job);
  chain.clear();
  if (!dir.ok()) {
    // Remove this save's temporary directory; the previous checkpoint stays the latest.
    const std::string tmp =
        JoinPath(options.model_dir,
                 fmt::format("{}{}-{}", internal::kTmpPrefix, step, static_cast<int>(getpid())));
    if (env->FileExists(tmp)) internal::DeleteDirRecursively(env, tmp).IgnoreError();
  }
  if (!dir.ok()) return dir.status();
  chain = job->chain;
  chain.push_back(internal::CheckpointName(step));
  return dir;
}

StatusOr<std::string> Saver::Save(int64_t global_step) {
  try {
    return impl_->SaveImpl(global_step, /*delta=*/false);
  } catch (const std::bad_alloc&) {
    impl_->chain.clear();
    return absl::ResourceExhaustedError(
        fmt::format("Saver: out of memory taking the snapshot of step {}", global_step));
  }
}

StatusOr<std::string> Saver::SaveDelta(int64_t global_step) {
  if (!impl_->options.is_incremental_checkpoint) {
    return absl::FailedPreconditionError(
        "Saver::SaveDelta needs SaverOptions.is_incremental_checkpoint = true");
  }
  if (impl_->chain.empty()) {
    return absl::FailedPreconditionError(
        "Saver::SaveDelta: there is no full checkpoint to build on (none saved or restored by this "
        "Saver, or the previous save failed); call Save first");
  }
  try {
    return impl_->SaveImpl(global_step, /*delta=*/true);
  } catch (const std::bad_alloc&) {
    impl_->chain.clear();
    return absl::ResourceExhaustedError(
        fmt::format("Saver: out of memory taking the delta snapshot of step {}", global_step));
  }
}

StatusOr<std::string> Saver::LatestCheckpoint() const {
  const std::string& model_dir = impl_->options.model_dir;
  if (!impl_->env->FileExists(JoinPath(model_dir, internal::kIndexFile))) {
    return absl::NotFoundError(fmt::format("no checkpoint in \"{}\" (it has no \"{}\" index file)",
                                           model_dir, internal::kIndexFile));
  }
  RECSDK_ASSIGN_OR_RETURN(internal::Index index, internal::ReadIndex(impl_->env, model_dir));
  if (index.checkpoints.empty()) {
    return absl::NotFoundError(fmt::format("the checkpoint index of \"{}\" is empty", model_dir));
  }
  return JoinPath(model_dir, index.checkpoints.back().name);
}

StatusOr<std::string> Saver::Impl::ResolveCheckpoint(std::string_view checkpoint) const {
  const std::string& model_dir = options.model_dir;
  if (checkpoint.empty()) {
    if (options.restore_model_version >= 0) {
      const std::string dir =
          JoinPath(model_dir, internal::CheckpointName(options.restore_model_version));
      if (!env->FileExists(dir)) {
        return absl::NotFoundError(fmt::format(
            "restore_model_version {}: there is no checkpoint \"{}\"; pick a step that was saved",
            options.restore_model_version, dir));
      }
      return dir;
    }
    const std::string index_path = JoinPath(model_dir, internal::kIndexFile);
    if (!env->FileExists(index_path)) {
      // No index: NotFound when there is no checkpoint at all, DataLoss when there are some
      // (the index was lost, so which one is the latest is unknown).
      auto children = env->GetChildren(model_dir);
      if (children.ok()) {
        for (const std::string& c : *children) {
          if (c.rfind(internal::kCheckpointPrefix, 0) == 0) {
            return absl::DataLossError(fmt::format(
                "checkpoint index \"{}\" is missing but \"{}\" holds checkpoints (e.g. \"{}\"); "
                "restore one by name",
                index_path, model_dir, c));
          }
        }
      }
      return absl::NotFoundError(fmt::format("no checkpoint in \"{}\"", model_dir));
    }
    RECSDK_ASSIGN_OR_RETURN(internal::Index index, internal::ReadIndex(env, model_dir));
    if (index.checkpoints.empty()) {
      return absl::NotFoundError(fmt::format("the checkpoint index \"{}\" is empty", index_path));
    }
    return JoinPath(model_dir, index.checkpoints.back().name);
  }
  std::string dir(checkpoint);
  if (dir.find('/') == std::string::npos) dir = JoinPath(model_dir, dir);
  if (!env->FileExists(dir)) {
    return absl::NotFoundError(fmt::format("checkpoint \"{}\" does not exist", dir));
  }
  return dir;
}

StatusOr<int64_t> Saver::Restore(std::string_view checkpoint) {
  Impl& im = *impl_;
  RECSDK_ASSIGN_OR_RETURN(std::string dir, im.ResolveCheckpoint(checkpoint));
  internal::LoadedCheckpoint ckpt;
  try {
    RECSDK_ASSIGN_OR_RETURN(ckpt, internal::LoadCheckpoint(im.env, dir));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        fmt::format("Saver: out of memory reading checkpoint \"{}\"", dir));
  }
  // Check everything against the session before changing anything.
  internal::ResourceMgr* rm = im.session->resource_mgr();
  const Graph& graph = im.session->graph();
  for (const std::string& name : im.var_names) {
    auto it = ckpt.vars.find(name);
    if (it == ckpt.vars.end()) {
      return absl::NotFoundError(fmt::format(
          "Saver::Restore: variable \"{}\" of the session is not in checkpoint \"{}\"; restore a "
          "checkpoint of the same model",
          name, dir));
    }
    const Node* n = graph.FindNode(name);
    const DType dtype = n->DTypeAttr("dtype");
    const Shape shape = n->ShapeAttr("shape");
    if (it->second.dtype != dtype || it->second.shape != shape) {
      return absl::FailedPreconditionError(fmt::format(
          "Saver::Restore: variable \"{}\" is {} {} in checkpoint \"{}\" but {} {} in the session; "
          "restore a checkpoint of the same model",
          name, DTypeName(it->second.dtype), it->second.shape.ToString(), dir, DTypeName(dtype),
          shape.ToString()));
    }
  }
  for (const internal::TableRef& t : im.tables) {
    auto it = ckpt.table_entries.find(t.name);
    if (it == ckpt.table_entries.end()) {
      return absl::NotFoundError(fmt::format(
          "Saver::Restore: table \"{}\" of the session is not in checkpoint \"{}\"; restore a "
          "checkpoint of the same model, or create the table with is_save = false",
          t.name, dir));
    }
    RECSDK_RETURN_IF_ERROR(
        internal::CheckTableCompatible(it->second, *t.resource->table(), ckpt.manifest_path));
  }
  // Apply.
  for (const std::string& name : im.var_names) {
    const internal::VarSnapshot& v = ckpt.vars[name];
    auto* res = dynamic_cast<internal::VariableResource*>(rm->LookupOrCreate(
        name, [&] { return std::make_unique<internal::VariableResource>(v.dtype, v.shape); }));
    if (res == nullptr) {
      return absl::InternalError(fmt::format("resource \"{}\" is not a variable", name));
    }
    Tensor value(v.dtype, v.shape);
    if (!v.bytes.empty()) std::memcpy(value.raw_data(), v.bytes.data(), v.bytes.size());
    std::lock_guard<std::mutex> lock(res->mu);
    res->value = std::move(value);
  }
  for (const internal::TableRef& t : im.tables) {
    std::unique_lock<std::shared_mutex> lock(t.resource->resolve_mu);
    for (const TableSnapshot& s : ckpt.tables[t.name]) {
      RECSDK_RETURN_IF_ERROR(t.resource->table()->LoadSnapshot(s));
    }
  }
  im.chain = ckpt.chain;
  im.chain.push_back(dir.substr(dir.find_last_of('/') + 1));
  internal::LogInfo("Saver: restored checkpoint \"{}\" (step {})", dir, ckpt.step);
  return ckpt.step;
}

Status SaveTable(EmbeddingTable& table, const std::string& dir) {
  Env* env = Env::Default();
  RECSDK_RETURN_IF_ERROR(env->CreateDir(dir));
  RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, table.Snapshot(EmbeddingTable::SnapshotKind::kFull));
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json entry, internal::WriteTablePayloads(env, dir, "", s));
  nlohmann::json manifest = {{"format_version", internal::kCheckpointFormatVersion},
                             {"table", entry}};
  return internal::WriteJsonDocument(env, JoinPath(dir, internal::kManifestFile),
                                     std::move(manifest), /*atomic=*/true);
}

Status RestoreTable(EmbeddingTable& table, const std::string& dir) {
  Env* env = Env::Default();
  const std::string path = JoinPath(dir, internal::kManifestFile);
  auto manifest = internal::ReadJsonDocument(env, path);
  if (!manifest.ok()) {
    if (absl::IsNotFound(manifest.status())) {
      return absl::DataLossError(
          fmt::format("table \"{}\": cannot restore from \"{}\": its manifest \"{}\" is missing",
                      table.name(), dir, path));
    }
    return manifest.status();
  }
  if (!manifest->contains("table")) {
    return absl::DataLossError(fmt::format("table manifest \"{}\" has no table entry", path));
  }
  RECSDK_RETURN_IF_ERROR(internal::CheckTableCompatible((*manifest)["table"], table, path));
  RECSDK_ASSIGN_OR_RETURN(TableSnapshot s,
                          internal::ReadTablePayloads(env, dir, (*manifest)["table"]));
  return table.LoadSnapshot(s);
}

}  // namespace recsdk
