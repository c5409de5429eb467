// dump_compare.h: comparing two dumps op by op (the spec's msaccucmp "vector comparison"), for
// `recsdk compare-dumps LEFT RIGHT [--threshold 0.98] [--csv FILE]`.
//
// Steps are matched by step number, ops by name, tensors by direction and port. Each pair of
// tensors written on both sides is read through dump_reader.h (size, CRC-32C and header checked)
// and compared as doubles: cosine similarity, max absolute and max relative error (|l - r| /
// max(|r|, 1e-12)), the first differing element, and NaN/Inf positions. A pair agrees when the
// shapes match, NaN/Inf sit at the same positions and the cosine similarity of the finite values is
// at least the threshold (two all-zero tensors: 1; one all-zero: 0 unless both are).
//
// The culprit (the spec's "problem source isolation") is the first op in execution order, over the
// steps in order, whose outputs disagree while all of its inputs agree: compared directly when both
// dumps hold the inputs (dump_mode all or input), or through the producers' compared outputs in
// the same step. Its consumers, whose inputs already differ, are not blamed. When the first
// disagreeing op got a differing input from outside the dump (a feed), the report says so instead.
//
// Fused ops (a fusion pass on one side, e.g. fuse_dense in RIGHT only): the fused node keeps the
// name of the last op it replaced, so it is compared with that op's outputs; its rows carry
// `fused` (which side, what it replaced), the ops it replaced that only the other side ran are
// noted as fused rather than "only in LEFT", and since its inputs are the chain's inputs, not
// the last op's, they are judged through their producers' outputs (which both sides hold).
//
// Cost: both dumps are read once; one step's tensors of one op are in memory at a time.
// Threading: pure functions over the Env.
#ifndef RECSDK_PRECISION_DUMP_COMPARE_H_
#define RECSDK_PRECISION_DUMP_COMPARE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"

namespace recsdk::internal {

struct TensorComparison {
  int64_t step = 0;
  std::string op, type, direction;  // direction: "input" or "output"
  int port = 0;
  int64_t elements = 0;
  double cosine = 1, max_abs = 0, max_rel = 0;
  int64_t first_diff = -1;  // flat index of the first element that differs; -1 when none
  bool agree = true;
  std::string note;  // why they disagree beyond the numbers ("shape [2] vs [3]", "NaN at ...")
  // fused: for an op a fusion pass built on either side (the manifest's fused_from), which side
  // and the unfused ops it replaced: "RIGHT FusedDense replaces MatMul \"mm\" + BiasAdd \"ba\"";
  // "" for other ops.
  std::string fused;
};

// DumpCulprit: where the culprit is, for reports that read its step again (the HTML report).
struct DumpCulprit {
  int64_t step = 0;
  std::string op, type;
  std::string left_dir, right_dir;  // the two step directories compared
};

struct DumpComparison {
  double threshold = 0.98;
  std::vector<TensorComparison> rows;  // execution order (left's), steps ascending
  // culprit: "step S: op \"name\" (type)" of the first op whose inputs agree and outputs differ.
  std::optional<std::string> culprit;
  std::optional<DumpCulprit> culprit_at;  // set with culprit
  std::vector<std::string> notes;         // steps or ops on one side only, differences from feeds
  bool all_agree() const;
  // Text: the terminal table and the verdict. Csv: one line per row, with a header.
  std::string Text() const;
  std::string Csv() const;
};

// DumpValues: a dumped tensor's payload (ReadDumpTensor's) as doubles, for any dtype dumps write.
std::vector<double> DumpValues(const std::string& dtype, const std::string& payload);
// CompareTensors: the per-tensor comparison compare-dumps makes (cosine similarity, max abs/rel
// error, first differing element, NaN/Inf placement, `agree` against `threshold`) of two tensors
// and their payloads (ReadDumpTensor's), filled into `row`'s numbers; `right` is the reference
// the relative error divides by. Used by `recsdk replay-op` (dump_replay.h) too.
struct DumpTensor;
void CompareTensors(const DumpTensor& left, const std::string& left_payload,
                    const DumpTensor& right, const std::string& right_payload, double threshold,
                    TensorComparison* row);

// CompareDumps: InvalidArgument when the two dumps share no step, or threshold is not in [-1, 1];
// reader errors (a corrupt or missing file, named) as they come.
[[nodiscard]] StatusOr<DumpComparison> CompareDumps(Env* env, const std::string& left,
                                                    const std::string& right, double threshold);

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_DUMP_COMPARE_H_
