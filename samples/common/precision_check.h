// precision_check.h: the spec's little_demo monitoring mode (PRECISION_CHECK=1) for every sample:
// the training steps of PRECISION_CHECK_STEPS are traced under PRECISION_CHECK_DIR/<time>/ by the
// session's dump observer (dump_mode "all"), and `recsdk precision-check RUN_A RUN_B` names the
// first step and stage where two runs diverge. The trace is compact by default (dump_checksums:
// per tensor the CRC-32C of its elements and its first values, in the manifest, no .npy files);
// PRECISION_CHECK_TENSORS=1 keeps every tensor whole (for compare-dumps' numbers, find-nan or
// replay-op on the trace). Threading: one caller.
#ifndef RECSDK_SAMPLES_COMMON_PRECISION_CHECK_H_
#define RECSDK_SAMPLES_COMMON_PRECISION_CHECK_H_

#include <cstdio>
#include <string>

#include "recsdk/config.h"
#include "recsdk/status.h"

namespace samples {

// PrecisionCheckOptions: the mode's knobs (their environment variables in parentheses).
struct PrecisionCheckOptions {
  bool on = false;                      // PRECISION_CHECK: 0 (default) or 1
  std::string dir = "precision_check";  // PRECISION_CHECK_DIR
  std::string steps = "0-9";            // PRECISION_CHECK_STEPS (dump_step's syntax)
  bool tensors = false;                 // PRECISION_CHECK_TENSORS: 1 keeps whole tensors
};

// PrecisionCheckFromEnv: the knobs from the environment (unset: the defaults). InvalidArgument
// naming `sample` and the variable for PRECISION_CHECK or PRECISION_CHECK_TENSORS other than 0
// or 1.
[[nodiscard]] recsdk::StatusOr<PrecisionCheckOptions> PrecisionCheckFromEnv(
    const std::string& sample);

// ApplyPrecisionCheck: with o.on, sets `config`'s dump options to the trace's (enable_dump,
// dump_path o.dir, dump_step o.steps, dump_mode "all", dump_checksums unless o.tensors; they
// override a session config file's) and prints where it traces to `out` (null: nothing). The
// result is validated: InvalidArgument naming `sample`, PRECISION_CHECK_STEPS and
// PRECISION_CHECK_DIR. Off: `config` is left alone.
[[nodiscard]] recsdk::Status ApplyPrecisionCheck(const std::string& sample,
                                                 const PrecisionCheckOptions& o,
                                                 recsdk::SessionConfig* config, std::FILE* out);

}  // namespace samples

#endif  // RECSDK_SAMPLES_COMMON_PRECISION_CHECK_H_
