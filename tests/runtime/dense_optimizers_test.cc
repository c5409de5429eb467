// dense_optimizers_test.cc: each dense optimizer against a hand-written reference update.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

// loss = 0.5 * sum(c * w^2) so grad = c * w, varying step by step.
constexpr double kC[3] = {1.0, -0.5, 2.0};
constexpr double kW0[3] = {0.5, -1.5, 2.0};

using RefUpdate = std::function<void(std::vector<double>& w, const std::vector<double>& g, int t)>;

void CheckOptimizer(Optimizer& opt, const RefUpdate& ref, int steps = 5) {
  Graph g;
  Scope root(&g);
  VariableOptions o;
  o.initializer = Initializer::Zeros();
  o.dtype = DType::kFloat64;
  Variable w = Variable::Make(root, "w", Shape{3}, o);
  Output c = ops::Const(root, *Tensor::FromValues<double>(Shape{3}, {kC[0], kC[1], kC[2]}));
  Output loss = ops::Mul(root, ops::ReduceSum(root, ops::Mul(root, c, ops::Square(root, w))),
                         ops::Const(root, 0.5));
  auto train = opt.Minimize(root, loss);
  ASSERT_TRUE(train.ok()) << train.status();
  Node* set = Assign(
      root, w, ops::Const(root, *Tensor::FromValues<double>(Shape{3}, {kW0[0], kW0[1], kW0[2]})));
  Node* init = GlobalVariablesInitializer(root);
  auto session = Session::Create(g);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Run({}, {}, {init}).ok());
  ASSERT_TRUE((*session)->Run({}, {}, {set}).ok());
  std::vector<double> ref_w(kW0, kW0 + 3);
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> grad(3);
    for (int i = 0; i < 3; ++i) grad[i] = kC[i] * ref_w[i];
    ref(ref_w, grad, t);
    ASSERT_TRUE((*session)->Run({}, {}, {*train}).ok());
    auto out = (*session)->Run({}, {w.value(), std::string(kGlobalStep) + "/read"});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR((*out)[0].data<double>()[i], ref_w[i], 1e-12) << opt.name() << " step " << t;
    EXPECT_EQ((*out)[1].scalar<int64_t>(), t);
  }
}

TEST(DenseOptimizersTest, Sgd) {
  SgdOptimizer opt(SgdOptions{0.1});
  CheckOptimizer(opt, [](auto& w, const auto& g, int) {
    for (int i = 0; i < 3; ++i) w[i] -= 0.1 * g[i];
  });
}

TEST(DenseOptimizersTest, MomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    MomentumOptions o;
    o.learning_rate = 0.1;
    o.momentum = 0.9;
    o.use_nesterov = nesterov;
    MomentumOptimizer opt(o);
    std::vector<double> accum(3, 0.0);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int) {
      for (int i = 0; i < 3; ++i) {
        accum[i] = 0.9 * accum[i] + g[i];
        w[i] -= nesterov ? 0.1 * (g[i] + 0.9 * accum[i]) : 0.1 * accum[i];
      }
    });
  }
}

TEST(DenseOptimizersTest, Adagrad) {
  AdagradOptions o;
  o.learning_rate = 0.1;
  AdagradOptimizer opt(o);
  std::vector<double> acc(3, 0.1);
  CheckOptimizer(opt, [&](auto& w, const auto& g, int) {
    for (int i = 0; i < 3; ++i) {
      acc[i] += g[i] * g[i];
      w[i] -= 0.1 * g[i] / (std::sqrt(acc[i]) + 1e-7);
    }
  });
}

void AdamReference(std::vector<double>& w, const std::vector<double>& g, int t,
                   std::vector<double>& m, std::vector<double>& v, double wd) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
  for (int i = 0; i < 3; ++i) {
    w[i] -= lr * wd * w[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
  }
}

TEST(DenseOptimizersTest, AdamAndAdamW) {
  AdamOptions o;
  o.learning_rate = 0.01;
  {
    AdamOptimizer opt(o);
    std::vector<double> m(3), v(3);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) { AdamReference(w, g, t, m, v, 0.0); });
  }
  {
    o.weight_decay = 0.05;
    AdamWOptimizer opt(o);
    std::vector<double> m(3), v(3);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) { AdamReference(w, g, t, m, v, 0.05); });
  }
  EXPECT_DOUBLE_EQ(AdamWOptimizer::DefaultOptions().weight_decay, 0.01);
}

