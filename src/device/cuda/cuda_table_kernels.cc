// cuda_table_kernels.cc: the table ops that read and update a table's rows, on the "cuda" device:
// TableGather, TableGatherConcat (the fused gather + concat of the DLRM path), TableApply, and
// TableGradAggregate (the summed gradients of a lookup's unique rows, which reads no rows).
// Their definitions and CPU twins: src/session/table_ops.cc, src/device/cpu/table_op_kernels.cc.
//
// Where a table's rows live decides how its op runs (the placement pass puts every op that reads
// or writes a variable's contents on the device the variable belongs to, session_passes' rule):
//   - a tiered table's device tier in GPU memory (CudaTierMemory, cuda_tier_memory.cc: the
//     Session gives one to every tiered table it creates on "cuda"): CUDA kernels on the slots
//     the key stage resolved (TableGather / TablePaddingMask / TableRowIds + MergeRowGrads +
//     SparseApply of cuda_kernels.h), the same bits as the CPU kernels; only the ids, restore
//     indices and gradients (already in device memory) are read, and the host waits for
//     nothing (LazyAdam's rate is computed on the GPU from the step, AdamRate);
//   - rows in host memory (an untiered table, a table wrapped for distribution): the CPU kernel
//     on host copies of the inputs (RunOnHost), the outputs copied back. Under mix_compile_mode
//     the placement pass already puts such ops on the host; this is the case without it. A
//     TableGatherConcat over both kinds gathers each table where its rows are.
//
// Exactness: TableGather follows PooledGatherRows / GatherRestored term by term. TableApply with
// one lookup passes its summed gradients straight to SparseApply (as the CPU passes them to
// ApplyGradients); with several lookups of one table it merges rows as the CPU does (a row once,
// its gradients summed from 0 in (lookup, position) order: MergeRowGrads, a stable sort by row on
// the GPU) before the update. Sentinel rows (padding, default) never train.
//
// Errors: the CPU kernels check restore indices and rows before touching anything. Here the
// kernels count bad ones on the device (a bad position reads 0, adds nothing, updates nothing)
// and the count is read off the step's path (CounterChecks, cuda_device.h): a nonzero one fails
// the next table op of the device, or its Synchronize (Session::Close), naming the op and run
// that met it, the table and the fix. The key stage makes the indices (DedupKeys, Resolve), so
// only hand-fed ones can be bad; checking them at once cost a host wait per op.
//
// Threading: as kernel.h; launches go to the device's compute stream.
#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "recsdk/table.h"
#include "src/common/status_macros.h"
#include "src/device/cuda/cuda_device.h"
#include "src/device/cuda/cuda_error.h"
#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_op_util.h"
#include "src/device/table_resource.h"
#include "src/graph/op_registry.h"
#include "src/table/table_config_json.h"
#include "src/table/tier_lease.h"

