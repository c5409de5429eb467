// kernel_util.h: helpers shared by the CPU kernels: dtype dispatch, broadcasting, NaN-aware
// scalars. Parallel loops are src/common/parallel_for.h's ParallelFor.
// Internal; thread-safe (pure functions).
#ifndef RECSDK_DEVICE_CPU_KERNEL_UTIL_H_
#define RECSDK_DEVICE_CPU_KERNEL_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "src/common/parallel_for.h"
#include "src/common/status_macros.h"
#include "src/device/kernel.h"

namespace recsdk::internal {

// NaN-propagating scalar forms shared by the kernels, as TensorFlow's ops behave. A plain compare
// is false for NaN, so `x > 0 ? x : 0` turned a NaN into 0 and `x > y ? x : y` kept a NaN only
// when it was the second operand: a NaN input left the loss finite while the weights went NaN,
// and NanTensorHook never fired (issue 30). Each is branch-free (compares and selects), so loops
// over them still vectorise. For integer T the NaN tests fold away.

// IsNaN: std::isnan for floating-point T, false for integers.
template <typename T>
inline bool IsNaN(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else {
    return false;
  }
}

// MaxNaN / MinNaN: the larger / smaller of x and y, NaN when either is (TensorFlow's Maximum and
// Minimum). Between 0 and -0 either may be returned, as with std::max.
template <typename T>
inline T MaxNaN(T x, T y) {
  return (x > y || IsNaN(x)) ? x : y;
}
template <typename T>
inline T MinNaN(T x, T y) {
  return (x < y || IsNaN(x)) ? x : y;
}

// ReluValue: x where x > 0, NaN where x is NaN, else +0.
template <typename T>
inline T ReluValue(T x) {
  return (x > T(0) || IsNaN(x)) ? x : T(0);
}

// ReluGradValue: dy where x > 0, else 0; NaN where x or dy is NaN (TensorFlow's dy * (x > 0) is
// NaN for a NaN dy on either side of the kink, and a NaN input must not become a zero gradient).
template <typename T>
inline T ReluGradValue(T x, T dy) {
  if (x > T(0)) return dy;
  return IsNaN(x) ? x : (IsNaN(dy) ? dy : T(0));
}

// AddBiasRows: rows [r0, r1) of c[m, n] get the bias b[n] added and, with relu, ReluValue: the
// epilogue of the FusedDense kernels (float32, float64 and the bfloat16-operand form), the same
// function as the unfused Relu so that both give the same bits (NaN and -0 included).
template <typename T>
void AddBiasRows(T* c, const T* b, int64_t n, int64_t r0, int64_t r1, bool relu) {
  for (int64_t r = r0; r < r1; ++r) {
    T* row = c + r * n;
    if (relu) {
      for (int64_t j = 0; j < n; ++j) row[j] = ReluValue(row[j] + b[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += b[j];
    }
  }
}

// Dispatch on a numeric dtype: calls fn(T{}) with T the element type.
// BlockedColumnSums: o[j] += sum over rows of g[r * c + j]. Blocks of 512 rows sum in parallel
// into partial rows, added in block order: the blocks depend on the shape alone, so the sums are
// bitwise the same at any thread count (BiasAddGrad's and DcnCrossGrad's bias gradient).
template <typename T>
void BlockedColumnSums(const T* g, int64_t rows, int64_t c, T* o) {
  constexpr int64_t kRows = 512;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  if (blocks <= 1) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < c; ++j) o[j] += g[r * c + j];
    }
    return;
  }
  std::vector<T> partial(static_cast<size_t>(blocks * c), T(0));
  ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      T* p = partial.data() + b * c;
      for (int64_t r = b * kRows; r < std::min(rows, (b + 1) * kRows); ++r) {
        for (int64_t j = 0; j < c; ++j) p[j] += g[r * c + j];
      }
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < c; ++j) o[j] += partial[b * c + j];
  }
}

template <typename Fn>
Status DispatchNumeric(const OpKernelContext& ctx, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      return fn(int64_t{});
    default:
      return ctx.Error("no CPU kernel for dtype {}", DTypeName(dtype));
  }
}
template <typename Fn>
Status DispatchFloat(const OpKernelContext& ctx, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    default:
      return ctx.Error("no CPU kernel for dtype {}; Cast to float32", DTypeName(dtype));
  }
}

// RuntimeBroadcast: the broadcast output shape of two runtime shapes, or an error.
StatusOr<Shape> RuntimeBroadcast(const OpKernelContext& ctx, const Shape& a, const Shape& b);

// BroadcastStrides: element strides of `in` (right-aligned) over `out`'s dims, 0 where broadcast.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

// ForEachBroadcast: calls fn(out_index, offset_0, offset_1, ...) over every element of `out`
// for inputs with the given broadcast strides; rows of the last dimension are handed out as runs.
template <int N, typename Fn>
void ForEachBroadcast(const Shape& out, const std::vector<int64_t> (&strides)[N], Fn&& fn) {
  const int rank = out.rank();
  const int64_t total = out.num_elements();
  if (total == 0) return;
  if (rank == 0) {
    int64_t offs[N] = {};
    int64_t zeros[N] = {};
    fn(int64_t{0}, offs, int64_t{1}, zeros);
    return;
  }
  const int64_t inner = out.dim(rank - 1);
  const int64_t rows = total / inner;
  int64_t inner_stride[N];
  for (int k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  ParallelFor(rows, GrainPerItem(inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t offs[N] = {};
      int64_t rem = r;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t idx = rem % out.dim(d);
        rem /= out.dim(d);
        for (int k = 0; k < N; ++k) offs[k] += idx * strides[k][d];
      }
      fn(r * inner, offs, inner, inner_stride);
    }
  });
}

// Registration of the CPU kernel families.
void RegisterCpuArrayKernels(KernelRegistry& r);
void RegisterCpuMathKernels(KernelRegistry& r);
void RegisterCpuMatMulKernels(KernelRegistry& r);
void RegisterCpuNnKernels(KernelRegistry& r);
void RegisterCpuStateKernels(KernelRegistry& r);
void RegisterCpuRandomKernels(KernelRegistry& r);
// The table ops' kernels (table_op_kernels.cc).
void RegisterCpuTableKernels(KernelRegistry& r);
// Mixed precision and loss scaling (bf16_kernels.cc).
void RegisterCpuBf16Kernels(KernelRegistry& r);

inline constexpr char kCpu[] = "cpu";
inline const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64};
inline const std::vector<DType> kNumericTypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                 DType::kInt64};

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_KERNEL_UTIL_H_
