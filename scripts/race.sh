#!/usr/bin/env bash
# race.sh: the races of recsdk against PyTorch on this machine's CPU: DLRM (issue 15), DCNv2
# (issue 26).
#
# Installs the peer's Debian packages if missing (python3-torch, libopenblas0-openmp,
# python3-numpy; not part of scripts/install_deps.sh, CI need not install torch), builds
# samples/dlrm and samples/dcnv2, writes the shared data files once, then for each configuration
# runs recsdk and PyTorch alternately, RECSDK_RACE_ROUNDS times (default 3; the machine drifts
# between windows, so only interleaved runs compare), and prints one JSON line per configuration:
#   vs_torch (median over rounds of recsdk samples/s / PyTorch samples/s), its min and max, both
#   sides' median rates and both sides' losses after the same steps on the same data.
# Configurations: the DLRM reference model at 1 and 2 threads with SGD and with Adagrad, and the
# embedding-only race (26 tables, lookup + pooled gradient + sparse Adagrad) at 1 and 2 threads,
# the little_demo race (samples/little_demo's model at batch 512, Adam) at 1 and 2 threads, and the
# DCNv2 race (issue 26: samples/dcnv2 --mode=race against benchmarks/peers/dcnv2_torch.py on the
# sample's own Criteo TSV, RECSDK_RACE_DCNV2_ROWS rows (32768 = 64 batches of 512), Adam +
# LazyAdam / SparseAdam, loss scale 65536) at 1 and 2 threads; `scripts/race.sh dcnv2` runs that
# race alone (any arguments replace RECSDK_RACE_MODES).
#
# PyTorch's OpenBLAS runs on the kernel set it detects for this CPU, except where its detection
# does not know the CPU and falls back to a pre-AVX2 set (Prescott on a hypervisor's "Intel(R)
# Xeon(R) Processor"): then OPENBLAS_CORETYPE is set to SkylakeX (AVX-512) or Haswell (AVX2), so
# the race is against PyTorch at its best. RECSDK_RACE_OPENBLAS_CORETYPE overrides the choice.
# PyTorch's OpenMP threads spin while they wait (OMP_WAIT_POLICY unset: libgomp's default), which
# is its best on a quiet machine; with other work on the cores they collapse (the DCNv2 peer at 2
# threads beside 2-3 compile jobs: ~2.5k samples/s spinning, ~27k passive, ~63k quiet), so each
# line carries the load average before its rounds ("loadavg") and RECSDK_RACE_OMP_WAIT_POLICY
# (e.g. PASSIVE) sets the peer's policy; only quiet-machine lines are worth quoting.
#
# Knobs: RECSDK_RACE_ROUNDS (3), RECSDK_RACE_THREADS ("1 2"), RECSDK_RACE_OPTIMIZERS
# ("sgd adagrad"), RECSDK_RACE_MODES ("dlrm embedding little_demo dcnv2"), RECSDK_RACE_DIR
# (build-race: the build and the data files), RECSDK_RACE_INTERACTION (fused), RECSDK_RACE_ARGS
# (extra flags for both sides, e.g. "--windows 5 --window_steps 4"), RECSDK_RACE_PRECISION
# (recsdk's precision_mode, e.g. allow_mix_precision for the bfloat16 race; PyTorch stays float32,
# as the issue's race is against PyTorch at its best in float32; the line then carries
# "precision"), RECSDK_RACE_DCNV2_ROWS (32768: the DCNv2 race's TSV rows),
# RECSDK_RACE_OPENBLAS_CORETYPE, RECSDK_RACE_OMP_WAIT_POLICY (see above).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${RECSDK_RACE_DIR:-build-race}
rounds=${RECSDK_RACE_ROUNDS:-3}
threads_list=${RECSDK_RACE_THREADS:-1 2}
optimizers=${RECSDK_RACE_OPTIMIZERS:-sgd adagrad}
modes=${RECSDK_RACE_MODES:-dlrm embedding little_demo dcnv2}
[ $# -gt 0 ] && modes="$*"
dcnv2_rows=${RECSDK_RACE_DCNV2_ROWS:-32768}
interaction=${RECSDK_RACE_INTERACTION:-fused}
extra=${RECSDK_RACE_ARGS:-}
precision=${RECSDK_RACE_PRECISION:-}
omp_wait_policy=${RECSDK_RACE_OMP_WAIT_POLICY:-}
py=/usr/bin/python3

if ! "$py" -c 'import torch, numpy' 2>/dev/null || ! dpkg -s libopenblas0-openmp >/dev/null 2>&1; then
  echo "race.sh: installing the PyTorch peer's Debian packages" >&2
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y python3-torch libopenblas0-openmp python3-numpy >&2
fi

# The OpenBLAS kernel set for PyTorch: its own detection unless that fell back below AVX2.
openblas_core=${RECSDK_RACE_OPENBLAS_CORETYPE:-}
if [ -z "$openblas_core" ]; then
  detected=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=1 "$py" -c \
    'import torch; torch.ones(64, 64) @ torch.ones(64, 64)' 2>&1 | sed -n 's/^Core: //p' | head -1)
  case "$detected" in
    Prescott | Katmai | Coppermine | Northwood | Core2 | Penryn | Dunnington | Nehalem | Atom | \
      Sandybridge | Banias | Yonah | "")
      if grep -qw avx512f /proc/cpuinfo; then
        openblas_core=SkylakeX
      elif grep -qw avx2 /proc/cpuinfo; then
        openblas_core=Haswell
      fi
      [ -n "$openblas_core" ] &&
        echo "race.sh: OpenBLAS detects this CPU as '${detected:-?}';" \
          "using OPENBLAS_CORETYPE=$openblas_core" >&2
      ;;
  esac
