// kernels.cu: the device code of the CUDA backend (every kernel of cuda_kernels.h but GEMM, which
// is cuBLAS), and the launchers declared in kernels_launch.h. One file on purpose: each .cu is a
// full nvcc compile (host and device passes), the largest share of this backend's build time.
//
// Numerics: compiled with --fmad=false (src/device/cuda/CMakeLists.txt), every expression is
// written in the CPU twin's order, so the rounding is the CPU's except in expf/log1pf/tanhf/powf
// (libdevice, within 2 ulp). Sums run in a fixed order (no atomics on floats): the results are
// the same on every run.
//
// Threading: launchers are called from one host thread per stream; kernels write disjoint outputs.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "src/device/cuda/kernels_launch.h"

namespace recsdk::cuda::launch {
namespace {

constexpr int kThreads = 256;

// Blocks: enough blocks of kThreads for n items, capped (the kernels loop with a grid stride).
unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
}

__device__ inline int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// The scalar functions of the CPU kernels (src/device/cpu/kernel_util.h, math_kernels.cc).
__device__ inline float ReluValue(float x) { return (x > 0.0f || isnan(x)) ? x : 0.0f; }
__device__ inline float ReluGradValue(float x, float dy) {
  if (x > 0.0f) return dy;
  return isnan(x) ? x : (isnan(dy) ? dy : 0.0f);
}
__device__ inline float SigmoidValue(float x) {
  return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

int LastError() { return static_cast<int>(cudaGetLastError()); }

__global__ void BinaryKernel(int op, const float* x, const float* y, float* out, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float a = x[i], b = y[i];
    out[i] = op == kBinaryAdd ? a + b : (op == kBinarySub ? a - b : a * b);
  }
}

__global__ void FillKernel(float value, float* out, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) out[i] = value;
}

// BroadcastKernel: out[o, a, i] = dy[o, i] * scale (the gradient of a sum or mean over the middle
// axis; the CPU's ReduceSumGrad multiplies by its scale, 1 for a sum, so the bits are the same).
__global__ void BroadcastKernel(const float* dy, int64_t outer, int64_t axis, int64_t inner,
                                float scale, float* out) {
  const int64_t n = outer * axis * inner;
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const int64_t o = i / (axis * inner), in = i % inner;
    out[i] = dy[o * inner + in] * scale;
  }
}

__global__ void BiasAddKernel(const float* x, const float* bias, float* out, int64_t rows,
                              int64_t cols, bool relu) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float v = x[i] + bias[i % cols];
    out[i] = relu ? ReluValue(v) : v;
  }
}

__global__ void UnaryKernel(int op, const float* x, float* out, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float v = x[i];
    switch (op) {
      case kUnaryRelu:
        out[i] = ReluValue(v);
        break;
      case kUnarySigmoid:
        out[i] = SigmoidValue(v);
        break;
      case kUnaryTanh:
        out[i] = tanhf(v);
        break;
      default:
        out[i] = -v;
        break;
    }
  }
}

__global__ void UnaryGradKernel(int op, const float* ref, const float* dy, float* dx, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float r = ref[i], g = dy[i];
    switch (op) {
      case kUnaryRelu:
        dx[i] = ReluGradValue(r, g);
        break;
      case kUnarySigmoid:
        dx[i] = g * r * (1.0f - r);
        break;
      case kUnaryTanh:
        dx[i] = g * (1.0f - r * r);
        break;
      default:
        dx[i] = -g;
        break;
    }
  }
}

// ReduceColumnsKernel: one thread per output (o, i), summing down the axis in order. Adjacent
// threads read adjacent i, so the loads coalesce when inner is wide.
__global__ void ReduceColumnsKernel(bool mean, const float* x, int64_t outer, int64_t axis,
                                    int64_t inner, float* out) {
  const int64_t n = outer * inner;
  for (int64_t t = GlobalIndex(); t < n; t += GridStride()) {
    const int64_t o = t / inner, i = t % inner;
    const float* p = x + o * axis * inner + i;
    float acc = 0.0f;
    for (int64_t a = 0; a < axis; ++a) acc += p[a * inner];
    out[t] = mean && axis > 0 ? acc / static_cast<float>(axis) : acc;
  }
}

// ReduceRowsKernel: one warp per output for contiguous rows (inner = 1): lane l sums
// a = l, l + 32, ... in order, then the warp adds the 32 lane sums as a fixed butterfly.
__global__ void ReduceRowsKernel(bool mean, const float* x, int64_t rows, int64_t axis,
                                 float* out) {
  const int64_t warps = GridStride() / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = GlobalIndex() / 32; r < rows; r += warps) {
    const float* p = x + r * axis;
    float acc = 0.0f;
    for (int64_t a = lane; a < axis; a += 32) acc += p[a];
    for (int offset = 16; offset > 0; offset /= 2) {
      acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    if (lane == 0) out[r] = mean ? acc / static_cast<float>(axis) : acc;  // axis >= 32
  }
}

