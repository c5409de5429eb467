// table_op_kernels.cc: the CPU kernels of the table ops (their definitions:
// src/session/table_ops.cc): TableHandle, SparseLookup / TableLookupGroup / TableLookupForward
// (the key work of in-graph lookups), TableGather, TableGatherConcat, TableGradAggregate and
// TableApply. Each reaches its table through the TableResource behind its handle input, whose
// table takes the lock table.h's contract asks for (src/table/locked_table.h).
//
// Threading: kernels follow kernel.h (one node at a time per kernel). SparseLookup takes the
// table's lock exclusively in training (Resolve changes which keys the table holds) and shared in
// evaluation (Resolve reads the key index, which a training resolve under stream_max_parallel_num
// or the key stage may be growing); TableGather and TableApply only touch the rows they are given
// (table.h allows them beside a Resolve).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fmt/format.h"
#include "recsdk/table.h"
#include "src/common/status_macros.h"
#include "src/device/cpu/kernel_util.h"
#include "src/device/kernel.h"
#include "src/device/table_resource.h"
#include "src/graph/op_registry.h"
#include "src/table/dedup.h"
#include "src/table/table_config_json.h"
#include "src/table/table_key_work.h"
#include "src/table/tier_lease.h"

namespace recsdk::internal {
namespace {

constexpr uint32_t kPaddingRow = EmbeddingTable::kPaddingRow;
constexpr uint32_t kDefaultRow = EmbeddingTable::kDefaultRow;

// Float32 row of a [U] int32 tensor holding uint32 row ids.
inline uint32_t RowAt(const Tensor& unique_rows, int64_t i) {
  return static_cast<uint32_t>(unique_rows.data<int32_t>()[i]);
}

StatusOr<TableResource*> TableInput(OpKernelContext& ctx) {
  auto* t = dynamic_cast<TableResource*>(ResourceFromTensor(ctx.input(0)));
  if (t == nullptr) return ctx.Error("input 0 is not a table handle");
  return t;
}

Status CheckRestore(OpKernelContext& ctx, const Tensor& restore, int64_t num_unique) {
  const int32_t* r = restore.data<int32_t>();
  for (int64_t i = 0; i < restore.num_elements(); ++i) {
    if (r[i] < 0 || r[i] >= num_unique) {
      return ctx.Error("restore index {} at position {} is outside the {} unique rows", r[i], i,
                       num_unique);
    }
  }
  return absl::OkStatus();
}

Status TableHandleKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, GetOrCreateTable(ctx.resources(), ctx.node()));
  ctx.set_output(0, MakeResourceTensor(t));
  return absl::OkStatus();
}

// RunLookups: the key work of lookups of one table and one mode whose inputs follow the handle
// in the order of `attrs`; their outputs in the same order.
Status RunLookups(OpKernelContext& ctx, const std::vector<LookupAttrs>& attrs) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  std::vector<LookupBatch> lookups(attrs.size());
  int next = 1;
  for (size_t l = 0; l < attrs.size(); ++l) {
    const LookupAttrs& a = attrs[l];
    LookupBatch& b = lookups[l];
    b.attrs = &a;
    for (int f = 0; f < a.num_features; ++f) b.ids.push_back(&ctx.input(next + f));
    if (a.has_mask) b.mask = &ctx.input(next + a.mask_input());
    if (a.has_timestamps) b.timestamps = &ctx.input(next + a.timestamps_input());
    next += a.num_inputs();
  }
  TableKeyWork work;
  work.table_name = attrs.front().table_name;
  RECSDK_RETURN_IF_ERROR(PrepareTableKeys(lookups, &work));
  // Training: the key index alone. Evaluation reads it: no training resolve may insert (or
  // rehash) meanwhile.
  const LookupMode mode = attrs.front().is_train ? LookupMode::kTrain : LookupMode::kEval;
  {
    TableGuard table = t->table()->LockKeys(mode);
    RECSDK_RETURN_IF_ERROR(ResolveTableKeys(table.get(), mode, &work));
  }
  int out = 0;
  for (TableKeyWork::Part& part : work.parts) {
    ctx.set_output(out++, std::move(part.unique_rows));
    for (Tensor& r : part.restore) ctx.set_output(out++, std::move(r));
  }
  return absl::OkStatus();
}

