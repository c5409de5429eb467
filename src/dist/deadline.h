// deadline.h: the deadline every wait in src/dist/ takes.
//
// A deadline is a point on the steady (monotonic) clock. Not absl::Time: that is wall-clock time,
// which jumps when NTP or an administrator steps the clock, and a step forward would fail every
// collective in flight at once. A point rather than a duration, so that a call made of several
// waits (the header exchange, then the data) spends one budget, and a caller that makes several
// calls for one step can give them all the step's deadline.
//
// Thread-safe (pure functions of the clock).
#ifndef RECSDK_DIST_DEADLINE_H_
#define RECSDK_DIST_DEADLINE_H_

#include <chrono>

namespace recsdk::dist {

using DeadlineClock = std::chrono::steady_clock;
using Deadline = DeadlineClock::time_point;

// DeadlineAfter: now + `timeout`, saturating at the clock's maximum (a huge timeout is a far
// deadline, not an overflow into the past).
inline Deadline DeadlineAfter(DeadlineClock::duration timeout) {
  const Deadline now = DeadlineClock::now();
  if (timeout > Deadline::max() - now) return Deadline::max();
  return now + timeout;
}

// DeadlineAfterSeconds: DeadlineAfter for a timeout in seconds (a config's `..._timeout_s`).
inline Deadline DeadlineAfterSeconds(double seconds) {
  const std::chrono::duration<double> d(seconds);
  if (d >= std::chrono::duration<double>(DeadlineClock::duration::max())) return Deadline::max();
  return DeadlineAfter(std::chrono::duration_cast<DeadlineClock::duration>(d));
}

// SecondsSince: seconds from `start` to now, for messages ("waited 2.00 s").
inline double SecondsSince(DeadlineClock::time_point start) {
  return std::chrono::duration<double>(DeadlineClock::now() - start).count();
}

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_DEADLINE_H_