// ReduceBlockKernel: one block per output (o, i) for long axes: thread t sums a = t, t + 256, ...
// in order, then the block adds the 256 partial sums as a fixed tree.
__global__ void ReduceBlockKernel(bool mean, const float* x, int64_t outer, int64_t axis,
                                  int64_t inner, float* out) {
  __shared__ float partial[kThreads];
  const int64_t n = outer * inner;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const int64_t o = t / inner, i = t % inner;
    const float* p = x + o * axis * inner + i;
    float acc = 0.0f;
    for (int64_t a = threadIdx.x; a < axis; a += blockDim.x) acc += p[a * inner];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
      if (static_cast<int>(threadIdx.x) < width) {
        partial[threadIdx.x] += partial[threadIdx.x + width];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0)
      out[t] = mean ? partial[0] / static_cast<float>(axis) : partial[0];  // axis >= 256
    __syncthreads();
  }
}

// PairIndex: the column of pair (i, j), i > j, in the order (1,0), (2,0), (2,1), ...
__device__ inline int64_t PairIndex(int64_t i, int64_t j) { return i * (i - 1) / 2 + j; }

__global__ void DotInteractionKernel(const float* x, int64_t batch, int64_t f, int64_t d,
                                     float* out) {
  const int64_t pairs = f * (f - 1) / 2;
  const int64_t n = batch * pairs;
  for (int64_t t = GlobalIndex(); t < n; t += GridStride()) {
    const int64_t b = t / pairs, p = t % pairs;
    // The row i of pair p: the largest i with i (i - 1) / 2 <= p (a float guess, then exact).
    int64_t i = static_cast<int64_t>((1.0 + sqrt(8.0 * static_cast<double>(p) + 1.0)) / 2.0);
    while (i > 1 && PairIndex(i, 0) > p) --i;
    while (PairIndex(i + 1, 0) <= p) ++i;
    const int64_t j = p - PairIndex(i, 0);
    const float* xi = x + (b * f + i) * d;
    const float* xj = x + (b * f + j) * d;
    float acc = 0.0f;
    for (int64_t k = 0; k < d; ++k) acc += xi[k] * xj[k];
    out[t] = acc;
  }
}

__global__ void DotInteractionGradKernel(const float* x, const float* dy, int64_t batch, int64_t f,
                                         int64_t d, float* dx) {
  const int64_t pairs = f * (f - 1) / 2;
  const int64_t n = batch * f * d;
  for (int64_t t = GlobalIndex(); t < n; t += GridStride()) {
    const int64_t k = t % d, i = (t / d) % f, b = t / (f * d);
    const float* dyb = dy + b * pairs;
    const float* xb = x + b * f * d;
    float acc = 0.0f;
    for (int64_t j = 0; j < f; ++j) {
      if (j == i) continue;
      const int64_t p = i > j ? PairIndex(i, j) : PairIndex(j, i);
      acc += dyb[p] * xb[j * d + k];
    }
    dx[t] = acc;
  }
}

__global__ void SigmoidCeKernel(const float* labels, const float* logits, float* loss, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float v = logits[i];
    // std::max(v, 0) of the CPU kernel: v unless v < 0 (a NaN logit stays NaN).
    const float pos = v < 0.0f ? 0.0f : v;
    loss[i] = pos - v * labels[i] + log1pf(expf(-fabsf(v)));
  }
}

__global__ void SigmoidCeGradKernel(const float* labels, const float* logits, const float* dloss,
                                    float* dlogits, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    dlogits[i] = dloss[i] * (SigmoidValue(logits[i]) - labels[i]);
  }
}

// GatherRows4Kernel: 16 bytes per thread (dim and stride multiples of 4, 16-byte aligned).
__global__ void GatherRows4Kernel(const float4* table, int64_t num_rows, int64_t stride4,
                                  int64_t dim4, const int64_t* ids, int64_t n, float4* out,
                                  int32_t* invalid_ids) {
  const int64_t total = n * dim4;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t r = t / dim4, c = t % dim4;
    const int64_t id = ids[r];
    if (id < 0 || id >= num_rows) {
      out[t] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (c == 0 && invalid_ids != nullptr) atomicAdd(invalid_ids, 1);
      continue;
    }
    out[t] = table[id * stride4 + c];
  }
}

