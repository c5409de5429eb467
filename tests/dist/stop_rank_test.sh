#!/bin/bash
# stop_rank_test.sh JOB DIR MPIEXEC [MPIEXEC FLAGS...]: a rank stopped with SIGSTOP in the middle
# of training (kill_rank_job.cc's stop phase, collective timeout 3 s) never resumes: the other
# rank fails its next collective with DeadlineExceeded naming the stopped rank and the step, and
# the job ends non-zero instead of hanging (the 60 s bound is a hang check, 20x the timeout; CTest's
# TIMEOUT is the last resort).
set -u
job=$1 dir=$2
shift 2
start=$(date +%s)
out=$("$@" -np 2 "$job" stop "$dir" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -20
fail() { echo "stop_rank_test: FAILED: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 was stopped"
[ "$elapsed" -lt 60 ] || fail "the job took ${elapsed}s to end (a hang check: the timeout is 3 s)"
echo "$out" | grep -q "rank 1 stops itself (SIGSTOP)" || fail "rank 1 did not stop"
line=$(echo "$out" | grep "kill_rank_job: step 12:")
[ -n "$line" ] || fail "rank 0 did not fail in step 12"
echo "$line" | grep -q "DEADLINE_EXCEEDED" || fail "rank 0's error is not DeadlineExceeded: $line"
echo "$line" | grep -q "rank 1 did not join" || fail "rank 0's error does not name rank 1: $line"
echo "stop_rank_test: passed: the job ended in ${elapsed}s with exit status $rc"
