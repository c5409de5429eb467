// xdeepfm: xDeepFM (linear + CIN + DNN) on the Estimator, on planted data. See xdeepfm.cc for
// the model and the data, README.md for the run and its figures.
#include <cstdio>
#include <string>

#include "samples/xdeepfm/xdeepfm.h"

int main(int argc, char** argv) {
  auto options = xdeepfm::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = xdeepfm::Run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "xdeepfm: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return 0;
}
