// cuda_kernels.h: the CUDA backend's kernels for what the DLRM and little_demo samples run, in
// plain C++: device pointers (from DeviceBuffer) and sizes in, a Status out. Each call checks its
// arguments (InvalidArgument naming the argument and the rule), enqueues the work on the Stream
// and returns; results are ready after the stream's next Synchronize (or an event).
//
// Every kernel has a CPU twin it is tested against (tests/device/cuda/cuda_kernels_test.cc):
//   Gemm / GemmBatched        SgemmReference, Bf16GemmReference (src/device/cpu/*gemm.h)
//   Binary, BiasAdd, Unary,   the CPU kernels of Add/Sub/Mul, BiasAdd, Relu/Sigmoid and their
//   UnaryGrad, Reduce,        gradients, ReduceSum/ReduceMean and ReduceSumGrad, OnesLike
//   Broadcast, Fill           (src/device/cpu/math_kernels.cc, array_kernels.cc)
//   AddN, ConcatColumns,      AddN, Concat on axis 1, Transpose {1, 0} (CPU kernels in a Session)
//   Transpose2D
//   DotInteraction(Grad)      DotInteractionReference / DotInteractionGradReference
//   SigmoidCrossEntropy(Grad) SigmoidCrossEntropyWithLogits and its gradient (nn_kernels.cc)
//   GatherRows                the table's row lookup
//   SegmentSum                AggregateGradients (src/table/dedup.h)
//   TableGradAggregate        AggregateLookupGradients (src/table/dedup.h)
//   MergeRowGrads             the CPU TableApply's merge of several lookups' rows
//   SparseApply               RowUpdater::Apply (src/table/sparse_optimizers.cc)
//   DenseSgd/Adagrad/Adam     ApplyGradientDescent, DenseAdagradReference, DenseAdamReference
// The elementwise, loss and optimizer kernels are compiled without fused multiply-adds, as the
// CPU code is, so they round the same way; exp/log/pow come from CUDA's libdevice (within 2 ulp
// of the C library's), so the tests compare with tolerances.
//
// Threading: as cuda_runtime.h (one thread per Stream at a time).
#ifndef RECSDK_SRC_DEVICE_CUDA_CUDA_KERNELS_H_
#define RECSDK_SRC_DEVICE_CUDA_CUDA_KERNELS_H_

#include <cstdint>
#include <vector>

#include "recsdk/sparse_optimizers.h"
#include "recsdk/status.h"
#include "src/device/cuda/cuda_runtime.h"

namespace recsdk::cuda {

// GemmInput: the element type of a GEMM's A and B (C and the accumulation are float32).
enum class GemmInput { kFloat32, kBFloat16 };

// GemmOperand: one input of a GEMM, row-major as stored: `data` (float or bfloat16 bit patterns
// as uint16_t), its row stride `ld` (elements) and whether the product uses its transpose.
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  bool transpose = false;
};

// Gemm: row-major C[m, n] = alpha * op(A) op(B) + beta * C, op(A) [m, k], op(B) [k, n], C with
// row stride ldc, through cuBLAS (cublasGemmEx) with float32 accumulation. Float32 inputs run in
// full float32 (no TF32), like the CPU. m, n or k of 0 is allowed (k = 0 scales C by beta).
[[nodiscard]] Status Gemm(Stream& stream, GemmInput input, int64_t m, int64_t n, int64_t k,
                          const GemmOperand& a, const GemmOperand& b, float* c, int64_t ldc,
                          float alpha = 1.0f, float beta = 0.0f);

// GemmBatched: `batch` independent contiguous products (BatchMatMul): C_i = op(A_i) op(B_i) with
// A_i = A + i * m * k elements, B_i = B + i * k * n, C_i = C + i * m * n, each compact (row stride
// = columns as stored).
[[nodiscard]] Status GemmBatched(Stream& stream, GemmInput input, int64_t batch, int64_t m,
                                 int64_t n, int64_t k, const void* a, bool trans_a, const void* b,
                                 bool trans_b, float* c);

