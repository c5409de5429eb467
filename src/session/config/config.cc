// config.cc: SessionConfig validation and JSON load/save.
//
// One table (kOptions) lists every option with its JSON reader and writer, so FromJson, ToJson and
// OptionNames cannot drift apart; Validate checks the rules in the order config.h documents them.
//
// Threading: pure functions of their arguments.
#include "recsdk/config.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/config_file.h"
#include "src/common/env.h"
#include "src/common/json_parse.h"
#include "src/common/status_macros.h"

namespace recsdk {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxMemory = 256 * kGiB;
constexpr int64_t kMaxTotalMemory = 31 * kGiB;
// intra_op_parallelism: past a few hundred threads a kernel's parallel loop gains nothing, and
// oneTBB's arena fails (and the Session's destructor crashed) with tens of thousands.
constexpr int kMaxIntraOpThreads = 1024;
constexpr int64_t kMaxIterationsPerLoop = 1000000;
// dump_step: a step number bound that keeps ranges well inside int64.
constexpr int64_t kMaxDumpStep = int64_t{1} << 40;

Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// kQuoteBytes: what a message quotes of a user's string at most; a 100 MB key or value was
// copied whole into the error.
constexpr size_t kQuoteBytes = 80;

// Quoted: `s` in double quotes for a message, cut past kQuoteBytes (QuoteBounded).
std::string Quoted(std::string_view s) { return internal::QuoteBounded(s, kQuoteBytes); }
std::string Quoted(const std::string& s) { return Quoted(std::string_view(s)); }
// Debian's Abseil has its own string_view (absl::StrSplit's pieces).
std::string Quoted(absl::string_view s) { return Quoted(std::string_view(s.data(), s.size())); }

StatusOr<std::map<std::string, int>> ParseStreams(const std::string& text) {
  std::map<std::string, int> out;
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, ':');
    int n = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &n)) {
      return Invalid(fmt::format(
          "stream_max_parallel_num: {} is not ENGINE:N; write e.g. \"DNN_VM_TF:1,DNN_V100:2\"",
          Quoted(part)));
    }
    if (kv[0] != "DNN_V100" && kv[0] != "DNN_VM_TF") {
      return Invalid(
          fmt::format("stream_max_parallel_num: engine {} is unknown; use DNN_V100 (device "
                      "ops) or DNN_VM_TF (host ops)",
                      Quoted(kv[0])));
    }
    if (out.contains(kv[0])) {
      return Invalid(
          fmt::format("stream_max_parallel_num: engine {} is listed twice in {}; list it once",
                      kv[0], Quoted(text)));
    }
    if (n < 1 || n > 13) {
      return Invalid(
          fmt::format("stream_max_parallel_num: {} for {} is out of range; use 1 to 13", n, kv[0]));
    }
    out[kv[0]] = n;
  }
  return out;
}

// OneOf: the value is one of `allowed`.
Status OneOf(std::string_view option, const std::string& value,
             std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (value == a) return absl::OkStatus();
  }
  std::vector<std::string> quoted;
  for (const char* a : allowed) quoted.push_back(fmt::format("\"{}\"", a));
  return Invalid(
      fmt::format("{}: {} is not one of {}", option, Quoted(value), fmt::join(quoted, ", ")));
}

// ValidateDumpStep: "" or `N|A-B|...`, steps in [0, 2^40], ranges with A <= B.
Status ValidateDumpStep(const std::string& text) {
  if (text.empty()) return absl::OkStatus();
  const std::string rule =
      "write step numbers and ranges separated by '|', e.g. \"0|3-5|10\" (ranges A-B with A <= B)";
  for (absl::string_view part : absl::StrSplit(text, '|')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int64_t lo = 0, hi = 0;
    const bool digits = std::all_of(ends.begin(), ends.end(), [](absl::string_view e) {
      return !e.empty() && std::all_of(e.begin(), e.end(), ::isdigit);
    });
    if (ends.size() > 2 || !digits || !absl::SimpleAtoi(ends[0], &lo) ||
        !absl::SimpleAtoi(ends.back(), &hi)) {
      return Invalid(fmt::format("dump_step: {} has the malformed part {}; {}", Quoted(text),
                                 Quoted(part), rule));
    }
    if (lo > kMaxDumpStep || hi > kMaxDumpStep) {
      return Invalid(
          fmt::format("dump_step: step in {} is above {}; {}", Quoted(part), kMaxDumpStep, rule));
    }
    if (lo > hi) {
      return Invalid(
          fmt::format("dump_step: range {} ends before it starts; {}", Quoted(part), rule));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SplitList(const std::string& text, char sep) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(text, sep, absl::SkipEmpty())) out.emplace_back(p);
  return out;
}

}  // namespace