__global__ void GatherRowsKernel(const float* table, int64_t num_rows, int64_t stride, int64_t dim,
                                 const int64_t* ids, int64_t n, float* out, int32_t* invalid_ids) {
  const int64_t total = n * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t r = t / dim, c = t % dim;
    const int64_t id = ids[r];
    if (id < 0 || id >= num_rows) {
      out[t] = 0.0f;
      if (c == 0 && invalid_ids != nullptr) atomicAdd(invalid_ids, 1);
      continue;
    }
    out[t] = table[id * stride + c];
  }
}

__global__ void ScatterRowsKernel(const float* in, int64_t n, int64_t width, const int64_t* rows,
                                  float* table, int64_t stride) {
  const int64_t total = n * width;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t r = t / width, c = t % width;
    table[rows[r] * stride + c] = in[t];
  }
}

// SegmentSumKernel: one thread per (segment, column), adding the segment's positions in order:
// ((0 + g[p0]) + g[p1]) + ..., AggregateGradients' order.
__global__ void SegmentSumKernel(const float* grads, int64_t dim, const int32_t* offsets,
                                 const int32_t* positions, int64_t num_segments, float* out) {
  const int64_t total = num_segments * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t u = t / dim, k = t % dim;
    float acc = 0.0f;
    for (int32_t q = offsets[u]; q < offsets[u + 1]; ++q) {
      acc += grads[static_cast<int64_t>(positions[q]) * dim + k];
    }
    out[t] = acc;
  }
}

// TableGatherKernel: one thread per (sample b, column d) of a lookup through a dedup'ed batch:
// row(j) = unique_rows[restore[b * per + j]] (uint32 in int32 storage). combine < 0 is the
// unpooled lookup (per = 1 per output row, a plain copy; sentinels read 0 or default_value, as
// TableImpl::GatherRows / CopyEmbedding). Otherwise PooledGatherRows (src/table/pooled_gather.h)
// term by term: o = 0, padding rows skipped, each valid row added in j order (default rows as
// default_value), then o *= 1 / valid (mean) or 1 / sqrt(valid) (sqrtn) when valid > 0. A restore
// index >= num_unique or a row id >= num_rows below the sentinels writes 0 and counts once per
// position in *invalid (the caller reads it and fails the op).
__global__ void TableGatherKernel(const float* table, int64_t num_rows, int64_t stride, int64_t dim,
                                  const int32_t* unique_rows, int64_t num_unique,
                                  const int32_t* restore, int64_t batch, int64_t per, int combine,
                                  float default_value, int64_t out_stride, float* out,
                                  int32_t* invalid) {
  const int64_t total = batch * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t b = t / dim, d = t % dim;
    float* o = out + b * out_stride + d;
    if (combine < 0) {
      const int32_t u = restore[b];
      if (u < 0 || u >= num_unique) {
        *o = 0.0f;
        if (d == 0) atomicAdd(invalid, 1);
        continue;
      }
      const uint32_t row = static_cast<uint32_t>(unique_rows[u]);
      if (row == kPaddingRowId) {
        *o = 0.0f;
      } else if (row == kDefaultRowId) {
        *o = default_value;
      } else if (row >= num_rows) {
        *o = 0.0f;
        if (d == 0) atomicAdd(invalid, 1);
      } else {
        *o = table[static_cast<int64_t>(row) * stride + d];
      }
      continue;
    }
    float acc = 0.0f;
    int64_t valid = 0;
    bool bad = false;
    for (int64_t j = 0; j < per; ++j) {
      const int32_t u = restore[b * per + j];
      if (u < 0 || u >= num_unique) {
        bad = true;
        continue;
      }
      const uint32_t row = static_cast<uint32_t>(unique_rows[u]);
      if (row == kPaddingRowId) continue;
      ++valid;
      if (row == kDefaultRowId) {
        acc += default_value;
      } else if (row >= num_rows) {
        bad = true;
      } else {
        acc += table[static_cast<int64_t>(row) * stride + d];
      }
    }
    if (bad) {
      *o = 0.0f;
      if (d == 0) atomicAdd(invalid, 1);
      continue;
    }
    if (valid > 0 && combine != kCombineSum) {
      const float scale = combine == kCombineMean ? 1.0f / static_cast<float>(valid)
                                                  : 1.0f / sqrtf(static_cast<float>(valid));
      acc *= scale;
    }
    *o = acc;
  }
}

// PaddingMaskKernel: mask[i] = 0 where position i holds a padding row, else 1 (PaddingMask); a
// restore index out of range counts in *invalid.
__global__ void PaddingMaskKernel(const int32_t* unique_rows, int64_t num_unique,
                                  const int32_t* restore, int64_t n, float* mask,
                                  int32_t* invalid) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const int32_t u = restore[i];
    if (u < 0 || u >= num_unique) {
      mask[i] = 0.0f;
      atomicAdd(invalid, 1);
      continue;
    }
    mask[i] = static_cast<uint32_t>(unique_rows[u]) == kPaddingRowId ? 0.0f : 1.0f;
  }
}

