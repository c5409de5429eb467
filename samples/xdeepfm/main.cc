// xdeepfm: xDeepFM (linear + CIN + DNN) on the Estimator, on planted data. See xdeepfm.cc for
// the model and the data, README.md for the run and its figures.
#include "samples/common/main.h"

#include "samples/xdeepfm/xdeepfm.h"

int main(int argc, char** argv) {
  return samples::SampleMain(argc, argv, "xdeepfm", xdeepfm::ParseOptions, xdeepfm::Run);
}