Status SessionConfig::Validate() const {
  // Device and parallelism.
  if (device.empty()) return Invalid("device: empty; use \"cpu\"");
  if (use_off_line && device == "cpu") {
    return Invalid(
        "use_off_line: true means training on an accelerator, but device is \"cpu\" (the host); "
        "set device to a registered accelerator backend, or use_off_line false");
  }
  if (auto s = ParseStreams(stream_max_parallel_num); !s.ok()) return s.status();
  if (intra_op_parallelism < 0 || intra_op_parallelism > kMaxIntraOpThreads) {
    return Invalid(fmt::format(
        "intra_op_parallelism: {} is outside [0, {}]; use 0 (all hardware threads) or a thread "
        "count up to {}",
        intra_op_parallelism, kMaxIntraOpThreads, kMaxIntraOpThreads));
  }

  // Memory.
  for (auto [name, value] :
       {std::pair<const char*, int64_t>{"graph_memory_max_size", graph_memory_max_size},
        std::pair<const char*, int64_t>{"variable_memory_max_size", variable_memory_max_size}}) {
    if (value < 0 || value > kMaxMemory) {
      return Invalid(
          fmt::format("{}: {} bytes is outside [0, {}] (256 GiB)", name, value, kMaxMemory));
    }
  }
  if (graph_memory_max_size + variable_memory_max_size > kMaxTotalMemory) {
    return Invalid(
        fmt::format("graph_memory_max_size ({}) + variable_memory_max_size ({}) = {} bytes exceeds "
                    "31 GiB ({}); lower one of them",
                    graph_memory_max_size, variable_memory_max_size,
                    graph_memory_max_size + variable_memory_max_size, kMaxTotalMemory));
  }

  // Execution modes.
  if (graph_run_mode != 0 && graph_run_mode != 1) {
    return Invalid(fmt::format("graph_run_mode: {} is not 0 (online inference) or 1 (training)",
                               graph_run_mode));
  }
  if (iterations_per_loop < 1 || iterations_per_loop > kMaxIterationsPerLoop) {
    return Invalid(fmt::format("iterations_per_loop: {} is outside [1, {}]", iterations_per_loop,
                               kMaxIterationsPerLoop));
  }
  if (enable_data_pre_proc && device == "cpu") {
    return Invalid(
        "enable_data_pre_proc: true offloads data preprocessing to the device, but device is "
        "\"cpu\": the pipeline already preprocesses in its own host threads; set it false");
  }
  // hcom_parallel: the session pass bucket_all_reduce (src/dist/bucket_all_reduce.cc) with
  // several ranks; nothing to do in one process. is_tailing_optimization: the pass
  // tailing_optimization (src/dist/tailing_all_reduce.cc) overlaps the last of those buckets with
  // the updates that do not need it; it checks DistributedOptimizerOptions' flag of the same name.
  if (is_tailing_optimization && !hcom_parallel) {
    return Invalid(
        "is_tailing_optimization: true overlaps the last bucket of the gradient all-reduce with "
        "the work that does not need it, but hcom_parallel is false: the gradients are reduced "
        "in one all-reduce after backward, which every dense update needs, so there is no last "
        "bucket to overlap; set hcom_parallel true, or is_tailing_optimization false (and "
        "DistributedOptimizerOptions.is_tailing_optimization false with it)");
  }

  // Precision.
  if (!precision_mode.empty()) {
    RECSDK_RETURN_IF_ERROR(OneOf(
        "precision_mode", precision_mode,
        {"allow_fp32_to_fp16", "must_keep_origin_dtype", "force_fp16", "allow_mix_precision"}));
  }
  if (!precision_mode_v2.empty()) {
    RECSDK_RETURN_IF_ERROR(
        OneOf("precision_mode_v2", precision_mode_v2,
              {"origin", "fp16", "mixed_float16", "mixed_bfloat16", "cube_fp16in_fp32out"}));
    if (!precision_mode.empty()) {
      return Invalid(
          fmt::format("precision_mode {} and precision_mode_v2 {} are both set; set only one",
                      Quoted(precision_mode), Quoted(precision_mode_v2)));
    }
  }
  if (enable_reduce_precision) {
    return Invalid(
        "enable_reduce_precision: not supported (the session options spec says the current "
        "version does not support it); remove it or set it false");
  }
  RECSDK_RETURN_IF_ERROR(
      OneOf("op_select_implmode", op_select_implmode, {"high_performance", "high_precision"}));
  if (!optypelist_for_implmode.empty() && op_select_implmode.empty()) {
    return Invalid("optypelist_for_implmode: set, but op_select_implmode is not; set both");
  }
  // The optional fusion passes of src/session/passes (each checks FusionPassEnabled).
  for (std::string name : SplitList(enable_scope_fusion_passes, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (name != "fuse_dense" && name != "fuse_gather_concat") {
      return Invalid(
          fmt::format("enable_scope_fusion_passes: {} is not a fusion pass of this runtime (known: "
                      "fuse_dense, fuse_gather_concat); remove it",
                      Quoted(name)));
    }
  }
  if (!auto_tune_mode.empty()) {
    for (const std::string& m : SplitList(auto_tune_mode, ',')) {
      RECSDK_RETURN_IF_ERROR(OneOf("auto_tune_mode", m, {"RL", "GA"}));
    }
    if (deterministic) {
      return Invalid(fmt::format(
          "auto_tune_mode: {} with deterministic: tuning picks GEMM plans by timing, which "
          "changes result bits between runs and thread counts; clear auto_tune_mode or "
          "deterministic",
          Quoted(auto_tune_mode)));
    }
    if (tune_bank_path.empty()) {
      return Invalid("tune_bank_path: empty with auto_tune_mode set; give a directory");
    }
  }
  if (op_debug_level < 0 || op_debug_level > 3) {
    return Invalid(fmt::format(
        "op_debug_level: {} is not 0 (off), 1, 2 (write kernel_meta and log) or 3 (write quietly)",
        op_debug_level));
  }

  if (op_debug_level > 0 && kernel_meta_dir.empty()) {
    return Invalid("kernel_meta_dir: empty with op_debug_level > 0; give a directory");
  }

  // Profiling.
  if (profiling_mode && profiling_dir.empty()) {
    return Invalid("profiling_dir: empty with profiling_mode on; give a directory");
  }
  const std::vector<std::string> profiling = ProfilingOptions();
  for (const std::string& p : profiling) {
    RECSDK_RETURN_IF_ERROR(
        OneOf("profiling_options", p, {"training_trace", "task_trace", "op_trace"}));
  }
  const auto has = [&](const char* p) {
    return std::find(profiling.begin(), profiling.end(), p) != profiling.end();
  };
  if (has("op_trace") && (has("training_trace") || has("task_trace"))) {
    return Invalid(fmt::format(
        "profiling_options: {}: op_trace is exclusive with training_trace and task_trace; "
        "choose op_trace alone or the others",
        Quoted(profiling_options)));
  }
  if (profiling_mode && profiling.empty()) {
    return Invalid(
        "profiling_mode: true needs profiling_options, e.g. \"training_trace:task_trace\" or "
        "\"op_trace\"");
  }
  if (profiling_mode && has("training_trace") && (fp_point.empty() || bp_point.empty())) {
    return Invalid(fmt::format(
        "fp_point {} / bp_point {}: both are required with training_trace; name the first "
        "forward node and the last backward node",
        Quoted(fp_point), Quoted(bp_point)));
  }

  // Dumps and overflow detection.
  RECSDK_RETURN_IF_ERROR(ValidateDumpStep(dump_step));
  RECSDK_RETURN_IF_ERROR(OneOf("dump_mode", dump_mode, {"input", "output", "all"}));
  RECSDK_RETURN_IF_ERROR(
      OneOf("dump_debug_mode", dump_debug_mode, {"aicore_overflow", "atomic_overflow", "all"}));
  if (dump_checksums && !enable_dump) {
    return Invalid(
        "dump_checksums: true makes enable_dump's tensors checksums, but enable_dump is off; turn "
        "enable_dump on or set dump_checksums false");
  }
  if (stop_on_overflow && !enable_dump_debug) {
    return Invalid(
        "stop_on_overflow: true stops the run at the first overflow that overflow detection "
        "reports, but enable_dump_debug (overflow detection) is off; turn enable_dump_debug on or "
        "set stop_on_overflow false");
  }
  if (enable_exception_dump != 0 && enable_exception_dump != 1) {
    return Invalid(fmt::format("enable_exception_dump: {} is not 0 or 1", enable_exception_dump));
  }
  if ((enable_dump || enable_dump_debug || enable_exception_dump == 1) && dump_path.empty()) {
    return Invalid(fmt::format("dump_path: required when {} is on; give a directory",
                               enable_dump         ? "enable_dump"
                               : enable_dump_debug ? "enable_dump_debug"
                                                   : "enable_exception_dump"));
  }
  return absl::OkStatus();
}

std::map<std::string, int> SessionConfig::ParsedStreamLimits() const {
  auto parsed = ParseStreams(stream_max_parallel_num);
  std::map<std::string, int> out = parsed.ok() ? *parsed : std::map<std::string, int>{};
  out.try_emplace("DNN_V100", 1);
  out.try_emplace("DNN_VM_TF", 1);
  return out;
}

std::vector<std::string> SessionConfig::ProfilingOptions() const {
  return SplitList(profiling_options, ':');
}

// --- JSON ---------------------------------------------------------------------------------------

namespace {

struct OptionIo {
  const char* name;
  std::function<Status(const json&, SessionConfig&)> read;
  std::function<json(const SessionConfig&)> write;
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// ValueText: a JSON value for a message, bounded: a string Quoted, an array or object by its
// size (its text can be any length), a number, boolean or null as JSON.
std::string ValueText(const json& j) {
  if (j.is_string()) return Quoted(j.get_ref<const std::string&>());
  if (j.is_array() || j.is_object()) {
    return fmt::format("an {} of {} entries", j.type_name(), j.size());
  }
  return Dump(j);
}

template <typename T>
OptionIo Field(const char* name, T SessionConfig::*member) {
  OptionIo io;
  io.name = name;
  io.write = [member](const SessionConfig& c) { return json(c.*member); };
  io.read = [name, member](const json& j, SessionConfig& c) -> Status {
    if constexpr (std::is_same_v<T, bool>) {
      // The spec writes booleans as true/false and deterministic as 0/1: accept both.
      if (j.is_boolean()) {
        c.*member = j.get<bool>();
        return absl::OkStatus();
      }
      if (j.is_number_integer() && (j.get<int64_t>() == 0 || j.get<int64_t>() == 1)) {
        c.*member = j.get<int64_t>() == 1;
        return absl::OkStatus();
      }
      return Invalid(fmt::format("option \"{}\": {} is not a boolean (true/false or 0/1)", name,
                                 ValueText(j)));
    } else if constexpr (std::is_integral_v<T>) {
      if (!j.is_number_integer()) {
        return Invalid(fmt::format("option \"{}\": {} is not an integer", name, ValueText(j)));
      }
      if (j.is_number_unsigned() &&
          j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return Invalid(fmt::format("option \"{}\": {} is too large", name, ValueText(j)));
      }
      const int64_t v = j.get<int64_t>();
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return Invalid(fmt::format("option \"{}\": {} does not fit its type", name, ValueText(j)));
      }
      c.*member = static_cast<T>(v);
      return absl::OkStatus();
    } else {
      if (!j.is_string()) {
        return Invalid(fmt::format("option \"{}\": {} is not a string", name, ValueText(j)));
      }
      c.*member = j.get<std::string>();
      return absl::OkStatus();
    }
  };
  return io;
}

const std::vector<OptionIo>& Options() {
  static const std::vector<OptionIo>* options = new std::vector<OptionIo>{
      Field("device", &SessionConfig::device),
      Field("use_off_line", &SessionConfig::use_off_line),
      Field("stream_max_parallel_num", &SessionConfig::stream_max_parallel_num),
      Field("intra_op_parallelism", &SessionConfig::intra_op_parallelism),
      Field("mix_compile_mode", &SessionConfig::mix_compile_mode),
      Field("graph_memory_max_size", &SessionConfig::graph_memory_max_size),
      Field("variable_memory_max_size", &SessionConfig::variable_memory_max_size),
      Field("graph_run_mode", &SessionConfig::graph_run_mode),
      Field("iterations_per_loop", &SessionConfig::iterations_per_loop),
      Field("deterministic", &SessionConfig::deterministic),
      Field("enable_data_pre_proc", &SessionConfig::enable_data_pre_proc),
      Field("hcom_parallel", &SessionConfig::hcom_parallel),
      Field("is_tailing_optimization", &SessionConfig::is_tailing_optimization),
      Field("precision_mode", &SessionConfig::precision_mode),
      Field("precision_mode_v2", &SessionConfig::precision_mode_v2),
      Field("enable_reduce_precision", &SessionConfig::enable_reduce_precision),
      Field("op_select_implmode", &SessionConfig::op_select_implmode),
      Field("optypelist_for_implmode", &SessionConfig::optypelist_for_implmode),
      Field("variable_format_optimize", &SessionConfig::variable_format_optimize),
      Field("enable_scope_fusion_passes", &SessionConfig::enable_scope_fusion_passes),
      Field("auto_tune_mode", &SessionConfig::auto_tune_mode),
      Field("tune_bank_path", &SessionConfig::tune_bank_path),
      Field("op_debug_level", &SessionConfig::op_debug_level),
      Field("kernel_meta_dir", &SessionConfig::kernel_meta_dir),
      Field("profiling_mode", &SessionConfig::profiling_mode),
      Field("profiling_options", &SessionConfig::profiling_options),
      Field("fp_point", &SessionConfig::fp_point),
      Field("bp_point", &SessionConfig::bp_point),
      Field("profiling_dir", &SessionConfig::profiling_dir),
      Field("enable_dump", &SessionConfig::enable_dump),
      Field("dump_path", &SessionConfig::dump_path),
      Field("dump_step", &SessionConfig::dump_step),
      Field("dump_mode", &SessionConfig::dump_mode),
      Field("dump_checksums", &SessionConfig::dump_checksums),
      Field("enable_dump_debug", &SessionConfig::enable_dump_debug),
      Field("dump_debug_mode", &SessionConfig::dump_debug_mode),
      Field("stop_on_overflow", &SessionConfig::stop_on_overflow),
      Field("enable_exception_dump", &SessionConfig::enable_exception_dump),
  };
  return *options;
}

// EditDistance: the Levenshtein distance of a and b when it is at most `limit`, else limit + 1.
// Keys whose lengths differ by more than `limit` cost nothing (a 100 MB key made the full
// O(|a| |b|) search run for minutes), and the rows stop once every entry is past the limit.
size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  const size_t longer = std::max(a.size(), b.size()), shorter = std::min(a.size(), b.size());
  if (longer - shorter > limit) return limit + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
      best = std::min(best, row[j]);
    }
    if (best > limit) return limit + 1;
  }
  return std::min(row[b.size()], limit + 1);
}

