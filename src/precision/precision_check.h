// precision_check.h: comparing two PRECISION_CHECK traces (the spec's little_demo monitoring
// mode), for `recsdk precision-check RUN_A RUN_B`.
//
// A trace is a dump (dump_observer.h) with dump_mode "all" of the training steps: each step's ops
// with their inputs and outputs as .npy files with CRC-32C in the manifest, written through the
// Env. There is no second trace format: the comparison reads both runs with the dump reader (every
// size, checksum and header checked, dump_reader.h) and compares them with CompareDumps. What this
// adds is the verdict a user asks for after a change: do the runs agree bit for bit, and if not,
// at which step and in which stage of the step did they first go apart. Steps are the trace's
// (Session::Run calls counted from 0, dump_step's numbering), so a Session's initialization run is
// a step too: in little_demo trace step 0 initializes the variables and trace step 1 is the first
// training step. The stages, in a training step's order:
//   init       initializers (ops named .../Initializer/..., Random* types), in any step
//   batch_ids  the ids a table lookup gets (its inputs)
//   lookups    the rows the lookup returns (its outputs)
//   dense      the forward ops up to the logits
//   loss       the loss op and everything after it in the forward pass
//   gradients  backward ops (named gradients/..., sparse_gradients/..., or *Grad types)
//   updates    the optimizers' applies (dense Apply*, TableApply, AssignAdd)
// A tensor diverges when any element differs (max_abs > 0), its shape differs or NaN/Inf sit
// elsewhere: a precision check is for runs that should agree bit for bit (same seed,
// deterministic mode), so no cosine threshold forgives a difference.
//
// Threading: pure functions over the Env.
#ifndef RECSDK_PRECISION_PRECISION_CHECK_H_
#define RECSDK_PRECISION_PRECISION_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"

namespace recsdk::internal {

// PrecisionStage: the stage of a training step a compared tensor belongs to; `direction` is
// "input" or "output"; `after_loss` says whether the step's loss op came earlier in the step.
std::string_view PrecisionStage(std::string_view op, std::string_view type,
                                std::string_view direction, bool after_loss);

// Divergence: the first tensor, over the steps in order and in execution order, that differs.
struct Divergence {
  int64_t step = 0;
  std::string stage;  // one of the stages above
  TensorComparison tensor;
};

struct PrecisionCheckReport {
  int64_t steps_compared = 0;
  int64_t tensors_compared = 0;
  std::optional<Divergence> first;  // empty: the runs agree bit for bit
  // first_training: the first divergence in a training step (a step with gradients or updates),
  // when `first` is in an initialization run: two seeds differ in the initial weights, and then
  // in the first training step's lookups.
  std::optional<Divergence> first_training;
  std::vector<std::string> notes;  // steps or ops on one side only (from CompareDumps)
  // Text: the verdict, one paragraph, for the terminal.
  std::string Text() const;
};

// PrecisionCheck: compares the traces under `run_a` and `run_b` (each a precision_check/<time>
// directory, or any directory CompareDumps takes). InvalidArgument when they share no step; the
// reader's errors (a missing or corrupt file, named) as they come. Nothing throws.
[[nodiscard]] StatusOr<PrecisionCheckReport> PrecisionCheck(Env* env, const std::string& run_a,
                                                            const std::string& run_b);

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_PRECISION_CHECK_H_
