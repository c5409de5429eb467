// shape.cc
#include "recsdk/shape.h"

namespace recsdk {

bool Shape::IsFullyDefined() const {
  for (int64_t d : dims_) {
    if (d < 0) return false;
  }
  return true;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (d < 0) return kUnknownDim;
    n *= d;
  }
  return n;
}

bool Shape::IsCompatibleWith(const Shape& other) const {
  if (rank() != other.rank()) return false;
  for (int i = 0; i < rank(); ++i) {
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) s += ',';
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  s += ']';
  return s;
}

}  // namespace recsdk