// SuggestionLimit: the largest edit distance at which `name` is offered as "did you mean": a
// third of its length, at least 2. Farther keys ("" against "device") get no suggestion: a guess
// that far off misleads more than it helps.
size_t SuggestionLimit(std::string_view name) { return std::max<size_t>(2, name.size() / 3); }

// UnknownOption: the error for a key that names no option, with the nearest option when one is
// close enough, and where the options are documented.
Status UnknownOption(const std::string& key) {
  constexpr char kWhere[] =
      "the options are documented in recsdk/config.h (SessionConfig) and listed by "
      "SessionConfig::OptionNames()";
  if (key.empty()) {
    return Invalid(fmt::format("session config: an option name is empty (\"\"); {}", kWhere));
  }
  const char* nearest = nullptr;
  size_t nearest_distance = 0;
  for (const OptionIo& o : Options()) {
    const size_t limit = SuggestionLimit(o.name);
    const size_t d = EditDistance(key, o.name, limit);
    if (d <= limit && (nearest == nullptr || d < nearest_distance)) {
      nearest = o.name;
      nearest_distance = d;
    }
  }
  if (nearest == nullptr) {
    return Invalid(fmt::format("session config: unknown option {}; {}", Quoted(key), kWhere));
  }
  return Invalid(
      fmt::format("session config: unknown option {}; did you mean \"{}\"?", Quoted(key), nearest));
}

}  // namespace

