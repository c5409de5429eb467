// dcnv2: the spec's DCNv2 Model Development Guide on recsdk (sess.run path). See dcnv2.cc for
// the model and the data, README.md for the guide's steps mapped to lines here.
#include "samples/common/main.h"

#include "samples/dcnv2/dcnv2.h"

int main(int argc, char** argv) {
  return samples::SampleMain(argc, argv, "dcnv2", dcnv2::ParseOptions, dcnv2::Run);
}
