// mmoe: MMoE (shared experts, a gate and a tower per task) on the Estimator, on planted data. See
// mmoe.cc for the model and the data, README.md for the run and its figures.
#include <cstdio>
#include <string>

#include "samples/mmoe/mmoe.h"

int main(int argc, char** argv) {
  auto options = mmoe::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = mmoe::Run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "mmoe: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return 0;
}
