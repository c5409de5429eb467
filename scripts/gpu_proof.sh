#!/usr/bin/env bash
# gpu_proof.sh: the CUDA backend's proof on a GPU machine (issue 27), in one run of under 10
# minutes: configures a Release tree with the CUDA backend required (build-gpu,
# -DRECSDK_CUDA=ON), builds the CUDA kernel tests, the cuda Device's tests, the CUDA benchmark and
# the DLRM sample, runs the tests (every kernel against its CPU twin, and a model trained on the
# cuda device against the CPU; none may skip here), then prints the figures:
#   GEMM         our cuda::Gemm vs cublasGemmEx direct          vs_cublas    (want >= 0.95)
#   row gather   GatherRows rows/s vs the copy-kernel roofline  vs_roofline  (want >= 0.5)
#   swap         RowSwapper bytes/s vs pinned cudaMemcpy        vs_pinned    (want >= 0.8)
#                (BM_Swap/SwapInAsync: the device tier's asynchronous swap-in, call to arrival,
#                 with host_fraction, the part of it the host was blocked)
#   table gather the TableGather op's pooled lookup (cuda::TableGather) vs the same roofline
#                (BM_TableGather vs_roofline, want >= 0.5)
#   table ops    the table kernels bit for bit against the CPU's (TableGather's loops; a tiered
#                table trained through the key stage on cuda vs cpu with SGD, Adagrad, LazyAdam,
#                FTRL, Adagrad by address): the tests' pass lines, with the lookups compared
#   DLRM         samples/s with --device cuda (dense ops on the GPU; the sample's tables are
#                untiered, so their rows, lookups and updates and the key stage stay on the
#                host under mix_compile_mode) vs our 2-thread CPU samples/s   gpu_vs_cpu2
#                (want >= 20), the same for --mode little_demo and for --tiered (the tables
#                with a device tier, a quarter of their rows, in GPU memory over a host tier,
#                the key stage feeding the steps: the sparse work on the GPU), and whether a
#                PyTorch with CUDA is there for the peer figure.
#
#   scripts/gpu_proof.sh                 everything
#   RECSDK_GPU_PROOF_JOBS=N              build jobs (default: all cores)
#   RECSDK_GPU_PROOF_DIR=build-gpu       the build tree
# Exits non-zero when there is no GPU, the build fails or a CUDA test fails or skips.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
stage() { echo "== [${SECONDS}s] $*"; }
dir=${RECSDK_GPU_PROOF_DIR:-build-gpu}
jobs=${RECSDK_GPU_PROOF_JOBS:-$(nproc)}

stage "GPU"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_proof.sh: no NVIDIA GPU (nvidia-smi missing or finds none): nothing to prove here" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -2

stage "configure ($dir: Release, RECSDK_CUDA=ON)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DRECSDK_CUDA=ON \
  -DRECSDK_WERROR=ON -DRECSDK_MPI=OFF >/dev/null

stage "build: device_cuda_kernels_test device_cuda_device_test cuda_bench dlrm ($jobs jobs)"
cmake --build "$dir" -j "$jobs" --target device_cuda_kernels_test device_cuda_device_test \
  cuda_bench dlrm

stage "CUDA kernel tests (every kernel against its CPU twin)"
# --gtest_fail_if_no_test_run is not enough: a skip is a pass to GoogleTest, so count them.
test_log=$(mktemp)
"$dir/tests/device_cuda_kernels_test" 2>&1 | tee "$test_log"
if grep -q '^\[  SKIPPED \]' "$test_log"; then
  echo "gpu_proof.sh: CUDA tests skipped on a GPU machine: the runtime found no usable GPU" >&2
  exit 1
fi

stage "cuda Device tests (registration, placement, a model trained on cuda vs the CPU)"
# The no-GPU error test is the one that cannot run on a GPU machine: left out, so a skip is news.
"$dir/tests/device_cuda_device_test" --gtest_filter='-*WithoutAGpu*' 2>&1 | tee "$test_log"
if grep -q '^\[  SKIPPED \]' "$test_log"; then
  echo "gpu_proof.sh: cuda Device tests skipped on a GPU machine: the runtime found no usable GPU" >&2
  exit 1
