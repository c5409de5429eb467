// wide_deep: Wide & Deep on the Estimator, on planted data. See wide_deep.cc for the model and
// the data, README.md for the run and its figures.
#include "samples/common/main.h"

#include "samples/wide_deep/wide_deep.h"

int main(int argc, char** argv) {
  return samples::SampleMain(argc, argv, "wide_deep", wide_deep::ParseOptions, wide_deep::Run);
}
