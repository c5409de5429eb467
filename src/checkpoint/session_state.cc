// session_state.cc: snapshots of a session's variables and tables, checkpoint files written from
// them, and checkpoints read, verified and applied. Threading: see session_state.h.
#include "src/checkpoint/session_state.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "fmt/format.h"
#include "recsdk/variables.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/checkpoint/sharded_checkpoint.h"
#include "src/common/crc32c.h"
#include "src/common/json_number.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/session/session_resources.h"
#include "src/table/collective_table.h"

namespace recsdk::internal {
namespace {

// kMaxShards: the most ranks a checkpoint's manifest may say wrote it (a bound on a number read
// from a file, far above any job's world).
constexpr int64_t kMaxShards = 1 << 20;

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

}  // namespace

StatusOr<SessionState> CollectSessionState(Session& session, bool saved_tables_only) {
  SessionState state;
  // Every VarHandle node, in graph order: the graph's variables (optimizer slots and the global
  // step included), also in an exported graph, which keeps no initializers.
  for (const Node* n : session.graph().nodes()) {
    if (n->type() == "VarHandle") state.var_names.push_back(n->name());
  }
  RegisterTableOps();
  for (Node* n : session.graph().nodes()) {
    if (n->type() != kTableHandleOp) continue;
    RECSDK_ASSIGN_OR_RETURN(TableResource * r,
                            GetOrCreateTable(internal::SessionResources(session), *n));
    if (saved_tables_only && !r->table()->config().is_save) continue;
    state.tables.push_back({r->table()->name(), r});
  }
  return state;
}

StatusOr<SaveJob> SnapshotSession(Session& session, const SessionState& state,
                                  EmbeddingTable::SnapshotKind kind, bool stream_tables) {
  SaveJob job;
  job.table_kind = kind;
  job.delta = kind == EmbeddingTable::SnapshotKind::kDelta;
  job.run_count = session.stats().steps;
  ResourceMgr* rm = internal::SessionResources(session);
  for (const std::string& name : state.var_names) {
    auto* v = dynamic_cast<VariableResource*>(rm->Lookup(name));
    VarSnapshot s;
    s.name = name;
    {
      if (v != nullptr) {
        std::lock_guard<std::mutex> lock(v->mu);
        if (v->initialized()) {
          // A variable in device memory is read through the device.
          RECSDK_ASSIGN_OR_RETURN(Tensor value, rm->ToHost(v->value));
          s.dtype = value.dtype();
          s.shape = value.shape();
          s.bytes.assign(static_cast<const char*>(value.raw_data()), value.TotalBytes());
        }
      }
    }
    if (s.dtype == DType::kInvalid) {
      return absl::FailedPreconditionError(fmt::format(
          "variable \"{}\" is not initialised; run the init op (GlobalVariablesInitializer) "
          "or Restore before saving",
          name));
    }
    job.vars.push_back(std::move(s));
  }
  if (stream_tables) {
    job.streamed_tables = state.tables;
    return job;
  }
  for (const TableRef& t : state.tables) {
    RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, t.resource->table()->Snapshot(kind));
    job.tables.push_back(std::move(s));
  }
  return job;
}