namespace recsdk::cuda {
namespace {

using internal::DeviceTierMemory;
using internal::OpKernelContext;
using internal::TableResource;

StatusOr<TableResource*> TableAt(OpKernelContext& ctx, int input) {
  auto* t = dynamic_cast<TableResource*>(internal::ResourceFromTensor(ctx.input(input)));
  if (t == nullptr) return ctx.Error("input {} is not a table handle", input);
  return t;
}

// DeviceRows: the table's device tier as a RowTable, or nullopt when its rows are host memory.
// The compute stream's later work (the caller's kernels) waits, on the GPU, for the swap-ins the
// key stage queued for the tier (cuda_tier_memory.h).
StatusOr<std::optional<RowTable>> DeviceRows(const EmbeddingTable& table) {
  DeviceTierMemory* memory = internal::DeviceTierMemoryOf(table);
  if (memory == nullptr) return std::optional<RowTable>();
  RECSDK_RETURN_IF_ERROR(memory->ComputeAfterWrites());
  return std::optional<RowTable>(RowTable{memory->rows(), static_cast<int64_t>(memory->capacity()),
                                          memory->row_floats(), table.dim()});
}

TableCombine CombineOf(const std::optional<Combiner>& combiner) {
  if (!combiner) return TableCombine::kNone;
  switch (*combiner) {
    case Combiner::kSum:
      return TableCombine::kSum;
    case Combiner::kMean:
      return TableCombine::kMean;
    default:
      return TableCombine::kSqrtn;
  }
}

const int32_t* I32(const Tensor& t) { return static_cast<const int32_t*>(t.raw_data()); }

// Counter: a zeroed int32 in device memory (the compute stream zeroes it before later kernels).
StatusOr<Tensor> Counter(OpKernelContext& ctx) {
  return ctx.device()->graph_allocator().AllocateTensor(DType::kInt32, Shape{1});
}

// EarlierChecks: the counts of bad indices earlier GPU table ops of this device handed to the
// device's CounterChecks, those already copied back (no wait): the first nonzero one fails this op.
Status EarlierChecks(OpKernelContext& ctx) {
  CounterChecks* checks = CounterChecksOf(ctx.device());
  return checks == nullptr ? absl::OkStatus() : checks->Poll(/*wait=*/false);
}

// CheckLater: the counter is read off the step's path (CounterChecks): a nonzero count fails a
// later table op of the session, or its Synchronize, with this op's message. `what` names the
// positions' table(s); `effect` what the op did with them.
Status CheckLater(OpKernelContext& ctx, const Tensor& counter, std::string what,
                  std::string effect) {
  CounterChecks* checks = CounterChecksOf(ctx.device());
  if (checks == nullptr) return ctx.Error("not on a \"cuda\" device");
  std::string op =
      fmt::format("op \"{}\" ({}), run {}", ctx.node().name(), ctx.node().type(), ctx.step_id());
  return checks->Add(
      static_cast<const int32_t*>(counter.raw_data()),
      [op = std::move(op), what = std::move(what), effect = std::move(effect)](int32_t count) {
        return fmt::format(
            "{}: {} positions of {} have a restore index outside their unique rows "
            "or a row outside the table's device rows ({}; found after the op ran, "
            "the GPU table ops check their indices off the step's path); feed the "
            "unique rows and restore indices of one lookup of the table (its key "
            "stage's outputs)",
            op, count, what, effect);
      });
}
std::string TableWhat(const EmbeddingTable& table) {
  return fmt::format("table \"{}\" ({} device rows)", table.name(),
                     internal::GetDeviceTierShape(table).rows);
}

Status TableGatherKernel(OpKernelContext& ctx) {
  RECSDK_RETURN_IF_ERROR(EarlierChecks(ctx));
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableAt(ctx, 0));
  const EmbeddingTable& table = *t->table();
  RECSDK_ASSIGN_OR_RETURN(const std::optional<RowTable> rows, DeviceRows(table));
  if (!rows) return RunOnHost(ctx);
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& unique = ctx.input(1);
  const int k = static_cast<int>(internal::NodeAttrs(ctx.node()).Int("num_features"));
  RECSDK_ASSIGN_OR_RETURN(auto combiner,
                          internal::ParseCombiner(ctx.node().StringAttr("combiner")));
  const int64_t dim = table.dim();
  RECSDK_ASSIGN_OR_RETURN(Tensor invalid, Counter(ctx));
  // The mask's kernel counts the same bad positions again: into a counter nobody reads.
  std::optional<Tensor> mask_invalid;
  if (ctx.node().BoolAttr("padding_mask")) {
    RECSDK_ASSIGN_OR_RETURN(mask_invalid, Counter(ctx));
  }
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(2 + f);
    if (restore.rank() != 2) {
      return ctx.Error("restore index {} is {}, not [batch, n]", f, restore.shape().ToString());
    }
    const int64_t b = restore.dim(0), n = restore.dim(1);
    const TableLookup lookup{I32(unique), unique.num_elements(), I32(restore), b, n};
    const Shape shape = combiner ? Shape{b, dim} : Shape{b, n, dim};
    RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(f, shape));
    RECSDK_RETURN_IF_ERROR(TableGather(
        *s, *rows, lookup, CombineOf(combiner), table.config().serving_default_value, dim,
        static_cast<float*>(out->raw_data()), static_cast<int32_t*>(invalid.raw_data())));
    if (ctx.node().BoolAttr("padding_mask")) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output_uninitialized(k + f, Shape{b, n}));
      RECSDK_RETURN_IF_ERROR(TablePaddingMask(*s, lookup, static_cast<float*>(mask->raw_data()),
                                              static_cast<int32_t*>(mask_invalid->raw_data())));
    }
  }
  return CheckLater(ctx, invalid, TableWhat(table), "their outputs were written as 0");
}

