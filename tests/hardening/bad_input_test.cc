// bad_input_test.cc: the table of hostile inputs (issue 10). One row per case: the entry point it
// reaches, the bad input, the status code a caller must get and the words the message must
// contain. Every class of the issue has rows: sizes that overflow, user sizes that would size an
// allocation, checks a caller can reach, special files, data dropped without a word and messages
// that mislead. Each row ran against the code before its fix and crashed, hung, was accepted or
// said the wrong thing there (see the row's comment). Cases that are not one call (skip mode
// counts, permission errors that root cannot see) follow the table as plain tests.
// Threading: single-threaded test code.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "recsdk/checkpoint.h"
#include "recsdk/config.h"
#include "recsdk/dataset.h"
#include "recsdk/embedding.h"
#include "recsdk/export.h"
#include "recsdk/gradients.h"
#include "recsdk/graph.h"
#include "recsdk/hooks.h"
#include "recsdk/initialize.h"
#include "recsdk/layers.h"
#include "recsdk/loss_scale.h"
#include "recsdk/metrics.h"
#include "recsdk/ops.h"
#include "recsdk/optimizers.h"
#include "recsdk/run_config.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/table.h"
#include "recsdk/variables.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/checked_math.h"
#include "src/common/env.h"
#include "src/common/file_open.h"
#include "src/common/status_macros.h"
#include "src/pipeline/crc32c.h"
#include "src/pipeline/tfrecord.h"
#include "src/session/table_ops.h"
#include "src/table/dedup.h"
#include "src/table/npy.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace recsdk {
namespace {

using ::recsdk::testing::Drain;
using ::recsdk::testing::TestDir;
using ::recsdk::testing::WriteFile;
using ::testing::HasSubstr;

struct BadInput {
  std::string name;  // entry point / case (a valid test name once '/' becomes '_')
  std::function<Status(const TestDir&)> run;
  absl::StatusCode code;
  std::vector<std::string> words;
};

// OneRowDataset: an in-memory dataset of one int64 column "x" with one row.
std::unique_ptr<Dataset> OneRowDataset() {
  std::vector<InMemoryColumn> cols(1);
  cols[0].name = "x";
  cols[0].values = std::vector<int64_t>{7};
  return *InMemoryDataset(std::move(cols), 1);
}

// DrainStatus: the status of reading a dataset to its end (or of creating it).
Status DrainStatus(StatusOr<std::unique_ptr<Dataset>> ds) {
  if (!ds.ok()) return ds.status();
  return Drain(**ds).status();
}

void Put32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

// A TFRecord frame header claiming `len` bytes, with a valid length CRC.
std::string FrameHeader(uint64_t len) {
  std::string h;
  Put64(&h, len);
  Put32(&h, internal::MaskCrc(internal::Crc32c(h.data(), 8)));
  return h;
}

// A record file (docs/binary_format.md) whose schema lists two float32 scalar columns, both
// named `name`, with one block of one row and the end block.
std::string RecordFileWithColumnTwice(const std::string& name) {
  std::string schema;
  Put32(&schema, 2);
  for (int i = 0; i < 2; ++i) {
    Put32(&schema, static_cast<uint32_t>(name.size()));
    schema += name;
    Put32(&schema, static_cast<uint32_t>(DType::kFloat32));
    Put32(&schema, 0);  // rank of a row: a scalar
  }
  std::string f("RSDKREC\0", 8);
  Put32(&f, 1);
  Put32(&f, static_cast<uint32_t>(schema.size()));
  f += schema;
  Put32(&f, internal::MaskCrc(internal::Crc32c(schema)));
  auto block = [&](uint32_t rows, const std::string& payload) {
    std::string h;
    Put32(&h, 0x4B4C4252);
    Put32(&h, rows);
    Put64(&h, payload.size());
    Put32(&h, internal::MaskCrc(internal::Crc32c(payload)));
    Put32(&h, internal::MaskCrc(internal::Crc32c(h.data(), h.size())));
    f += h + payload;
  };
  block(1, std::string(128, '\0'));  // two columns of one float, each padded to 64 bytes
  block(0, "");
  return f;
}

TableConfig SmallTable() {
  TableConfig c;
  c.name = "t";
  c.dim = 4;
  c.device_vocabulary_size = 100;
  c.initializer = Initializer::Uniform(-1, 1, 7);
  return c;
}

std::unique_ptr<EmbeddingTable> MakeTable() {
  auto t = EmbeddingTable::Create(SmallTable(), SparseOptimizerConfig::SGD(0.1f));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

// A graph holding one float32 constant [2], as JSON, with the constant's tensor attribute
// given to `edit`.
std::string GraphJsonWithTensor(const std::function<void(nlohmann::json&)>& edit) {
  Graph g;
  Scope s(&g);
  ops::Const(s, *Tensor::FromValues<float>(Shape{2}, {1.0f, 2.0f}));
  nlohmann::json j = nlohmann::json::parse(g.ToJson());
  for (auto& node : j["nodes"]) {
    for (auto& [key, attr] : node["attrs"].items()) {
      if (attr["value"].is_object() && attr["value"].contains("data")) edit(attr["value"]);
    }
  }
  return j.dump();
}

Status SparseLookupWithOption(bool bad_mask) {
  Graph g;
  Scope s(&g);
  auto table = create_table(s, SmallTable(), SparseOptimizerConfig::SGD(0.1f));
  if (!table.ok()) return table.status();
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{4, 1});
  SparseLookupOptions o;
  if (bad_mask) {
    o.mask = ops::Placeholder(s.WithOpName("mask"), DType::kInt64, Shape{4});
  } else {
    o.timestamps = ops::Placeholder(s.WithOpName("ts"), DType::kFloat32, Shape{4});
  }
  return sparse_lookup(s, *table, ids, o).status();
}

// --- Issue 30: checkpoints, bundles and configs as hostile input.

// CkptModel: a session with a float32 variable "w" [2] (constant `w`) and a table "t" (dim 4,
// SGD, `vocab` rows) holding keys 0..`keys`-1, for checkpoints to be saved from and restored into.
struct CkptModel {
  Graph graph;
  std::unique_ptr<Session> session;
  EmbeddingTable* table = nullptr;
  Output ids, lookup, w;
};

StatusOr<std::unique_ptr<CkptModel>> MakeCkptModel(int64_t vocab, int64_t keys, float w) {
  auto m = std::make_unique<CkptModel>();
  Scope s(&m->graph);
  TableConfig c = SmallTable();
  c.device_vocabulary_size = vocab;
  RECSDK_ASSIGN_OR_RETURN(SparseTable table, create_table(s, c, SparseOptimizerConfig::SGD(0.1f)));
  m->ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{2, 1});
  RECSDK_ASSIGN_OR_RETURN(m->lookup, sparse_lookup(s, table, m->ids));
  VariableOptions vo;
  vo.initializer = Initializer::Constant(w);
  m->w = Variable::Make(s, "w", Shape{2}, vo).value();
  ops::Identity(s.WithOpName("out"), m->lookup);
  GlobalVariablesInitializer(s);
  RECSDK_RETURN_IF_ERROR(s.status());
  RECSDK_ASSIGN_OR_RETURN(m->session, Session::Create(m->graph, SessionConfig()));
  RECSDK_RETURN_IF_ERROR(m->session->Run({}, {}, {"init"}).status());
  RECSDK_ASSIGN_OR_RETURN(m->table, LookupTable(*m->session, "t"));
  TableSnapshot snap = *m->table->Snapshot(EmbeddingTable::SnapshotKind::kFull);
  snap.keys.resize(static_cast<size_t>(keys));
  std::iota(snap.keys.begin(), snap.keys.end(), 0);
  snap.rows.assign(static_cast<size_t>(keys) * 4, 0.5f);
  RECSDK_RETURN_IF_ERROR(m->table->LoadSnapshot(snap));
  return m;
}

