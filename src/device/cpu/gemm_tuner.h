// gemm_tuner.h: auto_tune_mode's GEMM tuner: per product shape, the fastest GemmPlan measured on
// this machine, kept in a tune bank file so later runs start tuned.
//
// What it tunes: for each float32 product a Session runs (MatMul and FusedDense through
// ParallelSgemm; BatchMatMul's per-item products), the backend (oneDNN's sgemm when libdnnl is
// present, the Eigen kernel) and, for the unbatched products, how C is split across the arena's
// threads: 1, 2, 4 or 8 blocks of rows, or 2, 4 or 8 blocks of columns (which keeps both threads
// busy on a weight gradient's short C). The first time a shape runs, Plan times every candidate
// on the real operands (the candidates take turns: a warm-up round, then the best of three) and
// keeps the fastest; the default plan (DefaultGemmPlan) is one of the candidates, so the choice
// is never slower than the default as measured. At most 14 candidates per shape: the space is
// small enough to measure all of it, so the search methods auto_tune_mode names (RL, GA) do not
// apply.
//
// The tune bank: a text file, one line per (machine, threads, shape), five tab-separated fields:
//   <machine> <threads> "<batch> <m> <n> <k> <trans_a> <trans_b>"
//   "<eigen|onednn> <blocks> <rows|columns>" "<default_us> <tuned_us>"
// <machine> is the CPU model name and instruction set with spaces as '_', so a bank shared
// between machines keeps each machine's choices apart. Lines of other machines and thread counts
// are kept when the file is rewritten. The file is rewritten (write to a temporary, then rename)
// after each newly tuned shape; a malformed file is an error naming the file and the line, and a
// bank that cannot be written is logged once as a warning (the choices still apply in this
// process).
//
// Results: a plan changes which kernel sums the products and how the rows are split, so tuned
// results equal untuned ones within float32 rounding, not bit for bit, and a choice made by timing
// can differ between runs: SessionConfig::Validate refuses auto_tune_mode with deterministic.
//
// Threading: Plan may be called concurrently (kernels of one Session run in parallel); two calls
// for a new shape may both measure it, and the first to finish wins.
#ifndef RECSDK_DEVICE_CPU_GEMM_TUNER_H_
#define RECSDK_DEVICE_CPU_GEMM_TUNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "recsdk/status.h"
#include "src/device/cpu/gemm.h"

namespace recsdk::internal {

class Device;

// GemmShape: what a plan is chosen for. batch is 0 for one product, else the number of products
// of a BatchMatMul (whose plan's parts is always 1: it splits across the batch).
struct GemmShape {
  int64_t batch = 0, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  auto Tie() const { return std::tie(batch, m, n, k, trans_a, trans_b); }
  bool operator<(const GemmShape& o) const { return Tie() < o.Tie(); }
};

// GemmTuneRecord: one tuned shape: the chosen plan and the measured time of it and of the default.
struct GemmTuneRecord {
  GemmShape shape;
  GemmPlan plan;
  double default_us = 0, tuned_us = 0;
};

class GemmTuner {
 public:
  // Create: a tuner for `threads` threads whose bank is `bank_dir`/gemm.tsv (the folder is
  // created when the first shape is saved). Loads the bank if it exists: FailedPrecondition
  // naming the file and line if it is malformed.
  static StatusOr<std::unique_ptr<GemmTuner>> Create(std::string bank_dir, int threads);

  // Plan: the plan for this product, measuring the candidates first if the shape is new here.
  // Measuring runs the product on a, b into c several times, so c holds op(A) op(B) afterwards;
  // the caller then runs the chosen plan (with its epilogue, if any) as usual. a, b and c are as
  // for ParallelSgemm (for a batch: `batch` products stored back to back).
  GemmPlan Plan(const GemmShape& shape, const float* a, const float* b, float* c);

  // MachineKey: this machine as the bank names it (CPU model and instruction set).
  static std::string MachineKey();
  // Records: the shapes this tuner measured or loaded for this machine and thread count.
  std::vector<GemmTuneRecord> Records() const;
  // measured: how many shapes this tuner measured (not found in the bank).
  int64_t measured() const;
  const std::string& bank_path() const { return bank_path_; }

 private:
  GemmTuner(std::string bank_dir, int threads);
  Status Load();
  void Save();  // under mu_

  std::string bank_dir_, bank_path_, machine_;
  int threads_;
  mutable std::mutex mu_;
  std::map<GemmShape, GemmTuneRecord> mine_;  // this machine and thread count
  std::vector<std::string> others_;           // lines for other machines or thread counts
  int64_t measured_ = 0;
  bool warned_ = false;
};

// RunGemm: C = op(A) op(B) for one product or a batch of them (shape.batch > 0), with the
// device's tuner when auto_tune_mode is on, else the default plan. The epilogue (unbatched
// products only) runs on each row block of C after its product.
void RunGemm(Device* device, const GemmShape& shape, const float* a, const float* b, float* c,
             const GemmEpilogue& epilogue = nullptr);
// RunGemmPlan: the same with a given plan (the tuner's measurements and benchmarks).
void RunGemmPlan(const GemmPlan& plan, const GemmShape& shape, const float* a, const float* b,
                 float* c, const GemmEpilogue& epilogue = nullptr);

// CpuGemmTuner: the tuner of a CPU device created with auto_tune_mode set, else nullptr (also for
// devices of other backends). Defined in cpu_device.cc.
GemmTuner* CpuGemmTuner(Device* device);

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_CPU_GEMM_TUNER_H_
