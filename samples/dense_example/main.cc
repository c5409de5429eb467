// dense_example: trains an MLP on data with a planted logistic signal and prints loss and AUC.
// Usage: dense_example [steps]
#include <cstdio>
#include <cstdlib>

#include "samples/dense_example/dense_example.h"

int main(int argc, char** argv) {
  recsdk::samples::DenseExampleOptions options;
  if (argc > 1) options.steps = std::atoi(argv[1]);
  if (options.steps <= 0) {
    std::fprintf(stderr, "usage: dense_example [steps > 0]\n");
    return 2;
  }
  auto result = recsdk::samples::RunDenseExample(options);
  if (!result.ok()) {
    std::fprintf(stderr, "dense_example failed: %s\n",
                 std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("final eval AUC %.4f vs planted model AUC %.4f (loss %.4f -> %.4f)\n",
              result->final_auc, result->planted_auc, result->first_loss, result->final_loss);
  return 0;
}
