// runtime.cc
#include "src/session/runtime.h"

#include "src/device/device.h"
#include "src/dist/collective_ops.h"
#include "src/graph/op_registry.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {

void InitializeRuntime() {
  (void)OpRegistry::Global();
  RegisterCpuBackend();
  RegisterSeparateMemoryBackend();
  RegisterTableOps();
  // The collective ops (AllReduceMean): registered here so that a graph holding them loads and
  // runs in any Session, also one built without the distributed API's builders.
  dist::RegisterCollectiveOps();
}

}  // namespace recsdk::internal
