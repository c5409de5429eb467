// key_stage_registry.h: the key stages alive in the process, so terminate_config_initializer
// (recsdk/initialize.h) can stop them. Thread-safe (one mutex).
#ifndef RECSDK_SESSION_KEY_STAGE_REGISTRY_H_
#define RECSDK_SESSION_KEY_STAGE_REGISTRY_H_

namespace recsdk {
class KeyStage;
}  // namespace recsdk

namespace recsdk::internal {

// TrackKeyStage / UntrackKeyStage: called by KeyStage::Start and ~KeyStage.
void TrackKeyStage(KeyStage* stage);
void UntrackKeyStage(KeyStage* stage);
// StopAllKeyStages: KeyStage::Stop on every live stage; returns how many.
int StopAllKeyStages();

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_KEY_STAGE_REGISTRY_H_
