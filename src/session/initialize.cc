// initialize.cc: init / terminate_config_initializer (recsdk/initialize.h) and bind_cpu.
//
// Threading: the instance pointer is guarded by a mutex; bind_cpu walks /proc/self/task and sets
// each thread's affinity (threads created later inherit the creating thread's).
#if defined(__linux__)
#include <dirent.h>
#include <sched.h>
#endif

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "recsdk/initialize.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/session/initialize_internal.h"
#include "src/session/key_stage/key_stage_registry.h"

namespace recsdk {
namespace {

std::mutex& InstanceMu() {
  static std::mutex mu;
  return mu;
}
std::unique_ptr<ConfigInitializer>& Instance() {
  static auto* instance = new std::unique_ptr<ConfigInitializer>();  // outlives exit handlers
  return *instance;
}

Status CheckSteps(const char* name, int64_t v) {
  if (v < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "init: {} {} is below -1; use -1 (until the data ends) or a step count >= 0", name, v));
  }
  return absl::OkStatus();
}

// EnvRank: a rank variable's value and the variable it came from (null: none was set).
struct EnvRank {
  int value = 0;
  const char* name = nullptr;
};

// ReadEnvRank: the first of `names` that is set, parsed as a decimal integer >= `min`; `fallback`
// when none is set. A set variable that does not parse is an error naming it and its value:
// LOCAL_RANK=abc was taken as rank 0, so every process of a node pinned itself to the same cores.
StatusOr<EnvRank> ReadEnvRank(std::initializer_list<const char*> names, int fallback, int min,
                              std::string_view meaning) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    int out = 0;
    const std::string_view text(v);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc() || end != text.data() + text.size() || out < min) {
      return absl::InvalidArgumentError(fmt::format(
          "init: bind_cpu: environment variable {}=\"{}\" is not {}: it must be a decimal "
          "integer >= {}; fix the launcher's environment, or unset it ({} when none of {} is set)",
          name, text, meaning, min, fallback, fmt::join(names, ", ")));
    }
    return EnvRank{out, name};
  }
  return EnvRank{fallback, nullptr};
}

#if defined(__linux__)
std::vector<int> ParseCpuList(const std::string& text) {  // "0-3,8,10-11"
  std::vector<int> cpus;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string part = text.substr(i, j - i);
    const size_t dash = part.find('-');
    try {
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    } catch (const std::exception&) {
      return {};
    }
    i = j + 1;
  }
  return cpus;
}

std::vector<std::vector<int>> NumaNodes() {
  std::vector<std::vector<int>> nodes;
  for (int n = 0;; ++n) {
    std::ifstream f(fmt::format("/sys/devices/system/node/node{}/cpulist", n));
    std::string line;
    if (!f || !std::getline(f, line)) break;
    nodes.push_back(ParseCpuList(line));
  }
  if (nodes.empty()) {  // no NUMA information: one node of the online cores
    std::ifstream f("/sys/devices/system/cpu/online");
    std::string line;
    if (f && std::getline(f, line)) nodes.push_back(ParseCpuList(line));
  }
  return nodes;
}

// BindCpus: pins every thread of the process to `cpus`; false (with *why) where refused.
bool BindCpus(const std::vector<int>& cpus, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) {
    *why = "cannot list /proc/self/task";
    return false;
  }
  bool ok = true;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
    if (sched_setaffinity(tid, sizeof(set), &set) != 0) {
      *why = fmt::format("sched_setaffinity of thread {}: {}", tid, std::strerror(errno));
      ok = false;
    }
  }
  closedir(dir);
  return ok;
}
#endif

void AtExit() { terminate_config_initializer(); }

}  // namespace

std::vector<int> internal::CpusForLocalRank(const std::vector<std::vector<int>>& numa_nodes,
                                            int local_rank, int local_size) {
  std::vector<int> all;
  for (const auto& node : numa_nodes) all.insert(all.end(), node.begin(), node.end());
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size ||
      static_cast<int>(all.size()) < local_size) {
    return {};
  }
  const size_t n = all.size(), k = static_cast<size_t>(local_size);
  const size_t r = static_cast<size_t>(local_rank);
  const size_t begin = r * (n / k) + std::min(r, n % k);
  const size_t size = n / k + (r < n % k ? 1 : 0);
  return std::vector<int>(all.begin() + static_cast<long>(begin),
                          all.begin() + static_cast<long>(begin + size));
}

Status InitOptions::Validate() const {
  RECSDK_RETURN_IF_ERROR(CheckSteps("max_steps", max_steps));
  RECSDK_RETURN_IF_ERROR(CheckSteps("train_steps", train_steps));
  RECSDK_RETURN_IF_ERROR(CheckSteps("eval_steps", eval_steps));
  RECSDK_RETURN_IF_ERROR(CheckSteps("save_steps", save_steps));
  if (max_steps == 0 && train_steps == 0 && eval_steps == 0 && save_steps == 0) {
    return absl::InvalidArgumentError(
        "init: max_steps, train_steps, eval_steps and save_steps are all 0: nothing would run; "
        "use -1 for 'until the data ends' or a positive step count");
  }
  if (max_steps >= 0 && train_steps > max_steps) {
    return absl::InvalidArgumentError(
        fmt::format("init: train_steps {} exceeds max_steps {}: the job stops at max_steps; lower "
                    "train_steps or raise max_steps",
                    train_steps, max_steps));
  }
  if (is_incremental_checkpoint != (save_delta_checkpoints_secs > 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "init: is_incremental_checkpoint {} with save_delta_checkpoints_secs {}: delta "
        "checkpoints need both (is_incremental_checkpoint true and a period > 0), or neither",
        is_incremental_checkpoint, save_delta_checkpoints_secs));
  }
  if (save_delta_checkpoints_secs < 0) {
    return absl::InvalidArgumentError(fmt::format("init: save_delta_checkpoints_secs {} is below 0",
                                                  save_delta_checkpoints_secs));
  }
  if (restore_model_version < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "init: restore_model_version {} is below -1; use -1 for the latest checkpoint or its "
        "global step",
        restore_model_version));
  }
  if (restore_model_version >= 0 && !if_load) {
    return absl::InvalidArgumentError(fmt::format(
        "init: restore_model_version {} is set but if_load is false: nothing would be restored; "
        "set if_load = true or drop restore_model_version",
        restore_model_version));
  }
  return absl::OkStatus();
}

