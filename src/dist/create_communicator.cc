// create_communicator.cc: the choice between the local and the multi-process communicator.
#include "src/dist/create_communicator.h"

#include <cstdlib>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "src/dist/local_communicator.h"

namespace recsdk::dist {
namespace {

struct Registry {
  absl::Mutex mu;
  std::string name ABSL_GUARDED_BY(mu);
  CommunicatorFactory factory ABSL_GUARDED_BY(mu) = nullptr;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // never destroyed: usable from exit handlers
  return *registry;
}

// How to get MPI into this program, which depends on how recsdk was built (CMake defines
// RECSDK_BUILT_WITH_MPI when it found MPI and built recsdk::mpi).
#ifdef RECSDK_BUILT_WITH_MPI
constexpr const char* kHowToGetMpi =
    "link recsdk::mpi (find_package(recsdk COMPONENTS mpi)) and call "
    "recsdk::dist::RegisterMpiCommunicator() at start";
#else
constexpr const char* kHowToGetMpi =
    "this recsdk was built without MPI: install Open MPI (scripts/install_deps.sh installs "
    "libopenmpi-dev), rebuild recsdk, link recsdk::mpi and call "
    "recsdk::dist::RegisterMpiCommunicator() at start";
#endif

}  // namespace

void SetMultiProcessCommunicator(std::string_view name, CommunicatorFactory factory) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  registry.name = std::string(name);
  registry.factory = factory;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const LaunchEnvironment& env,
                                                                 Deadline deadline) {
  CommunicatorFactory factory = nullptr;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    factory = registry.factory;
  }
  if (env.under_launcher() && factory != nullptr) return factory(env, deadline);
  if (env.under_launcher() && env.size > 1) {
    return absl::FailedPreconditionError(fmt::format(
        "this process was launched as rank {} of {} ({} set {}={}) but this program has no "
        "multi-process communicator, so each rank would train alone; {}; or run one process "
        "without mpirun",
        env.rank, env.size, env.launcher, env.size_variable, env.size, kHowToGetMpi));
  }
  return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Deadline deadline) {
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) return env.status();
  // The spec's PS-worker scripts set TF_CONFIG: it must describe this job (launch_env.h).
  absl::Status tf_config =
      CheckTfConfig(*env, [](const char* name) -> const char* { return std::getenv(name); });
  if (!tf_config.ok()) return tf_config;
  return CreateCommunicator(*env, deadline);
}

}  // namespace recsdk::dist