// RowIdsKernel: the int64 row ids SparseApply takes from a lookup's uint32 rows: sentinels become
// -1 (skipped); a row >= num_rows below the sentinels becomes -1 too and counts in *invalid.
__global__ void RowIdsKernel(const int32_t* rows, int64_t n, int64_t num_rows, int64_t* out,
                             int32_t* invalid) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const uint32_t row = static_cast<uint32_t>(rows[i]);
    if (row >= kDefaultRowId) {
      out[i] = -1;
    } else if (row >= num_rows) {
      out[i] = -1;
      atomicAdd(invalid, 1);
    } else {
      out[i] = row;
    }
  }
}

// GradKeysKernel: TableGradAggregate's first pass over one feature, one thread per sample b: for
// each of its `per` positions the segment it sums into (its restore index; num_unique, a segment
// never summed, for a pooled padding row and for a bad index, which also counts in *invalid),
// where its gradient row is, and the pooled scale (1 / valid for the mean, 1 / sqrt(valid) for
// sqrtn, as TableGradAggregateKernel computes it on the CPU); order[pos] = pos for the sort.
__global__ void GradKeysKernel(const int32_t* unique_rows, int64_t num_unique,
                               const int32_t* restore, int64_t batch, int64_t per, int combine,
                               const float* grads, int64_t dim, int64_t base, uint32_t* keys,
                               int32_t* order, const float** src, float* scale, int32_t* invalid) {
  for (int64_t b = GlobalIndex(); b < batch; b += GridStride()) {
    const int32_t* r = restore + b * per;
    int64_t valid = 0;
    for (int64_t j = 0; j < per; ++j) {
      const int32_t u = r[j];
      if (u >= 0 && u < num_unique && static_cast<uint32_t>(unique_rows[u]) != kPaddingRowId) {
        ++valid;
      }
    }
    float s = 1.0f;
    if (combine == kCombineMean && valid > 0) s = 1.0f / static_cast<float>(valid);
    if (combine == kCombineSqrtn && valid > 0) s = 1.0f / sqrtf(static_cast<float>(valid));
    for (int64_t j = 0; j < per; ++j) {
      const int64_t pos = base + b * per + j;
      const int32_t u = r[j];
      uint32_t key = static_cast<uint32_t>(num_unique);
      if (u < 0 || u >= num_unique) {
        atomicAdd(invalid, 1);
      } else if (combine == kCombineNone ||
                 static_cast<uint32_t>(unique_rows[u]) != kPaddingRowId) {
        key = static_cast<uint32_t>(u);
      }
      keys[pos] = key;
      order[pos] = static_cast<int32_t>(pos);
      src[pos] = grads + (combine == kCombineNone ? b * per + j : b) * dim;
      scale[pos] = s;
    }
  }
}

// SegmentStartsKernel: offsets[u] = the first index of sorted_keys holding u or more, for u <=
// num_unique (n + 1 threads; the keys are sorted, so each offset is written by exactly one).
__global__ void SegmentStartsKernel(const uint32_t* sorted_keys, int64_t n, int64_t num_unique,
                                    int32_t* offsets) {
  for (int64_t i = GlobalIndex(); i <= n; i += GridStride()) {
    const int64_t prev = i == 0 ? -1 : static_cast<int64_t>(sorted_keys[i - 1]);
    const int64_t here = i == n ? num_unique + 1 : static_cast<int64_t>(sorted_keys[i]);
    for (int64_t u = prev + 1; u <= here && u <= num_unique; ++u) {
      offsets[u] = static_cast<int32_t>(i);
    }
  }
}

// GradSumKernel: one thread per (segment u, column d): the segment's positions in increasing
// order (the stable sort keeps them so), each gradient times its scale when scaled, added to 0:
// the CPU kernel's (feature, sample, position) order, so its bits.
__global__ void GradSumKernel(const int32_t* order, const float* const* src, const float* scale,
                              bool scaled, const int32_t* offsets, int64_t num_unique, int64_t dim,
                              float* out) {
  const int64_t total = num_unique * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t u = t / dim, d = t % dim;
    float acc = 0.0f;
    for (int32_t q = offsets[u]; q < offsets[u + 1]; ++q) {
      const int32_t pos = order[q];
      if (scaled) {
        acc += scale[pos] * src[pos][d];
      } else {
        acc += src[pos][d];
      }
    }
    out[t] = acc;
  }
}

