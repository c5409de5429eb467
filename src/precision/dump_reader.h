// dump_reader.h: reading the dumps DumpObserver writes (layout in dump_observer.h), for the
// `recsdk` tools: find-nan today.
//
// Nothing read from a dump is trusted: a manifest is at most kMaxManifestBytes and must have the
// documented shape (a missing or mistyped field is DataLoss naming the manifest and the field);
// a tensor file must be a plain file name, have exactly the size its dtype and shape give, the
// CRC-32C the manifest records and the .npy header our writer produces, or the error (DataLoss,
// NotFound) names the file. Directory walks are bounded in depth and entries and never follow a
// symbolic link. Errors are values; nothing throws.
//
// Threading: pure functions over the Env (thread-safe).
#ifndef RECSDK_PRECISION_DUMP_READER_H_
#define RECSDK_PRECISION_DUMP_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/status.h"
#include "src/common/env.h"

namespace recsdk::internal {

inline constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxDumpTensorBytes = uint64_t{64} << 30;

// DumpTensor: one input or output of a dumped op, as the manifest lists it.
struct DumpTensor {
  int port = 0;
  std::string producer;  // inputs only: "node:index"
  std::string dtype;     // "" when the op did not produce it
  std::vector<int64_t> shape;
  std::string file;  // "" when not written (dump_mode, or `skipped`)
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  std::string skipped;
  // dump_checksums: the CRC-32C of the elements and the first values (NaN/Inf read as NaN), in
  // place of a file; has_checksum false otherwise.
  bool has_checksum = false;
  uint32_t payload_crc32c = 0;
  std::vector<double> sample;
};

// FusedOp: one op a fused op replaced (the manifest's "fused_from", src/graph/fused_from.h).
struct FusedOp {
  std::string name, type;
};

struct DumpOp {
  int64_t seq = 0;
  std::string name, type, error;
  std::vector<std::string> reasons;  // "dump", "overflow", "exception"
  std::vector<DumpTensor> inputs, outputs;
  // attrs: the op's attributes as the manifest holds them (an object in graph JSON's layout,
  // checked only for being an object; src/graph/attr_json.h reads it). Null in dumps written
  // before manifests recorded attributes. attrs_omitted: large tensor attributes left out.
  nlohmann::json attrs;
  std::vector<std::string> attrs_omitted;
  // fused_from: for an op a fusion pass built (FusedDense, TableGatherConcat), the unfused ops it
  // replaced, in graph order (its own name among them); empty otherwise and in older dumps.
  std::vector<FusedOp> fused_from;
};

struct DumpStep {
  std::string dir;  // the step directory
  int64_t step = 0;
  std::string device, graph;
  int64_t graph_id = 0;
  std::vector<DumpOp> ops;  // in execution order
};

// FindStepDirs: the published step directories (holding manifest.json) at or under `root`, ordered
// by their parent directory and then by step number. Unpublished ones ("N.tmp-PID", a crash) are
// left out. NotFound when `root` does not exist; InvalidArgument when it holds no step.
[[nodiscard]] StatusOr<std::vector<std::string>> FindStepDirs(Env* env, const std::string& root);

// ReadDumpManifest: the manifest of one step directory, validated.
[[nodiscard]] StatusOr<DumpStep> ReadDumpManifest(Env* env, const std::string& step_dir);

// ReadDumpTensor: the payload (the elements, C order) of a written tensor, after checking its size,
// checksum and header against the manifest.
[[nodiscard]] StatusOr<std::string> ReadDumpTensor(Env* env, const DumpStep& step,
                                                   const DumpTensor& tensor);

// NanFinding: the first op, in execution order, whose outputs hold NaN or Inf.
struct NanFinding {
  std::string step_dir;
  int64_t step = 0;
  std::string op, type;
  std::vector<std::string> outputs;  // "output 0 (file): N NaN, M Inf"
  // inputs: whether the op's inputs already held NaN/Inf (read from the dumped inputs, or else
  // from the dumped outputs of their producers in the same step).
  enum class Inputs { kFinite, kNonFinite, kUnknown } inputs = Inputs::kUnknown;
  std::vector<std::string> input_notes;  // one line per input
  bool table_lookup = false;             // a lookup op: the rows it returned came from the table
};

struct NanReport {
  int64_t steps = 0, ops = 0, tensors = 0;  // read and verified
  std::optional<NanFinding> first;
  // Text: the report `recsdk find-nan` prints.
  std::string Text() const;
};

// FindNan: reads every step under `root`, verifies every tensor file against its manifest and
// finds the first op whose outputs hold NaN/Inf.
[[nodiscard]] StatusOr<NanReport> FindNan(Env* env, const std::string& root);

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_DUMP_READER_H_
