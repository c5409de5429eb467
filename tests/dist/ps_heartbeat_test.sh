#!/bin/bash
# ps_heartbeat_test.sh JOB DIR MPIEXEC [MPIEXEC FLAGS...]: the heartbeat of a job with a ps
# (src/dist/ps_heartbeat.h), two jobs of chief, worker and ps (each rank its TF_CONFIG; collective
# timeout 3 s):
# - kill_rank_job.cc's psbusy phase: both workers pause 8 s without an exchange after step 3:
#   the ps keeps waiting (its wait is kept alive by the heartbeat), and every rank ends with 0;
# - its psbusystop phase: in that pause worker rank 1 stops (SIGSTOP) while the chief stays busy
#   for 40 s: the ps ends with DeadlineExceeded, its heartbeat naming rank 1, and the job ends
#   non-zero long before the chief's pause is over (a hang check: 35 s).
set -u
job=$1 dir=$2
shift 2
cluster='"cluster":{"chief":["a:1"],"worker":["b:1"],"ps":["c:1"]}'
task() { echo "TF_CONFIG={$cluster,\"task\":{\"type\":\"$1\",\"index\":0}}"; }
run() {
  "$@" -np 1 -x "$(task chief)" "$job" "$phase" "$dir" : -np 1 -x "$(task worker)" "$job" "$phase" \
    "$dir" : -np 1 -x "$(task ps)" "$job" "$phase" "$dir" 2>&1
}
fail() { echo "ps_heartbeat_test: FAILED: $*"; exit 1; }
mkdir -p "$dir"

phase=psbusy
out=$(run "$@")
rc=$?
echo "$out" | tail -20
[ "$rc" -eq 0 ] || fail "the job failed although every worker was alive (busy 8 s, timeout 3 s)"
[ "$(echo "$out" | grep -c "trained through the pause")" -eq 2 ] ||
  fail "not both workers trained on after their pause"
echo "$out" | grep -q "ps rank 2 served the busy workers" || fail "the ps did not end with OK"
echo "ps_heartbeat_test: busy workers: the ps waited for them"

phase=psbusystop
start=$(date +%s)
out=$(run "$@")
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 was stopped"
[ "$elapsed" -lt 35 ] || fail "the job took ${elapsed}s to end: the ps waited for the busy chief"
echo "$out" | grep -q "rank 1 stops itself (SIGSTOP)" || fail "rank 1 did not stop"
ps=$(echo "$out" | grep "kill_rank_job: ps rank 2:")
[ -n "$ps" ] || fail "the ps did not end with an error"
echo "$ps" | grep -q "DEADLINE_EXCEEDED" || fail "the ps's error is not DeadlineExceeded: $ps"
echo "$ps" | grep -Eq "heartbeat.*rank 1 did not join" ||
  fail "the ps's error does not name rank 1 from the heartbeat: $ps"
echo "$out" | grep -q "the chief's pause ended" && fail "the chief's pause ended before the job"
echo "ps_heartbeat_test: passed (a stopped worker among busy ones: the job ended in ${elapsed}s)"
