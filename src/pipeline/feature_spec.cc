// feature_spec.cc: FeatureSpec validation (pure functions; thread-safe) and MergeFeatureFields,
// the transform that builds a merged feature's column from its fields.
#include "recsdk/feature_spec.h"

#include <limits>

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/hash.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

// ValidateFields: the rules of `fields`, `field_keys` and `field_offsets` (FeatureSpec).
Status ValidateFields(const FeatureSpec& spec) {
  const std::string& name = spec.name;
  if (spec.fields.empty()) {
    if (!spec.field_offsets.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": field_offsets has {} entries but fields is empty; offsets "
          "belong to a merged feature, so list its fields or clear field_offsets",
          name, spec.field_offsets.size()));
    }
    return absl::OkStatus();
  }
  if (spec.is_timestamp) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": is_timestamp is true and fields is set; the timestamp column is "
        "one column, so clear fields",
        name));
  }
  if (spec.fields.size() > static_cast<size_t>(FeatureSpec::kMaxFields)) {
    return absl::InvalidArgumentError(
        fmt::format("FeatureSpec \"{}\": {} fields, more than kMaxFields ({}); split the "
                    "feature into several",
                    name, spec.fields.size(), FeatureSpec::kMaxFields));
  }
  absl::flat_hash_set<std::string_view> seen;
  for (const std::string& f : spec.fields) {
    if (f.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": a field name is empty; name each field's dataset column", name));
    }
    if (f == spec.EffectiveIndexKey()) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": field \"{}\" is also the merged column's name; give the merged "
          "column another index_key (or name)",
          name, f));
    }
    if (!seen.insert(f).second) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": field \"{}\" is listed twice; list each column once", name, f));
    }
  }
  if (spec.field_keys != FieldKeys::kOffset && spec.field_keys != FieldKeys::kHash) {
    return absl::InvalidArgumentError(
        fmt::format("FeatureSpec \"{}\": field_keys {} is not a FieldKeys value; use kOffset or "
                    "kHash",
                    name, static_cast<int>(spec.field_keys)));
  }
  if (spec.field_keys == FieldKeys::kHash) {
    if (!spec.field_offsets.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": field_offsets is set with field_keys kHash, which uses no "
          "offsets; clear field_offsets or use kOffset",
          name));
    }
    return absl::OkStatus();
  }
  if (spec.field_offsets.empty()) return absl::OkStatus();
  if (spec.field_offsets.size() != spec.fields.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": {} field_offsets for {} fields; give one offset per field, or none "
        "for field f to start at f << 32",
        name, spec.field_offsets.size(), spec.fields.size()));
  }
  for (size_t f = 0; f < spec.field_offsets.size(); ++f) {
    const int64_t o = spec.field_offsets[f];
    if (o < 0 || (f > 0 && o <= spec.field_offsets[f - 1])) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": field_offsets[{}] = {} (field \"{}\") {}; offsets must be >= 0 "
          "and strictly increasing (each field's range ends where the next begins)",
          name, f, o, spec.fields[f],
          o < 0 ? "is negative"
                : fmt::format("is not above field_offsets[{}] = {}", f - 1,
                              spec.field_offsets[f - 1])));
    }
  }
  return absl::OkStatus();
}

// FieldRange: the keys field f of `spec` may produce with kOffset: [begin, begin + size).
struct FieldRange {
  int64_t begin = 0;
  int64_t size = 0;  // the ids allowed: [0, size)
};

FieldRange OffsetRange(const FeatureSpec& spec, size_t f) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (spec.field_offsets.empty()) {
    return FieldRange{static_cast<int64_t>(f) << 32, int64_t{1} << 32};
  }
  const int64_t begin = spec.field_offsets[f];
  const int64_t end = f + 1 < spec.field_offsets.size() ? spec.field_offsets[f + 1] : kMax;
  return FieldRange{begin, end - begin};
}