StatusOr<std::string> WriteCheckpointFiles(Env* env, const std::string& tmp, const SaveJob& job,
                                           const ManifestParts& parts) {
  nlohmann::json vars = nlohmann::json::array();
  for (size_t i = 0; parts.variables && i < job.vars.size(); ++i) {
    const VarSnapshot& v = job.vars[i];
    RECSDK_ASSIGN_OR_RETURN(std::string_view descr, NpyDescr(v.dtype, v.name));
    std::vector<int64_t> shape(v.shape.dims().begin(), v.shape.dims().end());
    RECSDK_ASSIGN_OR_RETURN(PayloadInfo info,
                            WritePayload(env, tmp, fmt::format("var_{}.npy", i), descr, shape,
                                         v.bytes.data(), v.bytes.size()));
    vars.push_back(
        {{"name", v.name}, {"dtype", std::string(DTypeName(v.dtype))}, {"payload", info.ToJson()}});
  }
  nlohmann::json tables_json = nlohmann::json::array();
  using TableSet = ManifestParts::TableSet;
  // Snapshots taken ahead (job.tables) exist only for a save of one process (async_write).
  for (size_t i = 0; parts.tables == TableSet::kAll && i < job.tables.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(
        nlohmann::json entry,
        WriteTablePayloads(env, tmp, fmt::format("table_{}_", i), job.tables[i]));
    tables_json.push_back(std::move(entry));
  }
  for (size_t j = 0; j < job.streamed_tables.size(); ++j) {
    const TableRef& t = job.streamed_tables[j];
    if (parts.tables != TableSet::kAll && IsSharded(t) != (parts.tables == TableSet::kSharded)) {
      continue;
    }
    // The table stays locked while its rows stream to the files.
    internal::TableGuard table = t.resource->table()->LockAll();
    RECSDK_ASSIGN_OR_RETURN(
        nlohmann::json entry,
        SnapshotAndWriteTable(env, tmp, fmt::format("table_{}_", job.tables.size() + j), *table,
                              job.table_kind, nullptr,
                              job.link_ssd && parts.tables == TableSet::kAll));
    tables_json.push_back(std::move(entry));
  }
  // Version 3 only where a table links its SSD segments, so older readers keep reading the rest.
  const bool linked = std::any_of(tables_json.begin(), tables_json.end(),
                                  [](const nlohmann::json& e) { return LinkedSsd(e); });
  nlohmann::json manifest = {
      {"format_version", linked ? kLinkedSsdFormatVersion : kCheckpointFormatVersion},
      {"step", job.step},
      {"kind", job.delta ? "delta" : "full"},
      {"chain", job.chain},
      {"rng", {{"run_count", job.run_count}}},
      {"variables", vars},
      {"tables", tables_json}};
  // The dataset position goes with the tables: the key stage's batches are those the tables saw.
  if (parts.dataset && job.dataset_batches >= 0) {
    manifest["dataset"] = {{"batches_consumed", job.dataset_batches}};
  }
  if (!job.worker_dataset_batches.empty()) {
    manifest["dataset"] = {{"workers", job.worker_dataset_batches}};
  }
  if (job.delta) manifest["chain_ids"] = job.chain_ids;
  if (!parts.shard_ids.empty()) {
    manifest["shards"] = {{"world_size", parts.shard_ids.size()}, {"ids", parts.shard_ids}};
  }
  const std::string id = fmt::format("{:08x}", Crc32c(manifest.dump()));
  manifest["id"] = id;
  RECSDK_RETURN_IF_ERROR(
      WriteJsonDocument(env, JoinPath(tmp, kManifestFile), manifest, /*atomic=*/false));
  RECSDK_RETURN_IF_ERROR(env->SyncDir(tmp));
  return id;
}

Status SettleSsdHolds(const SaveJob& job, bool committed) {
  Status first;
  if (job.delta) return first;
  for (const TableRef& t : job.streamed_tables) {
    internal::TableGuard table = t.resource->table()->LockAll();
    Status s = table->SettleSsdHold(committed);
    if (first.ok()) first = s;
  }
  return first;
}

