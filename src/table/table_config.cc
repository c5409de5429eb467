// table_config.cc: TableConfig::Validate, the up-front checks of create_table's parameters.
// Thread-safe (pure function of the config).
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "fmt/format.h"
#include "recsdk/table.h"
#include "src/common/checked_math.h"

namespace recsdk {

namespace {
bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}
}  // namespace

Status TableConfig::Validate() const {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(fmt::format(
        "create_table: name \"{}\" is invalid: it must be non-empty and use only letters, digits, "
        "'_', '.', '-' or '/'; rename the table",
        name));
  }
  auto fail = [&](std::string_view option, const auto& value, std::string_view rule) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": {} {} is invalid: {}", name, option, value, rule));
  };
  if (key_dtype != DType::kInt64 && key_dtype != DType::kInt32) {
    return fail("key_dtype", static_cast<int>(key_dtype), "use DType::kInt64 or DType::kInt32");
  }
  if (value_dtype != DType::kFloat32) {
    return fail("value_dtype", static_cast<int>(value_dtype),
                "only DType::kFloat32 is supported; use it");
  }
  if (dim < 1 || dim > 8192) return fail("dim", dim, "it must be in 1..8192");
  if (Status s = initializer.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": emb_initializer: {}", name, std::string(s.message())));
  }
  if (device_vocabulary_size <= 0) {
    return fail("device_vocabulary_size", device_vocabulary_size,
                "it must be > 0; set it to the number of rows the device tier holds");
  }
  if (host_vocabulary_size < 0) {
    return fail("host_vocabulary_size", host_vocabulary_size, "it must be >= 0 (0: no host tier)");
  }
  if (ssd_vocabulary_size < 0) {
    return fail("ssd_vocabulary_size", ssd_vocabulary_size, "it must be >= 0 (0: no SSD tier)");
  }
  // Each size is checked on its own first and the sum with overflow checks: sizes near 2^63
  // must not wrap into a small or negative total.
  constexpr int64_t kMaxTableRows = 0xFFFFFFFDll;
  std::optional<int64_t> total = internal::CheckedAdd(device_vocabulary_size, host_vocabulary_size);
  if (total.has_value()) total = internal::CheckedAdd(*total, ssd_vocabulary_size);
  if (!total.has_value() || *total > kMaxTableRows) {
    return fail("device + host + ssd vocabulary size",
                fmt::format("{} + {} + {}", device_vocabulary_size, host_vocabulary_size,
                            ssd_vocabulary_size),
                "a table holds at most 4294967293 rows; shard the table or lower the sizes");
  }
  if (ssd_vocabulary_size > 0 && host_vocabulary_size == 0) {
    return fail("ssd_vocabulary_size", ssd_vocabulary_size,
                "the SSD tier needs a host tier; set host_vocabulary_size > 0");
  }
  if (ssd_vocabulary_size > 0 && ssd_data_path.empty()) {
    return fail("ssd_data_path", "[]",
                "an SSD tier needs at least one directory; set ssd_data_path");
  }
  if (ssd_vocabulary_size == 0 && !ssd_data_path.empty()) {
    return fail("ssd_data_path", fmt::format("\"{}\"", ssd_data_path.front()),
                "it is set but ssd_vocabulary_size is 0; set ssd_vocabulary_size or drop the path");
  }
  for (const std::string& path : ssd_data_path) {
    std::error_code ec;
    if (path.empty() || !std::filesystem::is_directory(path, ec)) {
      return fail("ssd_data_path", fmt::format("\"{}\"", path),
                  "each entry must be an existing directory; create it first");
    }
  }
  // Dynamic expansion is device-only and excludes eviction (the spec).
  if (use_dynamic_expansion && host_vocabulary_size > 0) {
    return fail("use_dynamic_expansion", "true",
                fmt::format("a dynamically expanding table lives on the device only, but "
                            "host_vocabulary_size is {}; set host_vocabulary_size 0 (and "
                            "ssd_vocabulary_size 0) or turn use_dynamic_expansion off",
                            host_vocabulary_size));
  }
  if (use_dynamic_expansion && eviction_threshold >= 0) {
    return fail("use_dynamic_expansion", "true",
                fmt::format("dynamic expansion excludes eviction, but eviction_threshold is {}; "
                            "set eviction_threshold -1 or turn use_dynamic_expansion off",
                            eviction_threshold));
  }
  if (all2all_gradients_op != "sum" &&
      all2all_gradients_op != "sum_gradients_and_div_by_ranksize") {
    return fail("all2all_gradients_op", fmt::format("\"{}\"", all2all_gradients_op),
                "use \"sum\" or \"sum_gradients_and_div_by_ranksize\"");
  }
  if (!std::isfinite(serving_default_value)) {
    return fail("serving_default_value", serving_default_value, "it must be finite");
  }
  if (access_threshold < -1) {
    return fail("access_threshold", access_threshold,
                "it must be >= 0 to enable admission or -1 to disable it");
  }
  if (eviction_threshold < -1) {
    return fail("eviction_threshold", eviction_threshold,
                "it must be >= 0 (seconds) to enable eviction or -1 to disable it");
  }
  if (eviction_threshold >= 0 && access_threshold < 0) {
    return fail("eviction_threshold", eviction_threshold,
                "eviction needs admission; set access_threshold >= 0 (0 admits every key) or "
                "eviction_threshold = -1");
  }
  if (!std::isfinite(faae_coefficient) || faae_coefficient <= 0) {
    return fail("faae_coefficient", faae_coefficient, "it must be a finite number > 0");
  }
  if (key_dtype == DType::kInt32) {
    for (int64_t k : padding_keys) {
      if (k < std::numeric_limits<int32_t>::min() || k > std::numeric_limits<int32_t>::max()) {
        return fail("padding_keys entry", k, "an int32 table's keys must fit in int32");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace recsdk