// WValue: the model's variable "w"[0].
float WValue(CkptModel& m) {
  auto out = m.session->Run({}, {m.w});
  return out.ok() ? (*out)[0].data<float>()[0] : -1.0f;
}

// SavedModelDir: a model of 50 keys and w = 1 saved (full) at step 1 in `dir`.
Status SaveCkptModel(const std::string& dir, SaverOptions o = {}) {
  RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 50, 1.0f));
  o.model_dir = dir;
  RECSDK_ASSIGN_OR_RETURN(auto saver, Saver::Create(*m->session, o));
  return saver->Save(1).status();
}

// EditDocument: rewrites the checksummed JSON document at `path` (a manifest, the index,
// serving.json) after `edit`, with a valid checksum, as a hostile writer would.
void EditDocument(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  auto doc = internal::ReadJsonDocument(internal::Env::Default(), path);
  ASSERT_TRUE(doc.ok()) << doc.status();
  edit(*doc);
  ASSERT_TRUE(internal::WriteJsonDocument(internal::Env::Default(), path, *doc, false).ok());
}

// Nested: `depth` arrays around 1, as JSON text.
std::string Nested(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

// RestoreInto: a fresh model (vocab rows, w = 2) restored from `dir`; the status, and Internal
// when the restore failed but changed the variable or the table anyway.
Status RestoreFresh(const std::string& dir, int64_t vocab = 100, std::string_view which = "") {
  RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(vocab, 3, 2.0f));
  SaverOptions o;
  o.model_dir = dir;
  RECSDK_ASSIGN_OR_RETURN(auto saver, Saver::Create(*m->session, o));
  Status s = saver->Restore(which).status();
  if (!s.ok() && (WValue(*m) != 2.0f || m->table->size() != 3)) {
    return absl::InternalError(
        fmt::format("the failed restore changed the session: {}", s.message()));
  }
  return s;
}

// RestoreEdited: a model saved in d/m, its manifest changed by `edit`, restored into a fresh one.
Status RestoreEdited(const TestDir& d, const std::function<void(nlohmann::json&)>& edit) {
  RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
  EditDocument(d.File("m/ckpt-1/manifest.json"), edit);
  return RestoreFresh(d.File("m"));
}

