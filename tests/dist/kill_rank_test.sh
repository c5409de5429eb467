#!/bin/bash
# kill_rank_test.sh JOB DIR MPIEXEC [MPIEXEC FLAGS...]: a rank killed with SIGKILL in the middle
# of training (kill_rank_job.cc) ends the job in bounded time, non-zero, with a message naming
# the lost rank; the last complete checkpoint then restores on 2 ranks and training goes on.
set -u
job=$1 dir=$2
shift 2
start=$(date +%s)
out=$("$@" -np 2 "$job" kill "$dir" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
fail() { echo "kill_rank_test: FAILED: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 was killed"
[ "$elapsed" -lt 90 ] || fail "the job took ${elapsed}s to end (bound: 90s)"
echo "$out" | grep -q "rank 1" || fail "no message names rank 1"
echo "$out" | grep -qiE "signal 9|killed" || fail "no message says the rank was killed"
echo "kill_rank_test: the job ended in ${elapsed}s with exit status $rc"
out=$("$@" -np 2 "$job" restore "$dir" 2>&1)
rc=$?
echo "$out" | tail -5
[ "$rc" -eq 0 ] || fail "restoring the last checkpoint failed"
echo "kill_rank_test: passed"
