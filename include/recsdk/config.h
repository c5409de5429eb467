// recsdk/config.h: session configuration.
//
// Options keep the names of the session configuration spec (sess.run mode) so users find them by
// name. Each field documents its default, its rule and what it does on the CPU backend; Validate()
// checks every rule once, when the Session is created, and its error names the option, the value,
// the rule and the fix. Nothing is clamped, and no option is recorded and ignored: an option this
// runtime cannot honour yet is rejected with the reason (docs/session-config.md's table says
// which).
//
// FromJson / ToJson load and save the config as a JSON object keyed by these names; an unknown key
// is an error naming the nearest valid one when one is close. `recsdk validate-config FILE.json`
// runs both.
//
// Threading: a plain value; copy it freely.
#ifndef RECSDK_CONFIG_H_
#define RECSDK_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/status.h"

namespace recsdk {

class Env;  // recsdk/env.h

inline constexpr int64_t kGiB = int64_t{1} << 30;

// SessionConfig: the options of a Session (the session configuration spec's, plus ours, marked so).
// Plain struct; Validate() checks it when a Session is created.
struct SessionConfig {
  // --- Device and parallelism -----------------------------------------------------------------

  // device: the backend that runs the graph, by registered name. Default "cpu".
  std::string device = "cpu";

  // use_off_line: whether training runs on an accelerator (true) or on the host CPU (false,
  // default). true needs `device` to name an accelerator backend; with "cpu" it is an error.
  bool use_off_line = false;

  // stream_max_parallel_num: how many ops may run at once per engine, "ENGINE:N[,ENGINE:N]",
  // N in [1, 13], default 1 (ops run one at a time, each using intra-op parallelism).
  // Engines: "DNN_V100" bounds the device backend's ops (with the CPU backend, every op);
  // "DNN_VM_TF" bounds ops that fall back to the host under mix_compile_mode.
  std::string stream_max_parallel_num;

  // intra_op_parallelism: threads a single kernel may use, in [0, 1024]; 0 (default) = all
  // hardware threads.
  int intra_op_parallelism = 0;

  // mix_compile_mode: an op the device has no kernel for runs on the host, with copies where its
  // edges cross memory spaces (the placement pass). Default false (such an op is an error naming
  // it and the device). With the CPU backend the device is the host, so no op ever falls back;
  // true is accepted and changes nothing there.
  bool mix_compile_mode = false;

  // --- Memory -----------------------------------------------------------------------------------

  // graph_memory_max_size: bytes for activations and other step-scoped tensors on the device,
  // in [0, 256 GiB]; default 26 GiB. graph + variable memory must not exceed 31 GiB (spec rule).
  // Enforced: an allocation past it is ResourceExhausted naming the op, the bytes and the limit.
  int64_t graph_memory_max_size = 26 * kGiB;
  // variable_memory_max_size: bytes for variables, in [0, 256 GiB]; default 5 GiB. Enforced.
  int64_t variable_memory_max_size = 5 * kGiB;

  // --- Execution modes --------------------------------------------------------------------------

  // graph_run_mode: 1 (default) training; 0 online inference: Session::Create refuses gradient
  // and update ops (Apply*, TableApply) and makes every table lookup read-only (no admission, no
  // insertion; unseen keys read the default value).
  int graph_run_mode = 1;

  // iterations_per_loop: training steps one Session::RunLoop call performs, in [1, 1000000];
  // default 1. RunLoop's `iterations` must equal it (the spec's set_iteration_per_loop check).
  int64_t iterations_per_loop = 1;

  // deterministic: two runs with the same seed and data give bitwise-identical losses, weights
  // and table rows at any intra_op_parallelism and stream_max_parallel_num. Default false. On the
  // CPU backend this holds whether it is on or off: no kernel splits one output's sum across
  // threads, sparse gradients are summed per key in batch order and the key stage resolves in
  // batch order (tests/session/deterministic_test.cc guards it), so it costs nothing. A kernel
  // that reduces across threads must use a fixed order when it is on. (JSON also accepts 0 / 1,
  // as the spec writes it.)
  bool deterministic = false;

  // enable_data_pre_proc: data preprocessing offloaded to the device. Default false. The CPU
  // backend has no device to offload to (the pipeline already preprocesses in its own threads), so
  // true is an error with the CPU backend.
  bool enable_data_pre_proc = false;

  // hcom_parallel: with several ranks, DistributedOptimizer's gradient allreduce runs in buckets
  // in backward order, each starting once its gradients are ready, beside the rest of backward
  // (with stream_max_parallel_num > 1); false: one allreduce after backward. Default false. No
  // effect in one process. docs/distributed.md.
  // is_tailing_optimization: with several ranks, the last of hcom_parallel's buckets is reduced
  // in the background while the updates that do not need it (the earlier buckets' variables,
  // the sparse tables) run, on one stream as on several. Default false. Requires hcom_parallel
  // true (an error otherwise) and must equal DistributedOptimizerOptions::is_tailing_optimization
  // of the optimizer that built the graph (the spec's NPUOptimizer pairing; Session::Create fails
  // naming both when they differ). No effect in one process. Training is bitwise the same.
  // docs/distributed.md.
  bool hcom_parallel = false;
  bool is_tailing_optimization = false;

