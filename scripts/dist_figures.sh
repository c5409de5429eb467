#!/usr/bin/env bash
# The figures of distributed training (docs/distributed.md): benchmarks/dist_bench.cc under
# mpirun, on this host, shared memory only. Builds the Release tree's dist_bench if needed.
#
#   scripts/dist_figures.sh            2 ranks (RECSDK_DIST_RANKS=4 for 4)
#
# Last line: alltoall_vs_mpi=<x> shard_balance=<z> bytes_vs_estimate=<b> (ranks_vs_threads is
# measured on little_demo by hand, docs/distributed.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${RECSDK_DIST_RANKS:-2}
build=${RECSDK_DIST_BUILD:-build}
cmake --build "$build" -j "$(nproc)" --target dist_bench >/dev/null
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
echo "alltoall_vs_mpi=${a2a:-?} shard_balance=${balance:-?} bytes_vs_estimate=${bytes:-?} ranks=$ranks"
