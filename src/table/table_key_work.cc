// table_key_work.cc: the key work of the lookups of one table on one batch, shared by the in-graph
// kernels (SparseLookup, TableLookupGroup) and the key stage: gather the ids of every lookup,
// dedup them in one pass, weight the admission counts, resolve once, and hand each lookup its
// own unique rows and restore indices.
//
// Threading: PrepareTableKeys touches only its arguments (callers run it for several batches at
// once); ResolveTableKeys needs a guard of the table's lock (table_key_work.h).
#include "src/table/table_key_work.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "fmt/format.h"
#include "src/common/check.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

namespace {

constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();

Status CheckTensors(const LookupBatch& l) {
  const LookupAttrs& a = *l.attrs;
  const int64_t batch = l.ids.empty() ? 0 : l.ids[0]->dim(0);
  for (size_t f = 0; f < l.ids.size(); ++f) {
    const Tensor& t = *l.ids[f];
    if (t.rank() != 2 || t.dim(0) != batch ||
        (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)) {
      return absl::InvalidArgumentError(fmt::format(
          "sparse_lookup \"{}\" (table \"{}\"): ids of feature {} are {} {}; expected int64 or "
          "int32 [{}, n]",
          a.name, a.table_name, f, DTypeName(t.dtype()), t.shape().ToString(), batch));
    }
  }
  if (l.mask != nullptr &&
      (l.mask->dtype() != DType::kFloat32 || l.mask->num_elements() != batch)) {
    return absl::InvalidArgumentError(
        fmt::format("sparse_lookup \"{}\": mask is {} {}; expected float32 [{}]", a.name,
                    DTypeName(l.mask->dtype()), l.mask->shape().ToString(), batch));
  }
  if (l.timestamps != nullptr &&
      (l.timestamps->dtype() != DType::kInt64 || l.timestamps->num_elements() != batch)) {
    return absl::InvalidArgumentError(
        fmt::format("sparse_lookup \"{}\": timestamps are {} {}; expected int64 [{}]", a.name,
                    DTypeName(l.timestamps->dtype()), l.timestamps->shape().ToString(), batch));
  }
  return absl::OkStatus();
}

int64_t WeightOf(const LookupAttrs& a, size_t feature) {
  return feature < a.feature_weights.size() ? a.feature_weights[feature] : 1;
}

}  // namespace

