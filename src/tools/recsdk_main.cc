// recsdk_main.cc: the `recsdk` command line.
//
//   recsdk validate-config FILE.json   prints the session config with every default filled in, or
//                                      the first error (exit status 1): a syntax error with its
//                                      line and column, an unknown option with the nearest one
//   recsdk find-nan DUMP_DIR           reads a dump (SessionConfig::enable_dump; dump_path or any
//                                      directory below it), verifies every tensor file against its
//                                      manifest's checksum, and prints the first op in execution
//                                      order whose outputs hold NaN/Inf and whether its inputs
//                                      already did
//   recsdk compare-dumps LEFT RIGHT [--threshold 0.98] [--csv FILE] [--html FILE]
//                                      compares two dumps op by op (cosine similarity, max abs and
//                                      rel error) and names the first op whose inputs agree but
//                                      outputs differ; --html writes a single-file report
//   recsdk compare-ckpt LEFT RIGHT     compares two checkpoints (MODEL_DIR/ckpt-N) per dense
//                                      variable and per table (by key): cosine similarity, max abs
//                                      difference, keys on one side only; worst first
//   recsdk precision-check RUN_A RUN_B
//                                      compares two PRECISION_CHECK traces (little_demo with
//                                      PRECISION_CHECK=1) bit for bit and names the first step and
//                                      stage (batch_ids, lookups, dense, loss, gradients, updates)
//                                      where they diverge
//   recsdk dump-graph GRAPH.json|MODEL_DIR [--dot]
//                                      prints a graph (Graph::ToJson's file, or the graph of an
//                                      exported model, checked against its serving.json) as text,
//                                      one node a line, or as Graphviz dot
//   recsdk ops                         prints every op's declaration (inputs, outputs, attributes
//                                      with types and defaults) as JSON: the schema a graph JSON
//                                      file's nodes are checked against (OpRegistry::SchemaJson)
//   recsdk replay-op DUMP OP [--step N] [--threshold 0.98]
//                                      reruns one dumped op on the CPU from its dumped inputs and
//                                      compares each output with the dumped one (the spec's "run
//                                      the same operator logic on the CPU")
//
// Exit status: validate-config: 0 valid, 1 invalid, 2 usage error. find-nan: 0 no NaN/Inf, 1 found,
// 2 an error (a missing or corrupt dump, named) or a usage error. compare-dumps: 0 the dumps agree,
// 1 they differ, 2 an error or a usage error. compare-ckpt: 0 the checkpoints hold the same values,
// 1 they differ, 2 an error (a missing or corrupt checkpoint, named) or a usage error.
// precision-check: 0 no divergence, 1 diverged, 2 an error (a missing or corrupt trace, named) or
// a usage error. dump-graph: 0 printed, 2 an error (a missing, oversized or corrupt file, named) or
// a usage error. replay-op: 0 the replay agrees with the dump, 1 it differs, 2 an error (a missing
// op or a corrupt dump, named; an op that cannot be replayed, with why) or a usage error.
// Single-threaded.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/config.h"
#include "recsdk/graph.h"
#include "src/checkpoint/checkpoint_compare.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/json_number.h"
#include "src/common/status_macros.h"
#include "src/graph/graph_print.h"
#include "src/graph/op_registry.h"
#include "src/precision/dump_compare.h"
#include "src/precision/dump_reader.h"
#include "src/precision/dump_replay.h"
#include "src/precision/dump_report_html.h"
#include "src/precision/precision_check.h"
#include "src/session/runtime.h"

