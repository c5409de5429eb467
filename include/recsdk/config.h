// recsdk/config.h: session configuration.
//
// Options keep the names of the session configuration spec (sess.run mode) so users find them by
// name. Each field documents its default and rule; Validate() checks every rule once, when the
// Session is created, and names the option and the fix in its error. Nothing is clamped.
#ifndef RECSDK_CONFIG_H_
#define RECSDK_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>

#include "recsdk/status.h"

namespace recsdk {

inline constexpr int64_t kGiB = int64_t{1} << 30;

struct SessionConfig {
  // device: the backend that runs the graph, by registered name. Default "cpu".
  std::string device = "cpu";

  // stream_max_parallel_num: how many ops may run at once per engine, "ENGINE:N[,ENGINE:N]",
  // N in [1, 13], default 1 (ops run one at a time, each using intra-op parallelism).
  // Engines: "DNN_V100" bounds the device backend's ops (with the CPU backend, every op);
  // "DNN_VM_TF" bounds ops that fall back to the host under mix_compile_mode.
  std::string stream_max_parallel_num;

  // intra_op_parallelism: threads a single kernel may use; 0 (default) = all hardware threads.
  int intra_op_parallelism = 0;

  // graph_memory_max_size: bytes for activations and other step-scoped tensors on the device,
  // in [0, 256 GiB]; default 26 GiB. graph + variable memory must not exceed 31 GiB (spec rule).
  int64_t graph_memory_max_size = 26 * kGiB;
  // variable_memory_max_size: bytes for variables, in [0, 256 GiB]; default 5 GiB.
  int64_t variable_memory_max_size = 5 * kGiB;

  // op_select_implmode: "high_performance" (default) or "high_precision": which kernel variant
  // ops use where a backend offers both. optypelist_for_implmode: comma-separated op types the
  // mode applies to; empty applies it to every op.
  std::string op_select_implmode = "high_performance";
  std::string optypelist_for_implmode;

  // deterministic: ops that could reorder floating-point sums across threads use a fixed order,
  // so two runs with the same seed and data give bitwise-identical results. Default false.
  bool deterministic = false;

  // Validate returns InvalidArgument naming the first option that breaks its rule.
  Status Validate() const;

  // ParsedStreamLimits: stream_max_parallel_num as engine -> limit (after Validate succeeds).
  std::map<std::string, int> ParsedStreamLimits() const;
};

}  // namespace recsdk

#endif  // RECSDK_CONFIG_H_
