// clock.h: the monotonic clock the estimator and its hooks time intervals with.
#ifndef RECSDK_COMMON_CLOCK_H_
#define RECSDK_COMMON_CLOCK_H_

#include <chrono>

namespace recsdk::internal {

// NowSeconds: seconds on the steady clock (an arbitrary origin: only differences mean anything).
inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_CLOCK_H_