std::vector<BadInput> CheckpointCases() {
  using C = absl::StatusCode;
  std::vector<BadInput> v;
  // Before: the dense variables were replaced, then the table refused its 50 rows.
  v.push_back({"saver_restore/table_too_small_changes_nothing",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 return RestoreFresh(d.File("m"), /*vocab=*/10);
               },
               C::kResourceExhausted,
               {"table \"t\"", "needs 50 rows", "at most 10", "ckpt-1"}});
  // Before: last wins.
  v.push_back({"saver_restore/variable_listed_twice",
               [](const TestDir& d) {
                 return RestoreEdited(
                     d, [](nlohmann::json& j) { j["variables"].push_back(j["variables"][0]); });
               },
               C::kDataLoss,
               {"lists variable \"w\" twice"}});
  // Before: the int32 bits were read as floats.
  v.push_back({"saver_restore/float32_variable_with_int32_payload",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 const int32_t bits[2] = {7, 9};
                 RECSDK_ASSIGN_OR_RETURN(
                     internal::PayloadInfo info,
                     internal::WritePayload(internal::Env::Default(), d.File("m/ckpt-1"), "int.npy",
                                            "<i4", {2}, bits, sizeof(bits)));
                 EditDocument(d.File("m/ckpt-1/manifest.json"), [&](nlohmann::json& j) {
                   for (auto& var : j["variables"]) {
                     if (var["name"] == "w") var["payload"] = info.ToJson();
                   }
                 });
                 return RestoreFresh(d.File("m"));
               },
               C::kDataLoss,
               {"variable \"w\" is float32", "\"int.npy\"", "<i4"}});
  // Before: "missing from an earlier checkpoint of its chain".
  v.push_back({"saver_restore/table_listed_twice",
               [](const TestDir& d) {
                 return RestoreEdited(
                     d, [](nlohmann::json& j) { j["tables"].push_back(j["tables"][0]); });
               },
               C::kDataLoss,
               {"lists table \"t\" twice"}});
  // Before: "payload ... has dtype" for a payload whose file name leaves the directory.
  v.push_back({"saver_restore/payload_file_name_with_a_path",
               [](const TestDir& d) {
                 return RestoreEdited(d, [](nlohmann::json& j) {
                   j["variables"][0]["payload"]["file"] = "../../etc/passwd";
                 });
               },
               C::kDataLoss,
               {"\"../../etc/passwd\"", "not a plain file name"}});
  // Before: the delta was applied on the new base, a state that never existed.
  v.push_back({"saver_restore/delta_whose_base_was_replaced",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 50, 1.0f));
                 RECSDK_ASSIGN_OR_RETURN(
                     auto saver, Saver::Create(*m->session, {.model_dir = d.File("m"),
                                                             .is_incremental_checkpoint = true}));
                 RECSDK_RETURN_IF_ERROR(saver->Save(1).status());
                 RECSDK_RETURN_IF_ERROR(saver->SaveDelta(2).status());
                 TableSnapshot more = *m->table->Snapshot(EmbeddingTable::SnapshotKind::kFull);
                 more.keys.push_back(77);
                 more.rows.resize(more.rows.size() + 4, 1.0f);
                 RECSDK_RETURN_IF_ERROR(m->table->LoadSnapshot(more));
                 RECSDK_RETURN_IF_ERROR(saver->Save(1).status());  // replaces ckpt-1
                 return RestoreFresh(d.File("m"), 100, "ckpt-2");
               },
               C::kDataLoss,
               {"ckpt-2", "builds on", "ckpt-1", "replaced"}});
  v.push_back({"saver_restore/chain_listed_out_of_order",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 50, 1.0f));
                 RECSDK_ASSIGN_OR_RETURN(
                     auto saver, Saver::Create(*m->session, {.model_dir = d.File("m"),
                                                             .is_incremental_checkpoint = true}));
                 RECSDK_RETURN_IF_ERROR(saver->Save(1).status());
                 RECSDK_RETURN_IF_ERROR(saver->SaveDelta(2).status());
                 RECSDK_RETURN_IF_ERROR(saver->SaveDelta(3).status());
                 RECSDK_RETURN_IF_ERROR(saver->SaveDelta(4).status());
                 EditDocument(d.File("m/ckpt-4/manifest.json"), [](nlohmann::json& j) {
                   j.erase("chain_ids");  // as a checkpoint written before ids would have it
                   j["chain"] = {"ckpt-1", "ckpt-3", "ckpt-2"};
                 });
                 return RestoreFresh(d.File("m"), 100, "ckpt-4");
               },
               C::kDataLoss,
               {"ckpt-4", "chain is out of order", "ckpt-2\" (step 2)"}});
  // Before: restored from outside model_dir, and retention then deleted files there.
  v.push_back({"saver_restore/index_names_a_path_outside_model_dir",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("other")));
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 EditDocument(d.File("m/checkpoint"), [](nlohmann::json& j) {
                   j["checkpoints"][0]["name"] = "../other/ckpt-1";
                 });
                 return RestoreFresh(d.File("m"));
               },
               C::kDataLoss,
               {"names \"../other/ckpt-1\"", "not a checkpoint directory"}});
  v.push_back({"saver_save/index_naming_outside_never_deletes_there",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("other")));
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 EditDocument(d.File("m/checkpoint"), [](nlohmann::json& j) {
                   j["checkpoints"][0]["name"] = "../other/ckpt-1";
                 });
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 5, 1.0f));
                 SaverOptions o;
                 o.model_dir = d.File("m");
                 o.keep_checkpoint_max = 1;
                 RECSDK_ASSIGN_OR_RETURN(auto saver, Saver::Create(*m->session, o));
                 RECSDK_RETURN_IF_ERROR(saver->Save(2).status());
                 RECSDK_RETURN_IF_ERROR(saver->Save(3).status());
                 if (!std::filesystem::exists(d.File("other/ckpt-1/manifest.json"))) {
                   return absl::InternalError("retention deleted a checkpoint outside model_dir");
                 }
                 return saver->LatestCheckpoint().status();
               },
               C::kOk,
               {}});
  // Before: Save deleted the files of the link's target, then wrote into it.
  v.push_back({"saver_save/symlink_at_the_temporary_name",
               [](const TestDir& d) {
                 std::filesystem::create_directories(d.File("victim"));
                 WriteFile(d.File("victim/precious"), "data");
                 std::filesystem::create_directories(d.File("m"));
                 std::filesystem::create_directory_symlink(
                     d.File("victim"), d.File(fmt::format("m/.tmp-ckpt-1-{}", getpid())));
                 WriteFile(d.File("victim2"), "data");
                 std::filesystem::create_symlink(d.File("victim2"), d.File("m/checkpoint.tmp"));
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 if (!std::filesystem::exists(d.File("victim/precious")) ||
                     std::filesystem::file_size(d.File("victim2")) != 4) {
                   return absl::InternalError("Save followed a planted link");
                 }
                 return RestoreFresh(d.File("m"));
               },
               C::kOk,
               {}});
  // Before: ALREADY_EXISTS (the temporary was made inside the bundle's own directory).
  v.push_back({"export/trailing_slash",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 5, 1.0f));
                 ServingSignature sig;
                 sig.inputs = {"ids"};
                 sig.outputs = {"out:0"};
                 RECSDK_RETURN_IF_ERROR(ExportSavedModel(*m->session, d.File("b/bundle/"), sig));
                 return Predictor::Load(d.File("b/bundle//")).status();
               },
               C::kOk,
               {}});
  // Before: a stack overflow in nlohmann's dump() or our walk, for each of these documents.
  v.push_back({"saver_restore/manifest_nested_a_million_deep",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 WriteFile(d.File("m/ckpt-1/manifest.json"), Nested(1000000));
                 return RestoreFresh(d.File("m"));
               },
               C::kDataLoss,
               {"manifest.json", "more than 64 levels", "line 1, column 65"}});
  v.push_back({"saver_restore/index_nested_a_million_deep",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 WriteFile(d.File("m/checkpoint"), "{\"a\":" + Nested(1000000) + "}");
                 return RestoreFresh(d.File("m"));
               },
               C::kDataLoss,
               {"m/checkpoint", "more than 64 levels"}});
  v.push_back({"predictor/serving_json_nested_a_million_deep",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 5, 1.0f));
                 ServingSignature sig;
                 sig.inputs = {"ids"};
                 sig.outputs = {"out:0"};
                 RECSDK_RETURN_IF_ERROR(ExportSavedModel(*m->session, d.File("b"), sig));
                 WriteFile(d.File("b/serving.json"), Nested(1000000));
                 return Predictor::Load(d.File("b")).status();
               },
               C::kDataLoss,
               {"serving.json", "more than 64 levels"}});
  v.push_back({"graph_json/nested_a_million_deep",
               [](const TestDir&) { return Graph::FromJson(Nested(1000000)).status(); },
               C::kInvalidArgument,
               {"graph JSON", "more than 64 levels"}});
  v.push_back({"graph_json/table_attribute_nested_deep",
               [](const TestDir&) {
                 return internal::TableConfigFromJson("{\"name\":" + Nested(100000) + "}").status();
               },
               C::kInvalidArgument,
               {"table config attribute", "more than 64 levels"}});
  v.push_back({"graph_json/syntax_error_has_line_and_column",
               [](const TestDir&) { return Graph::FromJson("{\n  \"format\": x\n}").status(); },
               C::kInvalidArgument,
               {"graph JSON", "line 2, column"}});
  // Before: "not valid JSON" for a directory where the manifest belongs.
  v.push_back({"saver_restore/manifest_is_a_directory",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 std::filesystem::remove(d.File("m/ckpt-1/manifest.json"));
                 std::filesystem::create_directory(d.File("m/ckpt-1/manifest.json"));
                 return RestoreFresh(d.File("m"));
               },
               C::kInvalidArgument,
               {"manifest.json\" is a directory", "expected a regular file"}});
  // Before: an uncaught std::bad_alloc (a sparse file costs nothing to plant).
  v.push_back({"restore_table/payload_claims_64_gib",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 5, 1.0f));
                 RECSDK_RETURN_IF_ERROR(SaveTable(*m->table, d.File("t")));
                 // 2^33 keys: 64 GiB of keys, 128 GiB of rows, as sparse files.
                 const int64_t rows = int64_t{1} << 33;
                 const std::string keys_header = internal::NpyHeader("<i8", {rows});
                 const std::string rows_header = internal::NpyHeader("<f4", {rows, 4});
                 EditDocument(d.File("t/manifest.json"), [&](nlohmann::json& j) {
                   auto& k = j["table"]["files"]["keys"];
                   k["shape"] = {rows};
                   k["bytes"] = keys_header.size() + static_cast<uint64_t>(rows) * 8;
                   auto& r = j["table"]["files"]["rows"];
                   r["shape"] = {rows, 4};
                   r["bytes"] = rows_header.size() + static_cast<uint64_t>(rows) * 16;
                 });
                 std::filesystem::resize_file(d.File("t/keys.npy"),
                                              keys_header.size() + static_cast<uint64_t>(rows) * 8);
                 std::filesystem::resize_file(
                     d.File("t/rows.npy"), rows_header.size() + static_cast<uint64_t>(rows) * 16);
                 const int64_t before = m->table->size();
                 Status s = RestoreTable(*m->table, d.File("t"));
                 if (m->table->size() != before) return absl::InternalError("the table changed");
                 return s;
               },
               C::kResourceExhausted,
               {"table \"t\"", "keys.npy", "68719476736 bytes", "at most"}});
  // Before: an uncaught std::bad_alloc reading the whole "manifest" into a string.
  v.push_back({"saver_restore/manifest_of_64_gib",
               [](const TestDir& d) {
                 RECSDK_RETURN_IF_ERROR(SaveCkptModel(d.File("m")));
                 std::filesystem::resize_file(d.File("m/ckpt-1/manifest.json"), uint64_t{1} << 36);
                 return RestoreFresh(d.File("m"));
               },
               C::kResourceExhausted,
               {"manifest.json", "68719476736 bytes", "at most"}});
  // Before: "keys are not sorted and unique", without the file or the key.
  v.push_back({"restore_table/duplicate_key_in_the_keys_file",
               [](const TestDir& d) {
                 RECSDK_ASSIGN_OR_RETURN(auto m, MakeCkptModel(100, 5, 1.0f));
                 RECSDK_RETURN_IF_ERROR(SaveTable(*m->table, d.File("t")));
                 const int64_t keys[5] = {0, 1, 1, 3, 4};
                 RECSDK_ASSIGN_OR_RETURN(
                     internal::PayloadInfo info,
                     internal::WritePayload(internal::Env::Default(), d.File("t"), "keys.npy",
                                            "<i8", {5}, keys, sizeof(keys)));
                 EditDocument(d.File("t/manifest.json"), [&](nlohmann::json& j) {
                   j["table"]["files"]["keys"] = info.ToJson();
                 });
                 return RestoreTable(*m->table, d.File("t"));
               },
               C::kDataLoss,
               {"t/keys.npy", "table \"t\"", "key 1 at position 1 is repeated"}});
  return v;
}

