#!/bin/bash
# ps_stop_rank_test.sh JOB DIR MPIEXEC [MPIEXEC FLAGS...]: two jobs of chief, worker and ps (each
# rank its TF_CONFIG, mpirun's one context per task; collective timeout 3 s), each ending
# non-zero instead of hanging (60 s: a hang check, 20x the timeout):
# - kill_rank_job.cc's psstop phase: worker rank 1 stops with SIGSTOP in step 12; the chief fails
#   that step and the ps its wait for the workers' next exchange, both with DeadlineExceeded
#   naming rank 1;
# - its pslost phase: the ps (rank 2) stops in step 12; both workers fail that step, and the one
#   waiting for the ps in an exchange names rank 2;
# - its pskill phase: every rank checkpoints every 5 steps (the ps writes the table shard), and
#   the ps kills itself (SIGKILL) in step 12: the job ends non-zero naming rank 2; then the
#   psrestore phase, with 2 ps, restores the last complete checkpoint (step 10; 1 shard re-sharded
#   over 2 ps) and trains on; each ps then holds rows, only its own keys'; then 2 all-worker
#   ranks restore the same checkpoint (kill_rank_job's restore phase) and train on, and the 2-ps
#   job restores a checkpoint of 2 all-worker ranks (its kill phase's).
set -u
job=$1 dir=$2
shift 2
cluster='"cluster":{"chief":["a:1"],"worker":["b:1"],"ps":["c:1"]}'
task() { echo "TF_CONFIG={$cluster,\"task\":{\"type\":\"$1\",\"index\":0}}"; }
start=$(date +%s)
run() {
  "$@" -np 1 -x "$(task chief)" "$job" "$phase" "$dir" : -np 1 -x "$(task worker)" "$job" "$phase" \
    "$dir" : -np 1 -x "$(task ps)" "$job" "$phase" "$dir" 2>&1
}
# run2: the same job with a second ps.
run2() {
  local one=$cluster
  cluster='"cluster":{"chief":["a:1"],"worker":["b:1"],"ps":["c:1","d:1"]}'
  local ps1="TF_CONFIG={$cluster,\"task\":{\"type\":\"ps\",\"index\":1}}"
  "$@" -np 1 -x "$(task chief)" "$job" "$phase" "$dir" : -np 1 -x "$(task worker)" "$job" "$phase" \
    "$dir" : -np 1 -x "$(task ps)" "$job" "$phase" "$dir" : -np 1 -x "$ps1" "$job" "$phase" \
    "$dir" 2>&1
  cluster=$one
}
phase=psstop
out=$(run "$@")
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
echo "ps_stop_rank_test: a stopped worker: the job ended in ${elapsed}s with exit status $rc"

mkdir -p "$dir"
rm -f "$dir/stop-ps"
phase=pslost
start=$(date +%s)
out=$(run "$@")
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
[ "$rc" -ne 0 ] || fail "the job exited 0 although the ps was stopped"
[ "$elapsed" -lt 60 ] || fail "the job took ${elapsed}s to end (a hang check: the timeout is 3 s)"
echo "$out" | grep -q "ps rank 2 stops itself (SIGSTOP)" || fail "the ps did not stop"
# Both workers fail step 12 with DeadlineExceeded; the one that waits for the ps in an exchange
# names it (a rank stopped after its header for the next call was sent is reported as data that
# did not arrive, without a rank: MPI cannot say which rank did not pass it on).
steps=$(echo "$out" | grep "kill_rank_job: step 12:")
[ "$(echo "$steps" | grep -c "DEADLINE_EXCEEDED")" -eq 2 ] ||
  fail "not both workers failed step 12 with DeadlineExceeded: $steps"
echo "$steps" | grep -Eq "ranks? ([0-9]+ and )?2 did not join" ||
  fail "no worker's error names the ps, rank 2: $steps"
echo "ps_stop_rank_test: a stopped ps: the job ended in ${elapsed}s with exit status $rc"

rm -rf "$dir/ckpt" "$dir/kill-ps"
phase=pskill
start=$(date +%s)
out=$(run "$@")
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
[ "$rc" -ne 0 ] || fail "the job exited 0 although the ps was killed"
[ "$elapsed" -lt 60 ] || fail "the job took ${elapsed}s to end (bound: 60s)"
echo "$out" | grep -q "ps rank 2 kills itself (SIGKILL)" || fail "the ps did not kill itself"
echo "$out" | grep -v "kills itself" | grep -q "rank 2" || fail "no message (but the ps's own) names rank 2"
echo "$out" | grep -qiE "signal 9|killed" || fail "no message says the rank was killed"
echo "ps_stop_rank_test: a killed ps: the job ended in ${elapsed}s with exit status $rc"
phase=psrestore
out=$(run2 "$@")
rc=$?
echo "$out" | tail -5
[ "$rc" -eq 0 ] || fail "restoring the last checkpoint of the ps job failed"
echo "$out" | grep -q "kill_rank_job: psrestore done" || fail "the restored job did not train on"
[ "$(echo "$out" | grep -c "holds [0-9]* rows, all its own")" -eq 2 ] ||
  fail "not both ps hold rows of their own keys only"
# The same checkpoint in a job without ps: 2 all-worker ranks restore it (kill_rank_job's restore
# phase: step 10) and train on.
out=$("$@" -np 2 "$job" restore "$dir/ckpt" 2>&1)
rc=$?
echo "$out" | tail -5
[ "$rc" -eq 0 ] || fail "2 all-worker ranks could not restore the ps job's checkpoint"
echo "$out" | grep -q "kill_rank_job: restore done" || fail "the all-worker job did not train on"
# And the other way: a checkpoint of 2 all-worker ranks (kill_rank_job's kill phase, whose rank 1
# is killed in step 12) restores in the job of 2 ps (each reads the shard of its index).
"$@" -np 2 "$job" kill "$dir/aw/ckpt" > /dev/null 2>&1
ps_dir=$dir
dir=$dir/aw
out=$(run2 "$@")
rc=$?
dir=$ps_dir
echo "$out" | tail -5
[ "$rc" -eq 0 ] || fail "the ps job could not restore the all-worker checkpoint"
[ "$(echo "$out" | grep -c "holds [0-9]* rows, all its own")" -eq 2 ] ||
  fail "restored from the all-worker checkpoint, not both ps hold rows of their own keys only"
echo "ps_stop_rank_test: passed"