StatusOr<nlohmann::json> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFile);
  auto doc = ReadJsonDocument(env, path);
  if (!doc.ok() && absl::IsNotFound(doc.status())) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is missing; restore from another checkpoint", path));
  }
  RECSDK_RETURN_IF_ERROR(doc.status());
  try {
    const int version = JsonNumber<int>(doc->at("format_version"));
    if (version < kOldestReadableFormatVersion || version > kNewestReadableFormatVersion) {
      return absl::FailedPreconditionError(fmt::format(
          "checkpoint \"{}\" has format version {} but this recsdk reads versions {} to {}; "
          "restore it with the recsdk that wrote it",
          path, version, kOldestReadableFormatVersion, kNewestReadableFormatVersion));
    }
    (void)JsonNumber<int64_t>(doc->at("step"));
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
  if (!e.contains("payload")) {
    return absl::DataLossError(
        fmt::format("checkpoint manifest \"{}\": variable \"{}\" lists no payload", where, v.name));
  }
  RECSDK_ASSIGN_OR_RETURN(PayloadInfo info, PayloadInfo::FromJson(e.at("payload"), where));
  // The payload's element type must be the variable's: an int32 payload read as float32 bits
  // would restore numbers that never existed.
  auto descr = NpyDescr(v.dtype, v.name);
  if (!descr.ok() || info.descr != *descr) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\": variable \"{}\" is {} but its payload \"{}\" holds \"{}\" "
        "items; restore from another checkpoint",
        where, v.name, dtype, info.file, info.descr));
  }
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

// LinkTable: one table of a checkpoint of a chain, as this process holds it, with the manifest
// entry that describes it.
struct LinkTable {
  nlohmann::json entry;
  TableSnapshot snapshot;
};

// ReadListedTables: every table the manifest `m` of directory `dir` lists.
StatusOr<std::vector<LinkTable>> ReadListedTables(Env* env, const std::string& dir,
                                                  const nlohmann::json& m,
                                                  bool stream_rows = false) {
  std::vector<LinkTable> out;
  std::set<std::string> listed;
  for (const auto& e : m["tables"]) {
    // A name listed twice is refused before its payloads are read (they may be most of the
    // checkpoint); a malformed entry is ReadTablePayloads' to report.
    if (e.is_object() && e.contains("name") && e["name"].is_string() &&
        !listed.insert(e["name"].get<std::string>()).second) {
      return absl::DataLossError(
          fmt::format("checkpoint manifest \"{}\" lists table \"{}\" twice; restore from another "
                      "checkpoint",
                      JoinPath(dir, kManifestFile), e["name"].get<std::string>()));
    }
    RECSDK_ASSIGN_OR_RETURN(TableSnapshot s, ReadTablePayloads(env, dir, e, stream_rows));
    out.push_back({e, std::move(s)});
  }
  return out;
}

// ShardList: the shards a checkpoint's manifest lists; world 1 and no ids for a checkpoint of
// one process. A job with one ps rank writes one shard (world 1, one id).
struct ShardList {
  int world = 1;
  std::vector<std::string> ids;
};

StatusOr<ShardList> ReadShardList(const nlohmann::json& m, const std::string& manifest_path) {
  ShardList out;
  if (!m.contains("shards")) return out;
  try {
    const int64_t world = JsonNumber<int64_t>(m["shards"].at("world_size"));
    out.ids = m["shards"].at("ids").get<std::vector<std::string>>();
    if (world < 1 || world > kMaxShards || out.ids.size() != static_cast<size_t>(world)) {
      throw std::out_of_range("world_size");
    }
    out.world = static_cast<int>(world);
  } catch (const std::exception&) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: its shards entry is malformed (it needs a "
        "world_size from 1 to {} and as many ids); restore from another checkpoint",
        manifest_path, kMaxShards));
  }
  return out;
}

