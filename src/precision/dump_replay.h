// dump_replay.h: rerunning one dumped op on the CPU from its dumped inputs and comparing what it
// computes with its dumped outputs, for `recsdk replay-op DUMP OP [--step N] [--threshold 0.98]`
// (the spec's "run the same operator logic on the CPU" to tell a faulty kernel from a faulty
// input: when the replay agrees with the dump, the op computed what the CPU computes from the same
// inputs, and a difference seen by compare-dumps came in through those inputs).
//
// The op is rebuilt from the manifest (type and attributes; dump_observer.h) in a one-op graph
// whose inputs are placeholders fed with the dumped inputs (read through dump_reader.h: size,
// CRC-32C and header checked), run by a CPU Session, and every dumped output is compared with
// compare-dumps' per-tensor metrics (CompareTensors, dump_compare.h) with the replay as the
// reference.
//
// Ops that cannot be replayed are refused with FailedPrecondition naming the op and why: stateful
// ops (variables, tables and their lookups, random streams: their result depends on state a dump
// does not hold), ops with a resource input, ops whose inputs or outputs were not all dumped
// (dump_mode "all" is needed), ops whose outputs the manifest describes otherwise than the op
// rebuilt from it infers, ops whose manifest entry has no attributes (a dump older than this tool)
// or left a large tensor attribute out. The kernel's outputs are thus of sizes already checked
// against files: a manifest's attributes alone cannot make the replay allocate without bound.
//
// Cost: one step's manifest per step directory up to the op's, the op's tensors, one Session.
// Threading: pure functions over the Env.
#ifndef RECSDK_PRECISION_DUMP_REPLAY_H_
#define RECSDK_PRECISION_DUMP_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"

namespace recsdk::internal {

struct ReplayOptions {
  // threshold: the cosine similarity at or above which a replayed output agrees with the dumped
  // one; in [-1, 1]; default 0.98, compare-dumps' (the spec's).
  double threshold = 0.98;
  // step: the dumped step to replay; -1 (default): the first step, in FindStepDirs' order, that
  // holds the op.
  int64_t step = -1;
};

struct ReplayResult {
  std::string step_dir;
  int64_t step = 0;
  std::string op, type;
  double threshold = 0.98;
  // rows: one per output port (direction "output"); the dumped tensor is the left side, the
  // replay the right (the reference of max_rel).
  std::vector<TensorComparison> rows;
  bool all_agree() const;
  // Text: the table `recsdk replay-op` prints and its verdict ("agrees" / "differs").
  std::string Text() const;
};

// ReplayOp: replays op `op` of the dump at or under `root`. NotFound when no dumped step holds the
// op (the message lists some that are there); FailedPrecondition for an op that cannot be
// replayed (above); InvalidArgument for a threshold outside [-1, 1]; the reader's errors (DataLoss,
// NotFound naming the file) for a corrupt or missing dump; the Session's error when the CPU kernel
// fails on the dumped inputs.
[[nodiscard]] StatusOr<ReplayResult> ReplayOp(Env* env, const std::string& root,
                                              const std::string& op, const ReplayOptions& options);

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_DUMP_REPLAY_H_