Status PrepareTableKeys(const std::vector<LookupBatch>& lookups, TableKeyWork* work) {
  bool weighted = false, any_timestamps = false;
  for (const LookupBatch& l : lookups) {
    RECSDK_DCHECK(l.attrs->table_name == work->table_name);
    RECSDK_DCHECK(l.attrs->is_train == lookups.front().attrs->is_train);
    RECSDK_RETURN_IF_ERROR(CheckTensors(l));
    for (int64_t w : l.attrs->feature_weights) weighted |= w != 1;
    any_timestamps |= l.timestamps != nullptr;
  }
  work->keys.clear();
  work->counts.clear();
  work->parts.assign(lookups.size(), TableKeyWork::Part{});
  work->has_time = false;
  work->has_untimed_lookup = false;
  work->min_time = std::numeric_limits<int64_t>::max();
  // Per key position, only when needed: its admission weight and its sample's timestamp.
  std::vector<uint32_t> position_weight;
  std::vector<int64_t> position_time;
  for (size_t p = 0; p < lookups.size(); ++p) {
    const LookupBatch& l = lookups[p];
    TableKeyWork::Part& part = work->parts[p];
    part.attrs = l.attrs;
    part.first_key = work->keys.size();
    const int64_t batch = l.ids.empty() ? 0 : l.ids[0]->dim(0);
    const float* m = l.mask != nullptr ? l.mask->data<float>() : nullptr;
    const int64_t* ts = l.timestamps != nullptr ? l.timestamps->data<int64_t>() : nullptr;
    bool any_masked = false;
    if (m != nullptr) {
      for (int64_t b = 0; b < batch; ++b) any_masked |= m[b] == 0.0f;
    }
    part.has_padding_slot = any_masked;
    for (size_t f = 0; f < l.ids.size(); ++f) {
      const Tensor& t = *l.ids[f];
      const int64_t n = t.dim(1);
      const uint32_t weight = static_cast<uint32_t>(
          std::min<int64_t>(WeightOf(*l.attrs, f), std::numeric_limits<uint32_t>::max()));
      for (int64_t b = 0; b < batch; ++b) {
        if (any_masked && m[b] == 0.0f) continue;
        if (t.dtype() == DType::kInt64) {
          const int64_t* k = t.data<int64_t>() + b * n;
          work->keys.insert(work->keys.end(), k, k + n);
        } else {
          const int32_t* k = t.data<int32_t>() + b * n;
          work->keys.insert(work->keys.end(), k, k + n);
        }
        if (weighted) position_weight.insert(position_weight.end(), n, weight);
        if (any_timestamps) position_time.insert(position_time.end(), n, ts ? ts[b] : kNoTime);
      }
    }
    part.num_keys = work->keys.size() - part.first_key;
    if (ts != nullptr) {
      for (int64_t b = 0; b < batch; ++b) {
        if (any_masked && m[b] == 0.0f) continue;
        work->min_time = std::min(work->min_time, ts[b]);
        work->has_time = true;
      }
    } else {
      work->has_untimed_lookup = true;
    }
  }

  // One dedup over the keys of every lookup.
  DedupKeys(absl::MakeConstSpan(work->keys), &work->dedup);
  const std::vector<uint32_t>& restore = work->dedup.restore_index;
  const size_t num_unique = work->dedup.unique_keys.size();
  if (weighted) {
    std::vector<uint64_t> sum(num_unique, 0);
    for (size_t i = 0; i < restore.size(); ++i) sum[restore[i]] += position_weight[i];
    work->counts.resize(num_unique);
    for (size_t u = 0; u < num_unique; ++u) {
      work->counts[u] =
          static_cast<uint32_t>(std::min<uint64_t>(sum[u], std::numeric_limits<uint32_t>::max()));
    }
  }
  work->key_times.clear();
  work->untimed_keys = false;
  if (any_timestamps) {
    work->key_times.assign(num_unique, kNoTime);
    for (size_t i = 0; i < restore.size(); ++i) {
      int64_t& k = work->key_times[restore[i]];
      k = std::max(k, position_time[i]);
    }
    work->untimed_keys =
        std::find(work->key_times.begin(), work->key_times.end(), kNoTime) != work->key_times.end();
  }

  // Each lookup's own unique keys (in its order of first occurrence) and restore indices. A lone
  // lookup's are the dedup's own, so it skips the mapping.
  const bool alone = lookups.size() == 1;
  std::vector<uint32_t> local(alone ? 0 : num_unique);
  std::vector<uint32_t> stamp(alone ? 0 : num_unique, 0);
  for (size_t p = 0; p < lookups.size(); ++p) {
    const LookupBatch& l = lookups[p];
    const LookupAttrs& a = *l.attrs;
    TableKeyWork::Part& part = work->parts[p];
    const uint32_t mark = static_cast<uint32_t>(p + 1);
    part.unique.clear();
    if (alone) {
      part.unique.resize(num_unique);
      std::iota(part.unique.begin(), part.unique.end(), 0u);
    }
    for (size_t i = part.first_key; !alone && i < part.first_key + part.num_keys; ++i) {
      const uint32_t u = restore[i];
      if (stamp[u] != mark) {
        stamp[u] = mark;
        local[u] = static_cast<uint32_t>(part.unique.size());
        part.unique.push_back(u);
      }
    }
    const int64_t used = static_cast<int64_t>(part.unique.size()) + (part.has_padding_slot ? 1 : 0);
    if (a.static_shape && used > a.send_count) {
      return absl::InvalidArgumentError(fmt::format(
          "sparse_lookup \"{}\" on table \"{}\": the batch has {} unique keys but send_count is "
          "{}; raise send_count (or use dynamic shape, use_dynamic=true)",
          a.name, a.table_name, used, a.send_count));
    }
    const int64_t batch = l.ids.empty() ? 0 : l.ids[0]->dim(0);
    const float* m = l.mask != nullptr ? l.mask->data<float>() : nullptr;
    const int32_t padding_slot = static_cast<int32_t>(part.unique.size());
    size_t pos = part.first_key;
    part.restore.clear();
    for (const Tensor* t : l.ids) {
      const int64_t n = t->dim(1);
      Tensor r(DType::kInt32, Shape{batch, n});
      int32_t* out = r.data<int32_t>();
      for (int64_t b = 0; b < batch; ++b) {
        if (part.has_padding_slot && m[b] == 0.0f) {
          std::fill(out + b * n, out + (b + 1) * n, padding_slot);
          continue;
        }
        if (alone) {
          for (int64_t j = 0; j < n; ++j) out[b * n + j] = static_cast<int32_t>(restore[pos++]);
        } else {
          for (int64_t j = 0; j < n; ++j) {
            out[b * n + j] = static_cast<int32_t>(local[restore[pos++]]);
          }
        }
      }
      part.restore.push_back(std::move(r));
    }
  }
  return absl::OkStatus();
}