TEST(DenseOptimizersTest, RmsPropPlainAndCentered) {
  for (bool centered : {false, true}) {
    RmsPropOptions o;
    o.learning_rate = 0.01;
    o.momentum = 0.5;
    o.centered = centered;
    RmsPropOptimizer opt(o);
    std::vector<double> ms(3, 1.0), mom(3, 0.0), mg(3, 0.0);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int) {
      for (int i = 0; i < 3; ++i) {
        ms[i] = 0.9 * ms[i] + 0.1 * g[i] * g[i];
        double denom = ms[i];
        if (centered) {
          mg[i] = 0.9 * mg[i] + 0.1 * g[i];
          denom -= mg[i] * mg[i];
        }
        mom[i] = 0.5 * mom[i] + 0.01 * g[i] / std::sqrt(denom + 1e-7);
        w[i] -= mom[i];
      }
    });
  }
}

TEST(DenseOptimizersTest, ComputeGradientsWithoutVariablesIsAnError) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root, DType::kFloat32, Shape{2});
  SgdOptimizer opt;
  auto r = opt.Minimize(root, ops::ReduceSum(root, x));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("no variables"), std::string::npos);
}

TEST(DenseOptimizersTest, SlotsAreNamedAfterTheVariable) {
  Graph g;
  Scope root(&g);
  Variable w = Variable::Make(root, "layer/w", Shape{2});
  AdamOptimizer opt;
  ASSERT_TRUE(opt.Minimize(root, ops::ReduceSum(root, ops::Square(root, w))).ok());
  EXPECT_NE(g.FindNode("layer/w/Adam/m"), nullptr);
  EXPECT_NE(g.FindNode("layer/w/Adam/v"), nullptr);
  EXPECT_NE(g.FindNode("Adam/step"), nullptr);
  EXPECT_EQ(TrainableVariables(g).size(), 1u);
}

// --- Learning-rate schedules -------------------------------------------------------------