// BinaryOp: the same-shape elementwise ops.
enum class BinaryOp { kAdd, kSub, kMul };
// Binary: out[i] = x[i] op y[i] for i < n (out may alias x or y).
[[nodiscard]] Status Binary(Stream& stream, BinaryOp op, const float* x, const float* y, float* out,
                            int64_t n);

// AddN: out = ((x0 + x1) + x2) + ... for the n-element inputs, summed left to right as the CPU's
// AddN (the same bits). At least one input; out may alias the first.
[[nodiscard]] Status AddN(Stream& stream, const std::vector<const float*>& inputs, float* out,
                          int64_t n);

// ConcatInput: one input of ConcatColumns: a [rows, cols] matrix, row-major and compact.
struct ConcatInput {
  const float* data = nullptr;
  int64_t cols = 0;
};
// ConcatColumns: out [rows, sum of cols] = the inputs side by side (Concat on axis 1 of 2-D
// tensors, what DLRM joins the dense vector and the interaction with). Strided copies on the
// copy engine, no kernel.
[[nodiscard]] Status ConcatColumns(Stream& stream, const std::vector<ConcatInput>& inputs,
                                   int64_t rows, float* out);

// Transpose2D: out [cols, rows] = x [rows, cols] transposed (Transpose with perm {1, 0}).
[[nodiscard]] Status Transpose2D(Stream& stream, const float* x, int64_t rows, int64_t cols,
                                 float* out);

// Fill: out[i] = value for i < n (OnesLike, ZerosLike).
[[nodiscard]] Status Fill(Stream& stream, float value, float* out, int64_t n);
// Broadcast: out viewed as [outer, axis, inner] (contiguous); out[o, a, i] = dy[o, i] * scale:
// the gradient of Reduce (ReduceSumGrad: scale 1 for a sum, 1 / axis for a mean), the same bits
// as the CPU's.
[[nodiscard]] Status Broadcast(Stream& stream, const float* dy, int64_t outer, int64_t axis,
                               int64_t inner, float scale, float* out);

// Activation: what BiasAdd applies after the add (the fused Dense epilogue).
enum class Activation { kNone, kRelu };
// BiasAdd: out[r, j] = act(x[r, j] + bias[j]) for x [rows, cols] (out may alias x).
[[nodiscard]] Status BiasAdd(Stream& stream, const float* x, const float* bias, float* out,
                             int64_t rows, int64_t cols, Activation activation = Activation::kNone);

// UnaryOp: the elementwise activations.
enum class UnaryOp { kRelu, kSigmoid, kTanh, kNeg };
// Unary: out[i] = op(x[i]); Relu keeps NaN, Sigmoid is the CPU's two-branch stable form.
[[nodiscard]] Status Unary(Stream& stream, UnaryOp op, const float* x, float* out, int64_t n);
// UnaryGrad: the gradient ops: kRelu -> ReluGrad(x, dy) (dy where x > 0, NaN kept), kSigmoid ->
// SigmoidGrad(y, dy) = dy * y * (1 - y), kTanh -> TanhGrad(y, dy) = dy * (1 - y * y), kNeg -> -dy.
// `ref` is x for Relu and the forward output y for Sigmoid and Tanh.
[[nodiscard]] Status UnaryGrad(Stream& stream, UnaryOp op, const float* ref, const float* dy,
                               float* dx, int64_t n);

// ReduceKind: what Reduce computes over the reduced axis.
enum class ReduceKind { kSum, kMean };
// Reduce: x viewed as [outer, axis, inner] (contiguous); out[o, i] = sum (or mean) over a of
// x[o, a, i]. A full reduction is outer = inner = 1; BiasAddGrad's column sums are outer = 1,
// axis = rows, inner = cols. Deterministic (a fixed summation order, the same on every run).
// axis = 0 gives 0 for a sum and a mean alike, as the CPU does.
[[nodiscard]] Status Reduce(Stream& stream, ReduceKind kind, const float* x, int64_t outer,
                            int64_t axis, int64_t inner, float* out);

