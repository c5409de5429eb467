#!/usr/bin/env bash
# scale_run.sh: issue 29's run: a DLRM-style model whose tables (rows + Adagrad slots) total
# RAM_MULTIPLE x this machine's RAM (MemTotal, read at run time) trains from the SSD tier, against
# the same model with its tables scaled down to the host budget, all in memory (samples/scale).
# Ends with one line: ssd_vs_memory_at_scale=<x> and the other figures.
#
#   scripts/scale_run.sh                          0.25x RAM, Zipf 1.05, 120 s timed
#   RAM_MULTIPLE=1 ZIPF=1.2 SECONDS_AT_SCALE=180 scripts/scale_run.sh
#   CHECKPOINT=1 scripts/scale_run.sh             also a full and an incremental checkpoint
#   EXTRA='--dim 32' scripts/scale_run.sh         any other flag of samples/scale/main.cc
#
# Data (SSD files, rss.csv, checkpoints) go under DATA_DIR (default /work/scale-data/run); the
# SSD files are deleted at the end unless KEEP=1. The driver refuses a table whose files would
# pass MAX_DISK_GB (default 40) or leave less than 5 GB free.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
data=${DATA_DIR:-/work/scale-data/run}
if [ ! -x "$build/samples/scale" ]; then
  cmake --build "$build" -j2 --target scale
fi
mkdir -p "$data"
ckpt=()
if [ "${CHECKPOINT:-0}" = "1" ]; then ckpt=(--checkpoint_dir "$data/ckpt"); fi
status=0
# shellcheck disable=SC2086  # EXTRA is a list of flags
"$build/samples/scale" --ram_multiple "${RAM_MULTIPLE:-0.25}" \
  --host_fraction "${HOST_FRACTION:-0.125}" --zipf "${ZIPF:-1.05}" \
  --seconds "${SECONDS_AT_SCALE:-120}" --memory_seconds "${MEMORY_SECONDS:-30}" \
  --max_disk_gb "${MAX_DISK_GB:-40}" --data_dir "$data" --rss_csv "$data/rss.csv" \
  --keep_data "${KEEP:-0}" "${ckpt[@]}" ${EXTRA:-} || status=$?
if [ "${KEEP:-0}" != "1" ]; then rm -rf "$data/ssd" "$data/ckpt"; fi
exit $status
