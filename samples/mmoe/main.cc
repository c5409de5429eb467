// mmoe: MMoE (shared experts, a gate and a tower per task) on the Estimator, on planted data. See
// mmoe.cc for the model and the data, README.md for the run and its figures.
#include "samples/common/main.h"

#include "samples/mmoe/mmoe.h"

int main(int argc, char** argv) {
  return samples::SampleMain(argc, argv, "mmoe", mmoe::ParseOptions, mmoe::Run);
}