fi

stage "table ops on the GPU (device tier in GPU memory) against the CPU kernels, bit for bit"
# What they measure: TableGatherMatchesTheCpuLoopsBitForBit compares 4 gather modes x 33 samples
# bitwise and counts bad indices; TieredTableTrainsOnTheGpuAsOnTheCpuBitForBit compares 60 lookup
# outputs (20 steps x 3 lookups of one tiered table, rows moving between GPU and host tiers) per
# optimizer, 5 optimizers, bitwise. Both must say OK (a skip failed above).
grep -E '^\[ +(OK|FAILED) +\] CudaTableKernelsTest\.' "$test_log" || {
  echo "gpu_proof.sh: the table kernel tests did not run" >&2
  exit 1
}

stage "CUDA figures (cuda_bench)"
bench_log=$(mktemp)
"$dir/benchmarks/cuda_bench" --benchmark_counters_tabular=true --benchmark_min_time=0.2 \
  | tee "$bench_log"
echo "table gather (TableGather op, pooled sum) vs the copy-kernel roofline (want >= 0.5):"
grep -E '^BM_TableGather' "$bench_log" || echo "  BM_TableGather did not run" >&2
echo "swaps (SwapIn and SwapOut synchronous; SwapInAsync: the device tier's Write; SwapOutAsync: its ReadAsync + WaitRead) vs pinned cudaMemcpy (want >= 0.8):"
grep -E '^BM_Swap' "$bench_log" || echo "  BM_Swap did not run" >&2

# rate: the samples_per_s of dlrm's JSON line.
rate() { sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' <<<"$1"; }
data="$dir/dlrm_proof_data.bin"
"$dir/samples/dlrm" --data "$data" --write_data_only >/dev/null
for mode in dlrm little_demo; do
  opt=sgd
  [[ $mode == little_demo ]] && opt=adam
  stage "$mode sample: our CPU at 2 threads (the baseline), then --device cuda"
  cpu=$("$dir/samples/dlrm" --data "$data" --mode "$mode" --optimizer "$opt" --threads 2 \
    --inter_op 2)
  echo "$cpu"
  # The GPU run's host side (tables, key stage) uses every core: that is the GPU machine's setup.
  gpu=$("$dir/samples/dlrm" --data "$data" --mode "$mode" --optimizer "$opt" --threads "$(nproc)" \
    --device cuda)
  echo "$gpu"
  awk -v g="$(rate "$gpu")" -v c="$(rate "$cpu")" -v m="$mode" \
    'BEGIN { printf "%s: gpu_samples_per_s=%.1f cpu2_samples_per_s=%.1f gpu_vs_cpu2=%.2f (want >= 20)\n", m, g, c, g / c }'
done
# --tiered: the tables get a device tier (a quarter of each table's rows) over a host tier and
# the key stage feeds the steps, so on cuda the rows of the hot keys live in GPU memory and the
# tables' gathers, gradient sums and updates run on the GPU; the key stage and the swaps overlap.
stage "dlrm sample --tiered: our CPU at 2 threads (the baseline), then --device cuda"
cpu=$("$dir/samples/dlrm" --data "$data" --tiered --threads 2 --inter_op 2)
echo "$cpu"
gpu=$("$dir/samples/dlrm" --data "$data" --tiered --threads "$(nproc)" --device cuda)
echo "$gpu"
awk -v g="$(rate "$gpu")" -v c="$(rate "$cpu")" \
  'BEGIN { printf "dlrm --tiered: gpu_samples_per_s=%.1f cpu2_samples_per_s=%.1f gpu_vs_cpu2=%.2f (want >= 20)\n", g, c, g / c }'
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "PyTorch with CUDA is available: benchmarks/peers/dlrm_torch.py is the peer figure"
else
  echo "PyTorch with CUDA: not available here (Debian's torch is CPU-only): no peer GPU figure"
fi
stage "done"
