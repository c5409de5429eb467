#!/usr/bin/env bash
# The figures of distributed training (docs/distributed.md): benchmarks/dist_bench.cc under
# mpirun, on this host, shared memory only. Builds the Release tree's dist_bench if needed.
#
#   scripts/dist_figures.sh            2 ranks (RECSDK_DIST_RANKS=4 for 4)
#
# Last line: alltoall_vs_mpi=<x> ranks_vs_threads=<y> shard_balance=<z> bytes_vs_estimate=<b>.
# ranks_vs_threads: samples/little_demo (its defaults, RECSDK_DIST_STEPS steps, 300 unless set),
# 2 ranks x 1 thread (the global samples/s: 2 x rank 0's) / 1 process x 2 threads, each the rate
# of the last progress interval; always 2 ranks, whatever RECSDK_DIST_RANKS says. The DLRM sample
# (the issue's choice) has no rank support (it feeds whole batches and no distributed optimizer),
# so the figure is little_demo's: two tables, the key stage, a 1024-512-256-128 MLP.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${RECSDK_DIST_RANKS:-2}
build=${RECSDK_DIST_BUILD:-build}
cmake --build "$build" -j "$(nproc)" --target dist_bench little_demo >/dev/null
flags=(--bind-to none --mca btl self,vader)
# --oversubscribe makes idle ranks yield inside blocking MPI calls, which slows the raw baseline:
# only when the ranks outnumber the cores.
[ "$ranks" -gt "$(nproc)" ] && flags+=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
out=$(mpirun "${flags[@]}" -np "$ranks" "$build/benchmarks/dist_bench" --benchmark_counters_tabular=true --benchmark_color=false)
echo "$out"
# Pick the counters by column name from the tabular header (a data row has "ns" after Time and
# CPU, so a column sits 2 fields later there).
a2a=$(echo "$out" | awk '
  /alltoall_vs_mpi/ && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
  /^BM_KeyExchange\/65536/ && col["alltoall_vs_mpi"] {print $(col["alltoall_vs_mpi"] + 2)}')
balance=$(echo "$out" | awk '
  /shard_balance/ && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
  /^BM_ShardBalance/ && col["shard_balance"] {print $(col["shard_balance"] + 2)}')
bytes=$(echo "$out" | awk '
  /bytes_vs_estimate/ && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
  /^BM_StepBytes/ && col["bytes_vs_estimate"] {print $(col["bytes_vs_estimate"] + 2)}')
# ranks_vs_threads (see the top). Each run in a scratch directory of its own.
steps=${RECSDK_DIST_STEPS:-300}
demo=$(cd "$build/samples" && pwd)/little_demo
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo '{"intra_op_parallelism": 1}' >"$scratch/one_thread.json"
demo_flags=(--train_steps="$steps" --export_dir=)
rate() { grep -aoE "step $steps/$steps +[0-9.]+ steps/s +[0-9]+ samples/s" | tail -1 | awk '{print $5}'; }
threads=$(cd "$scratch" && mkdir -p t && cd t && "$demo" "${demo_flags[@]}" 2>&1 | rate)
mflags=(--bind-to none --mca btl self,vader)
[ "$(id -u)" = 0 ] && mflags+=(--allow-run-as-root)
[ 2 -gt "$(nproc)" ] && mflags+=(--oversubscribe)
per_rank=$(cd "$scratch" && mkdir -p r && cd r && mpirun "${mflags[@]}" -np 2 "$demo" \
  "${demo_flags[@]}" --session_config="$scratch/one_thread.json" 2>&1 | rate)
echo "little_demo: 1 process x 2 threads ${threads:-?} samples/s; 2 ranks x 1 thread ${per_rank:-?} samples/s per rank"
rvt=$(awk -v t="${threads:-0}" -v r="${per_rank:-0}" 'BEGIN {if (t > 0 && r > 0) printf "%.3f", 2 * r / t; else print "?"}')
echo "alltoall_vs_mpi=${a2a:-?} ranks_vs_threads=${rvt} shard_balance=${balance:-?} bytes_vs_estimate=${bytes:-?} ranks=$ranks"