std::vector<std::string> SessionConfig::OptionNames() {
  std::vector<std::string> names;
  for (const OptionIo& o : Options()) names.emplace_back(o.name);
  return names;
}

namespace {

StatusOr<SessionConfig> FromJsonImpl(std::string_view text) {
  // ParseJson bounds the nesting depth and reports a syntax error with its line and column.
  RECSDK_ASSIGN_OR_RETURN(const json j, internal::ParseJson(text, "session config",
                                                            absl::StatusCode::kInvalidArgument));
  if (!j.is_object()) {
    return Invalid(
        fmt::format("session config: the JSON is a {}, not an object of options", j.type_name()));
  }
  SessionConfig config;
  for (const auto& [key, value] : j.items()) {
    const OptionIo* io = nullptr;
    for (const OptionIo& o : Options()) {
      if (key == o.name) io = &o;
    }
    if (io == nullptr) return UnknownOption(key);
    RECSDK_RETURN_IF_ERROR(io->read(value, config));
  }
  RECSDK_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace

StatusOr<SessionConfig> SessionConfig::FromJson(std::string_view text) {
  try {
    return FromJsonImpl(text);
  } catch (const std::exception& e) {
    return Invalid(fmt::format("session config: {}", e.what()));
  }
}

StatusOr<SessionConfig> SessionConfigFromFile(const std::string& path) {
  // A session config is a few hundred bytes; the bound keeps a wrong path (a data file, a device)
  // from being read whole into memory.
  constexpr uint64_t kMaxBytes = uint64_t{16} << 20;
  const std::string help =
      "give the path of a JSON object of session options (recsdk validate-config FILE checks one)";
  auto in_file = [&](const Status& s) {
    return absl::Status(s.code(),
                        fmt::format("session config file \"{}\": {}; {}", path, s.message(), help));
  };
  internal::Env* env = internal::Env::Default();
  StatusOr<internal::FileType> type = env->GetFileType(path);
  if (!type.ok()) return in_file(type.status());
  if (*type == internal::FileType::kDirectory) {
    return Invalid(fmt::format("session config file \"{}\" is a directory; {}", path, help));
  }
  StatusOr<std::unique_ptr<internal::RandomAccessFile>> file = env->NewRandomAccessFile(path);
  if (!file.ok()) return in_file(file.status());
  StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) return in_file(size.status());
  if (*size > kMaxBytes) {
    return Invalid(
        fmt::format("session config file \"{}\" holds {} bytes, above the {} a config "
                    "may have; {}",
                    path, *size, kMaxBytes, help));
  }
  StatusOr<std::string> text = internal::ReadFileToString(env, path);
  if (!text.ok()) return in_file(text.status());
  StatusOr<SessionConfig> config = SessionConfig::FromJson(*text);
  if (!config.ok()) {
    return absl::Status(config.status().code(), fmt::format("session config file \"{}\": {}", path,
                                                            config.status().message()));
  }
  return config;
}

std::string SessionConfig::ToJson() const {
  // nlohmann's object sorts keys; keep the declaration order by building the text here. Strings
  // that are not UTF-8 are written with U+FFFD instead of throwing.
  std::string out = "{\n";
  const auto& options = Options();
  for (size_t i = 0; i < options.size(); ++i) {
    out += fmt::format("  \"{}\": {}{}\n", options[i].name,
                       options[i].write(*this).dump(-1, ' ', false, json::error_handler_t::replace),
                       i + 1 < options.size() ? "," : "");
  }
  out += "}\n";
  return out;
}

}  // namespace recsdk