// DotInteraction: out[b, p] = <x[b, i, :], x[b, j, :]> for the pairs p = (i, j), i > j, in the
// order (1,0), (2,0), (2,1), ...; x [batch, f, d], out [batch, f(f-1)/2].
[[nodiscard]] Status DotInteraction(Stream& stream, const float* x, int64_t batch, int64_t f,
                                    int64_t d, float* out);
// DotInteractionGrad: dx[b, i, :] = sum over the pairs p holding i of dy[b, p] * x[b, other, :].
[[nodiscard]] Status DotInteractionGrad(Stream& stream, const float* x, const float* dy,
                                        int64_t batch, int64_t f, int64_t d, float* dx);

// SigmoidCrossEntropy: loss[i] = max(x, 0) - x * z + log1p(exp(-|x|)) for logits x, labels z.
[[nodiscard]] Status SigmoidCrossEntropy(Stream& stream, const float* labels, const float* logits,
                                         float* loss, int64_t n);
// SigmoidCrossEntropyGrad: dlogits[i] = dloss[i] * (sigmoid(x[i]) - z[i]) (the graph's gradient).
[[nodiscard]] Status SigmoidCrossEntropyGrad(Stream& stream, const float* labels,
                                             const float* logits, const float* dloss,
                                             float* dlogits, int64_t n);

// RowTable: rows of a table in device memory, laid out as the host table's: row r starts at
// data + r * stride and holds [dim embedding values | optimizer slots].
struct RowTable {
  float* data = nullptr;
  int64_t num_rows = 0;
  int64_t stride = 0;
  int64_t dim = 0;
};

// GatherRows: out[i, :] = table row ids[i] (its first dim values) for i < n; out is [n, dim].
// An id outside [0, num_rows) writes a row of zeros and adds 1 to *invalid_ids when that device
// counter is given (the lookup cannot stop; the caller reads the counter and fails the step).
[[nodiscard]] Status GatherRows(Stream& stream, const RowTable& table, const int64_t* ids,
                                int64_t n, float* out, int32_t* invalid_ids = nullptr);

// TableCombine: how TableGather combines a sample's rows: kNone is the unpooled lookup (one row
// per position), the others are Combiner's sum, mean and sqrtn.
enum class TableCombine { kNone = -1, kSum = 0, kMean = 1, kSqrtn = 2 };
// TableLookup: a dedup'ed lookup in device memory: unique_rows [num_unique] (row ids as uint32
// in int32 storage, EmbeddingTable::kPaddingRow / kDefaultRow allowed) and restore
// [batch * per] (indices into unique_rows), what the key stage gives TableGather.
struct TableLookup {
  const int32_t* unique_rows = nullptr;
  int64_t num_unique = 0;
  const int32_t* restore = nullptr;
  int64_t batch = 0;
  int64_t per = 0;
};
// TableGather: the table ops' gather from a table's rows in device memory, the same bits as the
// CPU's: kNone writes out[(b * per + j) * out_stride + d] = the row's embedding (sentinels: 0 for
// padding, default_value for default), as GatherRestored; a combiner writes out[b * out_stride
// + d] = PooledGatherRows's value (padding rows count for nothing, default rows as
// default_value, the sum in j order, then the mean's or sqrtn's scale), as GatherPooledStrided.
// out_stride >= table.dim (a [batch, width] concat output at the table's column offset). A
// restore index or row out of range writes 0 and adds 1 per position to *invalid (a device
// counter, required): the caller reads it and fails the op, as the CPU checks up front.
[[nodiscard]] Status TableGather(Stream& stream, const RowTable& table, const TableLookup& lookup,
                                 TableCombine combine, float default_value, int64_t out_stride,
                                 float* out, int32_t* invalid);
// TablePaddingMask: mask[i] = 0 where restore position i holds a padding row, else 1
// (EmbeddingTable::PaddingMask); an index out of range adds to *invalid.
[[nodiscard]] Status TablePaddingMask(Stream& stream, const TableLookup& lookup, float* mask,
                                      int32_t* invalid);
