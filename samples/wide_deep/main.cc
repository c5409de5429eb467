// wide_deep: Wide & Deep on the Estimator, on planted data. See wide_deep.cc for the model and
// the data, README.md for the run and its figures.
#include <cstdio>
#include <string>

#include "samples/wide_deep/wide_deep.h"

int main(int argc, char** argv) {
  auto options = wide_deep::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = wide_deep::Run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "wide_deep: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return 0;
}
