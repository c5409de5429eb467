#!/usr/bin/env bash
# race.sh: the DLRM race of recsdk against PyTorch on this machine's CPU (issue 15).
#
# Installs the peer's Debian packages if missing (python3-torch, libopenblas0-openmp,
# python3-numpy; not part of scripts/install_deps.sh, CI need not install torch), builds
# samples/dlrm, writes the shared data file once, then for each configuration runs recsdk and
# PyTorch alternately, RECSDK_RACE_ROUNDS times (default 3; the machine drifts between windows,
# so only interleaved runs compare), and prints one JSON line per configuration:
#   vs_torch (median over rounds of recsdk samples/s / PyTorch samples/s), its min and max, both
#   sides' median rates and both sides' losses after the same steps on the same data.
# Configurations: the DLRM reference model at 1 and 2 threads with SGD and with Adagrad, and the
# embedding-only race (26 tables, lookup + pooled gradient + sparse Adagrad) at 1 and 2 threads, and
# the little_demo race (samples/little_demo's model at batch 512, Adam) at 1 and 2 threads.
#
# Knobs: RECSDK_RACE_ROUNDS (3), RECSDK_RACE_THREADS ("1 2"), RECSDK_RACE_OPTIMIZERS
# ("sgd adagrad"), RECSDK_RACE_MODES ("dlrm embedding little_demo"), RECSDK_RACE_DIR (build-race: the build
# and the data file), RECSDK_RACE_INTERACTION (fused), RECSDK_RACE_ARGS (extra flags for both
# sides, e.g. "--windows 5 --window_steps 4"), RECSDK_RACE_PRECISION (recsdk's precision_mode,
# e.g. allow_mix_precision for the bfloat16 race; PyTorch stays float32, as the issue's race is
# against PyTorch at its best in float32; the line then carries "precision").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${RECSDK_RACE_DIR:-build-race}
rounds=${RECSDK_RACE_ROUNDS:-3}
threads_list=${RECSDK_RACE_THREADS:-1 2}
optimizers=${RECSDK_RACE_OPTIMIZERS:-sgd adagrad}
modes=${RECSDK_RACE_MODES:-dlrm embedding little_demo}
interaction=${RECSDK_RACE_INTERACTION:-fused}
extra=${RECSDK_RACE_ARGS:-}
precision=${RECSDK_RACE_PRECISION:-}
py=/usr/bin/python3

if ! "$py" -c 'import torch, numpy' 2>/dev/null || ! dpkg -s libopenblas0-openmp >/dev/null 2>&1; then
  echo "race.sh: installing the PyTorch peer's Debian packages" >&2
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y python3-torch libopenblas0-openmp python3-numpy >&2
fi

if [ ! -x "$dir/samples/dlrm" ]; then
  scripts/install_deps.sh >&2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$dir" -j"${RECSDK_RACE_JOBS:-2}" --target dlrm >&2
dlrm="$root/$dir/samples/dlrm"
data="$root/$dir/dlrm_race_data.bin"
"$dlrm" --data "$data" --write_data_only

# recsdk runs up to `threads` ops at once (stream_max_parallel_num DNN_V100:threads) on its
# `threads` intra-op threads: the same cores, used where the graph has independent ops (the 26
# tables' lookups and updates).
run_recsdk() {  # mode threads optimizer
  "$dlrm" --data "$data" --mode "$1" --threads "$2" --inter_op "$2" --optimizer "$3" \
    --interaction "$interaction" ${precision:+--precision_mode "$precision"} $extra
}
run_torch() {  # mode threads optimizer
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$2" \
    "$py" "$root/benchmarks/peers/dlrm_torch.py" --data "$data" --mode "$1" --threads "$2" \
    --optimizer "$3" $extra
}

for mode in $modes; do
  opts=$optimizers
  [ "$mode" = embedding ] && opts=adagrad
  [ "$mode" = little_demo ] && opts=adam  # the sample's Adam + LazyAdam / SparseAdam
  for threads in $threads_list; do
    for opt in $opts; do
      results=()
      for ((r = 0; r < rounds; ++r)); do
        # Alternate who goes first so neither side always meets the same drift.
        if ((r % 2 == 0)); then
          a=$(run_recsdk "$mode" "$threads" "$opt"); b=$(run_torch "$mode" "$threads" "$opt")
        else
          b=$(run_torch "$mode" "$threads" "$opt"); a=$(run_recsdk "$mode" "$threads" "$opt")
        fi
        results+=("$a" "$b")
      done
      printf '%s\n' "${results[@]}" | "$py" -c '
import json, statistics, sys, platform, os
lines = [json.loads(l) for l in sys.stdin if l.strip()]
rec = [l for l in lines if l["impl"] == "recsdk"]
tor = [l for l in lines if l["impl"] == "torch"]
key = "samples_per_s" if "samples_per_s" in rec[0] else "ids_per_s"
ratios = [a[key] / b[key] for a, b in zip(rec, tor)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
  "model": rec[0]["model"], "threads": rec[0]["threads"], "optimizer": rec[0]["optimizer"],
  "precision": os.environ.get("RECSDK_RACE_PRECISION") or "float32",
  "interaction": rec[0]["interaction"], "rounds": len(ratios),
  "vs_torch": round(statistics.median(ratios), 3),
  "vs_torch_min": round(min(ratios), 3), "vs_torch_max": round(max(ratios), 3),
  "recsdk_" + key: round(statistics.median(r[key] for r in rec), 1),
  "torch_" + key: round(statistics.median(t[key] for t in tor), 1),
  "loss_steps": rec[0]["loss_steps"],
  "recsdk_first_loss": rec[0]["first_loss"], "torch_first_loss": tor[0]["first_loss"],
  "recsdk_loss": rec[0]["loss"], "torch_loss": tor[0]["loss"],
  "recsdk_breakdown": rec[0].get("breakdown"),
  "torch_version": tor[0]["torch"], "torch_blas": tor[0]["blas"],
  "cpu": cpu, "cores": os.cpu_count()}))
'
    done
  done
done