// MergeKeysKernel: TableApply's merge of several lookups' rows, first pass over one lookup's
// `count` rows (positions base.. of the concatenation): the key is the row (num_rows, never
// applied, for a sentinel and for a row past the table, which also counts in *invalid), order the
// position, src its gradient row.
__global__ void MergeKeysKernel(const int32_t* rows, int64_t count, int64_t num_rows,
                                const float* grads, int64_t dim, int64_t base, uint32_t* keys,
                                int32_t* order, const float** src, int32_t* invalid) {
  for (int64_t i = GlobalIndex(); i < count; i += GridStride()) {
    const uint32_t row = static_cast<uint32_t>(rows[i]);
    uint32_t key = static_cast<uint32_t>(num_rows);
    if (row < kDefaultRowId) {
      if (row < num_rows) {
        key = row;
      } else {
        atomicAdd(invalid, 1);
      }
    }
    keys[base + i] = key;
    order[base + i] = static_cast<int32_t>(base + i);
    src[base + i] = grads + i * dim;
  }
}

// MergeSumKernel: one thread per (sorted position i, column d): the first position of each row's
// run sums the run's gradients in increasing position order from 0 (the CPU merge's (lookup,
// position) order) into out[i] and names the row in ids[i]; every other position, and the
// never-applied key num_rows, gets ids[i] = -1 (SparseApply skips it).
__global__ void MergeSumKernel(const uint32_t* sorted_keys, const int32_t* order,
                               const float* const* src, int64_t n, int64_t num_rows, int64_t dim,
                               float* out, int64_t* ids) {
  const int64_t total = n * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t i = t / dim, d = t % dim;
    const uint32_t key = sorted_keys[i];
    if ((i > 0 && sorted_keys[i - 1] == key) || key >= num_rows) {
      if (d == 0) ids[i] = -1;
      continue;
    }
    float acc = 0.0f;
    for (int64_t q = i; q < n && sorted_keys[q] == key; ++q) acc += src[order[q]][d];
    out[t] = acc;
    if (d == 0) ids[i] = key;
  }
}

// AdamRateKernel: RowUpdater's LazyAdam rate for step *step + 1 (TableApply's step1), in double
// as the CPU computes it (pow within 2 ulp of the C library's; sqrt and division exact).
__global__ void AdamRateKernel(const int64_t* step, float lr, float b1, float b2, float* out) {
  const int64_t s1 = *step + 1;
  const double t = static_cast<double>(s1 < 1 ? 1 : s1);
  const double b1t = pow(static_cast<double>(b1), t);
  const double b2t = pow(static_cast<double>(b2), t);
  *out = static_cast<float>(static_cast<double>(lr) * sqrt(1.0 - b2t) / (1.0 - b1t));
}

// SparseApplyKernel: RowUpdater::Apply (src/table/sparse_optimizers.cc), one thread per value:
// the same expressions in the same order.
__global__ void SparseApplyKernel(OptimizerParams c, float* table, int64_t stride, int64_t dim,
                                  const int64_t* rows, const float* grads, int64_t count) {
  const int64_t total = count * dim;
  for (int64_t t = GlobalIndex(); t < total; t += GridStride()) {
    const int64_t u = t / dim, i = t % dim;
    if (rows[u] < 0) continue;  // a sentinel row (padding, default): never trains
    float* row = table + rows[u] * stride;
    const float g = grads[t];
    float& w = row[i];
    switch (c.kind) {
      case kOptSgd:
        if (c.weight_decay == 0.0f) {
          w -= c.learning_rate * g;
        } else {
          w -= c.learning_rate * (g + c.weight_decay * w);
        }
        break;
      case kOptAdagrad: {
        float& acc = row[dim + i];
        const float gi = c.weight_decay == 0.0f ? g : g + c.weight_decay * w;
        const float a = acc + gi * gi;
        acc = a;
        w -= c.learning_rate * gi / (sqrtf(a) + c.adagrad_epsilon);
        break;
      }
      case kOptLazyAdam: {
        float& m = row[dim + i];
        float& v = row[2 * dim + i];
        const float c1 = 1.0f - c.beta1, c2 = 1.0f - c.beta2;
        const float gi = c.weight_decay == 0.0f ? g : g + c.weight_decay * w;
        const float mi = c.beta1 * m + c1 * gi;
        const float vi = c.beta2 * v + c2 * gi * gi;
        m = mi;
        v = vi;
        const float lr_t = c.lr_t_at != nullptr ? *c.lr_t_at : c.lr_t;
        w -= lr_t * mi / (sqrtf(vi) + c.epsilon);
        break;
      }
      default: {
        float& acc = row[dim + i];
        float& lin = row[2 * dim + i];
        const float lr = c.learning_rate, p = c.learning_rate_power;
        const float two_l2 = 2.0f * c.l2, two_shrink = 2.0f * c.l2_shrinkage;
        const bool half = p == -0.5f;
        const float gs = g + two_shrink * w;
        const float a_old = acc;
        const float a_new = a_old + g * g;
        const float pow_new = half ? sqrtf(a_new) : powf(a_new, -p);
        const float pow_old = half ? sqrtf(a_old) : powf(a_old, -p);
        const float l = lin + gs - (pow_new - pow_old) / lr * w;
        lin = l;
        const float quadratic = pow_new / lr + two_l2;
        w = !(fabsf(l) <= c.l1) ? ((l > 0 ? c.l1 : -c.l1) - l) / quadratic : 0.0f;
        acc = a_new;
        break;
      }
    }
  }
}

