// random_ops.cc: random sources. Each is stateful: a new draw per step, reproducible from the
// graph seed, the op seed (or name) and the step number.
#include <cmath>
#include <string_view>

#include "src/graph/ops/op_util.h"

namespace recsdk {
namespace internal {

void RegisterRandomOps(OpRegistry& r) {
  for (const char* type : {"RandomUniform", "RandomNormal", "TruncatedNormal"}) {
    const bool uniform = std::string_view(type) == "RandomUniform";
    // a and b are (min, max) for RandomUniform, (mean, stddev) for the normals.
    r.Register({.type = type,
                .inputs = {},
                .outputs = {"values"},
                .attrs = {RequiredAttr("shape", AttrType::kShape),
                          RequiredAttr("dtype", AttrType::kDType), Attr("a", AttrType::kFloat, 0.0),
                          Attr("b", AttrType::kFloat, 0.0), Attr("seed", AttrType::kInt, 0)},
                .shape_fn =
                    [uniform](InferenceContext& c) {
                      const Shape s = c.ShapeAttr("shape");
                      if (!s.IsFullyDefined())
                        return c.Error("shape {} must be fully defined", s.ToString());
                      const DType d = c.DTypeAttr("dtype");
                      if (d != DType::kFloat32 && d != DType::kFloat64)
                        return c.Error("dtype must be float32 or float64");
                      // The same rules as Initializer::Validate: a graph built by hand or loaded
                      // from JSON must not draw from an empty range or a negative stddev.
                      const double a = c.FloatAttr("a"), b = c.FloatAttr("b");
                      if (!std::isfinite(a) || !std::isfinite(b)) {
                        return c.Error("{} {} and {} {} must be finite numbers",
                                       uniform ? "min" : "mean", a, uniform ? "max" : "stddev", b);
                      }
                      if (uniform && a > b)
                        return c.Error("min {} is above max {}; swap them", a, b);
                      if (!uniform && b < 0)
                        return c.Error("stddev {} is negative; use a value >= 0", b);
                      c.AddOutput(d, s);
                      return absl::OkStatus();
                    },
                .no_gradient = true,
                .stateful = true});
  }
}

}  // namespace internal

namespace ops {
using internal::Out;

Output RandomUniform(const Scope& scope, const Shape& shape, DType dtype, double min, double max,
                     int64_t seed) {
  return Out(
      scope.AddNode("RandomUniform", {},
                    {{"shape", shape}, {"dtype", dtype}, {"a", min}, {"b", max}, {"seed", seed}}));
}
Output RandomNormal(const Scope& scope, const Shape& shape, DType dtype, double mean, double stddev,
                    int64_t seed) {
  return Out(scope.AddNode(
      "RandomNormal", {},
      {{"shape", shape}, {"dtype", dtype}, {"a", mean}, {"b", stddev}, {"seed", seed}}));
}
Output TruncatedNormal(const Scope& scope, const Shape& shape, DType dtype, double mean,
                       double stddev, int64_t seed) {
  return Out(scope.AddNode(
      "TruncatedNormal", {},
      {{"shape", shape}, {"dtype", dtype}, {"a", mean}, {"b", stddev}, {"seed", seed}}));
}

}  // namespace ops
}  // namespace recsdk
