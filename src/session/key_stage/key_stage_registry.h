// key_stage_registry.h: the key stages alive in the process, so terminate_config_initializer
// (recsdk/initialize.h) can stop them. Thread-safe (one mutex).
#ifndef RECSDK_SESSION_KEY_STAGE_KEY_STAGE_REGISTRY_H_
#define RECSDK_SESSION_KEY_STAGE_KEY_STAGE_REGISTRY_H_

namespace recsdk {
class KeyStage;
class Session;
}  // namespace recsdk

namespace recsdk::internal {

// UntrackKeyStage: called by ~KeyStage (the constructor tracks the stage).
void UntrackKeyStage(KeyStage* stage);
// StopAllKeyStages: KeyStage::Stop on every live stage; returns how many.
int StopAllKeyStages();
// DetachKeyStages: stops every live stage started on `session` (releasing the leases tiered
// tables hold for it) and marks it detached, so it never touches the session's tables again:
// Next and AfterStep then answer FailedPrecondition, Stop and destruction are safe. Session::Close
// calls it before the tables go. Returns how many stages it detached.
int DetachKeyStages(const Session* session);

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_KEY_STAGE_KEY_STAGE_REGISTRY_H_