Status TableGatherConcatKernel(OpKernelContext& ctx) {
  RECSDK_RETURN_IF_ERROR(EarlierChecks(ctx));
  const std::vector<int64_t> dims = ctx.node().IntsAttr("dims");
  const std::vector<std::string> combiners = ctx.node().StringsAttr("combiners");
  RECSDK_ASSIGN_OR_RETURN(
      auto segments, internal::GatherConcatSegments(
                         ctx.node().IntsAttr("segment_kinds"), static_cast<int64_t>(dims.size()),
                         ctx.num_inputs(), [&](std::string m) { return ctx.Error("{}", m); }));
  if (combiners.size() != dims.size()) {
    return ctx.Error("{} combiners for {} gathers", combiners.size(), dims.size());
  }
  // Tables whose rows are all host memory: the CPU kernel on the host. Otherwise each table in
  // GPU memory is gathered here and each one in host memory on the host (its rows must not be
  // read by a host kernel reading the others).
  std::vector<std::optional<RowTable>> tables(segments.size());
  bool any_on_device = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!segments[i].gather) continue;
    RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableAt(ctx, segments[i].input));
    RECSDK_ASSIGN_OR_RETURN(tables[i], DeviceRows(*t->table()));
    any_on_device = any_on_device || tables[i].has_value();
  }
  if (!any_on_device) return RunOnHost(ctx);
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  int64_t batch = -1, width = 0;
  for (const internal::GatherConcatSegment& seg : segments) {
    const Tensor& in = ctx.input(seg.gather ? seg.input + 2 : seg.input);
    if (in.rank() != 2) {
      return ctx.Error("input {} is {}, not a matrix", seg.input, in.shape().ToString());
    }
    if (batch >= 0 && in.dim(0) != batch) {
      return ctx.Error(
          "segments have batch {} and {}: feed every lookup and dense input the same batch", batch,
          in.dim(0));
    }
    batch = in.dim(0);
    width += seg.gather ? dims[seg.gather_index] : in.dim(1);
  }
  batch = std::max<int64_t>(batch, 0);
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(0, Shape{batch, width}));
  float* o = static_cast<float*>(out->raw_data());
  RECSDK_ASSIGN_OR_RETURN(Tensor invalid, Counter(ctx));
  int64_t column = 0;
  std::vector<std::string> gpu_tables;  // for the message
  for (size_t i = 0; i < segments.size(); ++i) {
    const internal::GatherConcatSegment& seg = segments[i];
    if (!seg.gather) {
      const Tensor& in = ctx.input(seg.input);
      const int64_t w = in.dim(1);
      if (batch > 0 && w > 0) {
        RECSDK_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(o + column, static_cast<size_t>(width) * sizeof(float), in.raw_data(),
                              static_cast<size_t>(w) * sizeof(float),
                              static_cast<size_t>(w) * sizeof(float), static_cast<size_t>(batch),
                              cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s->native())),
            "TableGatherConcat: cudaMemcpy2DAsync"));
      }
      column += w;
      continue;
    }
    RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableAt(ctx, seg.input));
    const EmbeddingTable& table = *t->table();
    if (tables[i]) gpu_tables.push_back(fmt::format("\"{}\"", table.name()));
    const int64_t dim = dims[seg.gather_index];
    if (table.dim() != dim) {
      return ctx.Error("table \"{}\" has dim {}, the fused gather expects {}", table.name(),
                       table.dim(), dim);
    }
    RECSDK_ASSIGN_OR_RETURN(auto combiner, internal::ParseCombiner(combiners[seg.gather_index]));
    if (!combiner) return ctx.Error("gather segment {} is not pooled", seg.gather_index);
    const Tensor& unique = ctx.input(seg.input + 1);
    const Tensor& restore = ctx.input(seg.input + 2);
    if (!tables[i]) {
      // Host rows: the table's own pooled gather on host copies of the ids, then the [batch, dim]
      // result up and into its columns.
      RECSDK_ASSIGN_OR_RETURN(Tensor host_unique, OnHost(ctx, unique));
      RECSDK_ASSIGN_OR_RETURN(Tensor host_restore, OnHost(ctx, restore));
      RECSDK_ASSIGN_OR_RETURN(Tensor pooled, Tensor::Create(DType::kFloat32, Shape{batch, dim}));
      RECSDK_RETURN_IF_ERROR(table.GatherPooled(
          absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(host_unique.raw_data()),
                                     static_cast<size_t>(host_unique.num_elements())),
          absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(host_restore.raw_data()),
                                     static_cast<size_t>(host_restore.num_elements())),
          restore.dim(0), restore.dim(1), *combiner, pooled.flat<float>()));
      RECSDK_ASSIGN_OR_RETURN(
          Tensor up, ctx.device()->graph_allocator().AllocateTensor(
                         DType::kFloat32, Shape{batch, dim}, internal::Fill::kUninitialized));
      RECSDK_RETURN_IF_ERROR(ctx.device()->data_transfer().CopyHostToDevice(pooled, &up));
      if (batch > 0) {
        RECSDK_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(o + column, static_cast<size_t>(width) * sizeof(float), up.raw_data(),
                              static_cast<size_t>(dim) * sizeof(float),
                              static_cast<size_t>(dim) * sizeof(float), static_cast<size_t>(batch),
                              cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s->native())),
            "TableGatherConcat: cudaMemcpy2DAsync"));
      }
      column += dim;
      continue;
    }
    const TableLookup lookup{I32(unique), unique.num_elements(), I32(restore), restore.dim(0),
                             restore.dim(1)};
    RECSDK_RETURN_IF_ERROR(TableGather(*s, *tables[i], lookup, CombineOf(combiner),
                                       table.config().serving_default_value, width, o + column,
                                       static_cast<int32_t*>(invalid.raw_data())));
    column += dim;
  }
  return CheckLater(ctx, invalid, fmt::format("tables {}", fmt::join(gpu_tables, ", ")),
                    "their outputs were written as 0");
}