Status SparseLookupKernel(OpKernelContext& ctx) {
  // A moved lookup runs only in its key stage: running it here would do its key work (for a
  // training lookup: admission and inserts) on whatever batch fed the ids, e.g. an evaluation one.
  if (ctx.node().BoolAttr("moved_to_key_stage")) {
    const bool train = NodeAttrs(ctx.node()).Bool("is_train");
    return absl::FailedPreconditionError(fmt::format(
        "sparse_lookup \"{}\" (table \"{}\", is_train {}) was moved to the key stage "
        "(ModifyGraph) but this step did not feed its results: feed the step from a {} key stage "
        "(KeyStageChannel::{}), and fetch only outputs of that channel's lookups",
        ctx.node().name(), ctx.node().StringAttr("table_name"), train,
        train ? "training" : "evaluation", train ? "kTrain" : "kEval"));
  }
  return RunLookups(ctx, {ReadLookupAttrs(ctx.node())});
}

Status TableLookupGroupKernel(OpKernelContext& ctx) {
  return RunLookups(ctx, ReadGroupAttrs(ctx.node()));
}

Status TableLookupForwardKernel(OpKernelContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) ctx.set_output(i, ctx.input(i));
  return absl::OkStatus();
}

// AfterSwapIns: the compute stream's next work starts after the swap-ins queued for `table`'s
// device tier (its rows of this step may still be on their way, tier_memory.h); nothing for a
// table whose rows are host memory.
Status AfterSwapIns(const EmbeddingTable& table) {
  DeviceTierMemory* memory = DeviceTierMemoryOf(table);
  return memory == nullptr ? absl::OkStatus() : memory->ComputeAfterWrites();
}

Status TableGatherKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  const EmbeddingTable& table = *t->table();
  RECSDK_RETURN_IF_ERROR(AfterSwapIns(table));
  const Tensor& unique = ctx.input(1);
  const int k = static_cast<int>(NodeAttrs(ctx.node()).Int("num_features"));
  RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(ctx.node().StringAttr("combiner")));
  const int64_t dim = table.dim();
  const auto rows = absl::Span<const uint32_t>(
      reinterpret_cast<const uint32_t*>(unique.data<int32_t>()), unique.num_elements());
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(2 + f);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, unique.num_elements()));
    const auto idx = absl::Span<const uint32_t>(
        reinterpret_cast<const uint32_t*>(restore.data<int32_t>()), restore.num_elements());
    const int64_t b = restore.dim(0), n = restore.dim(1);
    // Both gathers write every element of their output: no zero-fill.
    if (!combiner) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(f, Shape{b, n, dim}));
      RECSDK_RETURN_IF_ERROR(table.GatherRestored(rows, idx, out->flat<float>()));
    } else {
      RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(f, Shape{b, dim}));
      RECSDK_RETURN_IF_ERROR(table.GatherPooled(rows, idx, b, n, *combiner, out->flat<float>()));
    }
    if (ctx.node().BoolAttr("padding_mask")) {
      RECSDK_ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output(k + f, Shape{b, n}));
      RECSDK_RETURN_IF_ERROR(table.PaddingMask(rows, idx, mask->flat<float>()));
    }
  }
  return absl::OkStatus();
}