// The dense optimizers: ApplyGradientDescent (state_kernels.cc) and DenseAdagradReference /
// DenseAdamReference (dense_update_kernels.cc), operation by operation.
__global__ void DenseSgdKernel(float* w, const float* g, int64_t n, float lr) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) w[i] -= lr * g[i];
}

__global__ void DenseAdagradKernel(float* w, float* acc, const float* g, int64_t n, float lr,
                                   float eps) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float a = acc[i] + g[i] * g[i];
    acc[i] = a;
    w[i] -= lr * g[i] / (sqrtf(a) + eps);
  }
}

__global__ void DenseAdamKernel(float* w, float* m, float* v, const float* g, int64_t n, float b1,
                                float b2, float c1, float c2, float eps, float lr_t, float decay,
                                bool weight_decay) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    float wi = w[i];
    if (weight_decay) wi -= decay * wi;
    const float mi = b1 * m[i] + c1 * g[i];
    const float vi = b2 * v[i] + c2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - lr_t * mi / (sqrtf(vi) + eps);
  }
}

// Transpose2DKernel: out[c, r] = x[r, c] through a 32 x 33 shared tile (the padding column keeps
// the tile's column reads free of bank conflicts), so both the reads and the writes coalesce.
constexpr int kTile = 32;
__global__ void Transpose2DKernel(const float* x, int64_t rows, int64_t cols, float* out) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t tiles_c = (cols + kTile - 1) / kTile;
  const int64_t tiles = tiles_c * ((rows + kTile - 1) / kTile);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    for (int k = threadIdx.y; k < kTile; k += blockDim.y) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[k][threadIdx.x] = x[r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += blockDim.y) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;
      if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

__global__ void CopyKernel16(const int4* in, int4* out, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) out[i] = in[i];
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

int Binary(void* stream, int op, const float* x, const float* y, float* out, int64_t n) {
  if (n == 0) return 0;
  BinaryKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(op, x, y, out, n);
  return LastError();
}

int Fill(void* stream, float value, float* out, int64_t n) {
  if (n == 0) return 0;
  FillKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(value, out, n);
  return LastError();
}

int Broadcast(void* stream, const float* dy, int64_t outer, int64_t axis, int64_t inner,
              float scale, float* out) {
  const int64_t n = outer * axis * inner;
  if (n == 0) return 0;
  BroadcastKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(dy, outer, axis, inner, scale, out);
  return LastError();
}

int BiasAdd(void* stream, const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
            bool relu) {
  if (rows * cols == 0) return 0;
  BiasAddKernel<<<Blocks(rows * cols), kThreads, 0, S(stream)>>>(x, bias, out, rows, cols, relu);
  return LastError();
}

int Unary(void* stream, int op, const float* x, float* out, int64_t n) {
  if (n == 0) return 0;
  UnaryKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(op, x, out, n);
  return LastError();
}

int UnaryGrad(void* stream, int op, const float* ref, const float* dy, float* dx, int64_t n) {
  if (n == 0) return 0;
  UnaryGradKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(op, ref, dy, dx, n);
  return LastError();
}

int Reduce(void* stream, bool mean, const float* x, int64_t outer, int64_t axis, int64_t inner,
           float* out) {
  const int64_t n = outer * inner;
  if (n == 0) return 0;
  // Many outputs or a short axis: a thread per output (a warp per output for contiguous rows).
  // Few outputs over a long axis: a block per output (a thread each would leave the GPU idle).
  if (inner == 1 && axis >= 32 && n >= 64) {
    // Rows of a matrix (a per-row sum): a warp per row reads it coalesced.
    ReduceRowsKernel<<<Blocks(n * 32), kThreads, 0, S(stream)>>>(mean, x, n, axis, out);
  } else if (axis < 256 || n >= 4096) {
    ReduceColumnsKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(mean, x, outer, axis, inner, out);
  } else {
    const unsigned blocks = static_cast<unsigned>(n < (1 << 20) ? n : (1 << 20));
    ReduceBlockKernel<<<blocks, kThreads, 0, S(stream)>>>(mean, x, outer, axis, inner, out);
  }
  return LastError();
}

