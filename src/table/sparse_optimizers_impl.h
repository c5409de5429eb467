// sparse_optimizers_impl.h: the per-row kernels of the sparse optimizers (internal).
// A RowUpdater is immutable after construction; Apply may run on many rows from many threads.
#ifndef RECSDK_TABLE_SPARSE_OPTIMIZERS_IMPL_H_
#define RECSDK_TABLE_SPARSE_OPTIMIZERS_IMPL_H_

#include <cstdint>

#include "recsdk/sparse_optimizers.h"

namespace recsdk::internal {

// InitSlots: the initial optimizer slots of a new row (num_slots floats).
void InitSlots(const SparseOptimizerConfig& config, int dim, float* slots);

// RowUpdater: one optimizer step for rows laid out as [embedding dim | slots].
class RowUpdater {
 public:
  RowUpdater(const SparseOptimizerConfig& config, int dim, int64_t step);
  // Apply: updates `row` in place with the summed gradient `g` (dim floats).
  void Apply(float* row, const float* g) const;
  // adam_lr_t: LazyAdam's bias-corrected learning rate for this step (0 for other kinds).
  float adam_lr_t() const { return adam_lr_t_; }

 private:
  const SparseOptimizerConfig& config_;
  int dim_;
  float adam_lr_t_ = 0.0f;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_SPARSE_OPTIMIZERS_IMPL_H_