// MergeOne adds `spec`'s merged column to `batch`.
Status MergeOne(const FeatureSpec& spec, Batch& batch) {
  const int64_t rows = batch.num_rows();
  std::vector<Tensor> columns;
  int64_t width = 0;
  for (const std::string& field : spec.fields) {
    RECSDK_ASSIGN_OR_RETURN(Tensor t, batch.Column(field));
    if (t.dtype() != DType::kInt64 || t.rank() < 1 || t.rank() > 2) {
      return absl::InvalidArgumentError(fmt::format(
          "MergeFeatureFields: feature \"{}\" field \"{}\" is {} {}; a field holds int64 ids, "
          "[B] or [B, n]; Cast it or drop it from fields",
          spec.name, field, DTypeName(t.dtype()), t.shape().ToString()));
    }
    width += t.rank() == 2 ? t.dim(1) : 1;
    columns.push_back(std::move(t));
  }
  if (batch.has_column(spec.EffectiveIndexKey())) {
    return absl::InvalidArgumentError(fmt::format(
        "MergeFeatureFields: feature \"{}\": the batch already has a column \"{}\"; name the "
        "merged column (index_key) differently or drop the old column first",
        spec.name, spec.EffectiveIndexKey()));
  }
  RECSDK_ASSIGN_OR_RETURN(Tensor merged, Tensor::Create(DType::kInt64, Shape{rows, width}));
  int64_t* out = merged.data<int64_t>();
  int64_t at = 0;  // the first output column of the current field
  for (size_t f = 0; f < columns.size(); ++f) {
    const Tensor& t = columns[f];
    const int64_t n = t.rank() == 2 ? t.dim(1) : 1;
    const int64_t* in = t.data<int64_t>();
    if (spec.field_keys == FieldKeys::kHash) {
      const uint64_t seed = internal::Mix64(static_cast<uint64_t>(f) + 1);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < n; ++k) {
          const uint64_t h = internal::CombineSeeds(seed, static_cast<uint64_t>(in[r * n + k]));
          out[r * width + at + k] = static_cast<int64_t>(h >> 1);  // non-negative
        }
      }
    } else {
      const FieldRange range = OffsetRange(spec, f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t id = in[r * n + k];
          if (id < 0 || id >= range.size) {
            return absl::InvalidArgumentError(fmt::format(
                "MergeFeatureFields: feature \"{}\" field \"{}\" (row {}, position {}) has id "
                "{} outside the field's range [0, {}); its key would fall in another field's "
                "range: widen the field's offsets (field_offsets), map the id into range, or use "
                "field_keys kHash",
                spec.name, spec.fields[f], r, k, id, range.size));
          }
          out[r * width + at + k] = range.begin + id;
        }
      }
    }
    at += n;
  }
  return batch.AddColumn(spec.EffectiveIndexKey(), std::move(merged));
}

}  // namespace

Status FeatureSpec::Validate() const {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "FeatureSpec: name is empty; every feature needs a unique name");
  }
  if (access_threshold < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": access_threshold {} is below -1; use -1 to disable admission or a "
        "count >= 0 to enable it",
        name, access_threshold));
  }
  if (eviction_threshold < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": eviction_threshold {} is below -1; use -1 to disable eviction or a "
        "number of seconds >= 0 to enable it",
        name, eviction_threshold));
  }
  if (eviction_threshold >= 0 && access_threshold < 0 && !is_timestamp) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": eviction_threshold {} is set but admission is off "
        "(access_threshold {}); eviction requires admission, so set access_threshold >= 0 or "
        "eviction_threshold to -1",
        name, eviction_threshold, access_threshold));
  }
  if (batch_size < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": batch_size {} is negative; use 0 for the dataset's batch size or a "
        "positive count",
        name, batch_size));
  }
  if (faae_coefficient < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": faae_coefficient {} is below 1; it is the weight of one access in "
        "admission counting, use 1 (default) or more",
        name, faae_coefficient));
  }
  RECSDK_RETURN_IF_ERROR(ValidateFields(*this));
  if (is_timestamp && (access_threshold != -1 || eviction_threshold != -1)) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": is_timestamp is true but access_threshold {} / eviction_threshold "
        "{} are set; a timestamp spec only names the timestamp column, set the thresholds on "
        "the features instead",
        name, access_threshold, eviction_threshold));
  }
  return absl::OkStatus();
}

Status ValidateFeatureSpecs(const std::vector<FeatureSpec>& specs) {
  absl::flat_hash_set<std::string> names;
  const FeatureSpec* timestamp = nullptr;
  const FeatureSpec* evicting = nullptr;
  for (const FeatureSpec& spec : specs) {
    if (Status s = spec.Validate(); !s.ok()) return s;
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(fmt::format(
          "FeatureSpec \"{}\": the name is used twice; give every feature a unique name",
          spec.name));
    }
    if (spec.is_timestamp) {
      if (timestamp != nullptr) {
        return absl::InvalidArgumentError(fmt::format(
            "FeatureSpec \"{}\": is_timestamp is true but \"{}\" is already the timestamp "
            "feature; keep one timestamp spec",
            spec.name, timestamp->name));
      }
      timestamp = &spec;
    } else if (spec.eviction_threshold >= 0 && evicting == nullptr) {
      evicting = &spec;
    }
  }
  if (evicting != nullptr && timestamp == nullptr) {
    return absl::InvalidArgumentError(fmt::format(
        "FeatureSpec \"{}\": eviction_threshold {} needs timestamps but no spec has "
        "is_timestamp=true; add FeatureSpec{{.name=\"timestamp\", .index_key=\"timestamp\", "
        ".is_timestamp=true}} or set eviction_threshold to -1",
        evicting->name, evicting->eviction_threshold));
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<Dataset>> MergeFeatureFields(std::unique_ptr<Dataset> input,
                                                      std::vector<FeatureSpec> specs) {
  if (input == nullptr) return absl::InvalidArgumentError("MergeFeatureFields: the input is null");
  RECSDK_RETURN_IF_ERROR(ValidateFeatureSpecs(specs));
  std::erase_if(specs, [](const FeatureSpec& s) { return s.fields.empty(); });
  return Map(std::move(input), [specs = std::move(specs)](Batch batch) -> StatusOr<Batch> {
    for (const FeatureSpec& spec : specs) RECSDK_RETURN_IF_ERROR(MergeOne(spec, batch));
    return batch;
  });
}

}  // namespace recsdk