  // --- Precision --------------------------------------------------------------------------------

  // precision_mode: "" (None) or "allow_fp32_to_fp16" (default: an op without a float32 kernel
  // runs in float16; every CPU op has one, so nothing changes precision), "must_keep_origin_dtype"
  // (never change precision), "allow_mix_precision" or "force_fp16": the session pass
  // "mixed_precision" runs every float32 MatMul/BatchMatMul (forward and backward) as a bfloat16
  // product with float32 accumulation (AVX-512 BF16), keeping master weights, optimizer state,
  // reductions, losses and other sensitive ops in float32 (src/session/passes/mixed_precision.cc
  // says why force_fp16 and float16 mean the same rewrite on CPU). Pair it with a loss-scale
  // optimizer (optimizers.h) if gradients underflow.
  std::string precision_mode;
  // precision_mode_v2: "" (unset, default; precision_mode applies), "origin" (keep every dtype),
  // or "fp16", "mixed_float16", "mixed_bfloat16", "cube_fp16in_fp32out" (the mixed_precision
  // pass, as above). Set at most one of precision_mode and precision_mode_v2.
  std::string precision_mode_v2;
  // enable_reduce_precision: not supported (spec); true is an error.
  bool enable_reduce_precision = false;

  // op_select_implmode: "high_performance" (default) or "high_precision": which kernel variant
  // ops use where a backend offers both. optypelist_for_implmode: comma-separated op types the
  // mode applies to (others use high_performance); empty applies it to every op. Needs
  // op_select_implmode set.
  std::string op_select_implmode = "high_performance";
  std::string optypelist_for_implmode;

  // variable_format_optimize: variables stored in the backend's preferred layout. Default true.
  // The CPU backend's preferred layout is the row-major one variables already have, so there is
  // nothing to convert: keeping weights pre-packed for the GEMM was measured to save at most
  // 0.14% (float32) and 1.3% (bfloat16) of a product at batch 4096 (docs/session-config.md).
  bool variable_format_optimize = true;

  // enable_scope_fusion_passes: comma-separated names of optional fusion passes to run. Default
  // "". Known: "fuse_dense" (MatMul + BiasAdd (+ Relu) as one FusedDense node) and
  // "fuse_gather_concat" (pooled lookups concatenated along axis 1 as one TableGatherConcat node
  // that pools each table straight into its columns); any other name is an error listing the
  // known ones.
  std::string enable_scope_fusion_passes;

  // auto_tune_mode: "" (default, off) or a comma list of "RL", "GA". Any value turns on the CPU
  // backend's GEMM tuner (src/device/cpu/gemm_tuner.h): the first time a float32 product shape
  // runs (MatMul, FusedDense, BatchMatMul), every candidate plan (backend x blocks of C by rows
  // or columns, at most 14) is timed on the real operands and the fastest is kept for that
  // shape, in this process and in the tune bank file tune_bank_path/gemm.tsv, keyed by CPU
  // model, threads and shape, so later runs start tuned. The space is small enough to measure
  // whole, so RL and GA (the spec's search methods) mean the same here. Exclusive with
  // deterministic (a choice by timing changes bits).
  std::string auto_tune_mode;
  // tune_bank_path (ours; the spec's tools read TUNE_BANK_PATH): the folder of the tune bank.
  // Default "tune_bank" (relative to the working directory), created when the first shape is
  // tuned.
  std::string tune_bank_path = "tune_bank";

  // op_debug_level: 0 (default) none; 1 and 2 write per-op debug information (op, inputs,
  // output dtypes and shapes, kernel key, creating pass) and the list of passes that ran to the
  // folder `kernel_meta` in the working directory and log where; 3 writes the same quietly.
  int op_debug_level = 0;
  // kernel_meta_dir (ours, not the spec's): where op_debug_level writes. Default "kernel_meta"
  // (relative to the working directory, as the spec says).
  std::string kernel_meta_dir = "kernel_meta";

  // --- Profiling --------------------------------------------------------------------------------

  // profiling_mode: write a profile per Run (Chrome trace JSON, see RunOptions). Default false.
  // profiling_options: colon-separated "training_trace", "task_trace", "op_trace"; op_trace is
  // exclusive with the other two. Required (non-empty) when profiling_mode is on.
  bool profiling_mode = false;
  std::string profiling_options;
  // fp_point / bp_point: names of the first forward node and the last backward node, required
  // with training_trace; Session::Create checks they name nodes of the graph.
  std::string fp_point;
  std::string bp_point;
  // profiling_dir (ours, not the spec's): the directory profiles go to, created if missing; one
  // file per Run, "trace_<session>_<step>.json". Default "profiling" (relative to the working
  // directory).
  std::string profiling_dir = "profiling";

