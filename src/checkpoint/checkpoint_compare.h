// checkpoint_compare.h: `recsdk compare-ckpt`: two checkpoints (Saver directories such as
// MODEL_DIR/ckpt-N) compared variable by variable and table by table, to find where two runs
// that should agree (a resumed run and an uninterrupted one, two backends, two library versions)
// went apart.
//
// Both checkpoints are read with LoadCheckpoint (session_state.h): every manifest and payload is
// verified against its CRC-32C, and a delta is read with its chain; nothing is parsed twice. A
// table is compared by key over its embedding values (the first `dim` columns of each row; the
// optimizer slots are not compared): the rows of the keys both sides hold give the cosine
// similarity and the max abs difference, and the keys only one side holds are counted. A dense
// variable is compared element by element when both sides have its dtype and shape.
//
// Cost: both checkpoints are held in memory at once (as a restore holds one).
// Threading: a pure function over the Env.
#ifndef RECSDK_CHECKPOINT_CHECKPOINT_COMPARE_H_
#define RECSDK_CHECKPOINT_CHECKPOINT_COMPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"

namespace recsdk::internal {

// CheckpointDifference: one variable or table of either checkpoint.
struct CheckpointDifference {
  enum class Kind { kVariable, kTable } kind = Kind::kVariable;
  std::string name;
  int64_t elements = 0;  // compared: a variable's elements; a table's common keys times dim
  double cosine = 1;     // 1 when every value is equal, 0 when only one side is all zeros
  double max_abs = 0;
  int64_t only_left = 0, only_right = 0;  // tables: keys held by one side only
  // note: why the two cannot be compared value by value ("only in LEFT", "shape [2] vs [3]",
  // "dim 4 vs 8"); empty when they were.
  std::string note;
  // same: equal in every compared value, no key on one side only, no note.
  bool same() const;
};

struct CheckpointComparison {
  std::string left, right;  // the checkpoint directories
  int64_t left_step = 0, right_step = 0;
  // rows: worst first: those with a note, then by cosine ascending, keys on one side only
  // descending, max abs difference descending, then by kind and name.
  std::vector<CheckpointDifference> rows;
  bool all_same() const;
  // Text: the table `recsdk compare-ckpt` prints, and a one-line verdict.
  std::string Text() const;
};

// CompareCheckpoints: NotFound naming a checkpoint directory that does not exist (and saying to
// give MODEL_DIR/ckpt-N when it is a model directory); the reader's errors (DataLoss naming a
// corrupt or missing file, FailedPrecondition for another format version) as they come.
[[nodiscard]] StatusOr<CheckpointComparison> CompareCheckpoints(Env* env, const std::string& left,
                                                                const std::string& right);

}  // namespace recsdk::internal

#endif  // RECSDK_CHECKPOINT_CHECKPOINT_COMPARE_H_