// TableGatherConcatKernel: each pooled gather writes its [batch, dim] straight into its columns
// of the [batch, width] output (no per-table buffer, no concat copy); dense segments are copied.
Status TableGatherConcatKernel(OpKernelContext& ctx) {
  const std::vector<int64_t> dims = ctx.node().IntsAttr("dims");
  const std::vector<std::string> combiners = ctx.node().StringsAttr("combiners");
  RECSDK_ASSIGN_OR_RETURN(
      auto segments,
      GatherConcatSegments(ctx.node().IntsAttr("segment_kinds"), static_cast<int64_t>(dims.size()),
                           ctx.num_inputs(), [&](std::string m) { return ctx.Error("{}", m); }));
  if (combiners.size() != dims.size()) {
    return ctx.Error("{} combiners for {} gathers", combiners.size(), dims.size());
  }
  int64_t batch = -1, width = 0;
  for (const GatherConcatSegment& s : segments) {
    const Tensor& in = ctx.input(s.gather ? s.input + 2 : s.input);
    if (in.rank() != 2)
      return ctx.Error("input {} is {}, not a matrix", s.input, in.shape().ToString());
    if (batch >= 0 && in.dim(0) != batch) {
      return ctx.Error(
          "segments have batch {} and {}: feed every lookup and dense input the same "
          "batch",
          batch, in.dim(0));
    }
    batch = in.dim(0);
    width += s.gather ? dims[s.gather_index] : in.dim(1);
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output_uninitialized(
                                            0, Shape{std::max<int64_t>(batch, 0), width}));
  float* o = out->data<float>();
  int64_t column = 0;
  for (const GatherConcatSegment& s : segments) {
    const absl::Span<float> at =
        out->flat<float>().subspan(static_cast<size_t>(std::min(column, out->num_elements())));
    if (!s.gather) {
      const Tensor& in = ctx.input(s.input);
      const int64_t w = in.dim(1);
      const float* src = in.data<float>();
      ParallelFor(batch, GrainPerItem(w), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          std::copy_n(src + b * w, w, o + b * width + column);
        }
      });
      column += w;
      continue;
    }
    auto* t = dynamic_cast<TableResource*>(ResourceFromTensor(ctx.input(s.input)));
    if (t == nullptr) return ctx.Error("input {} is not a table handle", s.input);
    const EmbeddingTable& table = *t->table();
    RECSDK_RETURN_IF_ERROR(AfterSwapIns(table));
    const int64_t dim = dims[s.gather_index];
    if (table.dim() != dim) {
      return ctx.Error("table \"{}\" has dim {}, the fused gather expects {}", table.name(),
                       table.dim(), dim);
    }
    const Tensor& unique = ctx.input(s.input + 1);
    const Tensor& restore = ctx.input(s.input + 2);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, unique.num_elements()));
    RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(combiners[s.gather_index]));
    if (!combiner) return ctx.Error("gather segment {} is not pooled", s.gather_index);
    RECSDK_RETURN_IF_ERROR(table.GatherPooledStrided(
        absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(unique.data<int32_t>()),
                                   unique.num_elements()),
        absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(restore.data<int32_t>()),
                                   restore.num_elements()),
        restore.dim(0), restore.dim(1), *combiner, width, at));
    column += dim;
  }
  return absl::OkStatus();
}

Status TableGradAggregateKernel(OpKernelContext& ctx) {
  const Tensor& unique = ctx.input(0);
  const int k = static_cast<int>(NodeAttrs(ctx.node()).Int("num_features"));
  const int64_t dim = ctx.node().IntAttr("dim");
  RECSDK_ASSIGN_OR_RETURN(auto combiner, ParseCombiner(ctx.node().StringAttr("combiner")));
  const int64_t num_unique = unique.num_elements();
  RECSDK_ASSIGN_OR_RETURN(Tensor * out,
                          ctx.allocate_output_uninitialized(0, Shape{num_unique, dim}));
  std::vector<LookupGradient> features;
  for (int f = 0; f < k; ++f) {
    const Tensor& restore = ctx.input(1 + f);
    const Tensor& grad = ctx.input(1 + k + f);
    RECSDK_RETURN_IF_ERROR(CheckRestore(ctx, restore, num_unique));
    const int64_t b = restore.dim(0), n = restore.dim(1);
    const int64_t want = combiner ? b * dim : b * n * dim;
    if (grad.num_elements() != want) {
      return ctx.Error("gradient {} of feature {} does not match restore {} and dim {}",
                       grad.shape().ToString(), f, restore.shape().ToString(), dim);
    }
    features.push_back(
        {.restore = restore.flat<int32_t>(), .batch = b, .per = n, .grad = grad.flat<float>()});
  }
  const Status s = AggregateLookupGradients(
      absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(unique.data<int32_t>()),
                                 static_cast<size_t>(num_unique)),
      features, combiner, dim, out->flat<float>());
  return s.ok() ? s : ctx.Error("{}", s.message());
}

