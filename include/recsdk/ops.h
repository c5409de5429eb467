// recsdk/ops.h: builders for the core ops.
//
// Each builder adds one node (or a few) to the scope's graph and returns its output(s). Shapes
// are checked at build time; on an error the builder records it in the graph and returns an
// invalid Output, and every later builder is a no-op (check Scope::status() once at the end).
// Binary arithmetic and comparison ops broadcast like NumPy. Axis arguments may be negative.
#ifndef RECSDK_OPS_H_
#define RECSDK_OPS_H_

#include <cstdint>
#include <vector>

#include "recsdk/graph.h"
#include "recsdk/scope.h"

namespace recsdk::ops {

// --- Sources, state and control ------------------------------------------------------------

// Placeholder: a value fed to Session::Run. Dimensions may be Shape::kUnknownDim.
Output Placeholder(const Scope& scope, DType dtype, const Shape& shape);
// Const: a constant tensor.
Output Const(const Scope& scope, const Tensor& value);
Output Const(const Scope& scope, float value);
Output Const(const Scope& scope, double value);
Output Const(const Scope& scope, int32_t value);
Output Const(const Scope& scope, int64_t value);
// ScalarLike: a scalar constant of x's dtype (float32, float64 or an integer type).
Output ScalarLike(const Scope& scope, Output x, double value);
// Identity: x itself (a new node; its gradient passes through).
Output Identity(const Scope& scope, Output x);
// StopGradient: identity whose gradient is zero.
Output StopGradient(const Scope& scope, Output x);
// NoOp: does nothing; with control dependencies it groups them into one target.
Node* NoOp(const Scope& scope);
// Group: a NoOp that runs after every node in `nodes`.
Node* Group(const Scope& scope, const std::vector<Node*>& nodes);

// --- Linear algebra --------------------------------------------------------------------------

// MatMulOptions: the options of MatMul.
struct MatMulOptions {
  // transpose_a, transpose_b: multiply by the transpose of that operand. Default false.
  bool transpose_a = false;
  bool transpose_b = false;
};
// MatMul: [m,k] x [k,n] -> [m,n] (after optional transposes).
Output MatMul(const Scope& scope, Output a, Output b, MatMulOptions options = {});
// BatchMatMulOptions: the options of BatchMatMul.
struct BatchMatMulOptions {
  bool adj_x = false;  // transpose the last two dims of x
  // adj_y: transpose the last two dims of y.
  bool adj_y = false;
};
// BatchMatMul: [..., m, k] x [..., k, n] -> [..., m, n]; leading dims equal.
Output BatchMatMul(const Scope& scope, Output x, Output y, BatchMatMulOptions options = {});
// BiasAdd: adds a [c] bias along the last dimension of x.
Output BiasAdd(const Scope& scope, Output x, Output bias);

// --- Elementwise -------------------------------------------------------------------------

// Add, Sub, Mul, Div, Maximum, Minimum, Pow: x + y, x - y, x * y, x / y, max(x, y), min(x, y),
// x ^ y, elementwise with broadcasting; x and y of one dtype.
Output Add(const Scope& scope, Output x, Output y);
Output Sub(const Scope& scope, Output x, Output y);
Output Mul(const Scope& scope, Output x, Output y);
Output Div(const Scope& scope, Output x, Output y);
Output Maximum(const Scope& scope, Output x, Output y);
Output Minimum(const Scope& scope, Output x, Output y);
Output Pow(const Scope& scope, Output x, Output y);
// AddN: the sum of tensors of one shape.
Output AddN(const Scope& scope, const std::vector<Output>& inputs);

// Neg, Square, Sqrt, Rsqrt, Exp, Log, Abs, Relu, Sigmoid, Tanh: -x, x^2, sqrt(x), 1/sqrt(x), e^x,
// ln(x), |x|, max(x, 0), 1/(1+e^-x), tanh(x), elementwise. LeakyRelu: x for x > 0, alpha * x
// otherwise.
Output Neg(const Scope& scope, Output x);
Output Square(const Scope& scope, Output x);
Output Sqrt(const Scope& scope, Output x);
Output Rsqrt(const Scope& scope, Output x);
Output Exp(const Scope& scope, Output x);
Output Log(const Scope& scope, Output x);
Output Abs(const Scope& scope, Output x);
Output Relu(const Scope& scope, Output x);
Output LeakyRelu(const Scope& scope, Output x, float alpha = 0.2f);
Output Sigmoid(const Scope& scope, Output x);
Output Tanh(const Scope& scope, Output x);
// Gelu: x * Phi(x); with approximate=true the tanh form 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))).
Output Gelu(const Scope& scope, Output x, bool approximate = false);

// Less, LessEqual, Greater, GreaterEqual, Equal: elementwise comparisons, with broadcasting,
// producing bool tensors. FloorMod: x mod y as Python computes it: the result has the divisor's
// sign.
Output Less(const Scope& scope, Output x, Output y);
Output LessEqual(const Scope& scope, Output x, Output y);
Output Greater(const Scope& scope, Output x, Output y);
Output GreaterEqual(const Scope& scope, Output x, Output y);
Output Equal(const Scope& scope, Output x, Output y);
Output FloorMod(const Scope& scope, Output x, Output y);
// Where: condition ? x : y, elementwise, with broadcasting of all three.
Output Where(const Scope& scope, Output condition, Output x, Output y);

// Cast: x converted to `dtype`. ZerosLike, OnesLike: zeros (ones) of x's dtype and shape.
Output Cast(const Scope& scope, Output x, DType dtype);
Output ZerosLike(const Scope& scope, Output x);
Output OnesLike(const Scope& scope, Output x);
// Fill: a tensor of a fully defined shape holding `value` (a scalar).
Output Fill(const Scope& scope, const Shape& shape, Output value);

// --- Neural-network ops --------------------------------------------------------------------

// Softmax, LogSoftmax: softmax (its logarithm) of `logits` along `axis` (default the last).
Output Softmax(const Scope& scope, Output logits, int axis = -1);
Output LogSoftmax(const Scope& scope, Output logits, int axis = -1);
// Dropout: zeroes each element with probability `rate` and scales the rest by 1/(1-rate).
// Seeded: the same graph seed and op seed give the same masks, step by step.
Output Dropout(const Scope& scope, Output x, float rate, int64_t seed = 0);
// SigmoidCrossEntropyWithLogits: elementwise, numerically stable; labels in [0,1].
Output SigmoidCrossEntropyWithLogits(const Scope& scope, Output labels, Output logits);
// SoftmaxCrossEntropyWithLogits: over the last axis; returns one loss per row ([..., n] -> [...]).
Output SoftmaxCrossEntropyWithLogits(const Scope& scope, Output labels, Output logits);
// DotInteraction: DLRM's dot interaction. `features` [B, F, D] (F known; any batch size) ->
// [B, F(F-1)/2]: for each sample the dot products of every pair of its F vectors below the
// diagonal, in the order (1,0), (2,0), (2,1), (3,0), ... One fused op with its own gradient
// kernel (instead of Concat, BatchMatMul, Reshape and a Gather). Cost O(B F^2 D).
Output DotInteraction(const Scope& scope, Output features);

// --- Shapes and indexing -----------------------------------------------------------------

// Concat: `values` joined along `axis`; the other dimensions must agree.
Output Concat(const Scope& scope, const std::vector<Output>& values, int axis);
// Split into `num_split` equal parts along axis.
std::vector<Output> Split(const Scope& scope, Output value, int num_split, int axis);
// SplitV: parts of the given sizes (one may be -1: the rest).
std::vector<Output> SplitV(const Scope& scope, Output value, const std::vector<int64_t>& sizes,
                           int axis);
// Slice: `size[i] == -1` takes everything from begin[i] on.
Output Slice(const Scope& scope, Output x, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& size);
// Reshape: one dimension may be -1 (inferred).
Output Reshape(const Scope& scope, Output x, const std::vector<int64_t>& shape);
// Transpose: x's dimensions permuted: output dimension i is input dimension perm[i].
Output Transpose(const Scope& scope, Output x, const std::vector<int64_t>& perm);
// ExpandDims: x with a size-1 dimension inserted at `axis`.
Output ExpandDims(const Scope& scope, Output x, int axis);
// Squeeze: removes the listed size-1 axes, or every size-1 axis when `axes` is empty.
Output Squeeze(const Scope& scope, Output x, const std::vector<int64_t>& axes = {});
// Tile: x repeated multiples[i] times along dimension i.
Output Tile(const Scope& scope, Output x, const std::vector<int64_t>& multiples);
// Gather: params[indices] along `axis` (default 0; negative counts from the end): the output is
// params.shape[:axis] + indices.shape + params.shape[axis+1:]. int32 or int64 indices; out of
// range is an error at run time naming the op, the index and the bound.
Output Gather(const Scope& scope, Output params, Output indices, int axis = 0);

// ReduceOptions: the options of the reductions.
struct ReduceOptions {
  // keep_dims: keep each reduced axis as size 1. Default false: reduced axes are removed.
  bool keep_dims = false;
};
// ReduceSum, ReduceMean, ReduceMax: the sum, mean, max over `axes` (all axes when empty).
Output ReduceSum(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                 ReduceOptions options = {});
Output ReduceMean(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                  ReduceOptions options = {});
Output ReduceMax(const Scope& scope, Output x, const std::vector<int64_t>& axes = {},
                 ReduceOptions options = {});

// --- Random ------------------------------------------------------------------------------

// RandomUniform, RandomNormal: random tensors of a fully defined shape, uniform in [min, max) or
// normal (mean, stddev). A seed of 0 derives one from the graph seed and the op's name; results
// are reproducible and independent of the thread count.
Output RandomUniform(const Scope& scope, const Shape& shape, DType dtype, double min, double max,
                     int64_t seed = 0);
Output RandomNormal(const Scope& scope, const Shape& shape, DType dtype, double mean, double stddev,
                    int64_t seed = 0);
// TruncatedNormal: normal values redrawn until within two standard deviations of the mean.
Output TruncatedNormal(const Scope& scope, const Shape& shape, DType dtype, double mean,
                       double stddev, int64_t seed = 0);

}  // namespace recsdk::ops

#endif  // RECSDK_OPS_H_
