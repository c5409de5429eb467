// make_seeds.cc: writes the seed corpora of the fuzz targets (tests/fuzz/*_fuzz.cc), generated
// by code rather than checked in, so they always match the current formats:
//   fuzz_make_seeds <out_dir>   ->  <out_dir>/<target>/seed_<n>
// Each seed is a small valid input (plus a few near-misses) in the target's input layout (the
// first byte(s) as the target's header says). scripts/fuzz.sh runs it before the targets.
// Threading: single-threaded program.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "recsdk/checkpoint.h"
#include "recsdk/config.h"
#include "recsdk/dataset.h"
#include "recsdk/graph.h"
#include "recsdk/ops.h"
#include "recsdk/scope.h"
#include "recsdk/table.h"
#include "src/pipeline/tfrecord.h"
#include "tests/fuzz/fuzz_dump.h"
#include "tests/fuzz/fuzz_model.h"

namespace {

namespace fs = std::filesystem;
using namespace recsdk;

std::string ReadAll(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

void Write(const std::string& dir, const std::string& target, int n, const std::string& bytes) {
  fs::create_directories(dir + "/" + target);
  const std::string path = dir + "/" + target + "/seed_" + std::to_string(n);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "fuzz_make_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_make_seeds: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds <out_dir>\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::string tmp = out + "/.work";
  fs::create_directories(tmp);

  // TFRecord: two Examples (packed and unpacked lists, bytes ids), both policies.
  {
    using internal::ExampleFeature;
    std::string file;
    file +=
        internal::FrameRecord(internal::EncodeExample({{"label", std::vector<float>{1.0f}},
                                                       {"dense", std::vector<float>{0.5f, -2.0f}},
                                                       {"ids", std::vector<int64_t>{7, 8}},
                                                       {"ts", std::vector<int64_t>{1700000000}}}));
    file += internal::FrameRecord(
        internal::EncodeExample({{"label", std::vector<int64_t>{0}, false},
                                 {"dense", std::vector<float>{1.0f, 2.0f}, false},
                                 {"ids", std::vector<std::string>{"a", "bc", "def"}}}));
    Write(out, "tfrecord_fuzz", 0, std::string(1, '\0') + file);
    Write(out, "tfrecord_fuzz", 1, std::string(1, '\1') + file);
  }
  // Criteo: a full row, a sparse one, a negative count.
  {
    std::string row = "1";
    for (int i = 0; i < 13; ++i) row += "\t" + std::to_string(i * 3);
    for (int i = 0; i < 26; ++i) row += "\t" + std::string(i % 2 ? "68fd1e64" : "0a");
    std::string sparse = "0";
    for (int i = 0; i < 39; ++i) sparse += "\t";
    std::string neg = "0\t-1";
    for (int i = 0; i < 38; ++i) neg += "\t";
    const std::string text = row + "\n" + sparse + "\n" + neg + "\n";
    Write(out, "criteo_fuzz", 0, std::string(1, '\0') + text);
    Write(out, "criteo_fuzz", 1, std::string(1, '\3') + text);
  }
  // Delimited: label, d, s (3 ids), h (2 hex ids), skip, ts.
  {
    const std::string text =
        "label,d,s,h,skip,ts\n1,0.5,1|2|3,ff|0a,x,17\n0,,4,,,\n1,-3e2,,1,y,9\n";
    Write(out, "delimited_fuzz", 0, std::string(1, '\2') + text);
    Write(out, "delimited_fuzz", 1, std::string(1, '\1') + text.substr(text.find('\n') + 1));
  }
  // Record file: converted from an in-memory dataset (float, int64, [B,3] columns).
  {
    auto src = InMemoryDataset({{"x", std::vector<float>{1, 2, 3, 4}, 1},
                                {"id", std::vector<int64_t>{5, 6, 7, 8}, 1},
                                {"v", std::vector<float>(12, 0.25f), 3}},
                               2);
    Check(src.status(), "InMemoryDataset");
    auto rows = ConvertToRecordFile(**src, tmp + "/a.rrec", 2);
    Check(rows.status(), "ConvertToRecordFile");
    const std::string file = ReadAll(tmp + "/a.rrec");
    Write(out, "record_file_fuzz", 0, std::string(1, '\0') + file);
    Write(out, "record_file_fuzz", 1, std::string(1, '\1') + file);
  }
  // npy: an exported table's keys and values (int64 and int32 tables).
  for (int int32 = 0; int32 < 2; ++int32) {
    TableConfig c;
    c.name = "seed";
    c.dim = 4;
    c.device_vocabulary_size = 16;
    c.key_dtype = int32 ? DType::kInt32 : DType::kInt64;
    auto t = EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f));
    Check(t.status(), "EmbeddingTable::Create");
    std::vector<int64_t> keys = {1, 2, 30};
    std::vector<uint32_t> rows(3);
    Check((*t)->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)), "Resolve");
    Check((*t)->ExportNpy(tmp + "/k.npy", tmp + "/v.npy"), "ExportNpy");
    const std::string k = ReadAll(tmp + "/k.npy"), v = ReadAll(tmp + "/v.npy");
    std::string seed;
    seed.push_back(static_cast<char>(k.size() & 0xff));
    seed.push_back(static_cast<char>(((k.size() >> 8) & 0x7f) | (int32 ? 0x80 : 0)));
    Write(out, "npy_fuzz", int32, seed + k + v);
  }
  // Graph JSON: a small graph with a tensor constant, a placeholder, attributes of every kind
  // the ops use, and a control input.
  {
    Graph g;
    Scope s(&g);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{Shape::kUnknownDim, 2});
    Output w =
        ops::Const(s.WithOpName("w"), *Tensor::FromValues<float>(Shape{2, 1}, {1.0f, -1.0f}));
    Output y = ops::MatMul(s.WithOpName("y"), x, w);
    ops::RandomUniform(s.WithOpName("r"), Shape{3}, DType::kFloat32, -1.0, 1.0, 5);
    Check(s.status(), "graph");
    (void)y;
    Write(out, "graph_json_fuzz", 0, g.ToJson());
    Write(out, "graph_json_fuzz", 1, g.ToJson(0));
  }
  // Table restore: each file of a valid checkpoint, selected by the first byte (files sorted by
  // name, as the target sorts them).
  {
    TableConfig c;
    c.name = "fuzz";
    c.dim = 4;
    c.device_vocabulary_size = 64;
    c.access_threshold = 0;
    c.eviction_threshold = 100;
    auto t = EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.1f));
    Check(t.status(), "EmbeddingTable::Create");
    std::vector<int64_t> keys = {3, 9, 27};
    std::vector<int64_t> ts = {5, 6, 7};
    std::vector<uint32_t> rows(3);
    Check((*t)->Resolve(keys, {}, ts, LookupMode::kTrain, absl::MakeSpan(rows)), "Resolve");
    Check(SaveTable(**t, tmp + "/ckpt"), "SaveTable");
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp + "/ckpt"))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    for (size_t i = 0; i < names.size(); ++i) {
      Write(out, "table_restore_fuzz", static_cast<int>(i),
            std::string(1, static_cast<char>(i)) + ReadAll(tmp + "/ckpt/" + names[i]));
    }
  }
  // Model checkpoint and exported bundle: each file of a valid model directory (the `checkpoint`
  // index, ckpt-1 full, ckpt-2 delta) and of a valid bundle, selected by the first byte (files
  // sorted by relative path, as the targets list them); checkpoint_fuzz's second byte picks
  // latest (0) or ckpt-1 (1).
  {
    auto m = fuzz::BuildFuzzModel();
    fuzz::TrainRows(*m, {3, 9, 27}, 5);
    SaverOptions o;
    o.model_dir = tmp + "/model";
    o.is_incremental_checkpoint = true;
    auto saver = fuzz::Die(Saver::Create(*m->session, o));
    Check(saver->Save(1).status(), "Saver::Save");
    fuzz::TrainRows(*m, {9, 81}, 6);
    Check(saver->SaveDelta(2).status(), "Saver::SaveDelta");
    const std::vector<std::string> files = fuzz::FilesUnder(o.model_dir);
    for (size_t i = 0; i < files.size(); ++i) {
      // Byte 1: bit 0 restores ckpt-1 alone, bit 1 reseals the file past its checksum.
      for (char flags : {'\0', '\1', '\2', '\3'}) {
        Write(out, "checkpoint_fuzz", static_cast<int>(4 * i + static_cast<size_t>(flags)),
              std::string(1, static_cast<char>(i)) + flags + ReadAll(o.model_dir + "/" + files[i]));
      }
    }
    const std::string bundle = tmp + "/bundle";
    Check(ExportSavedModel(*m->session, bundle, {{"ids"}, {"out"}}), "ExportSavedModel");
    const std::vector<std::string> bundle_files = fuzz::FilesUnder(bundle);
    for (size_t i = 0; i < bundle_files.size(); ++i) {
      // Byte 0: the file, and its high bit reseals it past its checksum.
      for (int reseal : {0, 0x80}) {
        Write(out, "predictor_fuzz", static_cast<int>(2 * i) + (reseal != 0 ? 1 : 0),
              std::string(1, static_cast<char>(i | static_cast<size_t>(reseal))) +
                  ReadAll(bundle + "/" + bundle_files[i]));
      }
    }
  }
  // Dump: each file of a valid step directory (fuzz_dump.h), selected by the first byte (files
  // sorted by name, as the target lists them); byte 1's low bit reseals a tensor file.
  {
    const std::string step = fuzz::WriteFuzzDump(tmp + "/dump");
    const std::vector<std::string> files = fuzz::FilesUnder(step);
    for (size_t i = 0; i < files.size(); ++i) {
      for (char flags : {'\0', '\1'}) {
        Write(out, "dump_fuzz", static_cast<int>(2 * i) + flags,
              std::string(1, static_cast<char>(i)) + flags + ReadAll(step + "/" + files[i]));
      }
    }
  }
  // Session config JSON: the defaults, and a few options set.
  {
    SessionConfig c;
    Write(out, "config_json_fuzz", 0, c.ToJson());
    Write(out, "config_json_fuzz", 1, "{\"intra_op_parallelism\": 4, \"deterministic\": true}");
    // Issue 30's shapes: nesting at the depth bound, a long unknown key (the suggestion search),
    // a long value quoted in an error, a syntax error on a later line.
    Write(out, "config_json_fuzz", 2,
          "{\"dump_step\": " + std::string(63, '[') + "1" + std::string(63, ']') + "}");
    Write(out, "config_json_fuzz", 3, "{\"" + std::string(4096, 'k') + "\": 1}");
    Write(out, "config_json_fuzz", 4, "{\"dump_mode\": \"" + std::string(4096, 'v') + "\"}");
    Write(out, "config_json_fuzz", 5, "{\n  \"deterministic\": true,\n  \"device\": cpu\n}");
  }
  fs::remove_all(tmp);
  return 0;
}