// TableGradAggregateKernel: the summed gradients of a lookup's unique rows, on the GPU from the
// gradients where the dense part left them (cuda_kernels.h's TableGradAggregate: a stable sort of
// the restore positions and fixed-order sums, AggregateLookupGradients' bits), so a tiered
// table's gradients never go down to the host and come back summed. The shapes are checked here
// as the CPU kernel checks them; a restore index outside the unique rows is counted on the
// device and fails the op as the gathers' do.
Status TableGradAggregateKernel(OpKernelContext& ctx) {
  RECSDK_RETURN_IF_ERROR(EarlierChecks(ctx));
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const Tensor& unique = ctx.input(0);
  const int k = static_cast<int>(internal::NodeAttrs(ctx.node()).Int("num_features"));
  const int64_t dim = ctx.node().IntAttr("dim");
  RECSDK_ASSIGN_OR_RETURN(auto combiner,
                          internal::ParseCombiner(ctx.node().StringAttr("combiner")));
  if (ctx.num_inputs() != 1 + 2 * k) {
    return ctx.Error(
        "{} inputs for {} features: pass the unique rows, {} restores and {} "
        "gradients",
        ctx.num_inputs(), k, k, k);
  }
  const int64_t num_unique = unique.num_elements();
  std::vector<GradFeature> features;
  int64_t positions = 0;
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(1 + f);
    const Tensor& grad = ctx.input(1 + k + f);
    if (restore.rank() != 2) {
      return ctx.Error("restore index {} is {}, not [batch, n]", f, restore.shape().ToString());
    }
    const int64_t b = restore.dim(0), n = restore.dim(1);
    const int64_t want = combiner ? b * dim : b * n * dim;
    if (grad.num_elements() != want) {
      return ctx.Error("gradient {} of feature {} does not match restore {} and dim {}",
                       grad.shape().ToString(), f, restore.shape().ToString(), dim);
    }
    features.push_back({I32(restore), b, n, static_cast<const float*>(grad.raw_data())});
    positions += b * n;
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output_uninitialized(0, Shape{num_unique, dim}));
  RECSDK_ASSIGN_OR_RETURN(int64_t bytes, TableGradAggregateScratchBytes(positions, num_unique));
  RECSDK_ASSIGN_OR_RETURN(Tensor scratch,
                          ctx.device()->graph_allocator().AllocateTensor(
                              DType::kUInt8, Shape{bytes}, internal::Fill::kUninitialized));
  RECSDK_ASSIGN_OR_RETURN(Tensor invalid, Counter(ctx));
  RECSDK_RETURN_IF_ERROR(TableGradAggregate(
      *s, I32(unique), num_unique, features, CombineOf(combiner), dim, scratch.raw_data(), bytes,
      static_cast<float*>(out->raw_data()), static_cast<int32_t*>(invalid.raw_data())));
  return CheckLater(ctx, invalid, fmt::format("a lookup of {} unique rows", num_unique),
                    "their gradients were left out of the sums");
}

