// recsdk/initializers.h: how variables (and, later, embedding rows) get their first values.
//
// An Initializer is a small value describing a distribution and a seed. Seeds make results
// reproducible: a seed of 0 derives one from the graph seed and the variable's name. It is plain
// data: a table (table.h) draws its rows from it without any graph, so this header names the
// graph's Scope and Output only by declaration (Build's callers have a Scope, hence scope.h).
#ifndef RECSDK_INITIALIZERS_H_
#define RECSDK_INITIALIZERS_H_

#include <cstdint>
#include <string>

#include "recsdk/dtype.h"
#include "recsdk/shape.h"
#include "recsdk/status.h"

namespace recsdk {

class Scope;    // recsdk/scope.h
struct Output;  // recsdk/graph.h

struct Initializer {
  // Pinned: the kind is recorded in checkpoints of tables.
  enum class Kind : int32_t {
    kConstant = 0,
    kUniform = 1,
    kNormal = 2,
    kTruncatedNormal = 3,
    kGlorotUniform = 4,  // a.k.a. xavier_uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out))
    kGlorotNormal = 5,   // a.k.a. xavier_normal: truncated N(0, sqrt(2 / (fan_in + fan_out)))
  };

  // kind: the distribution. Default kGlorotUniform. The fields below are its parameters.
  Kind kind = Kind::kGlorotUniform;
  double value = 0;      // kConstant
  double min = -0.05;    // kUniform
  double max = 0.05;     // kUniform
  double mean = 0;       // kNormal, kTruncatedNormal
  double stddev = 0.05;  // kNormal, kTruncatedNormal
  // seed: 0 derives one from the graph seed and the variable's name (file comment).
  int64_t seed = 0;

  // Constant, Zeros, Ones, Uniform, Normal, TruncatedNormal, GlorotUniform, GlorotNormal,
  // XavierUniform, XavierNormal: an initializer of that kind with those parameters (Uniform in
  // [min, max); TruncatedNormal redraws values beyond two standard deviations; Xavier* are the
  // Glorot* ones).
  static Initializer Constant(double value);
  static Initializer Zeros() { return Constant(0); }
  static Initializer Ones() { return Constant(1); }
  static Initializer Uniform(double min, double max, int64_t seed = 0);
  static Initializer Normal(double mean, double stddev, int64_t seed = 0);
  static Initializer TruncatedNormal(double mean, double stddev, int64_t seed = 0);
  static Initializer GlorotUniform(int64_t seed = 0);
  static Initializer GlorotNormal(int64_t seed = 0);
  static Initializer XavierUniform(int64_t seed = 0) { return GlorotUniform(seed); }
  static Initializer XavierNormal(int64_t seed = 0) { return GlorotNormal(seed); }

  // Validate: InvalidArgument for min > max, stddev < 0 or non-finite parameters.
  Status Validate() const;
  // ToString: the kind and its parameters, for messages.
  std::string ToString() const;

  // Build adds the nodes that produce an initial value of `shape` and `dtype` (defined in the
  // graph layer; include recsdk/scope.h to call it).
  Output Build(const Scope& scope, const Shape& shape, DType dtype) const;
};

}  // namespace recsdk

#endif  // RECSDK_INITIALIZERS_H_
