// gradient_checker_util.cc
#include "tests/graph/gradient_checker_util.h"

#include <cmath>
#include <random>

#include "fmt/format.h"

namespace recsdk::testing {

Status CheckGradients(const std::vector<Shape>& input_shapes, const BuildFn& build,
                      const GradCheckOptions& options) {
  Graph graph;
  Scope root(&graph);
  std::vector<Output> xs;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    xs.push_back(ops::Placeholder(root.WithOpName("x" + std::to_string(i)), DType::kFloat64,
                                  input_shapes[i]));
  }
  Output y = build(root, xs);
  if (!root.ok()) return root.status();
  if (!y.shape().IsFullyDefined()) return absl::InvalidArgumentError("y shape must be known");
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> wdist(0.5, 1.5);
  std::vector<double> wv(y.shape().num_elements());
  for (double& v : wv) v = wdist(rng);
  auto w = Tensor::FromValues<double>(y.shape(), absl::MakeConstSpan(wv));
  Output loss = ops::ReduceSum(root, ops::Mul(root, y, ops::Const(root, *w)));
  auto grads = Gradients(root, {loss}, xs);
  if (!grads.ok()) return grads.status();
  std::vector<TensorName> fetches = {loss};
  for (const Output& g : *grads) {
    if (!g.valid()) return absl::InvalidArgumentError("an input received no gradient");
    fetches.push_back(g);
  }
  if (!root.ok()) return root.status();
  auto session = Session::Create(graph);
  if (!session.ok()) return session.status();
  std::uniform_real_distribution<double> xdist(options.low, options.high);
  FeedList feeds;
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor t(DType::kFloat64, input_shapes[i]);
    for (double& v : t.flat<double>()) v = xdist(rng);
    feeds.emplace_back(xs[i], t);
  }
  auto out = (*session)->Run(feeds, fetches);
  if (!out.ok()) return out.status();
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor analytic = (*out)[i + 1];
    Tensor x = feeds[i].second;
    for (int64_t j = 0; j < x.num_elements(); ++j) {
      const double orig = x.data<double>()[j];
      x.data<double>()[j] = orig + options.delta;
      auto plus = (*session)->Run(feeds, {loss});
      x.data<double>()[j] = orig - options.delta;
      auto minus = (*session)->Run(feeds, {loss});
      x.data<double>()[j] = orig;
      if (!plus.ok()) return plus.status();
      if (!minus.ok()) return minus.status();
      const double numeric =
          ((*plus)[0].scalar<double>() - (*minus)[0].scalar<double>()) / (2 * options.delta);
      const double a = analytic.data<double>()[j];
      const double err = std::abs(a - numeric) / std::max(1.0, std::abs(numeric));
      if (!(err <= options.tolerance)) {
        return absl::InternalError(fmt::format(
            "input {} element {}: analytic {} vs numeric {} (error {})", i, j, a, numeric, err));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace recsdk::testing
