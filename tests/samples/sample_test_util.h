// sample_test_util.h: what the sample tests (tests/samples/) check the same way: a logistic
// regression over a sample's own features as the baseline its model must beat, the AUC checks
// against that baseline and the planted model, and the refusal of bad flags.
// Threading: one caller.
#ifndef RECSDK_TESTS_SAMPLES_SAMPLE_TEST_UTIL_H_
#define RECSDK_TESTS_SAMPLES_SAMPLE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/metrics.h"
#include "recsdk/status.h"

namespace sample_test {

// LinearFeature: one term of a row's linear score: weight `index` times `value`.
struct LinearFeature {
  int64_t index = 0;
  double value = 1;
};

// LinearRows: rows for the logistic regression: `features(i, out)` appends the terms of row i
// (0..n-1) to *out, which the caller has cleared; a row's indices are distinct.
struct LinearRows {
  int64_t n = 0;
  std::function<void(int64_t row, std::vector<LinearFeature>* out)> features;
  const std::vector<float>* labels = nullptr;  // [n]
};

// FieldOffsets: the first weight of each field, field f having vocabulary(f) ids (f in
// 0..fields-1); back() is the number of weights.
inline std::vector<int64_t> FieldOffsets(int fields,
                                         const std::function<int64_t(int)>& vocabulary) {
  std::vector<int64_t> offset(fields + 1, 0);
  for (int f = 0; f < fields; ++f) offset[f + 1] = offset[f] + vocabulary(f);
  return offset;
}

// FieldRows: n rows of `fields` ids each (ids [n][fields]), one weight per (field, id) at
// offset[f] + id; labels [n]. The vectors must outlive the rows.
inline LinearRows FieldRows(int64_t n, const std::vector<int64_t>& ids, int fields,
                            const std::vector<int64_t>& offset, const std::vector<float>& labels) {
  return {n,
          [&ids, fields, &offset](int64_t i, std::vector<LinearFeature>* out) {
            for (int f = 0; f < fields; ++f) out->push_back({offset[f] + ids[i * fields + f]});
          },
          &labels};
}

// LogisticRegressionAuc: a weight per index (0..weights-1) and a bias, trained on `train` by
// per-coordinate Adagrad on the log loss, one sample at a time, with L2 on the weights a sample
// touches. Returns the AUC on `eval` (0 when it cannot be computed).
inline double LogisticRegressionAuc(int64_t weights, const LinearRows& train,
                                    const LinearRows& eval, int epochs, double lr, double l2) {
  std::vector<double> w(weights, 0.0), gw(weights, 1e-6);
  double bias = 0, gb = 1e-6;
  std::vector<LinearFeature> x;
  auto score = [&](const LinearRows& r, int64_t i) {
    x.clear();
    r.features(i, &x);
    double z = bias;
    for (const LinearFeature& f : x) z += w[f.index] * f.value;
    return z;
  };
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < train.n; ++i) {
      const double g = 1 / (1 + std::exp(-score(train, i))) - (*train.labels)[i];
      gb += g * g;
      bias -= lr * g / std::sqrt(gb);
      for (const LinearFeature& f : x) {
        const double gi = g * f.value + l2 * w[f.index];
        gw[f.index] += gi * gi;
        w[f.index] -= lr * gi / std::sqrt(gw[f.index]);
      }
    }
  }
  std::vector<float> scores;
  for (int64_t i = 0; i < eval.n; ++i) scores.push_back(static_cast<float>(score(eval, i)));
  auto auc = recsdk::Auc(scores, *eval.labels);
  return auc.ok() ? *auc : 0;
}

// BestLogisticRegressionAuc: the best held-out AUC of a few settings (epochs 1 at rates 0.05 and
// 0.1, epochs 3 at 0.05; L2 1e-4), each printed to stderr after `prefix`. Scored on the held-out
// rows themselves: if anything, it flatters the baseline.
inline double BestLogisticRegressionAuc(int64_t weights, const LinearRows& train,
                                        const LinearRows& eval, const std::string& prefix = "") {
  double best = 0;
  for (const auto& [epochs, rate] :
       std::vector<std::pair<int, double>>{{1, 0.05}, {1, 0.1}, {3, 0.05}}) {
    const double auc = LogisticRegressionAuc(weights, train, eval, epochs, rate, 1e-4);
    std::fprintf(stderr, "%sLR epochs %d rate %.2f: AUC %.4f\n", prefix.c_str(), epochs, rate, auc);
    best = std::max(best, auc);
  }
  return best;
}

// AucBounds: how far a sample's held-out AUC must beat the baseline and may fall short of the
// planted model (each test states why, for its size).
struct AucBounds {
  double margin_over_logistic_regression = 0;
  double distance_to_planted = 0;
};

// ExpectLearned: prints "<model> auc, best LR, planted" to stderr and expects the model to beat
// the baseline by the margin, to come within the distance of the planted model, and not to beat
// the planted model (which knows the true logit).
inline void ExpectLearned(const std::string& model, double auc, double lr_auc, double planted_auc,
                          const AucBounds& bounds) {
  std::fprintf(stderr, "%s %.4f, best LR %.4f, planted %.4f\n", model.c_str(), auc, lr_auc,
               planted_auc);
  EXPECT_GT(auc, lr_auc + bounds.margin_over_logistic_regression);
  EXPECT_GT(auc, planted_auc - bounds.distance_to_planted);
  EXPECT_LT(auc, planted_auc);
}

// ParseStatus: the status of a sample's ParseOptions on `program` followed by `args`.
template <typename ParseOptions>
recsdk::Status ParseStatus(ParseOptions parse, const std::string& program,
                           std::vector<std::string> args) {
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parse(static_cast<int>(argv.size()), argv.data()).status();
}

// ExpectRefused: each flag alone is InvalidArgument with a message that contains its `what`.
template <typename ParseOptions>
void ExpectRefused(ParseOptions parse, const std::string& program,
                   const std::vector<std::pair<std::string, std::string>>& flags_and_whats) {
  for (const auto& [flag, what] : flags_and_whats) {
    const recsdk::Status st = ParseStatus(parse, program, {flag});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  }
}

}  // namespace sample_test

#endif  // RECSDK_TESTS_SAMPLES_SAMPLE_TEST_UTIL_H_