Status TableApplyKernel(OpKernelContext& ctx) {
  RECSDK_ASSIGN_OR_RETURN(TableResource * t, TableInput(ctx));
  EmbeddingTable& table = *t->table();
  RECSDK_RETURN_IF_ERROR(AfterSwapIns(table));
  const Tensor& step = ctx.input(1);
  if (step.dtype() != DType::kInt64 || step.num_elements() != 1) {
    return ctx.Error("step must be an int64 scalar");
  }
  const int64_t dim = table.dim();
  const int parts = (ctx.num_inputs() - 2) / 2;
  std::vector<uint32_t> rows;
  std::vector<float> merged;
  const uint32_t* row_ptr = nullptr;
  const float* grad_ptr = nullptr;
  int64_t count = 0;
  for (int p = 0; p < parts; ++p) {
    const Tensor& u = ctx.input(2 + 2 * p);
    const Tensor& g = ctx.input(3 + 2 * p);
    if (g.num_elements() != u.num_elements() * dim) {
      return ctx.Error("summed gradients {} do not match {} rows of dim {} of table \"{}\"",
                       g.shape().ToString(), u.num_elements(), dim, table.name());
    }
  }
  if (parts == 1) {
    const Tensor& u = ctx.input(2);
    row_ptr = reinterpret_cast<const uint32_t*>(u.data<int32_t>());
    grad_ptr = ctx.input(3).data<float>();
    count = u.num_elements();
  } else {
    // Several lookups of one table: one summed gradient per row, so each row updates once.
    absl::flat_hash_map<uint32_t, int64_t> slot;
    for (int p = 0; p < parts; ++p) {
      const Tensor& u = ctx.input(2 + 2 * p);
      const float* g = ctx.input(3 + 2 * p).data<float>();
      for (int64_t i = 0; i < u.num_elements(); ++i) {
        const uint32_t row = RowAt(u, i);
        if (row == kPaddingRow || row == kDefaultRow) continue;
        auto [it, inserted] = slot.try_emplace(row, static_cast<int64_t>(rows.size()));
        if (inserted) {
          rows.push_back(row);
          merged.resize(merged.size() + dim, 0.0f);
        }
        float* o = merged.data() + it->second * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += g[i * dim + d];
      }
    }
    row_ptr = rows.data();
    grad_ptr = merged.data();
    count = static_cast<int64_t>(rows.size());
  }
  const int64_t step1 = step.scalar<int64_t>() + 1;
  const auto row_span = absl::Span<const uint32_t>(row_ptr, count);
  const auto grad_span = absl::Span<const float>(grad_ptr, count * dim);
  if (table.optimizer().ByAddress()) {
    std::vector<float*> addresses(count);
    RECSDK_RETURN_IF_ERROR(table.RowAddresses(row_span, absl::MakeSpan(addresses)));
    return table.ApplyGradientsByAddress(addresses, grad_span, step1);
  }
  return table.ApplyGradients(row_span, grad_span, step1);
}

}  // namespace

void RegisterCpuTableKernels(KernelRegistry& r) {
  const DType any = DType::kInvalid;
  r.RegisterFn(kTableHandleOp, kCpu, {any}, TableHandleKernel);
  r.RegisterFn(kSparseLookupOp, kCpu, {any}, SparseLookupKernel);
  r.RegisterFn(kTableGatherOp, kCpu, {any}, TableGatherKernel);
  r.RegisterFn(kTableGradAggregateOp, kCpu, {any}, TableGradAggregateKernel);
  r.RegisterFn(kTableGatherConcatOp, kCpu, {any}, TableGatherConcatKernel);
  r.RegisterFn(kTableApplyOp, kCpu, {any}, TableApplyKernel);
  r.RegisterFn(kTableLookupGroupOp, kCpu, {any}, TableLookupGroupKernel);
  r.RegisterFn(kTableLookupForwardOp, kCpu, {any}, TableLookupForwardKernel);
}

}  // namespace recsdk::internal
