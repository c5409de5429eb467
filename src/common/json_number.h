// json_number.h: numbers read from JSON that a file or a caller controls (graph JSON, checkpoint
// manifests, serving.json, session config). nlohmann's get<int>() of a number that is a float,
// or that does not fit the type, is a plain cast: undefined behaviour for a float out of range
// (graph_json_fuzz found `"version": 8.9e98`), a silent wrap for an integer. JsonNumber<T>
// returns the value only when it fits T (integral T: an integer JSON number in T's range;
// float: any JSON number within float's range) and otherwise throws std::out_of_range naming
// the value and the range, which every JSON reader's catch turns into a Status naming its file.
// Threading: stateless; thread-safe.
#ifndef RECSDK_COMMON_JSON_NUMBER_H_
#define RECSDK_COMMON_JSON_NUMBER_H_

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace recsdk::internal {

template <typename T>
T JsonNumber(const nlohmann::json& j) {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_integral_v<T>) {
    if (j.is_number_unsigned()) {
      const uint64_t v = j.get<uint64_t>();
      if (v <= static_cast<uint64_t>(L::max())) return static_cast<T>(v);
    } else if (j.is_number_integer()) {
      const int64_t v = j.get<int64_t>();
      if (v >= static_cast<int64_t>(L::min()) &&
          (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(L::max()))) {
        return static_cast<T>(v);
      }
    }
    throw std::out_of_range(
        fmt::format("JSON value {} is not an integer in [{}, {}]", j.dump(), L::min(), L::max()));
  } else {
    if (j.is_number()) {
      const double v = j.get<double>();
      if (v >= -static_cast<double>(L::max()) && v <= static_cast<double>(L::max())) {
        return static_cast<T>(v);
      }
    }
    throw std::out_of_range(
        fmt::format("JSON value {} is not a number in [{}, {}]", j.dump(), -L::max(), L::max()));
  }
}

// JsonNumberOr: JsonNumber of obj[field] when obj has it, else `fallback`.
template <typename T>
T JsonNumberOr(const nlohmann::json& obj, const char* field, T fallback) {
  const auto it = obj.find(field);
  return it == obj.end() ? fallback : JsonNumber<T>(*it);
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_JSON_NUMBER_H_
