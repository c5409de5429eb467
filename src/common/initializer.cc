// initializer.cc: the value side of Initializer (factories, validation, naming). Building the
// graph nodes lives in src/graph/initializers.cc; tables use only this part.
#include <cmath>

#include "fmt/format.h"
#include "recsdk/initializers.h"

namespace recsdk {

Initializer Initializer::Constant(double value) {
  Initializer i;
  i.kind = Kind::kConstant;
  i.value = value;
  return i;
}

Initializer Initializer::Uniform(double min, double max, int64_t seed) {
  Initializer i;
  i.kind = Kind::kUniform;
  i.min = min;
  i.max = max;
  i.seed = seed;
  return i;
}

Initializer Initializer::Normal(double mean, double stddev, int64_t seed) {
  Initializer i;
  i.kind = Kind::kNormal;
  i.mean = mean;
  i.stddev = stddev;
  i.seed = seed;
  return i;
}

Initializer Initializer::TruncatedNormal(double mean, double stddev, int64_t seed) {
  Initializer i = Normal(mean, stddev, seed);
  i.kind = Kind::kTruncatedNormal;
  return i;
}

Initializer Initializer::GlorotUniform(int64_t seed) {
  Initializer i;
  i.kind = Kind::kGlorotUniform;
  i.seed = seed;
  return i;
}

Initializer Initializer::GlorotNormal(int64_t seed) {
  Initializer i;
  i.kind = Kind::kGlorotNormal;
  i.seed = seed;
  return i;
}

Status Initializer::Validate() const {
  for (double v : {value, min, max, mean, stddev}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError("initializer " + ToString() +
                                        ": parameters must be finite numbers");
    }
  }
  if (kind == Kind::kUniform && min > max) {
    return absl::InvalidArgumentError(
        fmt::format("initializer {}: min {} is above max {}; swap them", ToString(), min, max));
  }
  if ((kind == Kind::kNormal || kind == Kind::kTruncatedNormal) && stddev < 0) {
    return absl::InvalidArgumentError(
        fmt::format("initializer {}: stddev {} is negative; use a value >= 0", ToString(), stddev));
  }
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) > 5) {
    return absl::InvalidArgumentError(
        fmt::format("initializer kind {} is unknown", static_cast<int>(kind)));
  }
  return absl::OkStatus();
}

std::string Initializer::ToString() const {
  switch (kind) {
    case Kind::kConstant:
      return fmt::format("constant(value={})", value);
    case Kind::kUniform:
      return fmt::format("uniform(min={}, max={}, seed={})", min, max, seed);
    case Kind::kNormal:
      return fmt::format("normal(mean={}, stddev={}, seed={})", mean, stddev, seed);
    case Kind::kTruncatedNormal:
      return fmt::format("truncated_normal(mean={}, stddev={}, seed={})", mean, stddev, seed);
    case Kind::kGlorotUniform:
      return fmt::format("glorot_uniform(seed={})", seed);
    case Kind::kGlorotNormal:
      return fmt::format("glorot_normal(seed={})", seed);
  }
  return "unknown";
}

}  // namespace recsdk
