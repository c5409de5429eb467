// recsdk_main.cc: the `recsdk` command line.
//
//   recsdk validate-config FILE.json   prints the session config with every default filled in, or
//                                      the first error (exit status 1): a syntax error with its
//                                      line and column, an unknown option with the nearest one
//
// Exit status: 0 success, 1 the input is invalid, 2 usage error. Single-threaded.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "recsdk/config.h"

namespace {

constexpr char kUsage[] =
    "usage: recsdk COMMAND [ARGS]\n"
    "commands:\n"
    "  validate-config FILE.json   check a SessionConfig JSON file; print it with defaults\n";

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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "validate-config") return ValidateConfig(argv[2]);
  if (argc == 2 && (std::string_view(argv[1]) == "help" || std::string_view(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fputs(kUsage, stderr);
  return 2;
}
