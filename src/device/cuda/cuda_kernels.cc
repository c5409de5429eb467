// cuda_kernels.cc: cuda_kernels.h: the argument checks, cuBLAS for the GEMMs, and the launchers of
// kernels.cu for the rest. Compiled by the host compiler.
#include "src/device/cuda/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "fmt/format.h"
#include "recsdk/table.h"
#include "src/device/cuda/cuda_error.h"
#include "src/device/cuda/kernels_launch.h"
#include "src/table/sparse_optimizers_impl.h"

namespace recsdk::cuda {

static_assert(static_cast<int>(BinaryOp::kAdd) == launch::kBinaryAdd &&
              static_cast<int>(BinaryOp::kSub) == launch::kBinarySub &&
              static_cast<int>(BinaryOp::kMul) == launch::kBinaryMul);
static_assert(static_cast<int>(UnaryOp::kRelu) == launch::kUnaryRelu &&
              static_cast<int>(UnaryOp::kSigmoid) == launch::kUnarySigmoid &&
              static_cast<int>(UnaryOp::kTanh) == launch::kUnaryTanh &&
              static_cast<int>(UnaryOp::kNeg) == launch::kUnaryNeg);

namespace {

Status Bad(std::string_view kernel, std::string_view what) {
  return absl::InvalidArgumentError(fmt::format("cuda::{}: {}", kernel, what));
}

// CheckSizes: every size >= 0 and their product within int64 (n values of 4 bytes addressable).
Status CheckSizes(std::string_view kernel,
                  std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  int64_t product = 1;
  for (const auto& [name, v] : sizes) {
    if (v < 0) return Bad(kernel, fmt::format("{} is {}; pass a size >= 0", name, v));
    if (v > 0 && product > std::numeric_limits<int64_t>::max() / 8 / v) {
      return Bad(kernel, fmt::format("{} = {} makes the tensor too large to address", name, v));
    }
    product *= v;
  }
  return absl::OkStatus();
}

// CheckPointers: no null pointer where the work is not empty.
Status CheckPointers(std::string_view kernel, bool empty,
                     std::initializer_list<std::pair<const char*, const void*>> pointers) {
  if (empty) return absl::OkStatus();
  for (const auto& [name, p] : pointers) {
    if (p == nullptr) return Bad(kernel, fmt::format("{} is null; pass device memory", name));
  }
  return absl::OkStatus();
}

Status Launched(int error, std::string_view kernel) {
  return CudaStatus(error, fmt::format("cuda::{} launch", kernel));
}

int32_t Int32(int64_t v) { return static_cast<int32_t>(v); }

Status CheckGemmDims(std::string_view kernel, int64_t m, int64_t n, int64_t k) {
  RECSDK_RETURN_IF_ERROR(CheckSizes(kernel, {{"m", m}, {"n", n}, {"k", k}}));
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (m > kMax || n > kMax || k > kMax) {
    return Bad(kernel, fmt::format("m {}, n {}, k {}: cuBLAS takes dimensions below 2^31; split "
                                   "the product",
                                   m, n, k));
  }
  return absl::OkStatus();
}

}  // namespace

Status Gemm(Stream& stream, GemmInput input, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
            const GemmOperand& b, float* c, int64_t ldc, float alpha, float beta) {
  RECSDK_RETURN_IF_ERROR(CheckGemmDims("Gemm", m, n, k));
  // Row-major leading dimensions as stored: A is [m, k] (or [k, m] transposed), B [k, n] (or
  // [n, k]), C [m, n].
  const int64_t a_cols = a.transpose ? m : k, b_cols = b.transpose ? k : n;
  if (a.ld < std::max<int64_t>(1, a_cols) || b.ld < std::max<int64_t>(1, b_cols) ||
      ldc < std::max<int64_t>(1, n)) {
    return Bad("Gemm", fmt::format("row strides lda {}, ldb {}, ldc {} are below the stored "
                                   "columns {}, {}, {}; pass each matrix's row stride",
                                   a.ld, b.ld, ldc, a_cols, b_cols, n));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  RECSDK_RETURN_IF_ERROR(CheckPointers("Gemm", k == 0, {{"a", a.data}, {"b", b.data}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Gemm", false, {{"c", c}}));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS multiplies B's
  // storage by A's, with n and m swapped.
  const cudaDataType_t type = input == GemmInput::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  return CublasStatus(
      cublasGemmEx(static_cast<cublasHandle_t>(stream.blas()),
                   b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N, a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N,
                   Int32(n), Int32(m), Int32(k), &alpha, b.data, type, Int32(b.ld), a.data, type,
                   Int32(a.ld), &beta, c, CUDA_R_32F, Int32(ldc), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cuda::Gemm (cublasGemmEx)");
}

Status GemmBatched(Stream& stream, GemmInput input, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void* a, bool trans_a, const void* b, bool trans_b, float* c) {
  RECSDK_RETURN_IF_ERROR(CheckGemmDims("GemmBatched", m, n, k));
  RECSDK_RETURN_IF_ERROR(CheckSizes("GemmBatched", {{"batch", batch}, {"m", m}, {"n", n}}));
  if (batch > std::numeric_limits<int32_t>::max()) {
    return Bad("GemmBatched", fmt::format("batch {} is 2^31 or more; split it", batch));
  }
  if (batch == 0 || m == 0 || n == 0) return absl::OkStatus();
  RECSDK_RETURN_IF_ERROR(CheckPointers("GemmBatched", k == 0, {{"a", a}, {"b", b}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("GemmBatched", false, {{"c", c}}));
  const float alpha = 1.0f, beta = 0.0f;
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k);
  const int64_t ldb = std::max<int64_t>(1, trans_b ? k : n);
  const cudaDataType_t type = input == GemmInput::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  return CublasStatus(
      cublasGemmStridedBatchedEx(
          static_cast<cublasHandle_t>(stream.blas()), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, Int32(n), Int32(m), Int32(k), &alpha, b, type,
          Int32(ldb), k * n, a, type, Int32(lda), m * k, &beta, c, CUDA_R_32F, Int32(n), m * n,
          Int32(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cuda::GemmBatched (cublasGemmStridedBatchedEx)");
}

Status Binary(Stream& stream, BinaryOp op, const float* x, const float* y, float* out, int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("Binary", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Binary", n == 0, {{"x", x}, {"y", y}, {"out", out}}));
  return Launched(launch::Binary(stream.native(), static_cast<int>(op), x, y, out, n), "Binary");
}

Status AddN(Stream& stream, const std::vector<const float*>& inputs, float* out, int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("AddN", {{"n", n}}));
  if (inputs.empty()) return Bad("AddN", "no inputs; pass at least one");
  RECSDK_RETURN_IF_ERROR(CheckPointers("AddN", n == 0, {{"out", out}}));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (n > 0 && inputs[i] == nullptr) {
      return Bad("AddN", fmt::format("input {} is null; pass device memory", i));
    }
  }
  if (n == 0) return absl::OkStatus();
  if (inputs.size() == 1) {
    if (inputs[0] == out) return absl::OkStatus();
    return CopyDeviceToDevice(stream, out, inputs[0], n * static_cast<int64_t>(sizeof(float)));
  }
  // One add per input, into out: the sum of the first k inputs is complete before input k + 1 is
  // added, the CPU's left-to-right order. An input that aliases out after the first would read
  // the partial sum: refused.
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i] == out) {
      return Bad("AddN", fmt::format("input {} aliases out; only the first input may", i));
    }
  }
  RECSDK_RETURN_IF_ERROR(Launched(
      launch::Binary(stream.native(), launch::kBinaryAdd, inputs[0], inputs[1], out, n), "AddN"));
  for (size_t i = 2; i < inputs.size(); ++i) {
    RECSDK_RETURN_IF_ERROR(Launched(
        launch::Binary(stream.native(), launch::kBinaryAdd, out, inputs[i], out, n), "AddN"));
  }
  return absl::OkStatus();
}

Status ConcatColumns(Stream& stream, const std::vector<ConcatInput>& inputs, int64_t rows,
                     float* out) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("ConcatColumns", {{"rows", rows}}));
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].cols < 0) {
      return Bad("ConcatColumns",
                 fmt::format("input {} has {} columns; pass a size >= 0", i, inputs[i].cols));
    }
    if (rows > 0 && inputs[i].cols > 0 && inputs[i].data == nullptr) {
      return Bad("ConcatColumns", fmt::format("input {} is null; pass device memory", i));
    }
    total += inputs[i].cols;
  }
  RECSDK_RETURN_IF_ERROR(CheckSizes("ConcatColumns", {{"rows", rows}, {"total columns", total}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("ConcatColumns", rows * total == 0, {{"out", out}}));
  int64_t offset = 0;
  for (const ConcatInput& in : inputs) {
    if (rows > 0 && in.cols > 0) {
      const size_t width = static_cast<size_t>(in.cols) * sizeof(float);
      RECSDK_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpy2DAsync(out + offset, static_cast<size_t>(total) * sizeof(float), in.data,
                            width, width, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                            static_cast<cudaStream_t>(stream.native())),
          "cuda::ConcatColumns (cudaMemcpy2DAsync)"));
    }
    offset += in.cols;
  }
  return absl::OkStatus();
}

Status Transpose2D(Stream& stream, const float* x, int64_t rows, int64_t cols, float* out) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("Transpose2D", {{"rows", rows}, {"cols", cols}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Transpose2D", rows * cols == 0, {{"x", x}, {"out", out}}));
  if (x == out && rows * cols > 0) return Bad("Transpose2D", "x and out alias; pass another out");
  return Launched(launch::Transpose2D(stream.native(), x, rows, cols, out), "Transpose2D");
}

Status BiasAdd(Stream& stream, const float* x, const float* bias, float* out, int64_t rows,
               int64_t cols, Activation activation) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("BiasAdd", {{"rows", rows}, {"cols", cols}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("BiasAdd", rows * cols == 0, {{"x", x}, {"bias", bias}, {"out", out}}));
  return Launched(
      launch::BiasAdd(stream.native(), x, bias, out, rows, cols, activation == Activation::kRelu),
      "BiasAdd");
}

Status Fill(Stream& stream, float value, float* out, int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("Fill", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Fill", n == 0, {{"out", out}}));
  return Launched(launch::Fill(stream.native(), value, out, n), "Fill");
}

Status Broadcast(Stream& stream, const float* dy, int64_t outer, int64_t axis, int64_t inner,
                 float scale, float* out) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes("Broadcast", {{"outer", outer}, {"axis", axis}, {"inner", inner}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("Broadcast", outer * axis * inner == 0, {{"dy", dy}, {"out", out}}));
  return Launched(launch::Broadcast(stream.native(), dy, outer, axis, inner, scale, out),
                  "Broadcast");
}

Status Unary(Stream& stream, UnaryOp op, const float* x, float* out, int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("Unary", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Unary", n == 0, {{"x", x}, {"out", out}}));
  return Launched(launch::Unary(stream.native(), static_cast<int>(op), x, out, n), "Unary");
}

Status UnaryGrad(Stream& stream, UnaryOp op, const float* ref, const float* dy, float* dx,
                 int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("UnaryGrad", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("UnaryGrad", n == 0, {{"ref", ref}, {"dy", dy}, {"dx", dx}}));
  return Launched(launch::UnaryGrad(stream.native(), static_cast<int>(op), ref, dy, dx, n),
                  "UnaryGrad");
}

Status Reduce(Stream& stream, ReduceKind kind, const float* x, int64_t outer, int64_t axis,
              int64_t inner, float* out) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes("Reduce", {{"outer", outer}, {"axis", axis}, {"inner", inner}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Reduce", outer * inner == 0, {{"out", out}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("Reduce", outer * axis * inner == 0, {{"x", x}}));
  if (axis == 0) {  // no input to read: the sum (and the CPU's mean) of nothing is 0
    return Memset(stream, out, 0, outer * inner * static_cast<int64_t>(sizeof(float)));
  }
  return Launched(
      launch::Reduce(stream.native(), kind == ReduceKind::kMean, x, outer, axis, inner, out),
      "Reduce");
}

Status DotInteraction(Stream& stream, const float* x, int64_t batch, int64_t f, int64_t d,
                      float* out) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("DotInteraction", {{"batch", batch}, {"f", f}, {"d", d}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("DotInteraction", batch * f * d == 0 || f < 2, {{"x", x}, {"out", out}}));
  return Launched(launch::DotInteraction(stream.native(), x, batch, f, d, out), "DotInteraction");
}

Status DotInteractionGrad(Stream& stream, const float* x, const float* dy, int64_t batch, int64_t f,
                          int64_t d, float* dx) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("DotInteractionGrad", {{"batch", batch}, {"f", f}, {"d", d}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("DotInteractionGrad", batch * f * d == 0,
                                       {{"x", x}, {"dy", f < 2 ? x : dy}, {"dx", dx}}));
  return Launched(launch::DotInteractionGrad(stream.native(), x, dy, batch, f, d, dx),
                  "DotInteractionGrad");
}

Status SigmoidCrossEntropy(Stream& stream, const float* labels, const float* logits, float* loss,
                           int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("SigmoidCrossEntropy", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("SigmoidCrossEntropy", n == 0,
                                       {{"labels", labels}, {"logits", logits}, {"loss", loss}}));
  return Launched(launch::SigmoidCe(stream.native(), labels, logits, loss, n),
                  "SigmoidCrossEntropy");
}

Status SigmoidCrossEntropyGrad(Stream& stream, const float* labels, const float* logits,
                               const float* dloss, float* dlogits, int64_t n) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("SigmoidCrossEntropyGrad", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers(
      "SigmoidCrossEntropyGrad", n == 0,
      {{"labels", labels}, {"logits", logits}, {"dloss", dloss}, {"dlogits", dlogits}}));
  return Launched(launch::SigmoidCeGrad(stream.native(), labels, logits, dloss, dlogits, n),
                  "SigmoidCrossEntropyGrad");
}

namespace {

Status CheckTable(std::string_view kernel, const RowTable& t, int64_t min_stride) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes(kernel, {{"table.num_rows", t.num_rows}, {"table.stride", t.stride}}));
  if (t.dim < 1)
    return Bad(kernel, fmt::format("table.dim is {}; pass the table's dim (>= 1)", t.dim));
  if (t.stride < min_stride) {
    return Bad(kernel, fmt::format("table.stride {} is below the {} floats a row holds (dim {} "
                                   "and its slots); pass the row stride of the table",
                                   t.stride, min_stride, t.dim));
  }
  if (t.num_rows > 0 && t.data == nullptr) return Bad(kernel, "table.data is null");
  return absl::OkStatus();
}

}  // namespace

Status GatherRows(Stream& stream, const RowTable& table, const int64_t* ids, int64_t n, float* out,
                  int32_t* invalid_ids) {
  RECSDK_RETURN_IF_ERROR(CheckTable("GatherRows", table, table.dim));
  RECSDK_RETURN_IF_ERROR(CheckSizes("GatherRows", {{"n", n}, {"table.dim", table.dim}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("GatherRows", n == 0, {{"ids", ids}, {"out", out}}));
  return Launched(launch::GatherRows(stream.native(), table.data, table.num_rows, table.stride,
                                     table.dim, ids, n, out, invalid_ids),
                  "GatherRows");
}

static_assert(static_cast<int>(TableCombine::kNone) == launch::kCombineNone &&
              static_cast<int>(TableCombine::kSum) == launch::kCombineSum &&
              static_cast<int>(TableCombine::kMean) == launch::kCombineMean &&
              static_cast<int>(TableCombine::kSqrtn) == launch::kCombineSqrtn);
static_assert(launch::kPaddingRowId == EmbeddingTable::kPaddingRow &&
              launch::kDefaultRowId == EmbeddingTable::kDefaultRow);

namespace {
Status CheckLookup(std::string_view kernel, const TableLookup& l, int32_t* invalid) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes(kernel, {{"num_unique", l.num_unique}, {"batch", l.batch}, {"per", l.per}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers(kernel, l.num_unique == 0, {{"unique_rows", l.unique_rows}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers(kernel, l.batch * l.per == 0, {{"restore", l.restore}}));
  if (invalid == nullptr) return Bad(kernel, "invalid is null; pass a device int32 counter");
  return absl::OkStatus();
}
}  // namespace

Status TableGather(Stream& stream, const RowTable& table, const TableLookup& lookup,
                   TableCombine combine, float default_value, int64_t out_stride, float* out,
                   int32_t* invalid) {
  RECSDK_RETURN_IF_ERROR(CheckTable("TableGather", table, table.dim));
  RECSDK_RETURN_IF_ERROR(CheckLookup("TableGather", lookup, invalid));
  if (out_stride < table.dim) {
    return Bad("TableGather", fmt::format("out_stride {} is below dim {}; pass the output's row "
                                          "width",
                                          out_stride, table.dim));
  }
  // Unpooled: one output row per position (batch * per rows of per = 1).
  const bool pooled = combine != TableCombine::kNone;
  const int64_t rows = pooled ? lookup.batch : lookup.batch * lookup.per;
  RECSDK_RETURN_IF_ERROR(CheckPointers("TableGather", rows == 0, {{"out", out}}));
  return Launched(
      launch::TableGather(stream.native(), table.data, table.num_rows, table.stride, table.dim,
                          lookup.unique_rows, lookup.num_unique, lookup.restore, rows,
                          pooled ? lookup.per : 1, static_cast<int>(combine), default_value,
                          out_stride, out, invalid),
      "TableGather");
}

Status TablePaddingMask(Stream& stream, const TableLookup& lookup, float* mask, int32_t* invalid) {
  RECSDK_RETURN_IF_ERROR(CheckLookup("TablePaddingMask", lookup, invalid));
  const int64_t n = lookup.batch * lookup.per;
  RECSDK_RETURN_IF_ERROR(CheckPointers("TablePaddingMask", n == 0, {{"mask", mask}}));
  return Launched(launch::PaddingMask(stream.native(), lookup.unique_rows, lookup.num_unique,
                                      lookup.restore, n, mask, invalid),
                  "TablePaddingMask");
}

Status TableRowIds(Stream& stream, const int32_t* rows, int64_t n, int64_t num_rows, int64_t* out,
                   int32_t* invalid) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("TableRowIds", {{"n", n}, {"num_rows", num_rows}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("TableRowIds", n == 0, {{"rows", rows}, {"out", out}}));
  if (invalid == nullptr) return Bad("TableRowIds", "invalid is null; pass a device int32 counter");
  return Launched(launch::RowIds(stream.native(), rows, n, num_rows, out, invalid), "TableRowIds");
}

StatusOr<SegmentCsr> BuildSegmentCsr(const std::vector<uint32_t>& restore_index,
                                     int64_t num_segments) {
  if (num_segments < 0 || num_segments >= std::numeric_limits<int32_t>::max() ||
      restore_index.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(fmt::format(
        "cuda::BuildSegmentCsr: {} segments over {} positions; both must be in [0, 2^31 - 1)",
        num_segments, restore_index.size()));
  }
  SegmentCsr csr;
  csr.offsets.assign(static_cast<size_t>(num_segments) + 1, 0);
  for (size_t i = 0; i < restore_index.size(); ++i) {
    const uint32_t u = restore_index[i];
    if (u >= num_segments) {
      return absl::InvalidArgumentError(fmt::format(
          "cuda::BuildSegmentCsr: restore index {} at position {} is out of range for {} "
          "segments; pass the restore_index of the same DedupKeys",
          u, i, num_segments));
    }
    ++csr.offsets[u + 1];
  }
  for (size_t u = 0; u < static_cast<size_t>(num_segments); ++u) {
    csr.offsets[u + 1] += csr.offsets[u];
  }
  // A stable counting sort: each segment's positions in increasing order.
  std::vector<int32_t> next(csr.offsets.begin(), csr.offsets.end() - 1);
  csr.positions.resize(restore_index.size());
  for (size_t i = 0; i < restore_index.size(); ++i) {
    csr.positions[static_cast<size_t>(next[restore_index[i]]++)] = static_cast<int32_t>(i);
  }
  return csr;
}

Status SegmentSum(Stream& stream, const float* grads, int64_t n, int64_t dim,
                  const int32_t* offsets, const int32_t* positions, int64_t num_segments,
                  float* out) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes("SegmentSum", {{"n", n}, {"dim", dim}, {"num_segments", num_segments}}));
  if (dim < 1) return Bad("SegmentSum", fmt::format("dim is {}; pass the table's dim (>= 1)", dim));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("SegmentSum", num_segments == 0, {{"offsets", offsets}, {"out", out}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("SegmentSum", n == 0, {{"grads", grads}, {"positions", positions}}));
  return Launched(
      launch::SegmentSum(stream.native(), grads, dim, offsets, positions, num_segments, out),
      "SegmentSum");
}

namespace {

// GradScratch: TableGradAggregate's scratch, carved from one block in 256-byte pieces: two key and
// two position arrays (the sort's in and out), the gradient row and scale of each position, the
// offsets of num_unique + 1 segments, then cub's temporary storage.
struct GradScratch {
  int64_t keys_in = 0, keys_out = 0, order_in = 0, order_out = 0, src = 0, scale = 0, offsets = 0,
          temp = 0, temp_bytes = 0, total = 0;
  int end_bit = 1;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

StatusOr<GradScratch> PlanGradScratch(int64_t positions, int64_t num_unique, bool offsets = true) {
  RECSDK_RETURN_IF_ERROR(
      CheckSizes("TableGradAggregate", {{"positions", positions}, {"num_unique", num_unique}}));
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 1;
  if (positions >= kMax || num_unique >= kMax) {
    return Bad("TableGradAggregate",
               fmt::format("{} positions over {} unique rows; both must be below 2^31 - 1: split "
                           "the batch",
                           positions, num_unique));
  }
  GradScratch g;
  while (g.end_bit < 32 && (int64_t{1} << g.end_bit) <= num_unique) ++g.end_bit;
  size_t temp = 0;
  RECSDK_RETURN_IF_ERROR(CudaStatus(launch::SortKeysTempBytes(positions, g.end_bit, &temp),
                                    "cuda::TableGradAggregate: the sort's scratch size"));
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t here = at;
    at += Align256(std::max<int64_t>(bytes, 1));
    return here;
  };
  g.keys_in = take(positions * 4);
  g.keys_out = take(positions * 4);
  g.order_in = take(positions * 4);
  g.order_out = take(positions * 4);
  g.src = take(positions * 8);
  g.scale = take(positions * 4);
  g.offsets = offsets ? take((num_unique + 2) * 4) : 0;
  g.temp_bytes = static_cast<int64_t>(temp);
  g.temp = take(g.temp_bytes);
  g.total = at;
  return g;
}

// GradBuffers: a GradScratch plan's buffers inside the caller's scratch memory.
struct GradBuffers {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* order_in;
  int32_t* order_out;
  const float** src;
  float* scale;
  int32_t* offsets;  // only when the plan has offsets
  char* temp;
};

// CarveGradScratch: checks that `scratch` (scratch_bytes, sized by `sizer`) holds `plan` and that
// the device counter `invalid` is there, then points into it. `need` says what the plan is for.
StatusOr<GradBuffers> CarveGradScratch(std::string_view name, const GradScratch& plan,
                                       void* scratch, int64_t scratch_bytes, const int32_t* invalid,
                                       std::string_view need, std::string_view sizer) {
  if (scratch_bytes < plan.total) {
    return Bad(name, fmt::format("scratch holds {} bytes, {} need {} ({})", scratch_bytes, need,
                                 plan.total, sizer));
  }
  if (scratch == nullptr || invalid == nullptr) {
    return Bad(name, "scratch or invalid is null; pass device memory and a device int32 counter");
  }
  char* base = static_cast<char*>(scratch);
  return GradBuffers{reinterpret_cast<uint32_t*>(base + plan.keys_in),
                     reinterpret_cast<uint32_t*>(base + plan.keys_out),
                     reinterpret_cast<int32_t*>(base + plan.order_in),
                     reinterpret_cast<int32_t*>(base + plan.order_out),
                     reinterpret_cast<const float**>(base + plan.src),
                     reinterpret_cast<float*>(base + plan.scale),
                     reinterpret_cast<int32_t*>(base + plan.offsets),
                     base + plan.temp};
}

}  // namespace

StatusOr<int64_t> TableGradAggregateScratchBytes(int64_t positions, int64_t num_unique) {
  RECSDK_ASSIGN_OR_RETURN(GradScratch g, PlanGradScratch(positions, num_unique));
  return g.total;
}

Status TableGradAggregate(Stream& stream, const int32_t* unique_rows, int64_t num_unique,
                          const std::vector<GradFeature>& features, TableCombine combine,
                          int64_t dim, void* scratch, int64_t scratch_bytes, float* out,
                          int32_t* invalid) {
  constexpr std::string_view kName = "TableGradAggregate";
  if (dim < 1) return Bad(kName, fmt::format("dim is {}; pass the table's dim (>= 1)", dim));
  int64_t positions = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    const GradFeature& g = features[f];
    RECSDK_RETURN_IF_ERROR(CheckSizes(kName, {{"batch", g.batch}, {"per", g.per}, {"dim", dim}}));
    RECSDK_RETURN_IF_ERROR(
        CheckPointers(kName, g.batch * g.per == 0, {{"restore", g.restore}, {"grads", g.grads}}));
    positions += g.batch * g.per;
  }
  RECSDK_ASSIGN_OR_RETURN(GradScratch plan, PlanGradScratch(positions, num_unique));
  RECSDK_RETURN_IF_ERROR(CheckPointers(kName, num_unique == 0, {{"out", out}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers(kName, positions == 0, {{"unique_rows", unique_rows}}));
  RECSDK_ASSIGN_OR_RETURN(
      const GradBuffers b,
      CarveGradScratch(kName, plan, scratch, scratch_bytes, invalid,
                       fmt::format("{} positions over {} unique rows", positions, num_unique),
                       "TableGradAggregateScratchBytes"));
  int64_t at = 0;
  for (const GradFeature& g : features) {
    RECSDK_RETURN_IF_ERROR(
        Launched(launch::GradKeys(stream.native(), unique_rows, num_unique, g.restore, g.batch,
                                  g.per, static_cast<int>(combine), g.grads, dim, at, b.keys_in,
                                  b.order_in, b.src, b.scale, invalid),
                 "TableGradAggregate (keys)"));
    at += g.batch * g.per;
  }
  RECSDK_RETURN_IF_ERROR(Launched(
      launch::SortKeys(stream.native(), b.temp, static_cast<size_t>(plan.temp_bytes), b.keys_in,
                       b.keys_out, b.order_in, b.order_out, positions, plan.end_bit),
      "TableGradAggregate (sort)"));
  RECSDK_RETURN_IF_ERROR(
      Launched(launch::SegmentStarts(stream.native(), b.keys_out, positions, num_unique, b.offsets),
               "TableGradAggregate (offsets)"));
  const bool scaled = combine == TableCombine::kMean || combine == TableCombine::kSqrtn;
  return Launched(launch::GradSum(stream.native(), b.order_out, b.src, b.scale, scaled, b.offsets,
                                  num_unique, dim, out),
                  "TableGradAggregate (sums)");
}

StatusOr<int64_t> MergeRowGradsScratchBytes(int64_t n, int64_t num_rows) {
  RECSDK_ASSIGN_OR_RETURN(GradScratch g, PlanGradScratch(n, num_rows, /*offsets=*/false));
  return g.total;
}

Status MergeRowGrads(Stream& stream, const std::vector<RowGrads>& parts, int64_t num_rows,
                     int64_t dim, void* scratch, int64_t scratch_bytes, float* out, int64_t* ids,
                     int32_t* invalid) {
  constexpr std::string_view kName = "MergeRowGrads";
  if (dim < 1) return Bad(kName, fmt::format("dim is {}; pass the table's dim (>= 1)", dim));
  int64_t n = 0;
  for (const RowGrads& p : parts) {
    RECSDK_RETURN_IF_ERROR(CheckSizes(kName, {{"count", p.count}, {"dim", dim}}));
    RECSDK_RETURN_IF_ERROR(
        CheckPointers(kName, p.count == 0, {{"rows", p.rows}, {"grads", p.grads}}));
    n += p.count;
  }
  RECSDK_ASSIGN_OR_RETURN(GradScratch plan, PlanGradScratch(n, num_rows, /*offsets=*/false));
  RECSDK_RETURN_IF_ERROR(CheckPointers(kName, n == 0, {{"out", out}, {"ids", ids}}));
  RECSDK_ASSIGN_OR_RETURN(const GradBuffers b,
                          CarveGradScratch(kName, plan, scratch, scratch_bytes, invalid,
                                           fmt::format("{} rows", n), "MergeRowGradsScratchBytes"));
  int64_t at = 0;
  for (const RowGrads& p : parts) {
    RECSDK_RETURN_IF_ERROR(
        Launched(launch::MergeKeys(stream.native(), p.rows, p.count, num_rows, p.grads, dim, at,
                                   b.keys_in, b.order_in, b.src, invalid),
                 "MergeRowGrads (keys)"));
    at += p.count;
  }
  RECSDK_RETURN_IF_ERROR(
      Launched(launch::SortKeys(stream.native(), b.temp, static_cast<size_t>(plan.temp_bytes),
                                b.keys_in, b.keys_out, b.order_in, b.order_out, n, plan.end_bit),
               "MergeRowGrads (sort)"));
  return Launched(
      launch::MergeSum(stream.native(), b.keys_out, b.order_out, b.src, n, num_rows, dim, out, ids),
      "MergeRowGrads (sums)");
}

Status AdamRate(Stream& stream, const SparseOptimizerConfig& config, const int64_t* device_step,
                float* out) {
  if (config.kind != SparseOptimizerKind::kLazyAdam &&
      config.kind != SparseOptimizerKind::kLazyAdamByAddress) {
    return Bad("AdamRate", "the optimizer is not LazyAdam; only its rate depends on the step");
  }
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("AdamRate", false, {{"device_step", device_step}, {"out", out}}));
  return Launched(launch::AdamRate(stream.native(), device_step, config.learning_rate, config.beta1,
                                   config.beta2, out),
                  "AdamRate");
}

Status SparseApply(Stream& stream, const SparseOptimizerConfig& config, int64_t step,
                   const RowTable& table, const int64_t* rows, const float* grads, int64_t count,
                   const float* device_lr_t) {
  RECSDK_RETURN_IF_ERROR(config.Validate());
  RECSDK_RETURN_IF_ERROR(CheckTable("SparseApply", table, table.dim * (1 + config.SlotsPerDim())));
  RECSDK_RETURN_IF_ERROR(CheckSizes("SparseApply", {{"count", count}, {"table.dim", table.dim}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("SparseApply", count == 0, {{"rows", rows}, {"grads", grads}}));
  if (table.dim > std::numeric_limits<int>::max()) {
    return Bad("SparseApply", fmt::format("table.dim {} is 2^31 or more", table.dim));
  }
  launch::OptimizerParams p;
  switch (config.kind) {
    case SparseOptimizerKind::kSGD:
    case SparseOptimizerKind::kSGDByAddr:
      p.kind = launch::kOptSgd;
      break;
    case SparseOptimizerKind::kAdagrad:
    case SparseOptimizerKind::kAdagradByAddress:
      p.kind = launch::kOptAdagrad;
      break;
    case SparseOptimizerKind::kLazyAdam:
    case SparseOptimizerKind::kLazyAdamByAddress:
      p.kind = launch::kOptLazyAdam;
      break;
    case SparseOptimizerKind::kFTRL:
      p.kind = launch::kOptFtrl;
      break;
  }
  p.learning_rate = config.learning_rate;
  p.weight_decay = config.weight_decay;
  p.adagrad_epsilon = config.adagrad_epsilon;
  p.beta1 = config.beta1;
  p.beta2 = config.beta2;
  p.epsilon = config.epsilon;
  // LazyAdam's bias-corrected rate for this step, computed by the CPU's own code (in double).
  p.lr_t = internal::RowUpdater(config, static_cast<int>(table.dim), step).adam_lr_t();
  p.lr_t_at = device_lr_t;
  p.learning_rate_power = config.learning_rate_power;
  p.l1 = config.l1;
  p.l2 = config.l2;
  p.l2_shrinkage = config.l2_shrinkage;
  return Launched(launch::SparseApply(stream.native(), p, table.data, table.stride, table.dim, rows,
                                      grads, count),
                  "SparseApply");
}

Status DenseSgd(Stream& stream, float* w, const float* g, int64_t n, float lr) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("DenseSgd", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("DenseSgd", n == 0, {{"w", w}, {"g", g}}));
  return Launched(launch::DenseSgd(stream.native(), w, g, n, lr), "DenseSgd");
}

Status DenseAdagrad(Stream& stream, float* w, float* acc, const float* g, int64_t n, float lr,
                    float eps) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("DenseAdagrad", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(CheckPointers("DenseAdagrad", n == 0, {{"w", w}, {"acc", acc}, {"g", g}}));
  return Launched(launch::DenseAdagrad(stream.native(), w, acc, g, n, lr, eps), "DenseAdagrad");
}

Status DenseAdam(Stream& stream, float* w, float* m, float* v, const float* g, int64_t n,
                 const DenseAdamStep& p) {
  RECSDK_RETURN_IF_ERROR(CheckSizes("DenseAdam", {{"n", n}}));
  RECSDK_RETURN_IF_ERROR(
      CheckPointers("DenseAdam", n == 0, {{"w", w}, {"m", m}, {"v", v}, {"g", g}}));
  return Launched(launch::DenseAdam(stream.native(), w, m, v, g, n, p.b1, p.b2, p.c1, p.c2, p.eps,
                                    p.lr_t, p.decay, p.weight_decay),
                  "DenseAdam");
}

Status CopyKernel(Stream& stream, const void* in, void* out, int64_t bytes) {
  if (bytes < 0 || bytes % 16 != 0) {
    return Bad("CopyKernel", fmt::format("bytes is {}; pass a multiple of 16", bytes));
  }
  if (bytes > 0 &&
      (reinterpret_cast<uintptr_t>(in) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0)) {
    return Bad("CopyKernel", "in and out must be 16-byte aligned (as cudaMalloc returns them)");
  }
  RECSDK_RETURN_IF_ERROR(CheckPointers("CopyKernel", bytes == 0, {{"in", in}, {"out", out}}));
  return Launched(launch::CopyKernel(stream.native(), in, out, bytes), "CopyKernel");
}

}  // namespace recsdk::cuda
