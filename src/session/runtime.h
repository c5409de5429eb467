// runtime.h: one-time start of the runtime: registers the core ops (on first use of the op
// registry) and the built-in backends. Thread-safe and idempotent.
#ifndef RECSDK_SESSION_RUNTIME_H_
#define RECSDK_SESSION_RUNTIME_H_

namespace recsdk::internal {

void InitializeRuntime();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_RUNTIME_H_