// ReadPlacedTables: the tables of the checkpoint `dir` (manifest `m`), each as `placements`
// holds it: read from the checkpoint itself, or from its shards (only this rank's when it was
// written by as many ranks as the placements have, else every shard, one at a time, each
// filtered). `shard_batches` receives the dataset position of this rank's shard, when there is
// one.
StatusOr<std::vector<LinkTable>> ReadPlacedTables(Env* env, const std::string& dir,
                                                  const nlohmann::json& m,
                                                  const TablePlacements& placements, int* world,
                                                  int64_t* shard_batches, bool stream_rows) {
  const std::string manifest_path = JoinPath(dir, kManifestFile);
  RECSDK_ASSIGN_OR_RETURN(const ShardList shards, ReadShardList(m, manifest_path));
  *world = shards.world;
  if (shards.ids.empty()) {
    // Streamed rows only where nothing is filtered out (every key of every table is ours).
    bool whole = placements.others.world <= 1;
    for (const auto& [name, p] : placements.tables) whole = whole && p.world <= 1;
    RECSDK_ASSIGN_OR_RETURN(std::vector<LinkTable> tables,
                            ReadListedTables(env, dir, m, stream_rows && whole));
    for (LinkTable& t : tables) {
      t.snapshot = FilterSnapshot(std::move(t.snapshot), placements.Of(t.snapshot.table_name));
    }
    return tables;
  }
  // One shard is enough when every table is placed as the checkpoint's writers held it.
  const int n = shards.world;
  bool same_world = placements.others.world == n;
  for (const auto& [name, p] : placements.tables) {
    same_world = same_world && p.world == n && p.rank == placements.others.rank;
  }
  std::vector<int> needed;
  for (int r = 0; r < n; ++r) {
    // A process that holds no key of the sharded tables (TablePlacement::kNone) reads no shard.
    if (placements.others.rank == TablePlacement::kNone) break;
    if (!same_world || r == placements.others.rank) needed.push_back(r);
  }
  std::vector<std::string> names;  // in the first shard's order
  std::map<std::string, std::vector<TableSnapshot>> parts;
  std::map<std::string, nlohmann::json> entries;
  for (int r : needed) {
    const std::string shard_dir = JoinPath(dir, ShardDirName(r, n));
    if (!env->FileExists(JoinPath(shard_dir, kManifestFile))) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\" is incomplete: the shard of rank {} of {} (\"{}\") is missing; "
          "restore another checkpoint",
          dir, r, n, shard_dir));
    }
    RECSDK_ASSIGN_OR_RETURN(nlohmann::json sm, ReadManifest(env, shard_dir));
    const std::string id = sm.value("id", "");
    if (id != shards.ids[static_cast<size_t>(r)]) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\": the shard of rank {} (\"{}\") has id \"{}\" but the checkpoint "
          "recorded \"{}\" (a shard of another save was put there); restore another checkpoint",
          dir, r, shard_dir, id, shards.ids[static_cast<size_t>(r)]));
    }
    if (r == placements.others.rank && n == placements.others.world && sm.contains("dataset")) {
      try {
        *shard_batches = JsonNumber<int64_t>(sm["dataset"].at("batches_consumed"));
      } catch (const std::exception&) {
        return absl::DataLossError(
            fmt::format("checkpoint manifest \"{}\" is corrupt: its dataset entry is malformed",
                        JoinPath(shard_dir, kManifestFile)));
      }
    }
    RECSDK_ASSIGN_OR_RETURN(std::vector<LinkTable> tables, ReadListedTables(env, shard_dir, sm));
    std::set<std::string> here;
    for (LinkTable& t : tables) {
      const std::string name = t.snapshot.table_name;
      here.insert(name);
      if (r == needed.front()) {
        names.push_back(name);
        entries.emplace(name, t.entry);
      } else if (!entries.contains(name)) {
        return absl::DataLossError(fmt::format(
            "checkpoint \"{}\": the shard of rank {} holds table \"{}\", which the shard of rank "
            "{} does not; restore another checkpoint",
            dir, r, name, needed.front()));
      }
      const TablePlacement& p = placements.Of(name);
      if (p.world == n && p.rank != r) continue;  // none of its keys are this process's
      parts[name].push_back(p.world == n ? std::move(t.snapshot)
                                         : FilterSnapshot(std::move(t.snapshot), p));
    }
    if (here.size() != names.size()) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\": the shard of rank {} holds {} tables where the shard of rank {} "
          "holds {}; restore another checkpoint",
          dir, r, here.size(), needed.front(), names.size()));
    }
  }
  // The tables every rank held whole are in the checkpoint's own manifest (rank 0's).
  RECSDK_ASSIGN_OR_RETURN(std::vector<LinkTable> out, ReadListedTables(env, dir, m));
  for (LinkTable& t : out) {
    if (entries.contains(t.snapshot.table_name)) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\" holds table \"{}\" both whole and in shards; restore another "
          "checkpoint",
          dir, t.snapshot.table_name));
    }
    t.snapshot = FilterSnapshot(std::move(t.snapshot), placements.Of(t.snapshot.table_name));
  }
  for (const std::string& name : names) {
    RECSDK_ASSIGN_OR_RETURN(
        TableSnapshot merged,
        MergeShardSnapshots(parts[name],
                            fmt::format("checkpoint \"{}\", table \"{}\"", dir, name)));
    out.push_back({entries[name], std::move(merged)});
  }
  return out;
}

