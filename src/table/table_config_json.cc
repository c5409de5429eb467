// table_config_json.cc: TableConfig and SparseOptimizerConfig to and from the JSON text of a
// TableHandle node's attributes.
#include "src/table/table_config_json.h"

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "src/common/json_number.h"
#include "src/common/json_parse.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {
namespace {

using nlohmann::json;

json InitializerToJson(const Initializer& i) {
  return {{"kind", static_cast<int32_t>(i.kind)},
          {"value", i.value},
          {"min", i.min},
          {"max", i.max},
          {"mean", i.mean},
          {"stddev", i.stddev},
          {"seed", i.seed}};
}

Initializer InitializerFromJson(const json& j) {
  Initializer i;
  i.kind = JsonEnum(j.at("kind"), Initializer::Kind::kGlorotNormal);
  i.value = j.at("value").get<double>();
  i.min = j.at("min").get<double>();
  i.max = j.at("max").get<double>();
  i.mean = j.at("mean").get<double>();
  i.stddev = j.at("stddev").get<double>();
  i.seed = JsonNumber<int64_t>(j.at("seed"));
  return i;
}

}  // namespace

std::string CombinerName(const std::optional<Combiner>& c) {
  if (!c) return "none";
  switch (*c) {
    case Combiner::kSum:
      return "sum";
    case Combiner::kMean:
      return "mean";
    case Combiner::kSqrtn:
      return "sqrtn";
  }
  return "none";
}

// ParseCombiner: "none" -> nullopt.
StatusOr<std::optional<Combiner>> ParseCombiner(const std::string& s) {
  if (s == "none" || s.empty()) return std::optional<Combiner>();
  if (s == "sum") return std::optional<Combiner>(Combiner::kSum);
  if (s == "mean") return std::optional<Combiner>(Combiner::kMean);
  if (s == "sqrtn") return std::optional<Combiner>(Combiner::kSqrtn);
  return absl::InvalidArgumentError(
      fmt::format("combiner \"{}\" is unknown; use none, sum, mean or sqrtn", s));
}

std::string TableConfigToJson(const TableConfig& c) {
  json j = {{"name", c.name},
            {"key_dtype", std::string(DTypeName(c.key_dtype))},
            {"dim", c.dim},
            {"value_dtype", std::string(DTypeName(c.value_dtype))},
            {"initializer", InitializerToJson(c.initializer)},
            {"device_vocabulary_size", c.device_vocabulary_size},
            {"host_vocabulary_size", c.host_vocabulary_size},
            {"ssd_vocabulary_size", c.ssd_vocabulary_size},
            {"ssd_data_path", c.ssd_data_path},
            {"is_save", c.is_save},
            {"is_dp", c.is_dp},
            {"all2all_gradients_op", c.all2all_gradients_op},
            {"padding_keys", c.padding_keys},
            {"padding_keys_mask", c.padding_keys_mask},
            {"serving_default_value", c.serving_default_value},
            {"use_dynamic_expansion", c.use_dynamic_expansion},
            {"access_threshold", c.access_threshold},
            {"eviction_threshold", c.eviction_threshold},
            {"faae_coefficient", c.faae_coefficient}};
  return j.dump();
}

StatusOr<TableConfig> TableConfigFromJson(const std::string& text) {
  RECSDK_ASSIGN_OR_RETURN(json j, ParseJson(text, "table config attribute"));
  try {
    TableConfig c;
    c.name = j.at("name").get<std::string>();
    RECSDK_ASSIGN_OR_RETURN(c.key_dtype, ParseDType(j.at("key_dtype").get<std::string>()));
    c.dim = JsonNumber<int>(j.at("dim"));
    RECSDK_ASSIGN_OR_RETURN(c.value_dtype, ParseDType(j.at("value_dtype").get<std::string>()));
    c.initializer = InitializerFromJson(j.at("initializer"));
    c.device_vocabulary_size = JsonNumber<int64_t>(j.at("device_vocabulary_size"));
    c.host_vocabulary_size = JsonNumber<int64_t>(j.at("host_vocabulary_size"));
    c.ssd_vocabulary_size = JsonNumber<int64_t>(j.at("ssd_vocabulary_size"));
    c.ssd_data_path = j.at("ssd_data_path").get<std::vector<std::string>>();
    c.is_save = j.at("is_save").get<bool>();
    c.is_dp = j.at("is_dp").get<bool>();
    c.all2all_gradients_op = j.at("all2all_gradients_op").get<std::string>();
    c.padding_keys = j.at("padding_keys").get<std::vector<int64_t>>();
    c.padding_keys_mask = j.at("padding_keys_mask").get<bool>();
    c.serving_default_value = JsonNumber<float>(j.at("serving_default_value"));
    c.use_dynamic_expansion = j.at("use_dynamic_expansion").get<bool>();
    c.access_threshold = JsonNumber<int64_t>(j.at("access_threshold"));
    c.eviction_threshold = JsonNumber<int64_t>(j.at("eviction_threshold"));
    c.faae_coefficient = JsonNumber<float>(j.at("faae_coefficient"));
    return c;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("table config attribute: {}", e.what()));
  }
}

std::string OptimizerConfigToJson(const SparseOptimizerConfig& o) {
  json j = {{"kind", static_cast<int32_t>(o.kind)},
            {"learning_rate", o.learning_rate},
            {"weight_decay", o.weight_decay},
            {"initial_accumulator_value", o.initial_accumulator_value},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"epsilon", o.epsilon},
            {"adagrad_epsilon", o.adagrad_epsilon},
            {"learning_rate_power", o.learning_rate_power},
            {"l1", o.l1},
            {"l2", o.l2},
            {"l2_shrinkage", o.l2_shrinkage}};
  return j.dump();
}

StatusOr<SparseOptimizerConfig> OptimizerConfigFromJson(const std::string& text) {
  RECSDK_ASSIGN_OR_RETURN(json j, ParseJson(text, "optimizer config attribute"));
  try {
    SparseOptimizerConfig o;
    o.kind = JsonEnum(j.at("kind"), SparseOptimizerKind::kFTRL);
    o.learning_rate = JsonNumber<float>(j.at("learning_rate"));
    o.weight_decay = JsonNumber<float>(j.at("weight_decay"));
    o.initial_accumulator_value = JsonNumber<float>(j.at("initial_accumulator_value"));
    o.beta1 = JsonNumber<float>(j.at("beta1"));
    o.beta2 = JsonNumber<float>(j.at("beta2"));
    o.epsilon = JsonNumber<float>(j.at("epsilon"));
    o.adagrad_epsilon =
        JsonNumberOr<float>(j, "adagrad_epsilon", 0.0f);  // absent in graphs saved before it
    o.learning_rate_power = JsonNumber<float>(j.at("learning_rate_power"));
    o.l1 = JsonNumber<float>(j.at("l1"));
    o.l2 = JsonNumber<float>(j.at("l2"));
    o.l2_shrinkage = JsonNumber<float>(j.at("l2_shrinkage"));
    return o;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("optimizer config attribute: {}", e.what()));
  }
}
}  // namespace recsdk::internal
