// main.h: the main() of a sample whose library has ParseOptions and Run: the flags' error exits 2
// with its message, a failed run exits 1 naming the sample, a finished run exits 0.
// Threading: the main thread.
#ifndef RECSDK_SAMPLES_COMMON_MAIN_H_
#define RECSDK_SAMPLES_COMMON_MAIN_H_

#include <cstdio>
#include <string>

namespace samples {

// SampleMain: parse(argc, argv) gives a StatusOr of the options, run(options) a StatusOr of the
// result; `sample` prefixes a failed run's message (the flags' messages carry it already).
template <typename Parse, typename Run>
int SampleMain(int argc, char** argv, const char* sample, Parse parse, Run run) {
  auto options = parse(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "%s: %s\n", sample, result.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace samples

#endif  // RECSDK_SAMPLES_COMMON_MAIN_H_
