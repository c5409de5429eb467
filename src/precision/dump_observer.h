// dump_observer.h: the session's dumps (enable_dump, dump_path, dump_step, dump_mode), overflow
// detection (enable_dump_debug, dump_debug_mode) and exception dumps (enable_exception_dump), all
// one ExecutionObserver (recsdk/observer.h) that the Session installs when any of them is on. With
// all three off no observer exists and a Run pays nothing.
//
// Layout (the spec's, "Dump data file path format"): one directory per dumped step,
//   {dump_path}/{time}/{device id}/{graph name}/{graph id}/{step}/
// where time is YYYYMMDDHHMMSS (UTC) of the session's first dump, device id the device's index
// ("cpu:0" -> 0), graph name "recsdk_graph" (graphs have no name of their own yet) and graph id the
// process's session counter. A step directory holds one .npy (numpy format v1.0) per tensor,
// named "{op}.{input|output}.{port}.npy" (the op name with '/' and other characters outside
// [A-Za-z0-9_.-] turned into '_', the way the spec turns model names into directory names; a name
// taken by another op of the step gets "-{seq}"), and manifest.json:
//   {"format": "recsdk-dump", "version": 1, "step": S, "device": "cpu:0", "graph": ..., "graph_id":
//    G, "ops": [{"seq": 0, "name", "type", "reasons": ["dump"|"overflow"|"exception"],
//                "error": (exception only), "overflow": [{"port", "nan", "inf"}] (overflow only),
//                "attrs": {name: {"type", "value"}} (graph JSON's layout, src/graph/attr_json.h),
//                "attrs_omitted": [name] (tensor attributes past kMaxDumpAttrTensorBytes),
//                "fused_from": [{"name", "type"}] (an op a fusion pass built: the ops it
//                              replaced, src/graph/fused_from.h; absent otherwise),
//                "inputs": [{"port", "producer": "node:index", "dtype", "shape", "file"?, "bytes"?,
//                            "crc32c"?, "skipped"?, "payload_crc32c"?, "sample"?}],
//                "outputs": [same, without "producer"]}, ...]}
// Ops appear in execution order (with inter-op parallelism: the order they finished, which is
// still a topological order). A tensor listed without "file" was not written: dump_mode left it
// out, or "skipped" says why (a resource handle, an output the op did not produce). "crc32c" is the
// CRC-32C of the whole .npy file and "bytes" its size. With dump_checksums a dumped tensor has no
// file but "payload_crc32c" (the CRC-32C of its elements, C order, no header) and "sample" (its
// first kDumpSampleElements values as numbers, NaN and Inf as null), and the entry no "attrs"; such
// a manifest is written without indentation. src/precision/dump_reader.h reads this.
//
// Crash safety: a step is written into "{step}.tmp-{pid}" and renamed to "{step}" when the Run
// ends, after its manifest; so a step directory with a manifest is complete. Tensor files are not
// synced one by one (a dump is debugging output; one fsync per tensor made a step's dump several
// times slower); the manifest is written atomically and synced.
//
// Overflow detection checks every op at every step (dump_step does not narrow it): an op whose
// inputs are all finite and whose floating-point outputs hold NaN or Inf is reported on stderr by
// name and step, counted (overflow_count), and its inputs and outputs are dumped in that step's
// directory with the reason "overflow". The Run continues, unless stop_on_overflow is on: then
// StopStatus() holds the error from the first overflow on, and the executor (Session::Run) stops
// the Run right after the op, returning that error (InvalidArgument naming the op, the step and
// the step's dump directory, which EndRun still publishes). dump_debug_mode picks the ops: the
// accumulating ones (GatherGrad's scatter-add, TableGradAggregate's segment sum, TableApply; the
// spec's atomic_overflow), the others (aicore_overflow), or all.
//
// Exception dumps: when a kernel fails, its inputs (and whatever outputs it produced) are dumped in
// the step's directory with the reason "exception" and the error's message, and the Status the Run
// returns says where.
//
// Errors: a failed write stops that step's dumping and is returned by EndRun (so by Session::Run),
// naming the file and dump_path.
//
// Threading: AfterNode / OnNodeError may be called concurrently (inter-op parallelism); BeginRun
// and EndRun on the Run thread, never concurrently with node callbacks.
#ifndef RECSDK_PRECISION_DUMP_OBSERVER_H_
#define RECSDK_PRECISION_DUMP_OBSERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/config.h"
#include "recsdk/observer.h"
#include "src/common/env.h"