StatusOr<LoadedCheckpoint> LoadCheckpoint(Env* env, const std::string& dir,
                                          const TablePlacements& placements, bool stream_rows) {
  LoadedCheckpoint out;
  out.dir = dir;
  out.manifest_path = JoinPath(dir, kManifestFile);
  RECSDK_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(env, dir));
  out.step = JsonNumber<int64_t>(manifest["step"]);
  out.chain = manifest["chain"].get<std::vector<std::string>>();
  try {
    if (manifest.contains("rng"))
      out.run_count = JsonNumber<int64_t>(manifest["rng"].at("run_count"));
    if (manifest.contains("dataset") && !manifest["dataset"].contains("workers")) {
      out.dataset_batches = JsonNumber<int64_t>(manifest["dataset"].at("batches_consumed"));
    }
    if (manifest.contains("dataset") && manifest["dataset"].contains("workers")) {
      for (const nlohmann::json& w : manifest["dataset"].at("workers")) {
        out.worker_dataset_batches.push_back(JsonNumber<int64_t>(w));
        if (out.worker_dataset_batches.back() < -1) out.dataset_batches = -2;  // refused below
      }
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: its rng or dataset entry is malformed ({}); "
        "restore from another checkpoint",
        out.manifest_path, e.what()));
  }
  if (out.run_count < -1 || out.dataset_batches < -1) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: run_count {} / batches_consumed {} is negative",
        out.manifest_path, out.run_count, out.dataset_batches));
  }
  for (const auto& e : manifest["variables"]) {
    RECSDK_ASSIGN_OR_RETURN(VarSnapshot v, ReadVariable(env, dir, e, out.manifest_path));
    if (out.vars.contains(v.name)) {
      return absl::DataLossError(fmt::format(
          "checkpoint manifest \"{}\" lists variable \"{}\" twice; restore from another "
          "checkpoint",
          out.manifest_path, v.name));
    }
    const std::string name = v.name;
    out.vars.emplace(name, std::move(v));
  }
  try {
    out.id = manifest.value("id", "");
    if (manifest.contains("chain_ids")) {
      out.chain_ids = manifest["chain_ids"].get<std::vector<std::string>>();
    }
  } catch (const std::exception&) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: its id or chain_ids is not text; restore from "
        "another checkpoint",
        out.manifest_path));
  }
  if (!out.chain_ids.empty() && out.chain_ids.size() != out.chain.size()) {
    return absl::DataLossError(fmt::format(
        "checkpoint manifest \"{}\" is corrupt: its chain names {} checkpoints but lists {} ids",
        out.manifest_path, out.chain.size(), out.chain_ids.size()));
  }
  const std::string parent = Dirname(dir);
  std::vector<std::string> dirs;
  for (const std::string& name : out.chain) {
    if (!IsPlainFileName(name)) {
      return absl::DataLossError(fmt::format("checkpoint manifest \"{}\" names \"{}\" in its chain",
                                             out.manifest_path, name));
    }
    dirs.push_back(JoinPath(parent, name));
  }
  dirs.push_back(dir);
  int64_t previous_step = -1;
  int link_world = 1;
  for (size_t i = 0; i < dirs.size(); ++i) {
    nlohmann::json m;
    if (i + 1 == dirs.size()) {
      m = manifest;
    } else {
      RECSDK_ASSIGN_OR_RETURN(m, ReadManifest(env, dirs[i]));
      // Every link is the checkpoint the delta was built on: its recorded identity (a hash of
      // its manifest) must match, so a base replaced by a later save of the same step, or a
      // chain listed out of order, is refused instead of restoring a state that never existed.
      const std::string link_id = m.value("id", "");
      if (!out.chain_ids.empty() && link_id != out.chain_ids[i]) {
        return absl::DataLossError(fmt::format(
            "checkpoint \"{}\" builds on \"{}\" with id \"{}\", but that checkpoint now has "
            "id \"{}\" (it was replaced by a later save, or the chain is out of order); restore "
            "a full checkpoint",
            dir, dirs[i], out.chain_ids[i], link_id.empty() ? "none" : link_id));
      }
    }
    const int64_t step = JsonNumber<int64_t>(m["step"]);
    if (step <= previous_step && i > 0) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\": its chain is out of order: \"{}\" (step {}) follows a checkpoint "
          "of step {}; restore a full checkpoint",
          dir, dirs[i], step, previous_step));
    }
    previous_step = step;
    const bool want_delta = i > 0;
    const bool last = i + 1 == dirs.size();
    int64_t shard_batches = -1;
    RECSDK_ASSIGN_OR_RETURN(
        std::vector<LinkTable> tables,
        ReadPlacedTables(env, dirs[i], m, placements, last ? &out.world_size : &link_world,
                         &shard_batches, stream_rows));
    if (last && out.world_size > 1) out.dataset_batches = shard_batches;
    // A position in the input of another number of ranks means nothing here (each rank reads
    // its shard of the input, Shard(dataset, size, rank)).
    if (last && out.world_size != placements.others.world) out.dataset_batches = -1;
    for (LinkTable& t : tables) {
      TableSnapshot& s = t.snapshot;
      if (s.is_delta != want_delta) {
        return absl::DataLossError(
            fmt::format("checkpoint manifest \"{}\": table \"{}\" is {} where the chain needs a {}",
                        JoinPath(dirs[i], kManifestFile), s.table_name,
                        s.is_delta ? "a delta" : "full", want_delta ? "delta" : "full snapshot"));
      }
      if (i == 0) out.table_entries[s.table_name] = t.entry;
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

Status CheckCheckpoint(Session& session, const SessionState& state, LoadedCheckpoint& ckpt) {
  ResourceMgr* rm = internal::SessionResources(session);
  const Graph& graph = session.graph();
  for (const std::string& name : state.var_names) {
    auto it = ckpt.vars.find(name);
    if (it == ckpt.vars.end()) {
      return absl::NotFoundError(
          fmt::format("variable \"{}\" of the session is not in checkpoint \"{}\"; restore a "
                      "checkpoint of the same model",
                      name, ckpt.dir));
    }
    const Node* n = graph.FindNode(name);
    const DType dtype = n->DTypeAttr("dtype");
    const Shape shape = n->ShapeAttr("shape");
    if (it->second.dtype != dtype || it->second.shape != shape) {
      return absl::FailedPreconditionError(
          fmt::format("variable \"{}\" is {} {} in checkpoint \"{}\" but {} {} in the session; "
                      "restore a checkpoint of the same model",
                      name, DTypeName(it->second.dtype), it->second.shape.ToString(), ckpt.dir,
                      DTypeName(dtype), shape.ToString()));
    }
    // Checked here, not at commit: a resource of that name that is not a variable would fail
    // the commit after the tables were already loaded.
    if (auto* r = rm->Lookup(name); r != nullptr && dynamic_cast<VariableResource*>(r) == nullptr) {
      return absl::InternalError(fmt::format("resource \"{}\" is not a variable", name));
    }
  }
  for (const TableRef& t : state.tables) {
    auto it = ckpt.table_entries.find(t.name);
    if (it == ckpt.table_entries.end()) {
      return absl::NotFoundError(
          fmt::format("table \"{}\" of the session is not in checkpoint \"{}\"; restore a "
                      "checkpoint of the same model, or create the table with is_save = false",
                      t.name, ckpt.dir));
    }
    RECSDK_RETURN_IF_ERROR(
        CheckTableCompatible(it->second, *t.resource->table(), ckpt.manifest_path));
    if (Status s = t.resource->table()->CheckSnapshots(ckpt.tables[t.name]); !s.ok()) {
      return absl::Status(s.code(),
                          fmt::format("restoring checkpoint \"{}\": {}", ckpt.dir, s.message()));
    }
  }
  return absl::OkStatus();
}

Status CommitCheckpoint(Session& session, const SessionState& state, LoadedCheckpoint& ckpt) {
  ResourceMgr* rm = internal::SessionResources(session);
  // The tables, then the variables. What can still fail: an I/O error of a tier, or rows that a
  // one-pass restore checks as it loads them (TableSnapshot::verify_rows: only into an empty
  // table, which the failing table is left as). The tables this restore filled from empty are
  // then emptied again, so a failed restore into a fresh session leaves it as it was.
  std::vector<const TableRef*> filled;
  auto empty_filled = [&] {
    for (const TableRef* f : filled) {
      internal::TableGuard table = f->resource->table()->LockAll();
      TableSnapshot none;
      none.table_name = table->name();
      none.dim = table->dim();
      none.num_slots = table->num_slots();
      none.optimizer = table->optimizer().kind;
      none.key_dtype = table->config().key_dtype;
      (void)table->LoadSnapshot(none);
    }
  };
  for (const TableRef& t : state.tables) {
    Status loaded;
    {
      // Adopted: the full snapshot's row pages become the table's (no copy); `ckpt` is spent.
      internal::TableGuard table = t.resource->table()->LockAll();
      const bool was_empty = table->size() == 0;
      for (TableSnapshot& s : ckpt.tables[t.name]) {
        loaded = table->AdoptSnapshot(std::move(s));
        if (!loaded.ok()) break;
      }
      if (loaded.ok() && was_empty) filled.push_back(&t);
    }
    if (!loaded.ok()) {
      empty_filled();
      return loaded;
    }
  }
  for (const std::string& name : state.var_names) {
    const VarSnapshot& v = ckpt.vars[name];
    auto* res = dynamic_cast<VariableResource*>(rm->LookupOrCreate(
        name, [&] { return std::make_unique<VariableResource>(v.dtype, v.shape); }));
    if (res == nullptr) {
      return absl::InternalError(fmt::format("resource \"{}\" is not a variable", name));
    }
    Tensor host(v.dtype, v.shape);
    if (!v.bytes.empty()) std::memcpy(host.raw_data(), v.bytes.data(), v.bytes.size());
    // Where the device keeps its variables (its own memory on an accelerator).
    RECSDK_ASSIGN_OR_RETURN(Tensor value, rm->ToDevice(host));
    std::lock_guard<std::mutex> lock(res->mu);
    res->value = std::move(value);
  }
  return absl::OkStatus();
}

Status ApplyCheckpoint(Session& session, const SessionState& state, LoadedCheckpoint& ckpt) {
  RECSDK_RETURN_IF_ERROR(CheckCheckpoint(session, state, ckpt));
  return CommitCheckpoint(session, state, ckpt);
}

bool IsSharded(const TableRef& table) {
  return dynamic_cast<const CollectiveTable*>(&table.resource->table()->SelfSynchronised()) !=
         nullptr;
}

TablePlacements PlacementsOf(const SessionState& state, TablePlacement process) {
  TablePlacements out;
  out.others = process;
  for (const TableRef& t : state.tables) {
    const auto* c = dynamic_cast<const CollectiveTable*>(&t.resource->table()->SelfSynchronised());
    out.tables[t.name] =
        c != nullptr ? TablePlacement{c->rank(), c->world_size()} : TablePlacement{};
  }
  return out;
}

}  // namespace recsdk::internal
