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
//
// Exit status: validate-config: 0 valid, 1 invalid, 2 usage error. find-nan: 0 no NaN/Inf, 1 found,
// 2 an error (a missing or corrupt dump, named) or a usage error. Single-threaded.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "recsdk/config.h"
#include "src/common/env.h"
#include "src/precision/dump_reader.h"

namespace {

constexpr char kUsage[] =
    "usage: recsdk COMMAND [ARGS]\n"
    "commands:\n"
    "  validate-config FILE.json   check a SessionConfig JSON file; print it with defaults\n"
    "  find-nan DUMP_DIR           the first op of a dump whose outputs hold NaN/Inf\n"
    "                              (exit 0: none, 1: found, 2: error)\n";

int ValidateConfig(const std::string& path) {
  // A directory opens as a stream that reads nothing, and was then reported as an empty or
  // invalid config.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::fprintf(stderr,
                 "recsdk validate-config: \"%s\" is a directory; give the session config's JSON "
                 "file\n",
                 path.c_str());
    return 1;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "recsdk validate-config: cannot open \"%s\"\n", path.c_str());
    return 1;
  }
  std::stringstream text;
  text << f.rdbuf();
  if (f.bad()) {
    std::fprintf(stderr, "recsdk validate-config: cannot read \"%s\"\n", path.c_str());
    return 1;
  }
  auto config = recsdk::SessionConfig::FromJson(text.str());
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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "validate-config") return ValidateConfig(argv[2]);
  if (argc == 3 && std::string_view(argv[1]) == "find-nan") return FindNan(argv[2]);
  if (argc == 2 && (std::string_view(argv[1]) == "help" || std::string_view(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fputs(kUsage, stderr);
  return 2;
}
