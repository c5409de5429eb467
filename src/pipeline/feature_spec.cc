// feature_spec.cc: FeatureSpec validation. Pure functions; thread-safe.
#include "recsdk/feature_spec.h"

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"

namespace recsdk {

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

}  // namespace recsdk