// TableRowIds: out[i] = rows[i] as int64 for SparseApply, -1 for the sentinels (which never
// train: SparseApply skips rows < 0); a row >= num_rows below the sentinels becomes -1 and adds 1
// to *invalid.
[[nodiscard]] Status TableRowIds(Stream& stream, const int32_t* rows, int64_t n, int64_t num_rows,
                                 int64_t* out, int32_t* invalid);

// SegmentCsr: positions grouped by segment, what SegmentSum sums in a fixed order. Built on the
// host by the key stage (BuildSegmentCsr), next to DedupKeys' restore index.
struct SegmentCsr {
  std::vector<int32_t> offsets;    // num_segments + 1 entries; segment u is [offsets[u], [u+1])
  std::vector<int32_t> positions;  // the positions of segment u in increasing order
};
// BuildSegmentCsr: the CSR of a restore index (restore_index[i] = the segment of position i).
// InvalidArgument when an entry is num_segments or more.
StatusOr<SegmentCsr> BuildSegmentCsr(const std::vector<uint32_t>& restore_index,
                                     int64_t num_segments);
// SegmentSum: out[u, :] = sum of grads[p, :] over the positions p of segment u, summed in
// increasing p (the order AggregateGradients sums in, so the results are the CPU's bits).
// grads is [n, dim]; offsets (num_segments + 1) and positions (n) are the device copies of a
// SegmentCsr. out is [num_segments, dim] and is overwritten.
[[nodiscard]] Status SegmentSum(Stream& stream, const float* grads, int64_t n, int64_t dim,
                                const int32_t* offsets, const int32_t* positions,
                                int64_t num_segments, float* out);

// GradFeature: one feature of a lookup in device memory, for TableGradAggregate: its restore
// index [batch * per] into the lookup's unique rows and its embedding's gradient, [batch, dim]
// when pooled, [batch * per, dim] when not.
struct GradFeature {
  const int32_t* restore = nullptr;
  int64_t batch = 0;
  int64_t per = 0;
  const float* grads = nullptr;
};
// TableGradAggregateScratchBytes: the device scratch TableGradAggregate needs for `positions`
// restore positions (all features together) and num_unique unique rows. InvalidArgument when
// either is 2^31 - 1 or more (the sort's index type).
[[nodiscard]] StatusOr<int64_t> TableGradAggregateScratchBytes(int64_t positions,
                                                               int64_t num_unique);
// TableGradAggregate: the TableGradAggregate op on the GPU, AggregateLookupGradients' bits:
// out[u, :] (num_unique x dim, overwritten) = 0 + every contribution to unique row u in (feature,
// sample, position) order: a position's key is its restore index (a pooled padding row's
// positions count for nothing), a stable radix sort of the keys (cub) groups each row's positions
// in increasing order, and one thread per (row, column) adds them (times the sample's mean or
// sqrtn scale). No atomics on floats, no host wait. A restore index outside the unique rows adds
// 1 to *invalid (a device counter, required) and contributes nothing. scratch: at least
// TableGradAggregateScratchBytes bytes of device memory, 256-byte aligned.
[[nodiscard]] Status TableGradAggregate(Stream& stream, const int32_t* unique_rows,
                                        int64_t num_unique,
                                        const std::vector<GradFeature>& features,
                                        TableCombine combine, int64_t dim, void* scratch,
                                        int64_t scratch_bytes, float* out, int32_t* invalid);

// RowGrads: one lookup's rows of a table (uint32 in int32 storage, sentinels allowed) and their
// summed gradients [count, dim], in device memory, for MergeRowGrads.
struct RowGrads {
  const int32_t* rows = nullptr;
  int64_t count = 0;
  const float* grads = nullptr;
};
// MergeRowGradsScratchBytes: the device scratch MergeRowGrads needs for n rows in all and a table
// of num_rows rows; InvalidArgument when n or num_rows is 2^31 - 1 or more.
[[nodiscard]] StatusOr<int64_t> MergeRowGradsScratchBytes(int64_t n, int64_t num_rows);
// MergeRowGrads: TableApply's merge of several lookups of one table, on the GPU: each real row
// once, its gradients summed from 0 in (lookup, position) order (a stable sort by row, then the
// first position of each row's run sums the run), as the CPU kernel merges them. Writes ids[i]
// (n entries: a row, or -1 for a repeat, a sentinel or a row >= num_rows, which SparseApply skips)
// and out[i, :] for each i with ids[i] >= 0: SparseApply(..., ids, out, n) applies them. A row
// >= num_rows below the sentinels adds 1 to *invalid (a device counter, required).
[[nodiscard]] Status MergeRowGrads(Stream& stream, const std::vector<RowGrads>& parts,
                                   int64_t num_rows, int64_t dim, void* scratch,
                                   int64_t scratch_bytes, float* out, int64_t* ids,
                                   int32_t* invalid);