int DotInteraction(void* stream, const float* x, int64_t batch, int64_t f, int64_t d, float* out) {
  const int64_t n = batch * (f * (f - 1) / 2);
  if (n == 0) return 0;
  DotInteractionKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(x, batch, f, d, out);
  return LastError();
}

int DotInteractionGrad(void* stream, const float* x, const float* dy, int64_t batch, int64_t f,
                       int64_t d, float* dx) {
  const int64_t n = batch * f * d;
  if (n == 0) return 0;
  DotInteractionGradKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(x, dy, batch, f, d, dx);
  return LastError();
}

int SigmoidCe(void* stream, const float* labels, const float* logits, float* loss, int64_t n) {
  if (n == 0) return 0;
  SigmoidCeKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(labels, logits, loss, n);
  return LastError();
}

int SigmoidCeGrad(void* stream, const float* labels, const float* logits, const float* dloss,
                  float* dlogits, int64_t n) {
  if (n == 0) return 0;
  SigmoidCeGradKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(labels, logits, dloss, dlogits, n);
  return LastError();
}

int GatherRows(void* stream, const float* table, int64_t num_rows, int64_t stride, int64_t dim,
               const int64_t* ids, int64_t n, float* out, int32_t* invalid_ids) {
  if (n * dim == 0) return 0;
  const bool aligned = dim % 4 == 0 && stride % 4 == 0 &&
                       reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (aligned) {
    GatherRows4Kernel<<<Blocks(n * dim / 4), kThreads, 0, S(stream)>>>(
        reinterpret_cast<const float4*>(table), num_rows, stride / 4, dim / 4, ids, n,
        reinterpret_cast<float4*>(out), invalid_ids);
  } else {
    GatherRowsKernel<<<Blocks(n * dim), kThreads, 0, S(stream)>>>(table, num_rows, stride, dim, ids,
                                                                  n, out, invalid_ids);
  }
  return LastError();
}

int ScatterRows(void* stream, const float* in, int64_t n, int64_t width, const int64_t* rows,
                float* table, int64_t stride) {
  if (n * width == 0) return 0;
  ScatterRowsKernel<<<Blocks(n * width), kThreads, 0, S(stream)>>>(in, n, width, rows, table,
                                                                   stride);
  return LastError();
}

int TableGather(void* stream, const float* table, int64_t num_rows, int64_t stride, int64_t dim,
                const int32_t* unique_rows, int64_t num_unique, const int32_t* restore,
                int64_t batch, int64_t per, int combine, float default_value, int64_t out_stride,
                float* out, int32_t* invalid) {
  if (batch * dim == 0) return 0;
  TableGatherKernel<<<Blocks(batch * dim), kThreads, 0, S(stream)>>>(
      table, num_rows, stride, dim, unique_rows, num_unique, restore, batch, per, combine,
      default_value, out_stride, out, invalid);
  return LastError();
}

int PaddingMask(void* stream, const int32_t* unique_rows, int64_t num_unique,
                const int32_t* restore, int64_t n, float* mask, int32_t* invalid) {
  if (n == 0) return 0;
  PaddingMaskKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(unique_rows, num_unique, restore, n,
                                                           mask, invalid);
  return LastError();
}

int RowIds(void* stream, const int32_t* rows, int64_t n, int64_t num_rows, int64_t* out,
           int32_t* invalid) {
  if (n == 0) return 0;
  RowIdsKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(rows, n, num_rows, out, invalid);
  return LastError();
}

int SegmentSum(void* stream, const float* grads, int64_t dim, const int32_t* offsets,
               const int32_t* positions, int64_t num_segments, float* out) {
  if (num_segments * dim == 0) return 0;
  SegmentSumKernel<<<Blocks(num_segments * dim), kThreads, 0, S(stream)>>>(
      grads, dim, offsets, positions, num_segments, out);
  return LastError();
}

int GradKeys(void* stream, const int32_t* unique_rows, int64_t num_unique, const int32_t* restore,
             int64_t batch, int64_t per, int combine, const float* grads, int64_t dim, int64_t base,
             uint32_t* keys, int32_t* order, const float** src, float* scale, int32_t* invalid) {
  if (batch * per == 0) return 0;
  GradKeysKernel<<<Blocks(batch), kThreads, 0, S(stream)>>>(unique_rows, num_unique, restore, batch,
                                                            per, combine, grads, dim, base, keys,
                                                            order, src, scale, invalid);
  return LastError();
}