namespace recsdk::internal {

// DumpSteps: dump_step parsed: "" is every step; "0|5|10-20" the listed steps and ranges.
class DumpSteps {
 public:
  // Parse: InvalidArgument for a malformed text (SessionConfig::Validate checks it first).
  [[nodiscard]] static StatusOr<DumpSteps> Parse(std::string_view text);
  bool Contains(int64_t step) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // inclusive; empty: every step
};

// kDumpSampleElements: how many leading values a dump_checksums entry keeps ("sample").
inline constexpr int64_t kDumpSampleElements = 8;

// kMaxDumpAttrTensorBytes: a tensor attribute (a constant's value) larger than this is not copied
// into the manifest; "attrs_omitted" names it and `recsdk replay-op` refuses the op.
inline constexpr size_t kMaxDumpAttrTensorBytes = size_t{1} << 20;

// DumpFileName: "{op}.{direction}.{port}.npy" with the op name made a plain file name.
std::string DumpFileName(std::string_view op, std::string_view direction, int port);

// DumpNpyDescr: the .npy descr of a dtype ("<f4", ...); bfloat16 is stored as its bits ("<u2",
// numpy has no bfloat16; the manifest's dtype says which). "" for dtypes that are not dumped.
std::string_view DumpNpyDescr(DType dtype);

class DumpObserver final : public ExecutionObserver {
 public:
  // Create: for a session whose config has enable_dump, enable_dump_debug or
  // enable_exception_dump on. `device` is the session's device name ("cpu:0"), `graph_id` tells
  // sessions of one process apart.
  [[nodiscard]] static StatusOr<std::unique_ptr<DumpObserver>> Create(const SessionConfig& config,
                                                                      std::string device,
                                                                      int64_t graph_id);

  void BeginRun(int64_t step);
  // EndRun: writes the step's manifest and publishes its directory. Returns `run_status` when the
  // Run failed (with a failed publication added to its message), else the step's first write
  // error, else OK.
  [[nodiscard]] Status EndRun(int64_t step, Status run_status);

  void AfterNode(const NodeExecution& exec) override;
  void OnNodeError(const NodeExecution& exec, Status* error) override;

  // StopStatus: OK, or (stop_on_overflow) the error that stops this Run at its first overflow.
  // Called by the executor after every node's AfterNode: one relaxed atomic load until a stop.
  Status StopStatus() const {
    if (!stop_requested_.load(std::memory_order_acquire)) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  // overflow_count: op executions overflow detection reported since the session started.
  int64_t overflow_count() const { return overflow_count_.load(); }
  // last_step_dir: the directory of the last published step ("" when none).
  std::string last_step_dir() const;

 private:
  struct Tensors {
    bool inputs = false, outputs = false;
    bool checksums = false;  // dump_checksums: a checksum and a sample instead of the .npy
  };
  DumpObserver(const SessionConfig& config, std::string device, int64_t graph_id);
  // Record: dumps the chosen tensors of one node and adds its manifest entry. Returns the entry's
  // first write error.
  Status Record(const NodeExecution& exec, Tensors which, std::vector<std::string> reasons,
                nlohmann::json extra);
  Status EnsureStepDir();  // mu_ held
  std::string StepDir(int64_t step, bool tmp) const;
  // WriteTensor: the manifest entry of one tensor, its .npy written when `write` (a checksum and
  // sample instead when `checksum`).
  nlohmann::json WriteTensor(const Tensor* t, const std::string& file, bool write, bool checksum,
                             Status* error);

  Env* const env_;
  const std::string dump_path_, device_, device_id_;
  const int64_t graph_id_;
  const bool dump_, overflow_, exception_, stop_on_overflow_, checksums_;
  bool dump_inputs_ = false, dump_outputs_ = true;
  bool check_atomic_ = true, check_other_ = true;
  DumpSteps steps_;
  std::atomic<int64_t> overflow_count_{0};
  std::atomic<bool> stop_requested_{false};  // stop_ is set (this Run)

  mutable std::mutex mu_;  // guards everything below
  std::string time_;       // of the first dump; fixed for the session
  int64_t step_ = -1;
  bool dump_step_ = false;  // enable_dump and dump_step holds the step
  bool dir_created_ = false;
  std::set<std::string> names_;  // file names used in the step
  nlohmann::json ops_;
  int64_t seq_ = 0;
  Status error_;  // the step's first write error
  Status stop_;   // stop_on_overflow: the error of this Run's first overflow
  std::string last_step_dir_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_DUMP_OBSERVER_H_