TEST(LearningRateScheduleTest, MultiplierByHand) {
  LearningRateSchedule warm;
  warm.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(warm.Multiplier(0), 0.25);
  EXPECT_DOUBLE_EQ(warm.Multiplier(3), 1.0);
  EXPECT_DOUBLE_EQ(warm.Multiplier(100), 1.0);
  LearningRateSchedule exp;
  exp.warmup_steps = 2;
  exp.decay = LearningRateSchedule::Decay::kExponential;
  exp.decay_steps = 10;
  exp.decay_rate = 0.5;
  EXPECT_DOUBLE_EQ(exp.Multiplier(1), 1.0);  // last warm-up step
  EXPECT_DOUBLE_EQ(exp.Multiplier(2), 1.0);
  EXPECT_DOUBLE_EQ(exp.Multiplier(7), std::pow(0.5, 0.5));
  EXPECT_DOUBLE_EQ(exp.Multiplier(22), 0.25);
  exp.staircase = true;
  EXPECT_DOUBLE_EQ(exp.Multiplier(7), 1.0);
  EXPECT_DOUBLE_EQ(exp.Multiplier(12), 0.5);
  LearningRateSchedule cos;
  cos.decay = LearningRateSchedule::Decay::kCosine;
  cos.decay_steps = 8;
  cos.alpha = 0.1;
  EXPECT_DOUBLE_EQ(cos.Multiplier(0), 1.0);
  EXPECT_NEAR(cos.Multiplier(4), 0.1 + 0.9 * 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(cos.Multiplier(8), 0.1);
  EXPECT_DOUBLE_EQ(cos.Multiplier(1000), 0.1);
  EXPECT_TRUE(LearningRateSchedule().is_constant());
}

// The graph applies lr * Multiplier(t - 1) at update t, for SGD, Momentum, Adagrad, Adam and
// RMSProp, and the schedule's step advances once per step.
TEST(LearningRateScheduleTest, EveryDenseOptimizerFollowsItsSchedule) {
  LearningRateSchedule sched;
  sched.warmup_steps = 2;
  sched.decay = LearningRateSchedule::Decay::kCosine;
  sched.decay_steps = 3;
  auto m = [&](int t) { return sched.Multiplier(t - 1); };
  {
    SgdOptions o{0.1};
    o.learning_rate_schedule = sched;
    SgdOptimizer opt(o);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) {
      for (int i = 0; i < 3; ++i) w[i] -= 0.1 * m(t) * g[i];
    });
  }
  {
    MomentumOptions o;
    o.learning_rate = 0.1;
    o.learning_rate_schedule = sched;
    MomentumOptimizer opt(o);
    std::vector<double> accum(3, 0.0);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) {
      for (int i = 0; i < 3; ++i) {
        accum[i] = 0.9 * accum[i] + g[i];
        w[i] -= 0.1 * m(t) * accum[i];
      }
    });
  }
  {
    AdagradOptions o;
    o.learning_rate = 0.1;
    o.learning_rate_schedule = sched;
    AdagradOptimizer opt(o);
    std::vector<double> acc(3, 0.1);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) {
      for (int i = 0; i < 3; ++i) {
        acc[i] += g[i] * g[i];
        w[i] -= 0.1 * m(t) * g[i] / (std::sqrt(acc[i]) + 1e-7);
      }
    });
  }
  {
    AdamOptions o;
    o.learning_rate = 0.01;
    o.weight_decay = 0.05;
    o.learning_rate_schedule = sched;
    AdamWOptimizer opt(o);
    std::vector<double> mm(3), v(3);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) {
      const double lr = 0.01 * m(t), b1 = 0.9, b2 = 0.999;
      const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      for (int i = 0; i < 3; ++i) {
        w[i] -= lr * 0.05 * w[i];
        mm[i] = b1 * mm[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= lr_t * mm[i] / (std::sqrt(v[i]) + 1e-8);
      }
    });
  }
  {
    RmsPropOptions o;
    o.learning_rate = 0.01;
    o.learning_rate_schedule = sched;
    RmsPropOptimizer opt(o);
    std::vector<double> ms(3, 1.0), mom(3, 0.0);
    CheckOptimizer(opt, [&](auto& w, const auto& g, int t) {
      for (int i = 0; i < 3; ++i) {
        ms[i] = 0.9 * ms[i] + 0.1 * g[i] * g[i];
        mom[i] = 0.01 * m(t) * g[i] / std::sqrt(ms[i] + 1e-7);
        w[i] -= mom[i];
      }
    });
  }
}

TEST(LearningRateScheduleTest, ConstantAddsNothingAndBadSchedulesAreRefused) {
  {
    Graph g;
    Scope root(&g);
    Variable w = Variable::Make(root, "w", Shape{2});
    ASSERT_TRUE(SgdOptimizer().Minimize(root, ops::ReduceSum(root, ops::Square(root, w))).ok());
    EXPECT_EQ(g.FindNode("SGD/schedule_step"), nullptr);
  }
  auto refused = [](LearningRateSchedule sched, const std::string& what) {
    Graph g;
    Scope root(&g);
    Variable w = Variable::Make(root, "w", Shape{2});
    AdamOptions o;
    o.learning_rate_schedule = sched;
    auto r = AdamOptimizer(o).Minimize(root, ops::ReduceSum(root, ops::Square(root, w)));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(what), std::string::npos) << r.status();
    EXPECT_NE(std::string(r.status().message()).find("Adam: learning_rate_schedule"),
              std::string::npos)
        << r.status();
  };
  LearningRateSchedule s;
  s.warmup_steps = -1;
  refused(s, "warmup_steps -1");
  s = {};
  s.decay_steps = 5;
  refused(s, "decay is kConstant");
  s = {};
  s.decay = LearningRateSchedule::Decay::kExponential;
  refused(s, "decay_steps 0 must be > 0");
  s.decay_steps = 10;
  s.decay_rate = 1.5;
  refused(s, "decay_rate 1.5");
  s.decay_rate = std::nan("");
  refused(s, "decay_rate nan");
  s = {};
  s.decay = LearningRateSchedule::Decay::kCosine;
  s.decay_steps = 10;
  s.alpha = -0.5;
  refused(s, "alpha -0.5");
  s.decay = static_cast<LearningRateSchedule::Decay>(7);
  refused(s, "decay 7 is unknown");
}

}  // namespace
}  // namespace recsdk
