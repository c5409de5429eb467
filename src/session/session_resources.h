// session_resources.h: the resources a Session owns (its variables and tables, by node name), for
// the library's layers above the Session: the table builders and LookupTable (embedding.cc),
// set_threshold, the key stage, the checkpoints, the Estimator's global step and the variable
// broadcast. Not part of the public API: recsdk/session.h names only the friend class below.
//
// Threading: ResourceMgr's own rules (src/device/resource_mgr.h).
#ifndef RECSDK_SESSION_SESSION_RESOURCES_H_
#define RECSDK_SESSION_SESSION_RESOURCES_H_

#include "recsdk/session.h"
#include "src/device/resource_mgr.h"

namespace recsdk::internal {

// SessionAccess: Session's friend (session.h), the one way into its private state from src/.
class SessionAccess {
 public:
  static ResourceMgr* Resources(Session& session);
};

// SessionResources: the resources `session` owns; valid as long as the Session (Close clears
// them).
inline ResourceMgr* SessionResources(Session& session) { return SessionAccess::Resources(session); }

}  // namespace recsdk::internal

#endif  // RECSDK_SESSION_SESSION_RESOURCES_H_
