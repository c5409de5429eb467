// recsdk/shape.h: tensor shapes.
//
// A Shape has a known rank; each dimension is a size >= 0 or kUnknownDim (-1) while a graph is
// being built (e.g. the batch dimension of a placeholder). Tensors always have fully defined
// shapes. Value type, thread-compatible.
#ifndef RECSDK_SHAPE_H_
#define RECSDK_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace recsdk {

// Shape: a rank and its dimensions (see the file comment).
class Shape {
 public:
  // kUnknownDim: a dimension not known while the graph is built.
  static constexpr int64_t kUnknownDim = -1;
  // Dims: the dimensions, outermost first.
  using Dims = absl::InlinedVector<int64_t, 4>;

  Shape() = default;  // a scalar
  // Shape: of these dimensions (each >= 0 or kUnknownDim), e.g. Shape{kUnknownDim, 16}.
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}

  // rank, dim: the number of dimensions and dimension i (0 <= i < rank(), unchecked).
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  // dim_from_end(1) is the last dimension.
  int64_t dim_from_end(int i) const { return dims_[dims_.size() - i]; }
  // dims: every dimension. set_dim, AddDim, InsertDim, RemoveDim: change dimension i (or add one
  // at the end); i is not checked.
  const Dims& dims() const { return dims_; }
  void set_dim(int i, int64_t size) { dims_[i] = size; }
  void AddDim(int64_t size) { dims_.push_back(size); }
  void InsertDim(int i, int64_t size) { dims_.insert(dims_.begin() + i, size); }
  void RemoveDim(int i) { dims_.erase(dims_.begin() + i); }

  // IsScalar: rank 0. IsFullyDefined: no dimension is kUnknownDim.
  bool IsScalar() const { return dims_.empty(); }
  bool IsFullyDefined() const;
  // num_elements is the product of the dimensions, or kUnknownDim when one is unknown.
  int64_t num_elements() const;
  // IsCompatibleWith: same rank and every pair of known dimensions equal.
  bool IsCompatibleWith(const Shape& other) const;

  // ToString renders "[32,?,16]"; a scalar is "[]".
  std::string ToString() const;

  // operator==, operator!=: the same dimensions (unknown ones compare equal to unknown ones).
  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  Dims dims_;
};

}  // namespace recsdk

#endif  // RECSDK_SHAPE_H_