int SortKeysTempBytes(int64_t n, int end_bit, size_t* bytes) {
  *bytes = 0;
  return static_cast<int>(cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n), 0,
      end_bit));
}

int SortKeys(void* stream, void* temp, size_t temp_bytes, const uint32_t* keys_in,
             uint32_t* keys_out, const int32_t* order_in, int32_t* order_out, int64_t n,
             int end_bit) {
  if (n == 0) return 0;
  const cudaError_t e =
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, order_in, order_out,
                                      static_cast<int>(n), 0, end_bit, S(stream));
  return e != cudaSuccess ? static_cast<int>(e) : LastError();
}

int SegmentStarts(void* stream, const uint32_t* sorted_keys, int64_t n, int64_t num_unique,
                  int32_t* offsets) {
  SegmentStartsKernel<<<Blocks(n + 1), kThreads, 0, S(stream)>>>(sorted_keys, n, num_unique,
                                                                 offsets);
  return LastError();
}

int GradSum(void* stream, const int32_t* order, const float* const* src, const float* scale,
            bool scaled, const int32_t* offsets, int64_t num_unique, int64_t dim, float* out) {
  if (num_unique * dim == 0) return 0;
  GradSumKernel<<<Blocks(num_unique * dim), kThreads, 0, S(stream)>>>(
      order, src, scale, scaled, offsets, num_unique, dim, out);
  return LastError();
}

int MergeKeys(void* stream, const int32_t* rows, int64_t count, int64_t num_rows,
              const float* grads, int64_t dim, int64_t base, uint32_t* keys, int32_t* order,
              const float** src, int32_t* invalid) {
  if (count == 0) return 0;
  MergeKeysKernel<<<Blocks(count), kThreads, 0, S(stream)>>>(rows, count, num_rows, grads, dim,
                                                             base, keys, order, src, invalid);
  return LastError();
}

int MergeSum(void* stream, const uint32_t* sorted_keys, const int32_t* order,
             const float* const* src, int64_t n, int64_t num_rows, int64_t dim, float* out,
             int64_t* ids) {
  if (n * dim == 0) return 0;
  MergeSumKernel<<<Blocks(n * dim), kThreads, 0, S(stream)>>>(sorted_keys, order, src, n, num_rows,
                                                              dim, out, ids);
  return LastError();
}

int AdamRate(void* stream, const int64_t* step, float lr, float b1, float b2, float* out) {
  AdamRateKernel<<<1, 1, 0, S(stream)>>>(step, lr, b1, b2, out);
  return LastError();
}

int SparseApply(void* stream, const OptimizerParams& params, float* table, int64_t stride,
                int64_t dim, const int64_t* rows, const float* grads, int64_t count) {
  if (count * dim == 0) return 0;
  SparseApplyKernel<<<Blocks(count * dim), kThreads, 0, S(stream)>>>(params, table, stride, dim,
                                                                     rows, grads, count);
  return LastError();
}

int DenseSgd(void* stream, float* w, const float* g, int64_t n, float lr) {
  if (n == 0) return 0;
  DenseSgdKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(w, g, n, lr);
  return LastError();
}

int DenseAdagrad(void* stream, float* w, float* acc, const float* g, int64_t n, float lr,
                 float eps) {
  if (n == 0) return 0;
  DenseAdagradKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(w, acc, g, n, lr, eps);
  return LastError();
}

int DenseAdam(void* stream, float* w, float* m, float* v, const float* g, int64_t n, float b1,
              float b2, float c1, float c2, float eps, float lr_t, float decay, bool weight_decay) {
  if (n == 0) return 0;
  DenseAdamKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(w, m, v, g, n, b1, b2, c1, c2, eps, lr_t,
                                                         decay, weight_decay);
  return LastError();
}

int Transpose2D(void* stream, const float* x, int64_t rows, int64_t cols, float* out) {
  if (rows * cols == 0) return 0;
  const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  const unsigned blocks = static_cast<unsigned>(tiles < (1 << 20) ? tiles : (1 << 20));
  Transpose2DKernel<<<blocks, dim3(kTile, 8), 0, S(stream)>>>(x, rows, cols, out);
  return LastError();
}

int CopyKernel(void* stream, const void* in, void* out, int64_t bytes) {
  const int64_t n = bytes / 16;
  if (n == 0) return 0;
  CopyKernel16<<<Blocks(n), kThreads, 0, S(stream)>>>(static_cast<const int4*>(in),
                                                      static_cast<int4*>(out), n);
  return LastError();
}

}  // namespace recsdk::cuda::launch
