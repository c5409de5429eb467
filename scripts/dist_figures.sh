#!/usr/bin/env bash
# The figures of distributed training (docs/distributed.md): benchmarks/dist_bench.cc under
# mpirun, on this host, shared memory only. Builds the Release tree's dist_bench if needed.
#
#   scripts/dist_figures.sh            2 ranks (RECSDK_DIST_RANKS=4 for 4)
#
# Last line: alltoall_vs_mpi=<x> lookup_vs_mpi=<k> exchange_vs_mpi=<e> table_ns_per_key=<t>
# ranks_vs_threads=<y> shard_balance=<z> bytes_vs_estimate=<b> ranks_vs_threads_little_demo=<l>.
# alltoall_vs_mpi: our exchange of the keys and rows (the communicator calls a sharded Resolve
# makes) / raw MPI of the same bytes; lookup_vs_mpi: the whole distributed lookup (with the owners'
# table work) / the same raw bytes (benchmarks/dist_bench.cc says more).
# ranks_vs_threads (the issue's definition): samples/dlrm (26 tables, batch 4096, SGD), samples/s
# of `mpirun -np 2 dlrm --threads 1` (2 ranks x 1 thread, each its half of every global batch) /
# `dlrm --threads 2` (1 process x 2 threads), the median of 3 timing windows each, on the same
# data file. ranks_vs_threads_little_demo: the same comparison on samples/little_demo (two tables,
# the key stage), RECSDK_DIST_STEPS steps (300 unless set), the rate of the last progress line
# (2 x rank 0's for the ranks). Always 2 ranks, whatever RECSDK_DIST_RANKS says.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${RECSDK_DIST_RANKS:-2}
build=${RECSDK_DIST_BUILD:-build}
cmake --build "$build" -j "$(nproc)" --target dist_bench little_demo dlrm >/dev/null
flags=(--bind-to none --mca btl self,vader)
# --oversubscribe makes idle ranks yield inside blocking MPI calls, which slows the raw baseline:
# only when the ranks outnumber the cores.
[ "$ranks" -gt "$(nproc)" ] && flags+=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
out=$(mpirun "${flags[@]}" -np "$ranks" "$build/benchmarks/dist_bench" --benchmark_counters_tabular=true --benchmark_color=false)
echo "$out"
# Pick the counters by column name from the tabular header (a data row has "ns" after Time and
# CPU, so a column sits 2 fields later there).
key_exchange() {
  echo "$out" | awk -v name="$1" '
    $0 ~ name && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
    /^BM_KeyExchange\/65536/ && col[name] {print $(col[name] + 2)}'
}
a2a=$(key_exchange alltoall_vs_mpi)
lookup=$(key_exchange lookup_vs_mpi)
exch=$(key_exchange exchange_vs_mpi)
per_key=$(key_exchange table_ns_per_key)
balance=$(echo "$out" | awk '
  /shard_balance/ && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
  /^BM_ShardBalance/ && col["shard_balance"] {print $(col["shard_balance"] + 2)}')
bytes=$(echo "$out" | awk '
  /bytes_vs_estimate/ && /Benchmark/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
  /^BM_StepBytes/ && col["bytes_vs_estimate"] {print $(col["bytes_vs_estimate"] + 2)}')
# ranks_vs_threads (see the top). Each run in a scratch directory of its own.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mflags=(--bind-to none --mca btl self,vader)
[ "$(id -u)" = 0 ] && mflags+=(--allow-run-as-root)
[ 2 -gt "$(nproc)" ] && mflags+=(--oversubscribe)
dlrm=$(cd "$build/samples" && pwd)/dlrm
dlrm_flags=(--data "$scratch/dlrm_data.bin" --batches 8 --warmup 2 --windows 3 --window_steps 3)
"$dlrm" "${dlrm_flags[@]}" --write_data_only
json_rate() { grep -aoE '"samples_per_s":[0-9.]+' | tail -1 | cut -d: -f2; }
dlrm_threads=$("$dlrm" "${dlrm_flags[@]}" --threads 2 | json_rate)
dlrm_ranks=$(mpirun "${mflags[@]}" -np 2 "$dlrm" "${dlrm_flags[@]}" --threads 1 | json_rate)
echo "dlrm: 1 process x 2 threads ${dlrm_threads:-?} samples/s; 2 ranks x 1 thread ${dlrm_ranks:-?} samples/s"
steps=${RECSDK_DIST_STEPS:-300}
demo=$(cd "$build/samples" && pwd)/little_demo
echo '{"intra_op_parallelism": 1}' >"$scratch/one_thread.json"
demo_flags=(--train_steps="$steps" --export_dir=)
rate() { grep -aoE "step $steps/$steps +[0-9.]+ steps/s +[0-9]+ samples/s" | tail -1 | awk '{print $5}'; }
threads=$(cd "$scratch" && mkdir -p t && cd t && "$demo" "${demo_flags[@]}" 2>&1 | rate)
per_rank=$(cd "$scratch" && mkdir -p r && cd r && mpirun "${mflags[@]}" -np 2 "$demo" \
  "${demo_flags[@]}" --session_config="$scratch/one_thread.json" 2>&1 | rate)
echo "little_demo: 1 process x 2 threads ${threads:-?} samples/s; 2 ranks x 1 thread ${per_rank:-?} samples/s per rank"
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN {if (a > 0 && b > 0) printf "%.3f", a / b; else print "?"}'; }
rvt=$(ratio "$dlrm_ranks" "$dlrm_threads")
rvt_demo=$(ratio "$(awk -v r="${per_rank:-0}" 'BEGIN {print 2 * r}')" "$threads")
echo "alltoall_vs_mpi=${a2a:-?} lookup_vs_mpi=${lookup:-?} exchange_vs_mpi=${exch:-?} table_ns_per_key=${per_key:-?} ranks_vs_threads=${rvt} shard_balance=${balance:-?} bytes_vs_estimate=${bytes:-?} ranks_vs_threads_little_demo=${rvt_demo} ranks=$ranks"