std::vector<BadInput> Cases() {
  using C = absl::StatusCode;
  std::vector<BadInput> v;
  v = CheckpointCases();
  // --- Integer overflow in a length or size check.
  // Before: len + 4 wrapped to 2, the bounds check passed and the read ran off the buffer.
  v.push_back({"tfrecord/length_field_near_2_64",
               [](const TestDir& d) {
                 WriteFile(d.File("a.tfrecord"), FrameHeader(~uint64_t{0} - 1) + "0123456789");
                 TfRecordOptions o;
                 o.schema = {{"label", ColumnKind::kLabel}};
                 return DrainStatus(TfRecordDataset({d.File("a.tfrecord")}, o));
               },
               C::kDataLoss,
               {"a.tfrecord", "byte offset 0", "record of 18446744073709551614 bytes"}});
  // Before: the three sizes wrapped to a total of 1 and the table was created with 1 row.
  v.push_back({"table_config/vocabulary_sizes_sum_wraps",
               [](const TestDir& d) {
                 TableConfig c = SmallTable();
                 c.device_vocabulary_size = std::numeric_limits<int64_t>::max();
                 c.host_vocabulary_size = std::numeric_limits<int64_t>::max();
                 c.ssd_vocabulary_size = 3;
                 c.ssd_data_path = {d.path()};
                 return EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)).status();
               },
               C::kInvalidArgument,
               {"table \"t\"", "9223372036854775807 + 9223372036854775807 + 3", "4294967293"}});
  // Before: the integer was cast to the enum unchecked and parsing succeeded; only the table's
  // own Validate, later, refused the kind, without naming the graph attribute it came from.
  v.push_back({"graph_json/table_optimizer_kind_out_of_range",
               [](const TestDir&) {
                 nlohmann::json j = nlohmann::json::parse(
                     internal::OptimizerConfigToJson(SparseOptimizerConfig::SGD(0.1f)));
                 j["kind"] = 99;
                 return internal::OptimizerConfigFromJson(j.dump()).status();
               },
               C::kInvalidArgument,
               {"optimizer config attribute", "99", "[0, 6]"}});
  v.push_back({"graph_json/table_initializer_kind_out_of_range",
               [](const TestDir&) {
                 nlohmann::json j =
                     nlohmann::json::parse(internal::TableConfigToJson(SmallTable()));
                 j["initializer"]["kind"] = -1;
                 return internal::TableConfigFromJson(j.dump()).status();
               },
               C::kInvalidArgument,
               {"-1", "[0, 5]"}});
  // Before: the shape's byte count wrapped to 0 and matched the empty data: a [2^32, 2^32]
  // constant loaded with no values.
  v.push_back({"graph_json/tensor_shape_bytes_wrap",
               [](const TestDir&) {
                 const std::string text = GraphJsonWithTensor([](nlohmann::json& t) {
                   t["shape"] = {int64_t{1} << 32, int64_t{1} << 32};
                   t["data"] = "";
                 });
                 return Graph::FromJson(text).status();
               },
               C::kDataLoss,
               {"tensor attribute", "more than 2^64"}});
  // Before (graph_json_fuzz, 10-minute run): nlohmann's get<int>() cast the float to int, which
  // is undefined behaviour (UBSan: "8.9e+98 is outside the range of representable values").
  v.push_back({"graph_json/version_float_out_of_int_range",
               [](const TestDir&) {
                 nlohmann::json j = nlohmann::json::parse(GraphJsonWithTensor([](auto&) {}));
                 j["version"] = 8.88889e98;
                 return Graph::FromJson(j.dump()).status();
               },
               C::kInvalidArgument,
               {"8.88889e+98", "not an integer"}});
  v.push_back({"graph_json/random_seed_past_int64",
               [](const TestDir&) {
                 nlohmann::json j = nlohmann::json::parse(GraphJsonWithTensor([](auto&) {}));
                 j["random_seed"] = uint64_t{1} << 63;
                 return Graph::FromJson(j.dump()).status();
               },
               C::kInvalidArgument,
               {"9223372036854775808", "not an integer in"}});
  v.push_back({"graph_json/negative_dimension",
               [](const TestDir&) {
                 const std::string text =
                     GraphJsonWithTensor([](nlohmann::json& t) { t["shape"] = {-5}; });
                 return Graph::FromJson(text).status();
               },
               C::kDataLoss,
               {"dimension -5", "-1 (unknown)"}});
  // --- User-controlled sizes passed straight to an allocation.
  // Before: accepted, then the first GetNext threw std::bad_alloc out of the library.
  v.push_back({"batch_rows/absurd_batch_size",
               [](const TestDir&) {
                 auto src = InMemoryDataset({{"x", std::vector<float>{1, 2, 3}}});
                 if (!src.ok()) return src.status();
                 return DrainStatus(BatchRows(*std::move(src), int64_t{1} << 40));
               },
               C::kInvalidArgument,
               {"batch_size 1099511627776", "16777216"}});
  v.push_back({"reader_options/max_line_bytes_above_bound",
               [](const TestDir& d) {
                 WriteFile(d.File("a.tsv"), "1\n");
                 CriteoOptions o;
                 o.reader.max_line_bytes = int64_t{1} << 40;
                 return CriteoDataset({d.File("a.tsv")}, o).status();
               },
               C::kInvalidArgument,
               {"max_line_bytes 1099511627776", "1 GiB"}});
  // --- Assertions a caller reaches. Before: each aborted the process through RECSDK_CHECK or
  // read outside the table's memory.
  v.push_back({"table/resolve_rows_span_too_short",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<int64_t> keys = {1, 2, 3};
                 std::vector<uint32_t> rows(2);
                 return t->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
               },
               C::kInvalidArgument,
               {"Resolve of 3 keys got 2 rows"}});
  v.push_back({"table/resolve_counts_span_mismatch",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<int64_t> keys = {1, 2, 3};
                 std::vector<uint32_t> counts = {1};
                 std::vector<uint32_t> rows(3);
                 return t->Resolve(keys, counts, {}, LookupMode::kTrain, absl::MakeSpan(rows));
               },
               C::kInvalidArgument,
               {"1 counts"}});
  v.push_back({"table/resolve_timestamps_span_mismatch",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<int64_t> keys = {1, 2, 3};
                 std::vector<int64_t> ts = {1, 2, 3, 4};
                 std::vector<uint32_t> rows(3);
                 return t->Resolve(keys, {}, ts, LookupMode::kTrain, absl::MakeSpan(rows));
               },
               C::kInvalidArgument,
               {"4 timestamps"}});
  v.push_back({"table/row_addresses_span_mismatch",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {0, 1};
                 std::vector<float*> addresses(1);
                 return t->RowAddresses(rows, absl::MakeSpan(addresses));
               },
               C::kInvalidArgument,
               {"RowAddresses of 2 rows", "1 addresses"}});
  v.push_back({"table/row_addresses_row_past_capacity",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {1000000};
                 std::vector<float*> addresses(1);
                 return t->RowAddresses(rows, absl::MakeSpan(addresses));
               },
               C::kInvalidArgument,
               {"row id 1000000", "capacity 100"}});
  v.push_back(
      {"table/gather_pooled_restore_index_past_rows",
       [](const TestDir&) {
         auto t = MakeTable();
         std::vector<uint32_t> rows = {EmbeddingTable::kDefaultRow, EmbeddingTable::kDefaultRow};
         std::vector<uint32_t> restore = {0, 7};
         std::vector<float> out(4);
         return t->GatherPooled(rows, restore, 1, 2, Combiner::kSum, absl::MakeSpan(out));
       },
       C::kInvalidArgument,
       {"restore index 7", "2 unique rows"}});
  // Before: Gather, GatherRestored, PaddingMask and the gradient updates took a raw float* with
  // no size and no row check; a short buffer or a foreign row id read or wrote past memory.
  v.push_back({"table/gather_output_short",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {EmbeddingTable::kDefaultRow, 1};
                 std::vector<float> out(5);
                 return t->Gather(rows, absl::MakeSpan(out));
               },
               C::kInvalidArgument,
               {"Gather's output holds 5 floats", "2 rows of 4"}});
  v.push_back({"table/gather_restored_row_past_capacity",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {5000};
                 std::vector<uint32_t> restore = {0, 0};
                 std::vector<float> out(8);
                 return t->GatherRestored(rows, restore, absl::MakeSpan(out));
               },
               C::kInvalidArgument,
               {"row id 5000", "capacity 100"}});
  v.push_back({"table/padding_mask_restore_index_past_rows",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {EmbeddingTable::kPaddingRow};
                 std::vector<uint32_t> restore = {0, 3};
                 std::vector<float> mask(2);
                 return t->PaddingMask(rows, restore, absl::MakeSpan(mask));
               },
               C::kInvalidArgument,
               {"restore index 3", "1 unique rows"}});
  v.push_back({"table/apply_gradients_short_gradients",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<uint32_t> rows = {0, 1};
                 std::vector<float> grads(4);
                 return t->ApplyGradients(rows, grads, 1);
               },
               C::kInvalidArgument,
               {"summed gradients holds 4 floats", "2 rows of 4"}});
  v.push_back({"table/apply_gradients_by_address_foreign_address",
               [](const TestDir&) {
                 auto t = MakeTable();
                 std::vector<float> elsewhere(4);
                 std::vector<float*> addresses = {elsewhere.data()};
                 std::vector<float> grads(4);
                 return t->ApplyGradientsByAddress(addresses, grads, 1);
               },
               C::kInvalidArgument,
               {"not the start of one of this table's rows", "RowAddresses"}});
  // Before: a restore index of num_unique or more was skipped (its gradient dropped without a
  // word), or, past 16384 positions, counted into a vector out of bounds.
  v.push_back({"table/aggregate_gradients_restore_index_past_unique",
               [](const TestDir&) {
                 std::vector<uint32_t> restore = {0, 2};
                 std::vector<float> grads(2 * 4), out(2 * 4);
                 return internal::AggregateGradients(restore, grads, 4, 2, absl::MakeSpan(out));
               },
               C::kInvalidArgument,
               {"restore index 2", "2 unique keys"}});
  // --- Special files. Before: open() of the pipe blocked forever.
  v.push_back({"criteo/glob_matches_named_pipe",
               [](const TestDir& d) {
                 WriteFile(d.File("a.tsv"), "1\n");
                 if (::mkfifo(d.File("b.tsv").c_str(), 0600) != 0) {
                   return absl::InternalError("mkfifo failed");
                 }
                 return DrainStatus(CriteoDataset({d.File("*.tsv")}));
               },
               C::kInvalidArgument,
               {"b.tsv", "named pipe", "matched by"}});
  v.push_back({"criteo/path_is_named_pipe",
               [](const TestDir& d) {
                 if (::mkfifo(d.File("p.tsv").c_str(), 0600) != 0) {
                   return absl::InternalError("mkfifo failed");
                 }
                 return DrainStatus(CriteoDataset({d.File("p.tsv")}));
               },
               C::kInvalidArgument,
               {"p.tsv", "named pipe"}});
  v.push_back({"npy/import_keys_from_named_pipe",
               [](const TestDir& d) {
                 if (::mkfifo(d.File("keys.npy").c_str(), 0600) != 0) {
                   return absl::InternalError("mkfifo failed");
                 }
                 return MakeTable()->ImportNpy(d.File("keys.npy"), d.File("values.npy"));
               },
               C::kInvalidArgument,
               {"keys.npy", "named pipe"}});
  // Before: Env::NewRandomAccessFile opened the pipe blocking, and the restore never returned.
  v.push_back({"checkpoint/restore_table_file_is_named_pipe",
               [](const TestDir& d) {
                 auto t = MakeTable();
                 Status s = SaveTable(*t, d.File("ckpt"));
                 if (!s.ok()) return s;
                 std::vector<std::string> names;
                 for (const auto& e : std::filesystem::directory_iterator(d.File("ckpt"))) {
                   names.push_back(e.path().string());
                 }
                 for (const std::string& name : names) {
                   std::filesystem::remove(name);
                   if (::mkfifo(name.c_str(), 0600) != 0) return absl::InternalError("mkfifo");
                 }
                 return RestoreTable(*MakeTable(), d.File("ckpt"));
               },
               C::kInvalidArgument,
               {"named pipe"}});
  v.push_back(
      {"npy/import_keys_from_directory",
       [](const TestDir& d) { return MakeTable()->ImportNpy(d.path(), d.File("values.npy")); },
       C::kInvalidArgument,
       {"a directory"}});
  // --- Data dropped or accepted without a word.
  // Before: the second file's rows after the first's end block were ignored.
  v.push_back({"record_file/bytes_after_end_block",
               [](const TestDir& d) {
                 auto src = InMemoryDataset({{"x", std::vector<float>{1, 2, 3}}});
                 if (!src.ok()) return src.status();
                 auto rows = ConvertToRecordFile(**src, d.File("a.rrec"));
                 if (!rows.ok()) return rows.status();
                 const std::string one = ::recsdk::testing::ReadFile(d.File("a.rrec"));
                 WriteFile(d.File("a.rrec"), one + one);
                 return DrainStatus(RecordFileDataset({d.File("a.rrec")}));
               },
               C::kDataLoss,
               {"a.rrec", "follow the end-of-file block", "byte offset"}});
  // Before: the batch kept the first "x" and dropped the second without a word.
  v.push_back({"record_file/schema_names_column_twice",
               [](const TestDir& d) {
                 WriteFile(d.File("a.rrec"), RecordFileWithColumnTwice("x"));
                 return DrainStatus(RecordFileDataset({d.File("a.rrec")}));
               },
               C::kDataLoss,
               {"a.rrec", "schema names column \"x\" twice"}});
  // Before: a long line inside a chunk with a newline after it was parsed like any other.
  v.push_back({"delimited/line_longer_than_max_line_bytes",
               [](const TestDir& d) {
                 WriteFile(d.File("a.csv"), "1,2\n1,0.5" + std::string(40, '0') + "\n0,3\n");
                 DelimitedOptions o;
                 o.schema = {{"label", ColumnKind::kLabel}, {"x", ColumnKind::kDense}};
                 o.reader.max_line_bytes = 16;
                 return DrainStatus(DelimitedDataset({d.File("a.csv")}, o));
               },
               C::kDataLoss,
               {"a.csv", "line 2", "45 bytes", "max_line_bytes 16"}});
  v.push_back({"criteo/line_longer_than_max_line_bytes",
               [](const TestDir& d) {
                 std::string good = "1";
                 for (int i = 0; i < 39; ++i) good += "\t";
                 std::string longer = "0";
                 for (int i = 0; i < 13; ++i) longer += "\t12345";
                 for (int i = 0; i < 26; ++i) longer += "\t";
                 WriteFile(d.File("a.tsv"), good + "\n" + good + "\n" + longer + "\n");
                 CriteoOptions o;
                 o.reader.max_line_bytes = 64;
                 return DrainStatus(CriteoDataset({d.File("a.tsv")}, o));
               },
               C::kDataLoss,
               {"a.tsv", "line 3", "max_line_bytes 64"}});
  // --- Messages that mislead.
  // Before: accepted (and counted twice in "N new keys need rows" when the table was full).
  v.push_back({"npy/import_duplicate_key",
               [](const TestDir& d) {
                 auto t = MakeTable();
                 auto src = MakeTable();
                 std::vector<int64_t> keys = {5, 7, 5};
                 std::vector<uint32_t> rows(3);
                 // Export a table holding 5 and 7, then write a keys file listing 5 twice.
                 Status s = src->Resolve({5, 7}, {}, {}, LookupMode::kTrain,
                                         absl::MakeSpan(rows.data(), 2));
                 if (!s.ok()) return s;
                 s = src->ExportNpy(d.File("k.npy"), d.File("v.npy"));
                 if (!s.ok()) return s;
                 std::string k = ::recsdk::testing::ReadFile(d.File("k.npy"));
                 std::string v = ::recsdk::testing::ReadFile(d.File("v.npy"));
                 // Same header length: the shapes (2,) and (2, 4) become (3,) and (3, 4).
                 k.replace(k.find("(2,)"), 4, "(3,)");
                 v.replace(v.find("(2, 4)"), 6, "(3, 4)");
                 Put64(&k, 5);
                 v.append(v.substr(v.size() - 16));  // one more row of 4 floats
                 WriteFile(d.File("k.npy"), k);
                 WriteFile(d.File("v.npy"), v);
                 return t->ImportNpy(d.File("k.npy"), d.File("v.npy"));
               },
               C::kDataLoss,
               {"k.npy", "lists key 5 twice", "positions 0 and 2"}});
  // Before: "input 2 ... must be float32", naming no option.
  v.push_back({"sparse_lookup/mask_of_wrong_dtype",
               [](const TestDir&) { return SparseLookupWithOption(true); },
               C::kInvalidArgument,
               {"option mask", "int64", "float32"}});
  v.push_back({"sparse_lookup/timestamps_of_wrong_dtype",
               [](const TestDir&) { return SparseLookupWithOption(false); },
               C::kInvalidArgument,
               {"option timestamps", "float32", "int64"}});
  // Before: built, while Initializer::Uniform(1, 0) was refused.
  v.push_back({"ops/random_uniform_min_above_max",
               [](const TestDir&) {
                 Graph g;
                 Scope s(&g);
                 ops::RandomUniform(s, Shape{2}, DType::kFloat32, 1.0, 0.0, 1);
                 return s.status();
               },
               C::kInvalidArgument,
               {"min 1 is above max 0"}});
  v.push_back({"ops/random_normal_negative_stddev",
               [](const TestDir&) {
                 Graph g;
                 Scope s(&g);
                 ops::RandomNormal(s, Shape{2}, DType::kFloat32, 0.0, -1.0, 1);
                 return s.status();
               },
               C::kInvalidArgument,
               {"stddev -1 is negative"}});
  // Before: the constructor asserted (a process abort) on a shape a caller built wrongly.
  v.push_back({"Tensor::Create/unknown_dimension",
               [](const TestDir&) {
                 return Tensor::Create(DType::kFloat32, Shape{-1, 3}).status();
               },
               C::kInvalidArgument,
               {"[?,3]", "unknown or negative"}});
  v.push_back(
      {"Tensor::Create/bytes_overflow",
       [](const TestDir&) {
         return Tensor::Create(DType::kFloat32, Shape{int64_t{1} << 40, int64_t{1} << 40}).status();
       },
       C::kResourceExhausted,
       {"does not fit in memory"}});
  v.push_back(
      {"Tensor::FromBuffer/buffer_too_small",
       [](const TestDir&) {
         return Tensor::FromBuffer(DType::kFloat32, Shape{4}, AllocateHostBuffer(8), 4).status();
       },
       C::kInvalidArgument,
       {"at offset 4", "the buffer has 8"}});
  v.push_back(
      {"Tensor::SliceRows/past_the_end",
       [](const TestDir&) { return Tensor(DType::kInt64, Shape{3}).SliceRows(2, 5).status(); },
       C::kInvalidArgument,
       {"rows [2, 5)", "shape [3]"}});
  v.push_back({"Batch::Slice/past_the_end",
               [](const TestDir&) -> Status {
                 Batch b;
                 RECSDK_RETURN_IF_ERROR(b.AddColumn("x", Tensor(DType::kInt64, Shape{3})));
                 return b.Slice(1, 4).status();
               },
               C::kInvalidArgument,
               {"rows [1, 4)", "3 rows"}});
  // Before: an exception from the user's Map function or from an input read on the Prefetch
  // thread ended the process (std::terminate on the thread).
  v.push_back({"Map/function_throws",
               [](const TestDir&) -> Status {
                 auto ds = Map(OneRowDataset(), [](Batch) -> StatusOr<Batch> {
                   throw std::runtime_error("user bug");
                 });
                 return DrainStatus(std::move(ds));
               },
               C::kInternal,
               {"Map", "user bug"}});
  v.push_back({"Prefetch/input_throws_on_its_thread",
               [](const TestDir&) -> Status {
                 auto mapped =
                     Map(OneRowDataset(), [](Batch) -> StatusOr<Batch> { throw std::bad_alloc(); });
                 if (!mapped.ok()) return mapped.status();
                 return DrainStatus(Prefetch(*std::move(mapped), 2));
               },
               C::kResourceExhausted,
               {"Map", "out of memory"}});
  // Before: a null outputs pointer with fetches was written through (SIGSEGV).
  v.push_back({"Session::Run/null_outputs_with_fetches",
               [](const TestDir&) -> Status {
                 Graph g;
                 Scope s(&g);
                 Output c = ops::Const(s, Tensor::Scalar<float>(1.0f));
                 RECSDK_RETURN_IF_ERROR(s.status());
                 RECSDK_ASSIGN_OR_RETURN(auto session, Session::Create(g));
                 RECSDK_RETURN_IF_ERROR(
                     session->Run({}, {}, {}, nullptr));  // nothing fetched: fine
                 return session->Run({}, {c}, {}, nullptr);
               },
               C::kInvalidArgument,
               {"outputs is null", "1 fetches"}});
  // --- Issue 30: numerics and options.
  // NaN propagation: a NaN input reaches the loss, so NanTensorHook stops training. Before: Relu,
  // Maximum (NaN first) and ReduceMax turned the NaN into a number and ReluGrad into a zero
  // gradient: the loss stayed finite and the hook never fired.
  const auto nan_loss = [](const std::function<Output(const Scope&, Output)>& model) -> Status {
    Graph g;
    Scope s(&g);
    const Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2, 3});
    ops::Identity(s.WithOpName("loss"), model(s, x));
    RECSDK_RETURN_IF_ERROR(s.status());
    RECSDK_ASSIGN_OR_RETURN(auto session, Session::Create(g));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    RECSDK_ASSIGN_OR_RETURN(Tensor value,
                            Tensor::FromValues<float>(Shape{2, 3}, {1, nan, -1, 2, 3, 4}));
    RECSDK_ASSIGN_OR_RETURN(std::vector<Tensor> loss, session->Run({{"x", value}}, {"loss"}));
    NanTensorHook hook("loss");
    SessionRunContext context;
    return hook.AfterRun(context, loss);
  };
  v.push_back({"NanTensorHook/nan_input_through_relu",
               [nan_loss](const TestDir&) {
                 return nan_loss(
                     [](const Scope& s, Output x) { return ops::ReduceSum(s, ops::Relu(s, x)); });
               },
               C::kInvalidArgument,
               {"NaN or Inf loss", "\"loss\" = nan"}});
  v.push_back({"NanTensorHook/nan_input_through_maximum",
               [nan_loss](const TestDir&) {
                 return nan_loss([](const Scope& s, Output x) {
                   return ops::ReduceSum(s, ops::Maximum(s, x, ops::ZerosLike(s, x)));
                 });
               },
               C::kInvalidArgument,
               {"NaN or Inf loss", "\"loss\" = nan"}});
  v.push_back({"NanTensorHook/nan_input_through_reduce_max",
               [nan_loss](const TestDir&) {
                 return nan_loss([](const Scope& s, Output x) { return ops::ReduceMax(s, x); });
               },
               C::kInvalidArgument,
               {"NaN or Inf loss", "\"loss\" = nan"}});
  v.push_back({"NanTensorHook/nan_input_through_relu_gradient",
               [nan_loss](const TestDir&) {
                 return nan_loss([](const Scope& s, Output x) {
                   auto dx = Gradients(s, {ops::ReduceSum(s, ops::Relu(s, x))}, {x});
                   return dx.ok() ? ops::ReduceSum(s, (*dx)[0]) : Output();
                 });
               },
               C::kInvalidArgument,
               {"NaN or Inf loss", "\"loss\" = nan"}});
  // Before: a NaN score never equalled itself, so Auc's tie loop made no progress: a hang.
  v.push_back(
      {"Auc/nan_score",
       [](const TestDir&) {
         const std::vector<float> scores = {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.25f};
         const std::vector<float> labels = {1, 0, 0};
         return Auc(scores, labels).status();
       },
       C::kInvalidArgument,
       {"Auc: score nan at position 1 is not a number"}});
  // Float options: NaN fails every comparison, so each rule written as one passed it. Before:
  // each of these was accepted.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  v.push_back({"RunConfig/save_checkpoints_secs_nan",
               [nan](const TestDir&) {
                 RunConfig c;
                 c.save_checkpoints_secs = nan;
                 return c.Validate();
               },
               C::kInvalidArgument,
               {"RunConfig", "save_checkpoints_secs nan is not a finite number", "default 600"}});
  v.push_back({"RunConfig/save_checkpoints_secs_inf",
               [inf](const TestDir&) {
                 RunConfig c;
                 c.save_checkpoints_secs = inf;
                 return c.Validate();
               },
               C::kInvalidArgument,
               {"save_checkpoints_secs inf is not a finite number"}});
  v.push_back({"CheckpointSaverHook/save_secs_nan",
               [nan](const TestDir& d) {
                 CheckpointSaverOptions o;
                 o.model_dir = d.path();
                 o.save_secs = nan;
                 return CheckpointSaverHook(o).Begin(nullptr);
               },
               C::kInvalidArgument,
               {"CheckpointSaverHook", "save_secs nan is not a finite number"}});
  v.push_back({"CheckpointSaverHook/save_delta_checkpoints_secs_inf",
               [inf](const TestDir& d) {
                 CheckpointSaverOptions o;
                 o.model_dir = d.path();
                 o.is_incremental_checkpoint = true;
                 o.save_delta_checkpoints_secs = inf;
                 return CheckpointSaverHook(o).Begin(nullptr);
               },
               C::kInvalidArgument,
               {"save_delta_checkpoints_secs inf is not a finite number"}});
  const auto minimize = [](Optimizer& optimizer) -> Status {
    Graph g;
    Scope s(&g);
    VariableOptions vo;
    vo.initializer = Initializer::Constant(1.0);
    Variable w = Variable::Make(s, "w", Shape{2}, vo);
    return optimizer.Minimize(s, ops::ReduceSum(s, ops::Square(s, w.value()))).status();
  };
  v.push_back({"Optimizer/sgd_learning_rate_nan",
               [nan, minimize](const TestDir&) {
                 SgdOptimizer sgd(SgdOptions{nan});
                 return minimize(sgd);
               },
               C::kInvalidArgument,
               {"SGD: learning_rate nan is not a finite number", "default 0.01"}});
  v.push_back({"Optimizer/adam_epsilon_inf",
               [inf, minimize](const TestDir&) {
                 AdamOptions o;
                 o.epsilon = inf;
                 AdamOptimizer adam(o);
                 return minimize(adam);
               },
               C::kInvalidArgument,
               {"Adam: epsilon inf is not a finite number"}});
  v.push_back({"SparseOptimizerConfig/nan_in_a_field_the_kind_ignores",
               [](const TestDir&) {
                 SparseOptimizerConfig c = SparseOptimizerConfig::SGD(0.1f);
                 c.l2 = std::numeric_limits<float>::quiet_NaN();
                 return EmbeddingTable::Create(SmallTable(), c).status();
               },
               C::kInvalidArgument,
               {"l2 nan", "must be a finite number", "saved with the graph"}});
  v.push_back({"LossScaleOptions/static_scale_with_nan_decr_ratio",
               [nan](const TestDir&) {
                 LossScaleOptions o;
                 o.decr_ratio = nan;
                 return o.Validate();
               },
               C::kInvalidArgument,
               {"decr_ratio nan is not a finite number"}});
  v.push_back({"CriteoDataset/default_dense_nan",
               [nan](const TestDir& d) {
                 WriteFile(d.File("a.tsv"), "1\n");
                 CriteoOptions o;
                 o.default_dense = static_cast<float>(nan);
                 return CriteoDataset({d.File("a.tsv")}, o).status();
               },
               C::kInvalidArgument,
               {"CriteoDataset", "default_dense nan is not a finite number"}});
  v.push_back({"DelimitedDataset/default_value_inf",
               [inf](const TestDir& d) {
                 WriteFile(d.File("a.csv"), "1,\n");
                 DelimitedOptions o;
                 o.schema = {{"label", ColumnKind::kLabel}, {"x", ColumnKind::kDense}};
                 o.schema[1].default_value = static_cast<float>(inf);
                 return DelimitedDataset({d.File("a.csv")}, o).status();
               },
               C::kInvalidArgument,
               {"column \"x\" has default_value inf, not a finite number"}});
  v.push_back({"SyntheticDataset/bias_nan",
               [nan](const TestDir&) {
                 SyntheticOptions o;
                 o.bias = static_cast<float>(nan);
                 return SyntheticDataset(o).status();
               },
               C::kInvalidArgument,
               {"SyntheticDataset", "bias nan is not a finite number"}});
  v.push_back({"Mlp/dropout_rate_nan",
               [nan](const TestDir&) {
                 Graph g;
                 Scope s(&g);
                 layers::MlpOptions o;
                 o.hidden_units = {4};
                 o.dropout_rate = static_cast<float>(nan);
                 layers::Mlp(s, ops::Placeholder(s, DType::kFloat32, Shape{2, 3}), o);
                 return s.status();
               },
               C::kInvalidArgument,
               {"Mlp \"mlp\"", "dropout_rate nan is not a finite number"}});
  // Rank variables that do not parse. Before: LOCAL_RANK=abc was rank 0 without a word.
  const auto init_with_env = [](const char* name, const char* value) -> Status {
    ::setenv(name, value, 1);
    InitOptions o;
    o.bind_cpu = true;
    const Status s = init(o);
    ::unsetenv(name);
    terminate_config_initializer();
    return s;
  };
  v.push_back({"init/local_rank_not_a_number",
               [init_with_env](const TestDir&) { return init_with_env("LOCAL_RANK", "abc"); },
               C::kInvalidArgument,
               {"environment variable LOCAL_RANK=\"abc\" is not a local rank", "decimal integer"}});
  v.push_back(
      {"init/ompi_local_size_zero",
       [init_with_env](const TestDir&) { return init_with_env("OMPI_COMM_WORLD_LOCAL_SIZE", "0"); },
       C::kInvalidArgument,
       {"OMPI_COMM_WORLD_LOCAL_SIZE=\"0\"", ">= 1"}});
  // One tensor fed under two spellings. Before: both were accepted and the last won.
  const auto feed_twice = [](const char* first, const char* second) -> Status {
    Graph g;
    Scope s(&g);
    const Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{});
    ops::Identity(s.WithOpName("y"), x);
    RECSDK_RETURN_IF_ERROR(s.status());
    RECSDK_ASSIGN_OR_RETURN(auto session, Session::Create(g));
    return session
        ->Run({{first, Tensor::Scalar<float>(1.0f)}, {second, Tensor::Scalar<float>(2.0f)}}, {"y"})
        .status();
  };
  v.push_back({"Session::Run/feeds_x_and_x0",
               [feed_twice](const TestDir&) { return feed_twice("x", "x:0"); },
               C::kInvalidArgument,
               {"Session::Run: input \"x:0\" is fed twice (first as \"x\")"}});
  v.push_back({"Session::Run/feeds_x_twice",
               [feed_twice](const TestDir&) { return feed_twice("x", "x"); },
               C::kInvalidArgument,
               {"Session::Run: input \"x\" is fed twice; feed each tensor once"}});
  // Session configs from JSON (SessionConfig::FromJson; `recsdk validate-config`).
  // Before: "not valid JSON" without where.
  v.push_back({"SessionConfig::FromJson/syntax_error_names_line_and_column",
               [](const TestDir&) {
                 return SessionConfig::FromJson(
                            "{\n  \"graph_run_mode\": 1,\n  \"device\" \"cpu\"\n}")
                     .status();
               },
               C::kInvalidArgument,
               {"session config is not valid JSON", "line 3, column 16", "expected ':'"}});
  // Before: parsed, then the value was printed recursively into the message: a stack overflow.
  v.push_back({"SessionConfig::FromJson/value_nested_a_million_deep",
               [](const TestDir&) {
                 return SessionConfig::FromJson("{\"device\": " + std::string(1000000, '[') +
                                                std::string(1000000, ']') + "}")
                     .status();
               },
               C::kInvalidArgument,
               {"session config", "more than 64 levels deep"}});
  // Before: `unknown option ""; did you mean "device"?`.
  v.push_back({"SessionConfig::FromJson/empty_key",
               [](const TestDir&) { return SessionConfig::FromJson("{\"\": 1}").status(); },
               C::kInvalidArgument,
               {"an option name is empty", "recsdk/config.h"}});
  v.push_back(
      {"SessionConfig::FromJson/key_far_from_every_option",
       [](const TestDir&) { return SessionConfig::FromJson("{\"zzzzzzzzzz\": 1}").status(); },
       C::kInvalidArgument,
       {"unknown option \"zzzzzzzzzz\"; the options are documented in recsdk/config.h"}});
  // Before: the 1 MiB key was compared in full against every option and quoted whole.
  v.push_back(
      {"SessionConfig::FromJson/huge_key",
       [](const TestDir&) {
         return SessionConfig::FromJson("{\"" + std::string(1 << 20, 'k') + "\": 1}").status();
       },
       C::kInvalidArgument,
       {"unknown option \"kkkkkkkkkk", "...\" (1048576 bytes in all)"}});
  v.push_back({"SessionConfig::FromJson/huge_value",
               [](const TestDir&) {
                 return SessionConfig::FromJson("{\"dump_mode\": \"" + std::string(1 << 20, 'v') +
                                                "\"}")
                     .status();
               },
               C::kInvalidArgument,
               {"dump_mode: \"vvvvvvvvvv", "...\" (1048576 bytes in all) is not one of"}});
  v.push_back(
      {"SessionConfig::FromJson/huge_value_of_the_wrong_type",
       [](const TestDir&) {
         return SessionConfig::FromJson("{\"graph_run_mode\": \"" + std::string(1 << 20, 'v') +
                                        "\"}")
             .status();
       },
       C::kInvalidArgument,
       {"option \"graph_run_mode\": \"vvvvvvvvvv", "(1048576 bytes in all) is not an integer"}});
  return v;
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, GetsTheCodeAndAMessageNamingTheProblem) {
  const BadInput& c = GetParam();
  TestDir dir;
  const Status s = c.run(dir);
  EXPECT_EQ(s.code(), c.code) << s;
  for (const std::string& w : c.words) EXPECT_THAT(std::string(s.message()), HasSubstr(w));
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<BadInput>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// Skip mode: the record whose length would wrap is counted and the rest of the file dropped,
// after the good record before it.
TEST(BadInputSkipModeTest, TfRecordLengthNear2To64IsCountedAsTruncated) {
  TestDir d;
  const std::string good =
      internal::FrameRecord(internal::EncodeExample({{"label", std::vector<float>{1.0f}}}));
  WriteFile(d.File("a.tfrecord"), good + FrameHeader(~uint64_t{0} - 1) + "0123456789");
  TfRecordOptions o;
  o.schema = {{"label", ColumnKind::kLabel}};
  o.reader.malformed_policy = MalformedPolicy::kSkip;
  auto ds = TfRecordDataset({d.File("a.tfrecord")}, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  int64_t rows = 0;
  for (const Batch& b : *batches) rows += b.num_rows();
  EXPECT_EQ(rows, 1);
  const MalformedCounts counts = (*ds)->malformed_counts();
  EXPECT_EQ(counts.by_reason[static_cast<int>(MalformedReason::kTruncated)], 1)
      << counts.DebugString();
}

// Skip mode: the over-long line is counted, the lines around it are read.
TEST(BadInputSkipModeTest, LineLongerThanMaxLineBytesInsideAChunkIsSkippedAndCounted) {
  TestDir d;
  WriteFile(d.File("a.csv"), "1,2\n1,0.5" + std::string(40, '0') + "\n0,3\n1,4");
  DelimitedOptions o;
  o.schema = {{"label", ColumnKind::kLabel}, {"x", ColumnKind::kDense}};
  o.reader.max_line_bytes = 16;
  o.reader.malformed_policy = MalformedPolicy::kSkip;
  auto ds = DelimitedDataset({d.File("a.csv")}, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto batches = Drain(**ds);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(::recsdk::testing::Concat<float>(*batches, "dense"),
            (std::vector<float>{2.0f, 3.0f, 4.0f}));
  EXPECT_EQ((*ds)->malformed_counts().total(), 1);
}

// A permission error is PermissionDenied, never NotFound, for every file input. Root reads any
// file, so the end-to-end half runs only as another user; the mapping itself always runs.
TEST(BadInputPermissionTest, ErrnoMapsToTheCodeACallerCanActOn) {
  EXPECT_EQ(internal::ErrnoToStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(internal::ErrnoToStatus(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(internal::ErrnoToStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
}

TEST(BadInputPermissionTest, UnreadableFilesArePermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  TestDir d;
  WriteFile(d.File("a.tsv"), "1\n");
  WriteFile(d.File("k.npy"), "x");
  ASSERT_EQ(::chmod(d.File("a.tsv").c_str(), 0), 0);
  ASSERT_EQ(::chmod(d.File("k.npy").c_str(), 0), 0);
  const Status criteo = DrainStatus(CriteoDataset({d.File("a.tsv")}));
  EXPECT_EQ(criteo.code(), absl::StatusCode::kPermissionDenied) << criteo;
  EXPECT_THAT(std::string(criteo.message()), HasSubstr("a.tsv"));
  const Status npy = MakeTable()->ImportNpy(d.File("k.npy"), d.File("k.npy"));
  EXPECT_EQ(npy.code(), absl::StatusCode::kPermissionDenied) << npy;
  // A file in a directory this user cannot search: stat fails with EACCES.
  ASSERT_EQ(::mkdir(d.File("closed").c_str(), 0700), 0);
  WriteFile(d.File("closed/b.tsv"), "1\n");
  ASSERT_EQ(::chmod(d.File("closed").c_str(), 0), 0);
  const Status closed = CriteoDataset({d.File("closed/b.tsv")}).status();
  EXPECT_EQ(closed.code(), absl::StatusCode::kPermissionDenied) << closed;
  ASSERT_EQ(::chmod(d.File("closed").c_str(), 0700), 0);
}

TEST(CheckedMathTest, OverflowIsNulloptNeverAWrappedValue) {
  EXPECT_EQ(internal::CheckedAdd<uint64_t>(~uint64_t{0} - 1, 4), std::nullopt);
  EXPECT_EQ(internal::CheckedAdd<uint64_t>(6, 4), uint64_t{10});
  EXPECT_EQ(internal::CheckedAdd<int64_t>(std::numeric_limits<int64_t>::max(), 1), std::nullopt);
  EXPECT_EQ(internal::CheckedAdd<int64_t>(std::numeric_limits<int64_t>::min(), -1), std::nullopt);
  EXPECT_EQ(internal::CheckedMul<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 32), std::nullopt);
  EXPECT_EQ(internal::CheckedMul<int64_t>(-3, 7), int64_t{-21});
  EXPECT_FALSE(internal::FitsWithin<uint64_t>(~uint64_t{0} - 1, 4, 10));
  EXPECT_TRUE(internal::FitsWithin<uint64_t>(6, 4, 10));
  EXPECT_FALSE(internal::FitsWithin<uint64_t>(7, 4, 10));
}

}  // namespace
}  // namespace recsdk