namespace {

constexpr char kUsage[] =
    "usage: recsdk COMMAND [ARGS]\n"
    "commands:\n"
    "  validate-config FILE.json   check a SessionConfig JSON file; print it with defaults\n"
    "  find-nan DUMP_DIR           the first op of a dump whose outputs hold NaN/Inf\n"
    "                              (exit 0: none, 1: found, 2: error)\n"
    "  compare-dumps LEFT RIGHT [--threshold 0.98] [--csv FILE] [--html FILE]\n"
    "                              compare two dumps op by op; name the first op whose inputs\n"
    "                              agree but outputs differ (exit 0: agree, 1: differ, 2: error);\n"
    "                              --html: a report with a sortable table, the graph around that\n"
    "                              op and histograms of its output\n"
    "  compare-ckpt LEFT RIGHT     compare two checkpoints (MODEL_DIR/ckpt-N) per variable and\n"
    "                              per table, worst first (exit 0: same, 1: differ, 2: error)\n"
    "  precision-check RUN_A RUN_B compare two PRECISION_CHECK traces (precision_check/<time>)\n"
    "                              bit for bit; name the first step and stage where they diverge\n"
    "                              (exit 0: same, 1: diverged, 2: error)\n"
    "  dump-graph GRAPH.json|MODEL_DIR [--dot]\n"
    "                              print a graph (a graph JSON file or an exported model's) as\n"
    "                              text, or as Graphviz dot\n"
    "  ops                         print every op's declaration (inputs, outputs, attributes\n"
    "                              with types and defaults) as JSON\n"
    "  replay-op DUMP OP [--step N] [--threshold 0.98]\n"
    "                              rerun one dumped op on the CPU from its dumped inputs and\n"
    "                              compare its outputs with the dumped ones\n"
    "                              (exit 0: agree, 1: differ, 2: error)\n";

// The largest graph JSON dump-graph reads: far above a model's graph (constants included), and a
// bound on what a hostile file makes it allocate.
constexpr uint64_t kMaxGraphJsonBytes = uint64_t{1} << 30;

int ValidateConfig(const std::string& path) {
  recsdk::internal::Env* env = recsdk::internal::Env::Default();
  // A directory is named as one rather than reported as an unreadable config (a link to one is
  // refused by the read below, which also names it a directory).
  auto type = env->GetFileType(path);
  if (type.ok() && *type == recsdk::internal::FileType::kDirectory) {
    std::fprintf(stderr,
                 "recsdk validate-config: \"%s\" is a directory; give the session config's JSON "
                 "file\n",
                 path.c_str());
    return 1;
  }
  recsdk::StatusOr<std::string> text = recsdk::internal::ReadFileToString(env, path);
  if (!text.ok()) {
    std::fprintf(stderr, "recsdk validate-config: %s\n",
                 std::string(text.status().message()).c_str());
    return 1;
  }
  auto config = recsdk::SessionConfig::FromJson(*text);
  if (!config.ok()) {
    std::fprintf(stderr, "recsdk validate-config: %s: %s\n", path.c_str(),
                 std::string(config.status().message()).c_str());
    return 1;
  }
  std::fputs(config->ToJson().c_str(), stdout);
  return 0;
}

int FindNan(const std::string& dir) {
  recsdk::StatusOr<recsdk::internal::NanReport> report = absl::InternalError("not run");
  try {
    report = recsdk::internal::FindNan(recsdk::internal::Env::Default(), dir);
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    report = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!report.ok()) {
    std::fprintf(stderr, "recsdk find-nan: %s\n", std::string(report.status().message()).c_str());
    return 2;
  }
  std::fputs(report->Text().c_str(), stdout);
  return report->first ? 1 : 0;
}

int CompareDumps(int argc, char** argv) {
  // argv[0] is "compare-dumps".
  std::vector<std::string> paths;
  double threshold = 0.98;
  std::string csv, html;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--threshold" || arg == "--csv" || arg == "--html") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--csv" || arg == "--html") {
        (arg == "--csv" ? csv : html) = value;
        continue;
      }
      char* end = nullptr;
      threshold = std::strtod(value.c_str(), &end);
      if (value.empty() || end == nullptr || *end != '\0') {
        std::fprintf(stderr, "recsdk compare-dumps: --threshold \"%s\" is not a number\n",
                     value.c_str());
        return 2;
      }
    } else if (arg.substr(0, 2) == "--") {
      std::fprintf(stderr, "recsdk compare-dumps: unknown or incomplete option \"%s\"\n%s", argv[i],
                   kUsage);
      return 2;
    } else {
      paths.emplace_back(arg);
    }
  }
  if (paths.size() != 2) {
    std::fprintf(stderr, "recsdk compare-dumps: give two dump directories, LEFT and RIGHT\n%s",
                 kUsage);
    return 2;
  }
  recsdk::internal::Env* env = recsdk::internal::Env::Default();
  recsdk::StatusOr<recsdk::internal::DumpComparison> result = absl::InternalError("not run");
  try {
    result = recsdk::internal::CompareDumps(env, paths[0], paths[1], threshold);
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    result = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!result.ok()) {
    std::fprintf(stderr, "recsdk compare-dumps: %s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }
  std::fputs(result->Text().c_str(), stdout);
  if (!csv.empty()) {
    if (recsdk::Status s = recsdk::internal::WriteStringToFileAtomic(env, csv, result->Csv());
        !s.ok()) {
      std::fprintf(stderr, "recsdk compare-dumps: --csv: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (!html.empty()) {
    if (recsdk::Status s =
            recsdk::internal::WriteDumpReportHtml(env, *result, paths[0], paths[1], html);
        !s.ok()) {
      std::fprintf(stderr, "recsdk compare-dumps: --html: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  return result->all_agree() ? 0 : 1;
}

int PrecisionCheck(const std::string& run_a, const std::string& run_b) {
  recsdk::StatusOr<recsdk::internal::PrecisionCheckReport> result = absl::InternalError("not run");
  try {
    result = recsdk::internal::PrecisionCheck(recsdk::internal::Env::Default(), run_a, run_b);
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    result = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!result.ok()) {
    std::fprintf(stderr, "recsdk precision-check: %s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }
  std::fputs(result->Text().c_str(), stdout);
  return result->first.has_value() ? 1 : 0;
}

int CompareCkpt(const std::string& left, const std::string& right) {
  recsdk::StatusOr<recsdk::internal::CheckpointComparison> result = absl::InternalError("not run");
  try {
    result = recsdk::internal::CompareCheckpoints(recsdk::internal::Env::Default(), left, right);
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    result = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!result.ok()) {
    std::fprintf(stderr, "recsdk compare-ckpt: %s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }
  std::fputs(result->Text().c_str(), stdout);
  return result->all_same() ? 0 : 1;
}

// ReadGraphJson: the text of a graph JSON file, or of an exported model directory's graph.json
// after checking its size and CRC-32C against the bundle's serving.json (as Predictor::Load does).
recsdk::StatusOr<std::string> ReadGraphJson(const std::string& path) {
  namespace fs = std::filesystem;
  using recsdk::internal::JoinPath;
  recsdk::internal::Env* env = recsdk::internal::Env::Default();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(fmt::format(
        "\"{}\" does not exist; give a graph JSON file (Graph::ToJson) or an exported model "
        "directory (ExportSavedModel)",
        path));
  }
  const bool bundle = fs::is_directory(path, ec);
  const std::string file = bundle ? JoinPath(path, "graph.json") : path;
  if (bundle && !fs::exists(file, ec)) {
    return absl::NotFoundError(fmt::format(
        "\"{}\" holds no graph.json; give an exported model directory (ExportSavedModel) or a "
        "graph JSON file",
        path));
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<recsdk::internal::RandomAccessFile> f,
                          env->NewRandomAccessFile(file));
  RECSDK_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  if (size > kMaxGraphJsonBytes) {
    return absl::InvalidArgumentError(fmt::format(
        "\"{}\" is {} bytes, above the {} a graph JSON file may have; it is not a graph", file,
        size, kMaxGraphJsonBytes));
  }
  RECSDK_ASSIGN_OR_RETURN(std::string text, recsdk::internal::ReadFileToString(env, file));
  if (bundle) {
    const std::string serving_path = JoinPath(path, "serving.json");
    RECSDK_ASSIGN_OR_RETURN(nlohmann::json serving,
                            recsdk::internal::ReadJsonDocument(env, serving_path));
    uint64_t bytes = 0;
    uint32_t crc = 0;
    try {
      bytes = recsdk::internal::JsonNumber<uint64_t>(serving.at("graph_bytes"));
      crc = recsdk::internal::JsonNumber<uint32_t>(serving.at("graph_crc32c"));
    } catch (const std::exception& e) {
      return absl::DataLossError(
          fmt::format("\"{}\" is malformed ({}); export the model again", serving_path, e.what()));
    }
    if (text.size() != bytes || recsdk::internal::Crc32c(text) != crc) {
      return absl::DataLossError(fmt::format(
          "\"{}\" is truncated or corrupt (size or CRC-32C differ from {}); export the model again",
          file, serving_path));
    }
  }
  return text;
}

int DumpGraph(int argc, char** argv) {
  // argv[0] is "dump-graph".
  std::string path;
  bool dot = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--dot") {
      dot = true;
    } else if (arg.substr(0, 2) == "--" || !path.empty()) {
      std::fprintf(stderr, "recsdk dump-graph: unexpected argument \"%s\"\n%s", argv[i], kUsage);
      return 2;
    } else {
      path = std::string(arg);
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "recsdk dump-graph: give a graph JSON file or a model directory\n%s",
                 kUsage);
    return 2;
  }
  recsdk::StatusOr<std::string> printed = absl::InternalError("not run");
  try {
    printed = [&]() -> recsdk::StatusOr<std::string> {
      RECSDK_ASSIGN_OR_RETURN(std::string text, ReadGraphJson(path));
      auto graph = recsdk::Graph::FromJson(text);
      if (!graph.ok()) {
        return recsdk::Status(graph.status().code(),
                              fmt::format("\"{}\": {}", path, graph.status().message()));
      }
      return dot ? recsdk::internal::GraphDot(**graph) : recsdk::internal::GraphText(**graph);
    }();
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    printed = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!printed.ok()) {
    std::fprintf(stderr, "recsdk dump-graph: %s\n",
                 std::string(printed.status().message()).c_str());
    return 2;
  }
  std::fputs(printed->c_str(), stdout);
  return 0;
}

int ReplayOp(int argc, char** argv) {
  // argv[0] is "replay-op".
  std::vector<std::string> args;
  recsdk::internal::ReplayOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--threshold" || arg == "--step") && i + 1 < argc) {
      const std::string value = argv[++i];
      char* end = nullptr;
      if (arg == "--threshold") {
        options.threshold = std::strtod(value.c_str(), &end);
      } else {
        options.step = std::strtoll(value.c_str(), &end, 10);
      }
      if (value.empty() || end == nullptr || *end != '\0' ||
          (arg == "--step" && options.step < 0)) {
        std::fprintf(stderr, "recsdk replay-op: %s \"%s\" is not a %s\n", argv[i - 1],
                     value.c_str(), arg == "--step" ? "step number" : "number");
        return 2;
      }
    } else if (arg.substr(0, 2) == "--") {
      std::fprintf(stderr, "recsdk replay-op: unknown or incomplete option \"%s\"\n%s", argv[i],
                   kUsage);
      return 2;
    } else {
      args.emplace_back(arg);
    }
  }
  if (args.size() != 2) {
    std::fprintf(stderr, "recsdk replay-op: give a dump directory and an op name, DUMP OP\n%s",
                 kUsage);
    return 2;
  }
  recsdk::StatusOr<recsdk::internal::ReplayResult> result = absl::InternalError("not run");
  try {
    result =
        recsdk::internal::ReplayOp(recsdk::internal::Env::Default(), args[0], args[1], options);
  } catch (const std::exception& e) {  // e.g. out of memory: reported, not a crash
    result = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!result.ok()) {
    std::fprintf(stderr, "recsdk replay-op: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  std::fputs(result->Text().c_str(), stdout);
  return result->all_agree() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "validate-config") return ValidateConfig(argv[2]);
  if (argc == 3 && std::string_view(argv[1]) == "find-nan") return FindNan(argv[2]);
  if (argc >= 2 && std::string_view(argv[1]) == "compare-dumps") {
    return CompareDumps(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::string_view(argv[1]) == "compare-ckpt") {
    if (argc != 4) {
      std::fprintf(stderr,
                   "recsdk compare-ckpt: give two checkpoint directories, LEFT and RIGHT\n%s",
                   kUsage);
      return 2;
    }
    return CompareCkpt(argv[2], argv[3]);
  }
  if (argc >= 2 && std::string_view(argv[1]) == "precision-check") {
    if (argc != 4) {
      std::fprintf(stderr,
                   "recsdk precision-check: give two trace directories, RUN_A and RUN_B "
                   "(precision_check/<time> of two runs)\n%s",
                   kUsage);
      return 2;
    }
    return PrecisionCheck(argv[2], argv[3]);
  }
  if (argc >= 2 && std::string_view(argv[1]) == "dump-graph") return DumpGraph(argc - 1, argv + 1);
  if (argc >= 2 && std::string_view(argv[1]) == "replay-op") return ReplayOp(argc - 1, argv + 1);
  if (argc == 2 && std::string_view(argv[1]) == "ops") {
    recsdk::internal::InitializeRuntime();  // the core ops and those of the upper layers
    std::fputs((recsdk::internal::OpRegistry::Global().SchemaJson() + "\n").c_str(), stdout);
    return 0;
  }
  if (argc == 2 && (std::string_view(argv[1]) == "help" || std::string_view(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fputs(kUsage, stderr);
  return 2;
}