fi

if [ ! -x "$dir/samples/dlrm" ] || [ ! -x "$dir/samples/dcnv2" ]; then
  scripts/install_deps.sh >&2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$dir" -j"${RECSDK_RACE_JOBS:-2}" --target dlrm dcnv2 >&2
dlrm="$root/$dir/samples/dlrm"
data="$root/$dir/dlrm_race_data.bin"
"$dlrm" --data "$data" --write_data_only
dcnv2="$root/$dir/samples/dcnv2"
dcnv2_data="$root/$dir/dcnv2_race_data_$dcnv2_rows"
if [[ " $modes " == *" dcnv2 "* ]] && [ ! -f "$dcnv2_data/train.tsv" ]; then
  "$dcnv2" --mode=write_data --data_dir="$dcnv2_data" --train_rows="$dcnv2_rows" --eval_rows=1 >&2
fi

# recsdk runs up to `threads` ops at once (stream_max_parallel_num DNN_V100:threads) on its
# `threads` intra-op threads: the same cores, used where the graph has independent ops (the 26
# tables' lookups and updates).
# samples/dcnv2 takes session options from a JSON file: the same inter-op setting.
run_recsdk() {  # mode threads optimizer
  if [ "$1" = dcnv2 ]; then
    local config="$root/$dir/dcnv2_race_session_$2.json"
    printf '{"stream_max_parallel_num": "DNN_V100:%s"%s}\n' "$2" \
      "${precision:+, \"precision_mode\": \"$precision\"}" >"$config"
    "$dcnv2" --mode=race --data_dir="$dcnv2_data" --threads="$2" --session_config="$config" $extra
    return
  fi
  "$dlrm" --data "$data" --mode "$1" --threads "$2" --inter_op "$2" --optimizer "$3" \
    --interaction "$interaction" ${precision:+--precision_mode "$precision"} $extra
}
run_torch() {  # mode threads optimizer
  local peer=(dlrm_torch.py --data "$data" --mode "$1" --optimizer "$3")
  [ "$1" = dcnv2 ] && peer=(dcnv2_torch.py --data "$dcnv2_data/train.tsv")
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${openblas_core:+OPENBLAS_CORETYPE=$openblas_core} \
    ${omp_wait_policy:+OMP_WAIT_POLICY=$omp_wait_policy} OMP_NUM_THREADS="$2" \
    "$py" "$root/benchmarks/peers/${peer[0]}" "${peer[@]:1}" --threads "$2" $extra
}

for mode in $modes; do
  opts=$optimizers
  [ "$mode" = embedding ] && opts=adagrad
  [ "$mode" = little_demo ] && opts=adam  # the sample's Adam + LazyAdam / SparseAdam
  [ "$mode" = dcnv2 ] && opts=adam+lazy_adam  # the sample's optimizers; the flag is not passed
  for threads in $threads_list; do
    for opt in $opts; do
      results=()
      loadavg=$(cut -d' ' -f1 /proc/loadavg)
      for ((r = 0; r < rounds; ++r)); do
        # Alternate who goes first so neither side always meets the same drift.
        if ((r % 2 == 0)); then
          a=$(run_recsdk "$mode" "$threads" "$opt"); b=$(run_torch "$mode" "$threads" "$opt")
        else
          b=$(run_torch "$mode" "$threads" "$opt"); a=$(run_recsdk "$mode" "$threads" "$opt")
        fi
        results+=("$a" "$b")
      done
      printf '%s\n' "${results[@]}" | LOADAVG=$loadavg "$py" -c '
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
  "interaction": rec[0].get("interaction"), "rounds": len(ratios),
  "vs_torch": round(statistics.median(ratios), 3),
  "vs_torch_min": round(min(ratios), 3), "vs_torch_max": round(max(ratios), 3),
  "recsdk_" + key: round(statistics.median(r[key] for r in rec), 1),
  "torch_" + key: round(statistics.median(t[key] for t in tor), 1),
  "loss_steps": rec[0]["loss_steps"],
  "recsdk_first_loss": rec[0]["first_loss"], "torch_first_loss": tor[0]["first_loss"],
  "recsdk_loss": rec[0]["loss"], "torch_loss": tor[0]["loss"],
  "recsdk_breakdown": rec[0].get("breakdown"),
  "torch_version": tor[0]["torch"], "torch_blas": tor[0]["blas"],
  "torch_omp_wait_policy": os.environ.get("RECSDK_RACE_OMP_WAIT_POLICY") or "default",
  "cpu": cpu, "cores": os.cpu_count(), "loadavg": float(os.environ["LOADAVG"])}))
'
    done
  done
done
