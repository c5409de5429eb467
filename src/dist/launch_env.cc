// launch_env.cc: reading the launcher's variables, strictly (a value that does not parse is an
// error naming the variable, never a silent world of one).
#include "src/dist/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace recsdk::dist {
namespace {

struct LauncherVariables {
  const char* launcher;
  const char* size;
  const char* rank;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVariables kLaunchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH/Intel MPI", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"MVAPICH2", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"},
};

// ParseInt: the whole of `value` as a decimal int in [min, max], or an error naming `variable`.
absl::StatusOr<int> ParseInt(const char* variable, const char* value, int min, int max,
                             std::string_view rule) {
  int parsed = 0;
  const char* end = value + std::strlen(value);
  const auto [ptr, ec] = std::from_chars(value, end, parsed);
  if (ec != std::errc() || ptr != end || value == end) {
    return absl::InvalidArgumentError(
        fmt::format("{}=\"{}\" is not a whole number; the MPI launcher (mpirun) sets it to {}: "
                    "unset it, or launch with mpirun",
                    variable, value, rule));
  }
  if (parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        fmt::format("{}={} is out of range; it must be {}: unset it, or launch with mpirun",
                    variable, parsed, rule));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(EnvLookup lookup) {
  LaunchEnvironment env;
  for (const LauncherVariables& v : kLaunchers) {
    const char* size = lookup(v.size);
    if (size == nullptr) continue;
    env.launcher = v.launcher;
    env.size_variable = v.size;
    env.rank_variable = v.rank;
    const int max_int = std::numeric_limits<int>::max();
    absl::StatusOr<int> parsed = ParseInt(v.size, size, 1, max_int, "the number of ranks, >= 1");
    if (!parsed.ok()) return parsed.status();
    env.size = *parsed;
    const char* rank = lookup(v.rank);
    if (rank == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("{}={} is set but {} is not; a {} launch sets both: unset {}, or launch "
                      "with mpirun",
                      v.size, env.size, v.rank, v.launcher, v.size));
    }
    parsed = ParseInt(
        v.rank, rank, 0, env.size - 1,
        fmt::format("this process's rank, in [0, {}] ({}={})", env.size - 1, v.size, env.size));
    if (!parsed.ok()) return parsed.status();
    env.rank = *parsed;
    const char* local_size = lookup(v.local_size);
    const char* local_rank = lookup(v.local_rank);
    if (local_size == nullptr || local_rank == nullptr) {
      // An older launcher that does not say: all ranks on this host.
      env.local_size = env.size;
      env.local_rank = env.rank;
      return env;
    }
    parsed = ParseInt(
        v.local_size, local_size, 1, env.size,
        fmt::format("the ranks on this host, in [1, {}] ({}={})", env.size, v.size, env.size));
    if (!parsed.ok()) return parsed.status();
    env.local_size = *parsed;
    parsed = ParseInt(v.local_rank, local_rank, 0, env.local_size - 1,
                      fmt::format("the rank on this host, in [0, {}] ({}={})", env.local_size - 1,
                                  v.local_size, env.local_size));
    if (!parsed.ok()) return parsed.status();
    env.local_rank = *parsed;
    return env;
  }
  return env;
}

absl::StatusOr<JobLayout> ReadJobLayout(const LaunchEnvironment& env, EnvLookup lookup) {
  JobLayout layout;
  layout.workers = env.size;
  const char* text = lookup("TF_CONFIG");
  if (text == nullptr || *text == '\0') return layout;
  // The cluster's tasks in TensorFlow's order: the chief, the workers, the parameter servers.
  constexpr const char* kRoles[] = {"chief", "worker", "ps"};
  int64_t counts[3] = {0, 0, 0};
  std::string type;
  int64_t index = -1;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    const nlohmann::json& cluster = doc.at("cluster");
    for (int r = 0; r < 3; ++r) {
      if (cluster.contains(kRoles[r])) counts[r] = static_cast<int64_t>(cluster[kRoles[r]].size());
    }
    type = doc.at("task").at("type").get<std::string>();
    index = doc.at("task").at("index").get<int64_t>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format(
        "TF_CONFIG is not the JSON of a cluster and a task ({}): it needs {{\"cluster\": "
        "{{\"worker\": [...]}}, \"task\": {{\"type\": \"worker\", \"index\": 0}}}}",
        e.what()));
  }
  const int64_t tasks = counts[0] + counts[1] + counts[2];
  int64_t position = -1;  // this task's place in the cluster's order
  int64_t before = 0;
  for (int r = 0; r < 3; ++r) {
    if (type == kRoles[r]) {
      if (index < 0 || index >= counts[r]) {
        return absl::InvalidArgumentError(
            fmt::format("TF_CONFIG: task {} {} is not in the cluster, which lists {} {} task(s)",
                        type, index, counts[r], type));
      }
      position = before + index;
    }
    before += counts[r];
  }
  if (position < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "TF_CONFIG: task type \"{}\" is not chief, worker or ps (an evaluator runs apart from "
        "the job: start it without mpirun and without TF_CONFIG)",
        type));
  }
  if (counts[0] + counts[1] == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "TF_CONFIG lists {} ps task(s) and no chief or worker: the workers train and the ps "
        "tasks serve them; list at least one worker",
        counts[2]));
  }
  if (tasks != env.size) {
    return absl::FailedPreconditionError(fmt::format(
        "TF_CONFIG lists {} tasks (chief {}, worker {}, ps {}) but {} started {} rank(s); "
        "start one rank per task (mpirun -np {})",
        tasks, counts[0], counts[1], counts[2],
        env.under_launcher() ? env.launcher : std::string("no launcher"), env.size, tasks));
  }
  if (position != env.rank) {
    return absl::FailedPreconditionError(fmt::format(
        "TF_CONFIG makes this process {} {} (task {} of the cluster: chief first, then the "
        "workers, then the ps tasks) but it is rank {} ({}); give each rank the TF_CONFIG of its "
        "own task, e.g. built from {}",
        type, index, position, env.rank, env.rank_variable, env.rank_variable));
  }
  layout.workers = static_cast<int>(counts[0] + counts[1]);
  layout.ps = static_cast<int>(counts[2]);
  layout.is_ps = type == "ps";
  return layout;
}

absl::Status CheckTfConfig(const LaunchEnvironment& env, EnvLookup lookup) {
  return ReadJobLayout(env, lookup).status();
}

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment() {
  return ReadLaunchEnvironment([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace recsdk::dist
