// dcnv2: the spec's DCNv2 Model Development Guide on recsdk (sess.run path). See dcnv2.cc for
// the model and the data, README.md for the guide's steps mapped to lines here.
#include <cstdio>
#include <string>

#include "samples/dcnv2/dcnv2.h"

int main(int argc, char** argv) {
  auto options = dcnv2::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = dcnv2::Run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "dcnv2: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return 0;
}
