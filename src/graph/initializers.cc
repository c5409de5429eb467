// initializers.cc: Initializer::Build, the graph side of initializers.
#include "recsdk/initializers.h"

#include <cmath>

#include "recsdk/ops.h"

namespace recsdk {

Output Initializer::Build(const Scope& scope, const Shape& shape, DType dtype) const {
  if (!scope.ok()) return Output();
  const DType gen = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  auto finish = [&](Output v) { return dtype == gen ? v : ops::Cast(scope, v, dtype); };
  // Fans as Keras computes them: the last dim is fan_out, the product of the others fan_in
  // (for a vector both are its length).
  double fan_in = 1, fan_out = 1;
  if (shape.rank() == 1) {
    fan_in = fan_out = static_cast<double>(shape.dim(0));
  } else if (shape.rank() >= 2) {
    fan_out = static_cast<double>(shape.dim_from_end(1));
    for (int i = 0; i + 1 < shape.rank(); ++i) fan_in *= static_cast<double>(shape.dim(i));
  }
  switch (kind) {
    case Kind::kConstant: {
      return ops::Fill(scope, shape, ops::Cast(scope, ops::Const(scope, value), dtype));
    }
    case Kind::kUniform:
      return finish(ops::RandomUniform(scope, shape, gen, min, max, seed));
    case Kind::kNormal:
      return finish(ops::RandomNormal(scope, shape, gen, mean, stddev, seed));
    case Kind::kTruncatedNormal:
      return finish(ops::TruncatedNormal(scope, shape, gen, mean, stddev, seed));
    case Kind::kGlorotUniform: {
      const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
      return finish(ops::RandomUniform(scope, shape, gen, -limit, limit, seed));
    }
    case Kind::kGlorotNormal: {
      // Keras scales the truncated normal's stddev by 1/0.8796 so the truncated variance is
      // 2/(fi+fo).
      const double stddev_t =
          std::sqrt(2.0 / std::max(1.0, fan_in + fan_out)) / 0.87962566103423978;
      return finish(ops::TruncatedNormal(scope, shape, gen, 0.0, stddev_t, seed));
    }
  }
  return Output();
}

}  // namespace recsdk
