// little_demo: the main job (scripts/run_demo.sh). See little_demo.cc for the model and
// little_demo.h for the knobs (USE_MODE, CACHE_MODE, ... as environment variables or flags).
#include <cstdio>
#include <string>

#include "samples/little_demo/little_demo.h"
#if defined(LITTLE_DEMO_WITH_MPI)
#include "src/dist/mpi/mpi_communicator.h"
#endif

int main(int argc, char** argv) {
#if defined(LITTLE_DEMO_WITH_MPI)
  // Under mpirun, every rank trains its shard of the data (docs/distributed.md).
  recsdk::dist::RegisterMpiCommunicator();
#endif
  auto options = little_demo::ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto result = little_demo::Run(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "little_demo: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return 0;
}
