#!/bin/bash
# ps_stop_rank_test.sh JOB MPIEXEC [MPIEXEC FLAGS...]: a job of chief, worker and ps (each rank
# its TF_CONFIG, mpirun's one context per task; kill_rank_job.cc's psstop phase, collective
# timeout 3 s) whose worker rank 1 stops with SIGSTOP in step 12: the chief fails that step and
# the ps its wait for the workers' next exchange, both with DeadlineExceeded naming rank 1, and
# the job ends non-zero instead of hanging (60 s: a hang check, 20x the timeout).
set -u
job=$1
shift
cluster='"cluster":{"chief":["a:1"],"worker":["b:1"],"ps":["c:1"]}'
task() { echo "TF_CONFIG={$cluster,\"task\":{\"type\":\"$1\",\"index\":0}}"; }
start=$(date +%s)
out=$("$@" -np 1 -x "$(task chief)" "$job" psstop - : -np 1 -x "$(task worker)" "$job" psstop - \
  : -np 1 -x "$(task ps)" "$job" psstop - 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
fail() { echo "ps_stop_rank_test: FAILED: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 was stopped"
[ "$elapsed" -lt 60 ] || fail "the job took ${elapsed}s to end (a hang check: the timeout is 3 s)"
echo "$out" | grep -q "rank 1 stops itself (SIGSTOP)" || fail "rank 1 did not stop"
chief=$(echo "$out" | grep "kill_rank_job: step 12:")
[ -n "$chief" ] || fail "the chief did not fail in step 12"
echo "$chief" | grep -q "DEADLINE_EXCEEDED" || fail "the chief's error is not DeadlineExceeded: $chief"
echo "$chief" | grep -q "rank 1 did not join" || fail "the chief's error does not name rank 1: $chief"
ps=$(echo "$out" | grep "kill_rank_job: ps rank 2:")
[ -n "$ps" ] || fail "the ps did not end with an error"
echo "$ps" | grep -q "DEADLINE_EXCEEDED" || fail "the ps's error is not DeadlineExceeded: $ps"
echo "$ps" | grep -q "rank 1 did not join" || fail "the ps's error does not name rank 1: $ps"
echo "ps_stop_rank_test: passed: the job ended in ${elapsed}s with exit status $rc"