  // --- Dumps, overflow detection, exception dumps (src/precision/dump_observer.h) --------------
  // With all three of enable_dump, enable_dump_debug and enable_exception_dump off (the default)
  // nothing observes a Run and they cost nothing. The layout of a dump and its manifest are
  // described in docs/precision.md; `recsdk find-nan DUMP_DIR` reads them.

  // enable_dump: write op inputs/outputs (dump_mode) at the steps of dump_step, one .npy per
  // tensor and a manifest.json per step, under
  // dump_path/{time}/{device id}/recsdk_graph/{graph id}/{step}/. Default false. Needs dump_path.
  // A failed write makes that Session::Run return the error (naming the file).
  bool enable_dump = false;
  // dump_path: where dumps go (created if missing); required when enable_dump, enable_dump_debug
  // or enable_exception_dump is on.
  std::string dump_path;
  // dump_step: steps to dump, "" (all) or "N|A-B|..." e.g. "0|3-5|10" (ranges with A <= B). Steps
  // count completed Session::Run calls from 0.
  std::string dump_step;
  // dump_mode: "input", "output" (default) or "all".
  std::string dump_mode = "output";
  // dump_checksums (ours, not the spec's): a compact dump for bit-for-bit comparisons (the
  // PRECISION_CHECK trace): each tensor enable_dump writes becomes, instead of its .npy, the
  // CRC-32C of its elements and its first kDumpSampleElements values in the manifest
  // ("payload_crc32c", "sample"). compare-dumps and precision-check compare the checksums (and
  // the samples, for the numbers); find-nan and replay-op need the tensors. Overflow and exception
  // dumps still write whole tensors. Default false. Needs enable_dump.
  bool dump_checksums = false;
  // enable_dump_debug: overflow detection at every step: an op whose inputs are finite and whose
  // float outputs hold NaN/Inf is reported on stderr by name and step, counted
  // (SessionStats::overflow_count) and its inputs and outputs dumped; training continues (or stops:
  // stop_on_overflow). Default false. Needs dump_path. Cost: one scan of every float output (and,
  // on a hit, the inputs).
  bool enable_dump_debug = false;
  // dump_debug_mode: which ops overflow detection watches: "atomic_overflow" the accumulating ones
  // (GatherGrad, TableGradAggregate, TableApply), "aicore_overflow" the others, "all" (default)
  // every op.
  std::string dump_debug_mode = "all";
  // stop_on_overflow (ours, not the spec's): what overflow detection does at the first overflow.
  // false (default): report, count and continue (what loss scaling needs: the step's update is
  // skipped by the scaler and training goes on). true: the Run stops right after the op that
  // overflowed (the ops after it, the step's updates included, do not run and the step counter
  // does not advance) and Session::Run returns InvalidArgument naming the op, the step and the
  // directory holding its dumped inputs and outputs. Needs enable_dump_debug.
  bool stop_on_overflow = false;
  // enable_exception_dump: 0 (default) or 1: when an op's kernel fails, dump its inputs (and any
  // outputs it produced) and name the directory in the error Session::Run returns. Needs
  // dump_path. Costs nothing until an op fails.
  int enable_exception_dump = 0;
  // dump_env (ours, not an option of the spec, not in the JSON): the file system dumps are written
  // through; tests inject faults with it. Null (default): the process's. Not owned; must outlive
  // the Session.
  Env* dump_env = nullptr;

  // Validate returns InvalidArgument naming the first option that breaks its rule, its value, the
  // rule and the fix (graph-dependent rules such as fp_point naming a node are checked by
  // Session::Create).
  Status Validate() const;

  // ParsedStreamLimits: stream_max_parallel_num as engine -> limit (after Validate succeeds).
  std::map<std::string, int> ParsedStreamLimits() const;

  // ProfilingOptions: profiling_options split at ':' (after Validate succeeds).
  std::vector<std::string> ProfilingOptions() const;

  // FromJson parses a JSON object of option names to values (missing options keep their
  // defaults) and validates the result. InvalidArgument for a syntax error (with its line and
  // column), nesting deeper than 64 levels, an unknown key (with the nearest valid one when one is
  // close, and where the options are documented), or a value of the wrong JSON type. Messages
  // quote at most 80 bytes of a key or value.
  static StatusOr<SessionConfig> FromJson(std::string_view json);
  // ToJson: every option, defaults included, as a JSON object (pretty-printed).
  std::string ToJson() const;
  // OptionNames: every option FromJson accepts, in declaration order.
  static std::vector<std::string> OptionNames();
};

}  // namespace recsdk

#endif  // RECSDK_CONFIG_H_
