// runtime.cc
#include "src/session/runtime.h"

#include "src/device/device.h"
#include "src/graph/op_registry.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {

void InitializeRuntime() {
  (void)OpRegistry::Global();
  RegisterCpuBackend();
  RegisterTableOps();
}

}  // namespace recsdk::internal