Status PrepareResolve(EmbeddingTable* table, TableKeyWork* work, const ResolveLease* lease) {
  if (lease == nullptr && IsTiered(*table)) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\" keeps rows in host memory (host_vocabulary_size {}), so its lookups must "
        "run in the key stage, as the spec requires for host and SSD tiers: call "
        "modify_graph_and_start_emb_cache (or use FeatureSpec mode with start_asc_pipeline), or "
        "set host_vocabulary_size 0",
        table->name(), table->config().host_vocabulary_size));
  }
  const size_t num_unique = work->dedup.unique_keys.size();
  if (work->untimed_keys) {
    // Keys seen only in lookups without timestamps take the data time, as they would alone.
    int64_t now = table->data_time();
    for (int64_t t : work->key_times) now = std::max(now, t);
    const int64_t fill = now == kNoTime ? 0 : now;
    for (int64_t& t : work->key_times) {
      if (t == kNoTime) t = fill;
    }
  }
  work->rows.resize(num_unique);
  return absl::OkStatus();
}

const std::vector<uint32_t>& ResolveCounts(const TableKeyWork& work) {
  return work.counts.empty() ? work.dedup.counts : work.counts;
}

void FinishTableKeys(TableKeyWork* work) {
  for (TableKeyWork::Part& part : work->parts) {
    const LookupAttrs& a = *part.attrs;
    const int64_t used = static_cast<int64_t>(part.unique.size()) + (part.has_padding_slot ? 1 : 0);
    const int64_t out_size = a.static_shape ? a.send_count : used;
    Tensor u(DType::kInt32, Shape{out_size});
    int32_t* p = u.data<int32_t>();
    for (size_t i = 0; i < part.unique.size(); ++i) {
      p[i] = static_cast<int32_t>(work->rows[part.unique[i]]);
    }
    for (int64_t i = static_cast<int64_t>(part.unique.size()); i < out_size; ++i) {
      p[i] = static_cast<int32_t>(EmbeddingTable::kPaddingRow);
    }
    part.unique_rows = std::move(u);
  }
}

Status ResolveTableKeys(EmbeddingTable* table, LookupMode mode, TableKeyWork* work,
                        const ResolveLease* lease) {
  RECSDK_RETURN_IF_ERROR(PrepareResolve(table, work, lease));
  const std::vector<uint32_t>& counts = ResolveCounts(*work);
  if (lease != nullptr) {
    RECSDK_RETURN_IF_ERROR(ResolveWithLease(
        *table, absl::MakeConstSpan(work->dedup.unique_keys), absl::MakeConstSpan(counts),
        absl::MakeConstSpan(work->key_times), mode, absl::MakeSpan(work->rows), *lease));
  } else {
    RECSDK_RETURN_IF_ERROR(
        table->Resolve(absl::MakeConstSpan(work->dedup.unique_keys), absl::MakeConstSpan(counts),
                       absl::MakeConstSpan(work->key_times), mode, absl::MakeSpan(work->rows)));
  }
  FinishTableKeys(work);
  return absl::OkStatus();
}

}  // namespace recsdk::internal