// SparseApply: one step of a sparse optimizer on the rows rows[u] of `table` with the summed
// gradients grads[u, :] (u < count, each row at most once; a row < 0 is skipped), the same formulas
// as the CPU's RowUpdater (weight decay coupled into the gradient, Adagrad's eps outside the sqrt,
// LazyAdam's bias-corrected rate for `step`, FTRL's sqrt when learning_rate_power is -0.5). The
// table's stride must hold dim * (1 + config.SlotsPerDim()) floats. InvalidArgument for a config
// that Validate() rejects or a table too narrow for its slots.
// device_lr_t: LazyAdam's rate in device memory (AdamRate's output) instead of the one computed
// on the host for `step` (then unused), so the step need not come down.
[[nodiscard]] Status SparseApply(Stream& stream, const SparseOptimizerConfig& config, int64_t step,
                                 const RowTable& table, const int64_t* rows, const float* grads,
                                 int64_t count, const float* device_lr_t = nullptr);
// AdamRate: *out = LazyAdam's bias-corrected rate (RowUpdater::adam_lr_t) for the step
// *device_step + 1 (TableApply's), computed on the device in double as the CPU does: pow is within
// 2 ulp of the C library's, so the float rate is the CPU's unless the double lands within 2 ulp
// of a float rounding boundary (tolerance: 1 float ulp). InvalidArgument unless config is LazyAdam.
[[nodiscard]] Status AdamRate(Stream& stream, const SparseOptimizerConfig& config,
                              const int64_t* device_step, float* out);

// DenseSgd: w[i] -= lr * g[i] (ApplyGradientDescent's loop).
[[nodiscard]] Status DenseSgd(Stream& stream, float* w, const float* g, int64_t n, float lr);
// DenseAdagrad: acc += g g; w -= (lr g) / (sqrt(acc) + eps) (DenseAdagradReference).
[[nodiscard]] Status DenseAdagrad(Stream& stream, float* w, float* acc, const float* g, int64_t n,
                                  float lr, float eps);
// DenseAdamStep: ApplyAdam's constants for one step, each rounded to float as the CPU's
// AdamParams holds them (src/device/cpu/dense_update_kernels.h).
struct DenseAdamStep {
  float b1 = 0.9f, b2 = 0.999f, c1 = 0.1f, c2 = 0.001f, eps = 1e-8f, lr_t = 0.0f, decay = 0.0f;
  bool weight_decay = false;
};
// DenseAdam: if weight_decay, w -= decay w (decoupled); m = b1 m + c1 g; v = b2 v + (c2 g) g;
// w -= (lr_t m) / (sqrt(v) + eps) (DenseAdamReference).
[[nodiscard]] Status DenseAdam(Stream& stream, float* w, float* m, float* v, const float* g,
                               int64_t n, const DenseAdamStep& step);

// CopyKernel: out[i] = in[i] for `bytes` bytes with a plain vectorised copy kernel (not the copy
// engine): the device-memory bandwidth yardstick the gather benchmark's roofline is measured
// with. bytes must be a multiple of 16 and the pointers 16-byte aligned.
[[nodiscard]] Status CopyKernel(Stream& stream, const void* in, void* out, int64_t bytes);

}  // namespace recsdk::cuda

#endif  // RECSDK_SRC_DEVICE_CUDA_CUDA_KERNELS_H_