// UsesStep: whether SparseApply's update depends on the step (LazyAdam's bias correction).
bool UsesStep(const SparseOptimizerConfig& config) {
  return config.kind == SparseOptimizerKind::kLazyAdam ||
         config.kind == SparseOptimizerKind::kLazyAdamByAddress;
}

Status TableApplyKernel(OpKernelContext& ctx) {
  RECSDK_RETURN_IF_ERROR(EarlierChecks(ctx));
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableAt(ctx, 0));
  EmbeddingTable& table = *t->table();
  RECSDK_ASSIGN_OR_RETURN(const std::optional<RowTable> rows, DeviceRows(table));
  if (!rows) return RunOnHost(ctx);
  RECSDK_ASSIGN_OR_RETURN(Stream * s, StreamOf(ctx));
  const int64_t dim = table.dim();
  const int parts = (ctx.num_inputs() - 2) / 2;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(2 + 2 * p);
    const Tensor& g = ctx.input(3 + 2 * p);
    if (g.num_elements() != u.num_elements() * dim) {
      return ctx.Error("summed gradients {} do not match {} rows of dim {} of table \"{}\"",
                       g.shape().ToString(), u.num_elements(), dim, table.name());
    }
  }
  const Tensor& step_in = ctx.input(1);
  if (step_in.dtype() != DType::kInt64 || step_in.num_elements() != 1) {
    return ctx.Error("step must be an int64 scalar");
  }
  // Only LazyAdam's rate depends on the step, and it is computed on the GPU from the step where
  // it is (AdamRate): the step never comes down (a host wait for the work queued before). A step
  // fed from the host is read there.
  int64_t step1 = 1;
  const float* device_lr_t = nullptr;
  std::optional<Tensor> rate;
  if (UsesStep(table.optimizer())) {
    if (step_in.on_host()) {
      step1 = step_in.scalar<int64_t>() + 1;
    } else {
      RECSDK_ASSIGN_OR_RETURN(rate, ctx.device()->graph_allocator().AllocateTensor(
                                        DType::kFloat32, Shape{1}, internal::Fill::kUninitialized));
      RECSDK_RETURN_IF_ERROR(AdamRate(*s, table.optimizer(),
                                      static_cast<const int64_t*>(step_in.raw_data()),
                                      static_cast<float*>(rate->raw_data())));
      device_lr_t = static_cast<const float*>(rate->raw_data());
    }
  }
  if (parts == 1) {
    // The lookup's unique rows, each once: their summed gradients go straight to the update.
    const Tensor& u = ctx.input(2);
    const int64_t count = u.num_elements();
    RECSDK_ASSIGN_OR_RETURN(
        Tensor ids, ctx.device()->graph_allocator().AllocateTensor(DType::kInt64, Shape{count},
                                                                   internal::Fill::kUninitialized));
    RECSDK_ASSIGN_OR_RETURN(Tensor invalid, Counter(ctx));
    RECSDK_RETURN_IF_ERROR(TableRowIds(*s, I32(u), count, rows->num_rows,
                                       static_cast<int64_t*>(ids.raw_data()),
                                       static_cast<int32_t*>(invalid.raw_data())));
    // A row outside the device rows becomes -1 (never updated) and is counted; the count is read
    // off the step's path (unlike the CPU kernel, the other rows of such a batch are updated).
    RECSDK_RETURN_IF_ERROR(SparseApply(
        *s, table.optimizer(), step1, *rows, static_cast<const int64_t*>(ids.raw_data()),
        static_cast<const float*>(ctx.input(3).raw_data()), count, device_lr_t));
    return CheckLater(ctx, invalid, TableWhat(table), "those rows were not updated");
  }
  // Several lookups of one table: the CPU kernel's merge, on the GPU (MergeRowGrads: a stable sort
  // by row, each row once with its gradients summed from 0 in (lookup, position) order); no row
  // comes down. Sentinels and repeats get id -1, which SparseApply skips.
  std::vector<RowGrads> parts_on_gpu;
  int64_t total = 0;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(2 + 2 * p);
    parts_on_gpu.push_back(
        {I32(u), u.num_elements(), static_cast<const float*>(ctx.input(3 + 2 * p).raw_data())});
    total += u.num_elements();
  }
  RECSDK_ASSIGN_OR_RETURN(int64_t bytes, MergeRowGradsScratchBytes(total, rows->num_rows));
  internal::LimitedAllocator& pool = ctx.device()->graph_allocator();
  RECSDK_ASSIGN_OR_RETURN(Tensor scratch, pool.AllocateTensor(DType::kUInt8, Shape{bytes},
                                                              internal::Fill::kUninitialized));
  RECSDK_ASSIGN_OR_RETURN(
      Tensor summed, pool.AllocateTensor(DType::kFloat32, Shape{std::max<int64_t>(total, 1), dim},
                                         internal::Fill::kUninitialized));
  RECSDK_ASSIGN_OR_RETURN(Tensor ids,
                          pool.AllocateTensor(DType::kInt64, Shape{std::max<int64_t>(total, 1)},
                                              internal::Fill::kUninitialized));
  RECSDK_ASSIGN_OR_RETURN(Tensor invalid, Counter(ctx));
  RECSDK_RETURN_IF_ERROR(MergeRowGrads(*s, parts_on_gpu, rows->num_rows, dim, scratch.raw_data(),
                                       bytes, static_cast<float*>(summed.raw_data()),
                                       static_cast<int64_t*>(ids.raw_data()),
                                       static_cast<int32_t*>(invalid.raw_data())));
  RECSDK_RETURN_IF_ERROR(
      SparseApply(*s, table.optimizer(), step1, *rows, static_cast<const int64_t*>(ids.raw_data()),
                  static_cast<const float*>(summed.raw_data()), total, device_lr_t));
  return CheckLater(ctx, invalid, TableWhat(table), "those rows were not updated");
}

}  // namespace

void RegisterCudaTableKernels(internal::KernelRegistry& r) {
  const DType any = DType::kInvalid;
  RegisterCudaOp(r, internal::kTableGatherOp, {any}, TableGatherKernel);
  RegisterCudaOp(r, internal::kTableGatherConcatOp, {any}, TableGatherConcatKernel);
  RegisterCudaOp(r, internal::kTableApplyOp, {any}, TableApplyKernel);
  RegisterCudaOp(r, internal::kTableGradAggregateOp, {any}, TableGradAggregateKernel);
}

}  // namespace recsdk::cuda
