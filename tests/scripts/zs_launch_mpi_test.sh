#!/usr/bin/env bash
# scripts/zs-launch around a real mpirun job of zs-train (ctest label mpi): 4 processes on two
# fake hosts of 2 slots; rank 3 fails before step 5 (zs-train's test flag --inject-fault 3:5:
# the rank throws, the job ends through MPI_Abort) and the probe reports hostB gone from then on.
# The launcher relaunches on 2 processes with the micro-batch doubled (4 x 2 -> 2 x 4), zs-train
# resumes from the newest complete checkpoint resharded from 4 ranks to 2 and finishes: exit 0.
# That checkpoint is step 4's or step 2's: step 4's save is asynchronous, and the abort can kill
# the job before its background write commits (then step 2's is the newest complete one). With
# --min-ranks 3 the launcher stops after the failure with an error naming the ranks left.
# Usage: zs_launch_mpi_test.sh ZS_LAUNCH MPIEXEC "MPIEXEC_FLAGS" ZS_TRAIN CORPUS
set -uo pipefail
launcher="$1" mpiexec="$2" mpiexec_flags="$3" zs_train="$4" corpus="$5"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_contains() {  # expect_contains FILE TEXT WHAT
  grep -qE -- "$2" "$1" || fail "$3: expected /$2/ in the output above"
}

printf 'hostA slots=2\nhostB slots=2\n' >"$work/hosts"
# hostB answers the first probe (before the first launch) and never again.
probe="if [ {host} = hostB ]; then [ ! -e $work/gone ] && touch $work/gone; else true; fi"
# shellcheck disable=SC2206
job=("$mpiexec" $mpiexec_flags -np 4 "$zs_train" --backend mpi --text "$corpus" --layers 2
     --width 32 --heads 2 --context 32 --steps 8 --zero-stage 3 --micro-batch 2 --threads 1
     --eval-batches 2 --no-progress --checkpoint-interval 2 --inject-fault 3:5)

"$launcher" --max-restarts 2 --min-ranks 2 --hostfile "$work/hosts" --probe "$probe" -- \
  "${job[@]}" --checkpoint-dir "$work/ckpt" >"$work/out" 2>&1
status=$?
cat "$work/out"
[[ $status == 0 ]] || fail "the elastic run ended with exit status $status"
expect_contains "$work/out" "rank 3 fails before step 5" "the injected fault"
expect_contains "$work/out" "restart 1 of 2 after exit status [1-9]" "the restart"
expect_contains "$work/out" "dropped: hostB; 2 ranks left on: hostA" "the lost host"
expect_contains "$work/out" "relaunching on 2 ranks with --micro-batch 4" "the smaller world"
expect_contains "$work/out" "resumed from checkpoint .*step-00000([24]) after \\1 steps" "the resume"
expect_contains "$work/out" "resharded from 4 ranks" "the reshard"
expect_contains "$work/out" "eval after step 8" "the finished run"

rm -f "$work/gone"
"$launcher" --max-restarts 2 --min-ranks 3 --hostfile "$work/hosts" --probe "$probe" -- \
  "${job[@]}" --checkpoint-dir "$work/ckpt3" >"$work/out3" 2>&1
status=$?
cat "$work/out3"
[[ $status == 3 ]] || fail "below --min-ranks: exit status $status, expected 3"
expect_contains "$work/out3" "only 2 ranks left \(hosts: hostA\), fewer than --min-ranks 3" \
  "the min-ranks error"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "zs-launch under mpirun: all checks passed"