StatusOr<InitOptions> InitOptions::FromSettings(
    const std::map<std::string, std::string>& settings) {
  InitOptions o;
  for (const auto& setting : settings) {
    // Plain references, not a structured binding: clang 14 (the fuzz build) cannot capture
    // structured bindings in the lambdas below.
    const std::string& name = setting.first;
    const std::string& text = setting.second;
    auto as_int = [&](int64_t* out) -> Status {
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
      if (ec != std::errc() || end != text.data() + text.size()) {
        return absl::InvalidArgumentError(
            fmt::format("init: setting {} = \"{}\" is not an integer", name, text));
      }
      return absl::OkStatus();
    };
    auto as_bool = [&](bool* out) -> Status {
      if (text == "true" || text == "True" || text == "1") {
        *out = true;
      } else if (text == "false" || text == "False" || text == "0") {
        *out = false;
      } else {
        return absl::InvalidArgumentError(fmt::format(
            "init: setting {} = \"{}\" is not a boolean; use true/false or 1/0", name, text));
      }
      return absl::OkStatus();
    };
    Status s;
    if (name == "max_steps") {
      s = as_int(&o.max_steps);
    } else if (name == "train_steps") {
      s = as_int(&o.train_steps);
    } else if (name == "eval_steps") {
      s = as_int(&o.eval_steps);
    } else if (name == "save_steps") {
      s = as_int(&o.save_steps);
    } else if (name == "save_delta_checkpoints_secs") {
      s = as_int(&o.save_delta_checkpoints_secs);
    } else if (name == "restore_model_version") {
      s = as_int(&o.restore_model_version);
    } else if (name == "if_load") {
      s = as_bool(&o.if_load);
    } else if (name == "use_dynamic") {
      s = as_bool(&o.use_dynamic);
    } else if (name == "use_dynamic_expansion") {
      s = as_bool(&o.use_dynamic_expansion);
    } else if (name == "bind_cpu") {
      s = as_bool(&o.bind_cpu);
    } else if (name == "is_incremental_checkpoint") {
      s = as_bool(&o.is_incremental_checkpoint);
    } else {
      return absl::InvalidArgumentError(fmt::format(
          "init: unknown setting \"{}\"; the settings are max_steps, train_steps, eval_steps, "
          "save_steps, if_load, use_dynamic, use_dynamic_expansion, bind_cpu, "
          "is_incremental_checkpoint, save_delta_checkpoints_secs, restore_model_version",
          name));
    }
    RECSDK_RETURN_IF_ERROR(s);
  }
  RECSDK_RETURN_IF_ERROR(o.Validate());
  return o;
}

const ConfigInitializer* ConfigInitializer::Get() {
  std::lock_guard<std::mutex> lock(InstanceMu());
  return Instance().get();
}

Status init(const InitOptions& options) {
  RECSDK_RETURN_IF_ERROR(options.Validate());
  std::lock_guard<std::mutex> lock(InstanceMu());
  if (Instance() != nullptr) {
    return absl::FailedPreconditionError(
        "init: the framework is already initialised; call terminate_config_initializer() first");
  }
  auto instance = std::make_unique<ConfigInitializer>(options);
  if (options.bind_cpu) {
#if defined(__linux__)
    RECSDK_ASSIGN_OR_RETURN(
        const EnvRank local_rank,
        ReadEnvRank({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}, 0, 0, "a local rank"));
    RECSDK_ASSIGN_OR_RETURN(
        const EnvRank local_size,
        ReadEnvRank({"LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 1, "a count of local ranks"));
    const int rank = local_rank.value, size = local_size.value;
    if (rank >= size) {
      return absl::InvalidArgumentError(fmt::format(
          "init: bind_cpu: local rank {} ({}) is not below the local size {} ({}); fix the "
          "launcher's environment",
          rank, local_rank.name != nullptr ? local_rank.name : "default", size,
          local_size.name != nullptr ? local_size.name : "default"));
    }
    std::vector<int> cpus = internal::CpusForLocalRank(NumaNodes(), rank, size);
    std::string why;
    if (cpus.empty()) {
      internal::LogWarning("init: bind_cpu: no cores for local rank {} of {}; threads not pinned",
                           rank, size);
    } else if (!BindCpus(cpus, &why)) {
      internal::LogWarning("init: bind_cpu: the OS refused ({}); threads not pinned", why);
    } else {
      instance->bound_cpus_ = std::move(cpus);
    }
#else
    internal::LogWarning("init: bind_cpu is a no-op on this OS");
#endif
  }
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(AtExit); });
  Instance() = std::move(instance);
  return absl::OkStatus();
}

void terminate_config_initializer() {
  internal::StopAllKeyStages();
  std::lock_guard<std::mutex> lock(InstanceMu());
  Instance().reset();
}

}  // namespace recsdk
