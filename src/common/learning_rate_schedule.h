// learning_rate_schedule.h: the learning-rate multiplier of a LearningRateSchedule
// (recsdk/optimizers.h) at a step, as plain arithmetic shared by the public
// LearningRateSchedule::Multiplier and the CPU kernel of the LearningRateMultiplier op, so the
// graph and the host reference cannot drift apart. Threading: pure; thread-safe.
#ifndef RECSDK_COMMON_LEARNING_RATE_SCHEDULE_H_
#define RECSDK_COMMON_LEARNING_RATE_SCHEDULE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace recsdk::internal {

// Decay kinds as stored in the op's "decay" attribute (LearningRateSchedule::Decay's values).
inline constexpr int64_t kDecayConstant = 0, kDecayExponential = 1, kDecayCosine = 2;

// LearningRateMultiplierAt: the factor on the base learning rate for the update that follows
// `step` applied updates (0 for the first). Linear warm-up (step + 1) / warmup_steps while
// step < warmup_steps; after it, with t = step - warmup_steps: 1 (constant),
// decay_rate^(t / decay_steps) (exponential; the exponent floored when staircase), or
// alpha + (1 - alpha) * (1 + cos(pi * min(t, decay_steps) / decay_steps)) / 2 (cosine).
inline double LearningRateMultiplierAt(int64_t step, int64_t warmup_steps, int64_t decay,
                                       int64_t decay_steps, double decay_rate, bool staircase,
                                       double alpha) {
  if (step < 0) step = 0;
  if (step < warmup_steps) {
    return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double t = static_cast<double>(step - warmup_steps);
  if (decay == kDecayExponential && decay_steps > 0) {
    double p = t / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return std::pow(decay_rate, p);
  }
  if (decay == kDecayCosine && decay_steps > 0) {
    const double p = std::min(t, static_cast<double>(decay_steps)) / decay_steps;
    return alpha + (1 - alpha) * 0.5 * (1 + std::cos(M_PI * p));
  }
  return 1.0;
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_LEARNING_RATE_SCHEDULE_H_
