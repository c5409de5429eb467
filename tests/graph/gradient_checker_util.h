// gradient_checker_util.h: finite-difference gradient checks for ops (shared test helper).
#ifndef RECSDK_TESTS_GRAPH_GRADIENT_CHECKER_UTIL_H_
#define RECSDK_TESTS_GRAPH_GRADIENT_CHECKER_UTIL_H_

#include <functional>
#include <vector>

#include "recsdk/recsdk.h"

namespace recsdk::testing {

// BuildFn builds y from the placeholders (float64) of the given input shapes.
using BuildFn = std::function<Output(const Scope&, const std::vector<Output>&)>;

struct GradCheckOptions {
  double delta = 1e-6;
  double tolerance = 1e-5;  // max |analytic - numeric| / max(1, |numeric|)
  // Inputs initialised uniformly in [low, high] (seeded).
  double low = -2.0;
  double high = 2.0;
  uint64_t seed = 1;
};

// CheckGradients returns OK when the gradient of sum(w * y) (w fixed random weights) w.r.t.
// each input matches central finite differences; else an error naming the input and element.
Status CheckGradients(const std::vector<Shape>& input_shapes, const BuildFn& build,
                      const GradCheckOptions& options = {});

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_GRAPH_GRADIENT_CHECKER_UTIL_H_
