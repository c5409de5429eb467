// kernels_launch.h: the launchers of kernels.cu, called by cuda_kernels.cc. Internal to the CUDA
// backend. Plain types only (nvcc compiles kernels.cu without Abseil or recsdk headers): a stream
// as void* (cudaStream_t), sizes already checked by the caller, and the launch's cudaError_t
// returned as an int (0 = success). Threading: as cuda_kernels.h.
#ifndef RECSDK_SRC_DEVICE_CUDA_KERNELS_LAUNCH_H_
#define RECSDK_SRC_DEVICE_CUDA_KERNELS_LAUNCH_H_

#include <cstddef>
#include <cstdint>

namespace recsdk::cuda::launch {

// Op codes shared with cuda_kernels.h's enums (same values, checked there by static_assert).
inline constexpr int kBinaryAdd = 0, kBinarySub = 1, kBinaryMul = 2;
inline constexpr int kUnaryRelu = 0, kUnarySigmoid = 1, kUnaryTanh = 2, kUnaryNeg = 3;
inline constexpr int kOptSgd = 0, kOptAdagrad = 1, kOptLazyAdam = 2, kOptFtrl = 3;
// Table lookups: how TableGather combines a sample's rows (kCombineNone: unpooled), and the row
// ids of EmbeddingTable::kPaddingRow / kDefaultRow (checked in cuda_kernels.cc).
inline constexpr int kCombineNone = -1, kCombineSum = 0, kCombineMean = 1, kCombineSqrtn = 2;
inline constexpr uint32_t kPaddingRowId = 0xFFFFFFFFu, kDefaultRowId = 0xFFFFFFFEu;

// OptimizerParams: a sparse optimizer step in plain floats (cuda_kernels.cc fills it from a
// SparseOptimizerConfig and the step, lr_t as RowUpdater computes it).
struct OptimizerParams {
  int kind = kOptSgd;
  float learning_rate = 0.0f;
  float weight_decay = 0.0f;
  float adagrad_epsilon = 0.0f;
  float beta1 = 0.0f;
  float beta2 = 0.0f;
  float epsilon = 0.0f;
  float lr_t = 0.0f;
  const float* lr_t_at = nullptr;  // when set: lr_t in device memory (AdamRate's output)
  float learning_rate_power = 0.0f;
  float l1 = 0.0f;
  float l2 = 0.0f;
  float l2_shrinkage = 0.0f;
};

int Binary(void* stream, int op, const float* x, const float* y, float* out, int64_t n);
int Fill(void* stream, float value, float* out, int64_t n);
int Broadcast(void* stream, const float* dy, int64_t outer, int64_t axis, int64_t inner,
              float scale, float* out);
int BiasAdd(void* stream, const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
            bool relu);
int Unary(void* stream, int op, const float* x, float* out, int64_t n);
int UnaryGrad(void* stream, int op, const float* ref, const float* dy, float* dx, int64_t n);
int Reduce(void* stream, bool mean, const float* x, int64_t outer, int64_t axis, int64_t inner,
           float* out);
int DotInteraction(void* stream, const float* x, int64_t batch, int64_t f, int64_t d, float* out);
int DotInteractionGrad(void* stream, const float* x, const float* dy, int64_t batch, int64_t f,
                       int64_t d, float* dx);
int SigmoidCe(void* stream, const float* labels, const float* logits, float* loss, int64_t n);
int SigmoidCeGrad(void* stream, const float* labels, const float* logits, const float* dloss,
                  float* dlogits, int64_t n);
int GatherRows(void* stream, const float* table, int64_t num_rows, int64_t stride, int64_t dim,
               const int64_t* ids, int64_t n, float* out, int32_t* invalid_ids);
int ScatterRows(void* stream, const float* in, int64_t n, int64_t width, const int64_t* rows,
                float* table, int64_t stride);
int TableGather(void* stream, const float* table, int64_t num_rows, int64_t stride, int64_t dim,
                const int32_t* unique_rows, int64_t num_unique, const int32_t* restore,
                int64_t batch, int64_t per, int combine, float default_value, int64_t out_stride,
                float* out, int32_t* invalid);
int PaddingMask(void* stream, const int32_t* unique_rows, int64_t num_unique,
                const int32_t* restore, int64_t n, float* mask, int32_t* invalid);
int RowIds(void* stream, const int32_t* rows, int64_t n, int64_t num_rows, int64_t* out,
           int32_t* invalid);
int SegmentSum(void* stream, const float* grads, int64_t dim, const int32_t* offsets,
               const int32_t* positions, int64_t num_segments, float* out);
// TableGradAggregate's passes (cuda_kernels.cc's TableGradAggregate runs them in this order):
// GradKeys per feature (positions base.. of the concatenated lookup), SortKeys (a stable radix
// sort of the keys' low end_bit bits, carrying the positions; SortKeysTempBytes its scratch),
// SegmentStarts (offsets[0..num_unique] of the sorted keys), GradSum (the sums).
int GradKeys(void* stream, const int32_t* unique_rows, int64_t num_unique, const int32_t* restore,
             int64_t batch, int64_t per, int combine, const float* grads, int64_t dim, int64_t base,
             uint32_t* keys, int32_t* order, const float** src, float* scale, int32_t* invalid);
int SortKeysTempBytes(int64_t n, int end_bit, size_t* bytes);
int SortKeys(void* stream, void* temp, size_t temp_bytes, const uint32_t* keys_in,
             uint32_t* keys_out, const int32_t* order_in, int32_t* order_out, int64_t n,
             int end_bit);
int SegmentStarts(void* stream, const uint32_t* sorted_keys, int64_t n, int64_t num_unique,
                  int32_t* offsets);
int GradSum(void* stream, const int32_t* order, const float* const* src, const float* scale,
            bool scaled, const int32_t* offsets, int64_t num_unique, int64_t dim, float* out);
// TableApply's merge of several lookups' rows (cuda_kernels.cc's MergeRowGrads): MergeKeys per
// lookup, SortKeys, MergeSum.
int MergeKeys(void* stream, const int32_t* rows, int64_t count, int64_t num_rows,
              const float* grads, int64_t dim, int64_t base, uint32_t* keys, int32_t* order,
              const float** src, int32_t* invalid);
int MergeSum(void* stream, const uint32_t* sorted_keys, const int32_t* order,
             const float* const* src, int64_t n, int64_t num_rows, int64_t dim, float* out,
             int64_t* ids);
int AdamRate(void* stream, const int64_t* step, float lr, float b1, float b2, float* out);
int SparseApply(void* stream, const OptimizerParams& params, float* table, int64_t stride,
                int64_t dim, const int64_t* rows, const float* grads, int64_t count);
int DenseSgd(void* stream, float* w, const float* g, int64_t n, float lr);
int DenseAdagrad(void* stream, float* w, float* acc, const float* g, int64_t n, float lr,
                 float eps);
// DenseAdam: the constants as AdamParams (src/device/cpu/dense_update_kernels.h) holds them.
int DenseAdam(void* stream, float* w, float* m, float* v, const float* g, int64_t n, float b1,
              float b2, float c1, float c2, float eps, float lr_t, float decay, bool weight_decay);
int Transpose2D(void* stream, const float* x, int64_t rows, int64_t cols, float* out);
int CopyKernel(void* stream, const void* in, void* out, int64_t bytes);

}  // namespace recsdk::cuda::launch

#endif  // RECSDK_SRC_DEVICE_CUDA_KERNELS_LAUNCH_H_
