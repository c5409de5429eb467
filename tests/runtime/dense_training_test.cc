// dense_training_test.cc: a dense MLP learns a planted signal: its AUC approaches the planted
// model's own AUC and the loss falls.
#include <gtest/gtest.h>

#include "samples/dense_example/dense_example.h"

namespace recsdk {
namespace {

TEST(DenseTrainingTest, MlpReachesThePlantedModelsAuc) {
  samples::DenseExampleOptions o;
  o.steps = 800;
  o.eval_every = 800;
  o.verbose = false;
  auto r = samples::RunDenseExample(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->planted_auc, 0.8);
  EXPECT_GT(r->final_auc, r->planted_auc - 0.01) << "planted " << r->planted_auc;
  EXPECT_LT(r->final_loss, r->first_loss);
}

}  // namespace
}  // namespace recsdk
